"""Where a published sub-network loads (``ltsedge.subnets.outputs.runtimes``): onnxruntime-genai and
transformers.js read each cache's shape from the graph, so they load every child as published (the exporter's
tests run both on bundles whose layers keep different key/value heads); Optimum sizes every cache from
config.json, so such a child loads there only re-exported as frontier.json's ``optimum_export`` says. Here that
command is run as a user would, in the output folder, and Optimum generates the published bundle's tokens."""

from __future__ import annotations

import shlex

import numpy as np
import onnxruntime as ort
import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from tests.helpers import larger_than_init, run_ltsedge

torch = pytest.importorskip("torch")
optimum_ort = pytest.importorskip("optimum.onnxruntime", reason="Optimum (optimum[onnxruntime]) is not installed")

from ltsedge.exporters import export_model  # noqa: E402
from ltsedge.exporters.bundle import write_bundle  # noqa: E402
from ltsedge.exporters.optimum import optimum_note, uniform_loads  # noqa: E402
from ltsedge.exporters.options import ExportOptions  # noqa: E402
from ltsedge.generation import greedy  # noqa: E402
from ltsedge.subnets.genes import SubnetGenes  # noqa: E402
from ltsedge.subnets.importance import measure_importance  # noqa: E402
from ltsedge.subnets.outputs import runtimes  # noqa: E402
from ltsedge.subnets.parent import parent_weights  # noqa: E402
from ltsedge.subnets.publish import PublishedSubnet, _write_sources  # noqa: E402
from ltsedge.subnets.slicing import slice_state_dict  # noqa: E402

# Head size 16: GroupQueryAttention's, the default form of a published bundle.
PARENT = Architecture(backbone="llama", n_layer=2, d_model=64, n_head=(4, 4), n_kv_head=(2, 2), head_dim=16,
                      d_inner=(96, 96), vocab_size=90, n_positions=64, rope_theta=500.0)
PROMPT = [5, 9, 17, 3, 44]
STEPS = 8


class Folder:
    """An output folder: ``path(rel)`` as OutputDir gives it."""

    def __init__(self, root):
        self.root = root

    def path(self, rel: str):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


def published(tmp_path, kv_groups, ffn=(96, 96)) -> tuple[PublishedSubnet, object]:
    """A child of PARENT keeping ``kv_groups`` and ``ffn`` channels per layer, written as publishing writes it
    (int4 bundle in models/front-1, its architecture and weights beside it), with the runtime fields publishing
    sets from the export."""
    model = larger_than_init(get_backbone("llama").build_model(PARENT), seed=5)
    weights = parent_weights(PARENT, model.state_dict())
    windows = np.random.default_rng(0).integers(0, PARENT.vocab_size, (4, 16))
    child, state = slice_state_dict(PARENT, weights, SubnetGenes((True, True), kv_groups, ffn),
                                    measure_importance(PARENT, weights, windows))
    exported = export_model(child, ExportOptions(variant="generate", precision="int4"), weights=state)
    folder = Folder(tmp_path)
    write_bundle(exported, folder.path("models/front-1"))
    _write_sources(folder, "front-1", child, state)
    p = PublishedSubnet("front-1", None, None, False, None)
    p.optimum, p.optimum_uniform = optimum_note(exported), uniform_loads(exported)
    return p, tmp_path / "models" / "front-1"


def file_greedy(bundle) -> list[int]:
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    return greedy(session, np.array([PROMPT]), STEPS).tokens[0].tolist()


def optimum_greedy(bundle) -> list[int]:
    model = optimum_ort.ORTModelForCausalLM.from_pretrained(bundle, use_cache=True)
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         max_new_tokens=STEPS, do_sample=False, num_beams=1)
    return out[0, len(PROMPT):].tolist()


def test_a_child_keeping_every_head_loads_in_optimum_as_published(tmp_path):
    p, bundle = published(tmp_path, (2, 2), ffn=(96, 48))  # only channels pruned
    row = runtimes(p, "int4")
    assert "optimum" in row["loads_in"] and row["optimum_note"] is None and row["optimum_export"] is None
    assert optimum_greedy(bundle) == file_greedy(bundle)


def test_a_child_of_fewer_query_heads_in_every_layer_has_no_layout_optimum_loads(tmp_path):
    """Optimum takes the head size as hidden_size / num_attention_heads: with one group (2 query heads of 16 in
    a width of 64) it makes caches of 32; no cache layout helps, and the row says so."""
    p, bundle = published(tmp_path, (1, 1))
    row = runtimes(p, "int4")
    assert row["loads_in"] == ["onnxruntime-genai", "transformers.js"] and row["optimum_export"] is None
    assert "1x32" in row["optimum_note"] and "--cache-layout" not in row["optimum_note"]
    with pytest.raises(Exception, match="invalid dimensions"):
        optimum_greedy(bundle)


def test_a_child_whose_layers_keep_different_heads_gets_the_export_optimum_loads(tmp_path, monkeypatch):
    p, bundle = published(tmp_path, (2, 1))
    row = runtimes(p, "int4")
    assert row["loads_in"] == ["onnxruntime-genai", "transformers.js"]
    assert "cannot load this bundle" in row["optimum_note"] and "2x16, 1x16" in row["optimum_note"]
    with pytest.raises(Exception, match="invalid dimensions"):  # what the note says
        optimum_greedy(bundle)
    expected = file_greedy(bundle)
    assert len(set(expected)) > 2
    command = shlex.split(row["optimum_export"])
    assert command[0] == "ltsedge"
    monkeypatch.chdir(tmp_path)  # the command is given for the output folder
    proc = run_ltsedge(*command[1:])
    assert proc.returncode == 0, proc.stderr
    uniform = tmp_path / "front-1-uniform"
    assert optimum_greedy(uniform) == expected  # the same model, every cache of 2 heads
    pytest.importorskip("onnxruntime_genai")
    from tests.helpers import genai_greedy

    assert genai_greedy(bundle, PROMPT, STEPS)[0] == expected  # genai loads the bundle as published
