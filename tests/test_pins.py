"""Pinned exports: the graph and weights of a fixed set of architectures, and their store keys.

These digests were computed before the backbone registry was introduced; a refactor must not move
a byte of the graph (metadata aside: it carries the ltsedge version). When a change to a graph is
intended, the stored measurements of the old graph must stop being reused: bump the backbone's
``graph_version`` (it is in every store key) and update these pins in the same commit.

Here: GPT-2 at two targets, and the cache layouts' invariance. Every backbone's (OPT's and
Transformer-XL's included) default exports, both variants, are pinned by tests/test_contract.py's PINS,
whose "plain" GPT-2 pin is the same bytes as ("plain", "1.20") here.
"""

import pytest

from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from tests.helpers import graph_digest

ARCHS = {
    "plain": Architecture(n_layer=2, d_model=64, n_head=(2, 4), d_inner=(128, 192), vocab_size=512, n_positions=64),
    "div2": Architecture(n_layer=3, d_model=96, n_head=(2, 4, 2), d_inner=(256, 192, 320), d_embed=32, div_val=2,
                         vocab_size=300, n_positions=32),
    "div1-narrow": Architecture(n_layer=1, d_model=32, n_head=(4,), d_inner=(64,), d_embed=16, div_val=1,
                                vocab_size=100, n_positions=16),
    "div4-cutoffs": Architecture(n_layer=2, d_model=64, n_head=(8, 2), d_inner=(256, 128), d_embed=64, div_val=4,
                                 vocab_size=1000, n_positions=128, cutoffs=(100, 500)),
}
# (architecture, onnxruntime target) -> (sha256 of the file without metadata_props, store model key).
# Target 1.16 writes opset 19 (GELU as its erf formula), 1.20 opset 21 (the Gelu operator).
PINS = {
    ("plain", "1.16"): ("8a172566929b1af9563603bcbc7235ac9f56d97c1cd8b1cedb3445512c5d7d7e",
                        "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=9:opset=19:weights=shared-v1"),
    ("plain", "1.20"): ("8fa5c319970278625568f9d57f00c5279502206df4112f2a9e43c03cea5f5f8e",
                        "arch:gpt2-L2-d64-e3e80f2a5f:graph=2:ir=10:opset=21:weights=shared-v1"),
    ("div2", "1.16"): ("6dcf4642630309b49ccfebe6e647db20f683c1eb3f5ddfd8035dc135eee7a5bd",
                       "arch:gpt2-L3-d96-e1260eefe7:graph=2:ir=9:opset=19:weights=shared-v1"),
    ("div2", "1.20"): ("9132527065f794da7da5d566cea61ce30f4d339569fb2304609fd2d86b06a2ca",
                       "arch:gpt2-L3-d96-e1260eefe7:graph=2:ir=10:opset=21:weights=shared-v1"),
    ("div1-narrow", "1.16"): ("971e5d06ff8d99ff5b20ce3a6f2daa8549c04ca2930d34d2ffd631bd501199e3",
                              "arch:gpt2-L1-d32-7cf93cb5f5:graph=2:ir=9:opset=19:weights=shared-v1"),
    ("div1-narrow", "1.20"): ("711a8db25936772a0530f05d6b2591823f51e65cff52100c403a66ab537f2a9e",
                              "arch:gpt2-L1-d32-7cf93cb5f5:graph=2:ir=10:opset=21:weights=shared-v1"),
    ("div4-cutoffs", "1.16"): ("4c62e4abe4616ec5c55a1052b176fa3e2a5acc9e985711097b4195848d908a52",
                               "arch:gpt2-L2-d64-8d7493d919:graph=2:ir=9:opset=19:weights=shared-v1"),
    ("div4-cutoffs", "1.20"): ("b09053d46d2c16b796c968b15f46065e3ccea155ae7c38b1040d7e1e02e7abda",
                               "arch:gpt2-L2-d64-8d7493d919:graph=2:ir=10:opset=21:weights=shared-v1"),
}


# The default target became the oldest supported runtime's (ltsedge.ortcompat.OLDEST_ORT, 1.20) instead of
# the local runtime's newest pair: a default export is now 1.20's bytes, under 1.20's key (the key names
# opset and IR). No graph changed for any (opset, IR), so no graph_version was bumped.
DEFAULT_TARGET = "1.20"


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_default_export_is_the_oldest_supported_runtimes_pinned_export(name):
    digest, key = PINS[name, DEFAULT_TARGET]
    assert graph_digest(export_model(ARCHS[name]).to_bytes()) == digest
    assert ExportOptions().model_key(ARCHS[name]) == key


@pytest.mark.parametrize("name,target", sorted(PINS), ids=lambda v: str(v))
def test_exported_graph_and_store_key_are_pinned(name, target):
    arch = ARCHS[name]
    digest, key = PINS[name, target]
    options = ExportOptions(target_ort=target)
    assert graph_digest(export_model(arch, options).to_bytes()) == digest
    assert options.model_key(arch) == key


# The generate variant, pinned when the KV-cache layout became an export option (backbones.kv_cache):
# a model whose attention layers all have the same heads exports the very graph it did before, in either
# layout, under the key it had; a model with per-layer heads does in the per-layer layout.
GENERATE_ARCHS = {
    "gpt2-equal": Architecture(n_layer=2, d_model=64, n_head=(4, 4), d_inner=(128, 96), vocab_size=300,
                               n_positions=64),
    "opt-equal": Architecture(backbone="opt", n_layer=2, d_model=64, n_head=(4, 4), d_inner=(128, 96),
                              vocab_size=300, n_positions=64),
    # PAR: the FFN-only layer 0 has no cache, so its 8 heads never meet a cache of 2
    "par-equal": Architecture(n_layer=3, d_model=64, n_head=(8, 2, 2), d_inner=(128, 96, 64), vocab_size=300,
                              n_positions=64, block_types=("ffn", "attn", "attn_ffn")),
    "gpt2-per-layer": Architecture(n_layer=3, d_model=64, n_head=(2, 8, 4), d_inner=(128, 256, 96), vocab_size=300,
                                   n_positions=64),
}
GENERATE_PINS = {
    ("gpt2-equal", "1.16"): ("652318ddc873d24a34eab4c485cbeec3610089b4f66be0058901a50422805467",
                             "arch:gpt2-L2-d64-9797b70641:graph=2:ir=9:opset=19:variant=generate:weights=shared-v1"),
    ("gpt2-equal", "1.20"): ("ba2eb1fb58e8f477aea2d1395ab1e098586cd0f43a0a010dc7fae8535e57e424",
                             "arch:gpt2-L2-d64-9797b70641:graph=2:ir=10:opset=21:variant=generate:weights=shared-v1"),
    ("opt-equal", "1.16"): ("f23c962f60659d120d4f8d12453438f100611b86e8107096c0c3341cc622cfd6",
                            "arch:opt-L2-d64-ba94ed5d8b:graph=2:ir=9:opset=19:variant=generate:weights=shared-v1"),
    ("opt-equal", "1.20"): ("cb46c80edc71e9936285b9fe8b063458a0d03c76774b760860a01c061d46db08",
                            "arch:opt-L2-d64-ba94ed5d8b:graph=2:ir=10:opset=21:variant=generate:weights=shared-v1"),
    ("par-equal", "1.16"): ("a89fbfcd6cf55d8719c258a44a9758312ac83506bb6786eca6d0796a9e69bcaf",
                            "arch:gpt2-L3-d64-470dd3d204:graph=2:ir=9:opset=19:variant=generate:weights=shared-v1"),
    ("par-equal", "1.20"): ("94f2bb67743ac77943493cc498873762167940d079f27cc64a69adc834e3478d",
                            "arch:gpt2-L3-d64-470dd3d204:graph=2:ir=10:opset=21:variant=generate:weights=shared-v1"),
    ("gpt2-per-layer", "1.16"): ("7bffb6ae0a6971866fd0347614cee1ffe97bd6dcd29ac456e4f491cb760345e6",
                                 "arch:gpt2-L3-d64-beaaafee17:graph=2:ir=9:opset=19:variant=generate:weights=shared-v1"),
    ("gpt2-per-layer", "1.20"): ("316ddd10688103c107eb3683b76a8570246683be0fff7470e2125e0d22e28db0",
                                 "arch:gpt2-L3-d64-beaaafee17:graph=2:ir=10:opset=21:variant=generate:weights=shared-v1"),
}


@pytest.mark.parametrize("name,target", sorted(GENERATE_PINS), ids=lambda v: str(v))
def test_generate_graph_and_key_are_pinned_where_the_cache_layout_changes_nothing(name, target):
    arch = GENERATE_ARCHS[name]
    digest, key = GENERATE_PINS[name, target]
    layouts = ["per-layer"] if name == "gpt2-per-layer" else [None, "per-layer", "uniform"]  # None: the default
    for layout in layouts:
        inline = ExportOptions(variant="generate", target_ort=target, cache_layout=layout, external_data=False)
        assert graph_digest(export_model(arch, inline).to_bytes()) == digest
        assert inline.model_key(arch) == key
        # by default its weights go to a data file beside it (options.default_external): the same graph under a
        # key of its own, since onnxruntime holds less memory for it than for one file
        options = ExportOptions(variant="generate", target_ort=target, cache_layout=layout)
        assert graph_digest(export_model(arch, options).to_bytes()) == digest
        assert options.model_key(arch) == key.replace(":graph=", ":data=external:graph=")
