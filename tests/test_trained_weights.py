"""``ltsedge export --weights`` of a file whose tensors hold no values to export: on the meta device, sparse,
NaN or infinite, or beyond float32's range. Each is one line naming the tensor, exit 2, and nothing written,
for every backbone the registry knows (the check is in the loading path all of them share)."""

from __future__ import annotations

import pytest

from ltsedge.architecture import Architecture
from ltsedge.backbones import backbone_names, get_backbone
from tests.helpers import one_line_exit_2, run_ltsedge

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")  # torch warns on making one

# Small enough for any backbone: every one is held to this shape by the backbone contract (tests/test_contract.py).
PLAIN = dict(n_layer=2, d_model=32, n_head=(2, 4), d_inner=(48, 40), vocab_size=60, n_positions=32)


def reference(backbone: str) -> tuple[Architecture, dict]:
    """A tiny architecture of ``backbone`` and its reference model's state_dict, each tensor its own copy."""
    arch = Architecture(backbone=backbone, **PLAIN)
    state = get_backbone(backbone).build_model(arch).state_dict()
    return arch, {name: tensor.clone() for name, tensor in state.items()}


def first_matrix(state: dict) -> str:
    return next(name for name, tensor in state.items() if tensor.dim() == 2)


def with_values(tensor, *values):
    """``tensor`` with its elements 3, 4, ... set to ``values`` (element 3 is [0, 3] of a matrix)."""
    tensor = tensor.clone()
    for i, value in enumerate(values):
        tensor.view(-1)[3 + i] = value
    return tensor


CORRUPTIONS = {  # case -> (the tensor as a file holds it, what the error says of it)
    "meta": (lambda t: torch.empty(t.shape, device="meta"), "is on the meta device, which holds no values"),
    "sparse_coo": (lambda t: t.to_sparse(), "is a sparse_coo tensor: weights must be dense"),
    "sparse_csr": (lambda t: t.to_sparse_csr(), "is a sparse_csr tensor: weights must be dense"),
    "nan": (lambda t: with_values(t, float("nan")), "has 1 NaN value (the first at [0, 3]): weights must be finite"),
    "inf": (lambda t: with_values(t, float("inf"), float("-inf")), "has 2 infinite values (the first at [0, 3])"),
}


def refused(tmp_path, arch: Architecture, state: dict, *messages: str, suffix: str = ".pt",
            variant: str = "forward") -> None:
    """Export ``state`` as trained weights of ``arch``: one line holding ``messages``, exit 2, and no file
    but the two inputs in ``tmp_path`` afterwards (no model, no .partial, no bundle directory)."""
    arch_path, weights = tmp_path / "arch.json", tmp_path / f"w{suffix}"
    arch_path.write_text(arch.to_json())
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(weights))
    else:
        torch.save(state, weights)
    output = tmp_path / ("m.onnx" if variant == "forward" else "bundle")
    proc = run_ltsedge("export", arch_path, "--weights", weights, "--variant", variant, "-o", output)
    one_line_exit_2(proc, f"weights file {weights}", *messages)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([arch_path.name, weights.name])


@pytest.mark.parametrize("case", list(CORRUPTIONS))
@pytest.mark.parametrize("backbone", backbone_names())
def test_a_tensor_without_finite_dense_values_is_one_line_and_nothing_is_written(tmp_path, backbone, case):
    arch, state = reference(backbone)
    name = first_matrix(state)
    corrupt, message = CORRUPTIONS[case]
    state[name] = corrupt(state[name])
    refused(tmp_path, arch, state, f"tensor {name!r} {message}")


@pytest.mark.parametrize("backbone", backbone_names())
def test_nan_in_a_safetensors_file_is_refused(tmp_path, backbone):
    arch, state = reference(backbone)
    name = first_matrix(state)
    state[name] = with_values(state[name], float("nan"), float("inf"))
    refused(tmp_path, arch, state, f"tensor {name!r} has 1 NaN and 1 infinite values (the first at [0, 3])",
            suffix=".safetensors")


def test_nan_weights_write_no_generate_bundle(tmp_path):
    arch, state = reference("gpt2")
    state["h.1.mlp.c_fc.weight"] = with_values(state["h.1.mlp.c_fc.weight"], float("nan"))
    refused(tmp_path, arch, state, "tensor 'h.1.mlp.c_fc.weight' has 1 NaN value", variant="generate")


def test_float64_values_beyond_float32s_range_are_refused(tmp_path):
    """Finite in the file, infinite once converted to the exported float32."""
    arch, state = reference("gpt2")
    state["wte.weight"] = with_values(state["wte.weight"].double(), 1e300)
    refused(tmp_path, arch, state, "tensor 'wte.weight' has 1 value beyond float32's range (the first at [0, 3])")


TIED = [name for name in backbone_names() if get_backbone(name).tied_aliases]
ALIAS_CASES = {  # case -> (the tensor named, its corruption, the alias's corruption (None: equal), the error)
    "meta_alias": ("alias", None, CORRUPTIONS["meta"][0], "is on the meta device"),
    "meta_tied_to": ("name", CORRUPTIONS["meta"][0], None, "is on the meta device"),
    "sparse_alias": ("alias", None, CORRUPTIONS["sparse_coo"][0], "is a sparse_coo tensor"),
    "csr_alias": ("alias", None, CORRUPTIONS["sparse_csr"][0], "is a sparse_csr tensor"),
    "nan_in_both": ("name", CORRUPTIONS["nan"][0], CORRUPTIONS["nan"][0], "has 1 NaN value"),
    "inf_alias": ("alias", None, CORRUPTIONS["inf"][0], "has 2 infinite values"),
}


@pytest.mark.parametrize("case", list(ALIAS_CASES))
@pytest.mark.parametrize("backbone", TIED)
def test_a_tied_alias_without_finite_dense_values_is_one_line(tmp_path, backbone, case):
    """A checkpoint carrying the tied copy of a tensor (OPT's lm_head.weight beside the token embedding):
    the bad tensor is named, never torch's error from comparing the two, nor 'differs' for NaN in both."""
    arch, state = reference(backbone)
    alias, name = next(iter(get_backbone(backbone).tied_aliases.items()))
    named, corrupt_name, corrupt_alias, message = ALIAS_CASES[case]
    if corrupt_name is not None:
        state[name] = corrupt_name(state[name])
    state[alias] = state[name] if corrupt_alias is None else corrupt_alias(state[name])
    refused(tmp_path, arch, state, f"tensor {(alias if named == 'alias' else name)!r} {message}")
