"""One ``ExportOptions`` (variant, target runtime, precision, quantization, cache layout, external data) from
the CLI and the Python API down to the exporters, wholly inside the store key.

The defaults give the keys of old (tests/test_pins.py's literal pins), every combination that could be
asked for before gives the very key it had, each field changed changes the key, a bad value is one line,
and the exported model carries its options in its metadata.
"""

from __future__ import annotations

import itertools
import json

import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model, read_metadata
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import QuantOptions
from ltsedge.keys import WEIGHTS_SCHEME, arch_key
from ltsedge.ortcompat import target_for
from tests.helpers import graph_digest, one_line_exit_2, run_ltsedge

# tests/test_pins.py's architectures and literal keys
PLAIN = Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=512, n_positions=64)
PLAIN_KEY = "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=10:opset=21:weights=shared-v1"
PLAIN_KEY_116 = "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=9:opset=19:weights=shared-v1"
EQUAL = Architecture(n_layer=2, d_model=64, n_head=(4, 4), d_inner=(128, 96), vocab_size=300, n_positions=64)
# a generate variant's key says where its weights are: in a data file by default (options.default_external)
EQUAL_GENERATE_KEY = ("arch:gpt2-L2-d64-9797b70641:data=external:graph=2:ir=10:opset=21:variant=generate:"
                      "weights=shared-v1")
EQUAL_INLINE_KEY = "arch:gpt2-L2-d64-9797b70641:graph=2:ir=10:opset=21:variant=generate:weights=shared-v1"
PER_LAYER = Architecture(n_layer=3, d_model=64, n_head=(2, 8, 4), d_inner=(128, 256, 96), vocab_size=300,
                         n_positions=64)  # heads that differ: its cache layout changes the graph
PER_LAYER_KEY = ("arch:gpt2-L3-d64-beaaafee17:data=external:graph=2:ir=10:opset=21:variant=generate:"
                 "weights=shared-v1")


def test_the_defaults_give_the_pinned_keys():
    assert ExportOptions().model_key(PLAIN) == PLAIN_KEY
    assert ExportOptions(target_ort="1.16").model_key(PLAIN) == PLAIN_KEY_116
    # GPT-2's bundles are in fused attention where every cache fuses (EQUAL's heads of 16), for onnxruntime 1.22;
    # the plain form named is the key their figures were filed under before
    assert ExportOptions(variant="generate").model_key(EQUAL) == EQUAL_GENERATE_KEY.replace(
        ":graph=2:ir=10:opset=21:", ":form=contrib:graph=2:ir=10:opset=22:")
    plain = {"variant": "generate", "graph_form": "plain"}
    assert ExportOptions(**plain).model_key(EQUAL) == EQUAL_GENERATE_KEY
    assert ExportOptions(**plain, external_data=True).model_key(EQUAL) == EQUAL_GENERATE_KEY
    # weights inline, as every generation model was written before: the key those figures were filed under
    assert ExportOptions(**plain, external_data=False).model_key(EQUAL) == EQUAL_INLINE_KEY
    assert ExportOptions(variant="generate", cache_layout="per-layer").model_key(PER_LAYER) == PER_LAYER_KEY
    # what a default means spelled out is the same key: fp32, the oldest runtime, inline data below 2 GB
    same = [ExportOptions(precision="fp32"), ExportOptions(target_ort="1.20"), ExportOptions(external_data=False),
            ExportOptions(quantization=QuantOptions()), ExportOptions(cache_layout="per-layer"),
            ExportOptions(precision="fp32", quantization=QuantOptions(per_channel=True))]  # fp32: no quantizer
    assert {o.model_key(PLAIN) for o in same} == {PLAIN_KEY}


def test_each_field_changed_changes_the_key():
    """Each field moved off its default, one at a time: every key differs from the default's and the others'."""
    cases = {
        "default": (PER_LAYER, ExportOptions(variant="generate", cache_layout="per-layer")),
        "variant": (PER_LAYER, ExportOptions(variant="forward", cache_layout="per-layer")),
        "target_ort": (PER_LAYER, ExportOptions(variant="generate", cache_layout="per-layer", target_ort="1.16")),
        "precision": (PER_LAYER, ExportOptions(variant="generate", cache_layout="per-layer", precision="int8")),
        "cache_layout": (PER_LAYER, ExportOptions(variant="generate", cache_layout="uniform")),
        "external_data": (PER_LAYER, ExportOptions(variant="generate", cache_layout="per-layer", external_data=False)),
    }
    keys = {name: options.model_key(arch) for name, (arch, options) in cases.items()}
    assert keys["default"] == PER_LAYER_KEY
    assert len(set(keys.values())) == len(keys), keys
    assert "data=external" not in keys["external_data"] and "cache=uniform" in keys["cache_layout"]
    forward = {e: ExportOptions(external_data=e).model_key(PLAIN) for e in (None, False, True)}
    assert forward[None] == forward[False] == PLAIN_KEY  # a forward model's weights stay inline below 2 GB
    assert forward[True] == PLAIN_KEY.replace(":graph=", ":data=external:graph=")
    # a quantization option of the precision asked for
    for precision, changed in (("int8", QuantOptions(per_channel=True)), ("int4", QuantOptions(block_size=64)),
                               ("int4", QuantOptions(symmetric=False)), ("int4", QuantOptions(accuracy_level=0))):
        plain = ExportOptions(precision=precision).model_key(PLAIN)
        other = ExportOptions(precision=precision, quantization=changed).model_key(PLAIN)
        assert plain != other and ":quantization=" in other and ":quantization=" not in plain


def _key_before(arch, target, variant="forward", precision="fp32", quantization=None, cache_layout=None) -> str:
    """The model key as it was before ExportOptions (its keys must not move), of a model with inline weights."""
    from ltsedge.backbones.kv_cache import DEFAULT_CACHE_LAYOUT, layout_changes_graph

    backbone = get_backbone(arch.backbone)
    settings = {"graph": backbone.graph_version, "opset": target.opset, "ir": target.ir_version,
                "weights": WEIGHTS_SCHEME}
    if variant != "forward":
        settings["variant"] = variant
    if variant == "generate" and backbone.kv_cache and layout_changes_graph(arch, cache_layout or
                                                                            DEFAULT_CACHE_LAYOUT):
        settings["cache"] = cache_layout or DEFAULT_CACHE_LAYOUT
    if precision != "fp32":
        settings["precision"] = precision
        options = quantization.key(precision) if quantization is not None else None
        if options:
            settings["quantization"] = options
    return arch_key(arch.id, settings)


def test_every_combination_asked_for_before_keeps_its_key():
    archs = [PLAIN, EQUAL, PER_LAYER,
             Architecture(backbone="opt", n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 96), vocab_size=300,
                          n_positions=64),
             Architecture(backbone="transfo_xl", n_layer=1, d_model=64, n_head=[2], d_inner=[64], vocab_size=100)]
    quantizations = [None, QuantOptions(), QuantOptions(per_channel=True), QuantOptions(block_size=128),
                     QuantOptions(symmetric=False, accuracy_level=None)]
    checked = 0
    for arch, target_ort, variant, precision, quantization, layout, external in itertools.product(
            archs, [None, "1.16", "1.20", "1.22"], ["forward", "generate"], ["fp32", "fp16", "int8", "int4"],
            quantizations, [None, "uniform", "per-layer"], [None, False]):
        if variant not in get_backbone(arch.backbone).variants:
            continue
        if precision == "int4" and target_ort == "1.16":  # refused before keying, then as now
            with pytest.raises(LtsedgeError, match="needs onnxruntime >= 1.17"):
                ExportOptions(target_ort=target_ort, precision=precision)
            continue
        # GPT-2's and OPT's bundles were plain and their caches uniform unless asked otherwise: both named now
        named = {"graph_form": "plain", "cache_layout": layout or "uniform"} \
            if variant == "generate" and arch.backbone in ("gpt2", "opt") else {"cache_layout": layout}
        options = ExportOptions(variant=variant, target_ort=target_ort, precision=precision,
                                quantization=quantization, external_data=external, **named)
        before = _key_before(arch, target_for(target_ort), variant, precision, quantization, layout)
        if external is None and variant == "generate":  # generation models' weights now go to a data file
            assert options.model_key(arch) == before.replace(":graph=", ":data=external:graph=")
        else:
            assert options.model_key(arch) == before
        checked += 1
    assert checked > 1000


@pytest.mark.parametrize("fields, message", [
    ({"variant": ""}, r"^export variant '' must be a name"),
    ({"target_ort": "1.10"}, r"^--target-ort 1\.10: onnxruntime before 1\.14 lacks opset 17"),
    ({"target_ort": "newest"}, r"^onnxruntime version 'newest' is not a version number like 1\.20"),
    ({"target_ort": 1.2}, r"^onnxruntime version 1\.2 is not a version number like 1\.20"),
    ({"precision": "int3"}, r"^--precision 'int3': must be one of fp32, fp16, int8, int4$"),
    ({"precision": "int4", "target_ort": "1.16"},
     r"^--precision int4 needs onnxruntime >= 1\.17 \(MatMulNBits\), the target is onnxruntime 1\.16$"),
    ({"quantization": {"block_size": 64}}, r"^quantization options must be a QuantOptions, not dict$"),
    ({"cache_layout": "packed"}, r"^cache layout 'packed' is unknown \(layouts: per-layer, uniform\)$"),
    ({"external_data": "yes"}, r"^external_data 'yes' must be true, false or None"),
])
def test_a_bad_value_is_a_one_line_error(fields, message):
    with pytest.raises(LtsedgeError, match=message) as error:
        ExportOptions(**fields)
    assert "\n" not in str(error.value)


def test_a_variant_the_backbone_lacks_is_refused_by_export_and_key_alike():
    transfo_xl = Architecture(backbone="transfo_xl", n_layer=1, d_model=64, n_head=[2], d_inner=[64], vocab_size=100)
    options = ExportOptions(variant="decode")
    for call in (lambda: export_model(PLAIN, options), lambda: options.model_key(transfo_xl)):
        with pytest.raises(LtsedgeError, match=r"has no export variant 'decode' \(variants: forward, generate\)"):
            call()
    with pytest.raises(LtsedgeError, match="export options must be an ExportOptions, not str"):
        export_model(PLAIN, "generate")


def test_the_exported_model_carries_its_options_in_its_metadata(tmp_path):
    options = ExportOptions(variant="generate", target_ort="1.17", precision="int8",
                            quantization=QuantOptions(per_channel=True), cache_layout="per-layer")
    exported = export_model(PER_LAYER, options)
    meta = read_metadata(exported.proto)
    assert (meta["variant"], meta["target_ort"], meta["opset"], meta["ir_version"]) == ("generate", "1.17", "20", "9")
    assert meta["precision"] == "int8" and json.loads(meta["quantization"]) == {"per_channel": True}
    assert exported.cache_layout == "per-layer" and exported.precision == "int8" and exported.options == options
    per_layer = export_model(PER_LAYER, ExportOptions(variant="generate"))  # the default layout
    assert per_layer.cache_layout == "per-layer" and "precision" not in read_metadata(per_layer.proto)


def test_external_data_is_how_the_files_are_written(tmp_path):
    exported = export_model(PLAIN, ExportOptions(external_data=True))
    assert sorted(exported.save_files(tmp_path / "m.onnx")) == ["m.onnx", "m.onnx_data"]
    assert sorted(exported.save_files(tmp_path / "i.onnx", external_data=False)) == ["i.onnx"]  # asked otherwise
    inline = export_model(PLAIN)  # the same graph and weights: only where they are written differs
    assert graph_digest(inline.to_bytes()) == graph_digest(exported.to_bytes())
    assert sorted(inline.save_files(tmp_path / "d.onnx")) == ["d.onnx"]
    generate = export_model(PLAIN, ExportOptions(variant="generate"))  # a generation model's: a data file
    assert sorted(generate.save_files(tmp_path / "g.onnx")) == ["g.onnx", "g.onnx_data"]
    assert sorted(generate.save_files(tmp_path / "h.onnx", external_data=False)) == ["h.onnx"]


def test_the_cli_flags_build_one_options_and_export_to_path_writes_as_it_says(tmp_path):
    from ltsedge.exporters.bundle import export_to_path

    arch_file = tmp_path / "arch.json"
    arch_file.write_text(PLAIN.to_json())
    proc = run_ltsedge("export", str(arch_file), "-o", str(tmp_path / "cli.onnx"), "--external-data",
                       "--target-ort", "1.16")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cli.onnx_data").is_file()
    assert read_metadata(tmp_path / "cli.onnx")["opset"] == "19"
    one_line_exit_2(run_ltsedge("export", str(arch_file), "-o", str(tmp_path / "x.onnx"), "--cache-layout", "packed"),
                    "cache layout 'packed' is unknown")
    _, files = export_to_path(PLAIN, tmp_path / "api.onnx", ExportOptions(target_ort="1.16", external_data=True))
    assert sorted(files) == [str(tmp_path / "api.onnx"), str(tmp_path / "api.onnx_data")]
    assert (tmp_path / "api.onnx_data").read_bytes() == (tmp_path / "cli.onnx_data").read_bytes()


def test_the_search_exports_and_keys_with_one_options(tmp_path):
    from ltsedge.devices import load_profile
    from ltsedge.search.budgets import Budgets
    from ltsedge.search.evaluate import CandidateEvaluator
    from ltsedge.search.settings import SearchSettings
    from ltsedge.store import MeasurementStore

    class Stub:  # the evaluator asks its runner for the machine's fingerprint only
        def fingerprint(self):
            return {"machine": "test", "onnxruntime": "1.0"}

    settings = SearchSettings(objective="decode", target_ort="1.18", precision="int8")
    options = settings.export_options
    assert options == ExportOptions(variant="generate", target_ort="1.18", precision="int8")
    with MeasurementStore(tmp_path / "store.sqlite") as store:
        evaluator = CandidateEvaluator(load_profile("cpu"), Stub(), store, tmp_path, Budgets(),
                                       export=ExportOptions(variant="generate", target_ort=options.target_ort,
                                                            precision=options.precision),
                                       objective=settings.objective)
        assert evaluator.store_key(EQUAL)[0] == options.model_key(EQUAL)
        # A search hands the evaluator its one ExportOptions, quantization options included.
        from ltsedge.precision import QuantOptions

        tuned = SearchSettings(objective="decode", precision="int4", quantization=QuantOptions(block_size=64))
        evaluator = CandidateEvaluator(load_profile("cpu"), Stub(), store, tmp_path, Budgets(),
                                       export=tuned.export_options, objective="decode")
        assert evaluator.export == tuned.export_options
        assert ":quantization=block_size64-" in evaluator.store_key(EQUAL)[0]
        assert evaluator.store_key(EQUAL)[0] != SearchSettings(objective="decode", precision="int4") \
            .export_options.model_key(EQUAL)
        assert tuned.to_dict()["quantization"] == {"block_size": 64, "symmetric": True, "accuracy_level": 4}
        with pytest.raises(ValueError, match="timed on the generate variant"):
            CandidateEvaluator(load_profile("cpu"), Stub(), store, tmp_path, Budgets(),
                               export=ExportOptions(variant="forward"), objective="decode")
