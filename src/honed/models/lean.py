"""A lean decoding step for Llama-architecture models.

For a small model, a decoding step through `transformers` spends much of its time outside the
arithmetic: building a 4-D attention mask, cache and attention dispatch, output wrappers,
per-module calls, seven small ops per RMSNorm, and `scaled_dot_product_attention`'s CPU kernel,
which is tiled for long queries, on a single query. This module runs the same decoding step as
`LlamaForCausalLM.forward` with the model's own weights and sub-modules (embeddings, rotary
embedding, activation) and the sampler's in-place KV cache, with fewer and larger tensor
operations. On the embedded policy (0.9 M parameters, 64 rows, 32 tokens, 2 threads) sampling
went from 0.243 to 0.205 s (`bench/README.md`). It computes the same function (tests compare
logits with `transformers`' forward); prefill and every gradient-carrying forward still go
through `transformers`.

Only plain Llama models (`model_type == "llama"`, full attention, no attention or MLP
peculiarities beyond optional biases) take this path; any other model decodes through its own
`forward`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import rotate_half

from honed.models.kvcache import InPlaceLayer


def supports_lean_decoding(model: PreTrainedModel) -> bool:
    """Whether `lean_decode_step` computes this model's forward exactly."""
    config = model.config
    if getattr(config, "model_type", None) != "llama" or model.training:
        return False
    if getattr(config, "pretraining_tp", 1) != 1:
        return False  # tensor-parallel slicing of the projections changes the arithmetic
    return getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager")


class LeanDecoder:
    """One model's decoding step without `transformers`' per-step machinery.

    Built once per `generate` call (the weights it fuses are a snapshot: build it again after
    an optimizer step). The query/key/value projections are one matrix product, as are the
    MLP's gate and up projections: fewer, larger products waste less of a small model's time
    on per-call overhead.
    """

    @torch.inference_mode()
    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.fused = []
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
            up = [mlp.gate_proj, mlp.up_proj]
            self.fused.append(
                (
                    torch.cat([m.weight for m in qkv]),
                    _cat_bias(qkv),
                    (attn.q_proj.out_features, attn.k_proj.out_features),
                    torch.cat([m.weight for m in up]),
                    _cat_bias(up),
                )
            )

    @torch.inference_mode()
    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attention: torch.Tensor,
        layers: list[InPlaceLayer],
    ) -> torch.Tensor:
        """Logits [B, V] for one new token per row, appending its keys and values to `layers`.

        `tokens` and `positions` are [B]; `attention` is [B, L] (1 for a real position, 0 for
        left padding), L counting the new token; `layers` are the cache's layers, prefilled.
        """
        model = self.model
        inner = model.model
        hidden = inner.embed_tokens(tokens[:, None])
        cos, sin = inner.rotary_emb(hidden, positions[:, None])
        cos, sin = cos[:, None], sin[:, None]
        batch = tokens.shape[0]
        # Additive mask built once per step for every layer: 0 on real keys, -inf on padding.
        bias = torch.zeros(attention.shape, dtype=hidden.dtype)
        bias = bias.masked_fill_(attention == 0, -torch.inf)[:, None, None, :]
        for layer, cache, fused in zip(inner.layers, layers, self.fused, strict=True):
            qkv_w, qkv_b, (q_size, k_size), up_w, up_b = fused
            attn, mlp = layer.self_attn, layer.mlp
            qkv = F.linear(_norm(layer.input_layernorm, hidden), qkv_w, qkv_b)
            q, k, v = qkv.split([q_size, k_size, qkv.shape[-1] - q_size - k_size], dim=-1)
            q = q.view(batch, 1, -1, attn.head_dim).transpose(1, 2)
            k = k.view(batch, 1, -1, attn.head_dim).transpose(1, 2)
            v = v.view(batch, 1, -1, attn.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            keys, values = cache.update(k, v)
            out = _attend(q, keys, values, bias, attn.scaling)
            out = out.transpose(1, 2).reshape(batch, 1, -1)
            hidden = hidden + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
            x = _norm(layer.post_attention_layernorm, hidden)
            gate, up = F.linear(x, up_w, up_b).chunk(2, -1)
            down = mlp.down_proj
            hidden = hidden + F.linear(mlp.act_fn(gate) * up, down.weight, down.bias)
        return model.lm_head(_norm(inner.norm, hidden)[:, -1])


def _norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """`LlamaRMSNorm` as torch's fused kernel: one call instead of seven small ones.

    Only in float32, where the two are the same computation; `LlamaRMSNorm` normalises a
    half-precision input in float32 and rounds before the weight, so it keeps those.
    """
    if hidden.dtype != torch.float32:
        return norm(hidden)
    return F.rms_norm(hidden, hidden.shape[-1:], norm.weight, norm.variance_epsilon)


def _cat_bias(linears: list[torch.nn.Linear]) -> torch.Tensor | None:
    if all(m.bias is None for m in linears):
        return None
    return torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
    )


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of one query per row: softmax(q·kᵀ·scale + bias)·v, in float32.

    For a single query, two batched matrix products beat `scaled_dot_product_attention`'s CPU
    kernel several times over (that kernel is tiled for long queries). Grouped-query heads share
    their key/value head through a view, without copying.
    """
    batch, heads, _, dim = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    q = q.reshape(batch, kv_heads, group, dim)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale + bias
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, values).reshape(batch, heads, 1, dim)
