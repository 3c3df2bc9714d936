"""Llama's parameters, counted analytically: the proxy, instant and without torch.

As Hugging Face's ``LlamaForCausalLM`` counts them (no biases): per layer two RMSNorm scales, the
q/o projections (``n_head x head_dim`` wide), the k/v projections (``n_kv_head x head_dim`` wide) and
the SwiGLU's gate, up and down projections; then the final RMSNorm. Embedding = the token embedding
and, when untied, the output layer. The tests prove these formulas equal to counting the PyTorch
modules' parameters (and, in scripts, to transformers' own count).
"""

from __future__ import annotations


def layer_params(d_model: int, n_head: int, n_kv_head: int, head_dim: int, d_inner: int) -> int:
    norms = 2 * d_model
    attention = 2 * d_model * n_head * head_dim + 2 * d_model * n_kv_head * head_dim
    return norms + attention + 3 * d_model * d_inner


def decoder_params(arch) -> int:
    layers = sum(layer_params(arch.d_model, arch.n_head[i], arch.kv_heads[i], arch.d_head[i], arch.d_inner[i])
                 for i in range(arch.n_layer))
    return layers + arch.d_model  # + the final RMSNorm


def embedding_params(arch) -> int:
    tables = 1 if arch.tie_embeddings else 2  # the output layer's own matrix when untied
    return tables * arch.vocab_size * arch.d_model
