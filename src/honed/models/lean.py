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
    an optimizer step). Each layer's projections are one matrix product whose output holds the
    queries and keys, the same two rotated by RoPE's `rotate_half` (a signed permutation of
    the output rows, so it is folded into the weights exactly), and the values; RoPE is then one
    multiply-add. The MLP's gate and up projections are one product too. Fewer, larger products
    waste less of a small model's time on per-call overhead.
    """

    @torch.inference_mode()
    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        config = model.config
        act = getattr(config, "hidden_act", None)
        # transformers' SiLU module is torch's function behind a module call
        self.act = F.silu if act in ("silu", "swish") else None
        self.fused = []
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            dim = attn.head_dim
            q, k, v = attn.q_proj, attn.k_proj, attn.v_proj
            qk_w = torch.cat([q.weight, k.weight])
            qk_b = _cat_bias([q, k])
            parts_w = [qk_w, _rotated(qk_w, dim), v.weight]
            parts_b = None
            if qk_b is not None or v.bias is not None:
                qk_b = qk_b if qk_b is not None else qk_w.new_zeros(qk_w.shape[0])
                v_b = v.bias if v.bias is not None else v.weight.new_zeros(v.out_features)
                parts_b = torch.cat([qk_b, _rotated(qk_b, dim), v_b])
            up = [mlp.gate_proj, mlp.up_proj]
            self.fused.append(
                (
                    torch.cat(parts_w),
                    parts_b,
                    q.out_features // dim,
                    qk_w.shape[0],
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
        hidden = inner.embed_tokens(tokens)  # [B, H]: one query per row, no sequence axis
        cos, sin = inner.rotary_emb(hidden, positions[:, None])  # [B, 1, head_dim]
        batch = attention.shape[0]
        bias = None
        for layer, cache, fused in zip(inner.layers, layers, self.fused, strict=True):
            qkv_w, qkv_b, q_heads, qk_size, up_w, up_b = fused
            attn, mlp = layer.self_attn, layer.mlp
            dim = attn.head_dim
            out = F.linear(_norm(layer.input_layernorm, hidden), qkv_w, qkv_b)
            qk = out[:, :qk_size].view(batch, -1, dim)
            qk = torch.addcmul(qk * cos, out[:, qk_size : 2 * qk_size].view(batch, -1, dim), sin)
            q, k = qk[:, :q_heads], qk[:, q_heads:]
            v = out[:, 2 * qk_size :].view(batch, -1, 1, dim)
            keys, values = cache.update(k.unsqueeze(2), v)
            if bias is None:  # one additive mask per step: 0 on real keys, -inf on padding
                bias = _padding_bias(attention, keys.shape[1], hidden.dtype)
            attended = _attend(q, keys, values, bias, attn.scaling)
            hidden = hidden + F.linear(attended, attn.o_proj.weight, attn.o_proj.bias)
            x = _norm(layer.post_attention_layernorm, hidden)
            gate, up = F.linear(x, up_w, up_b).chunk(2, -1)
            gate = self.act(gate) if self.act is not None else mlp.act_fn(gate)
            down = mlp.down_proj
            hidden = hidden + F.linear(gate * up, down.weight, down.bias)
        return model.lm_head(_norm(inner.norm, hidden))


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


def _rotated(rows: torch.Tensor, dim: int) -> torch.Tensor:
    """`rotate_half` applied to every head's block of output rows (weights [N, H] or bias [N]).

    rotate_half(x) = (-x₂, x₁) for x = (x₁, x₂) split in halves, so rotate_half(W·x + b) is
    W'·x + b' with each head's rows swapped by halves and the (new) first half negated.
    """
    heads = rows.view(-1, dim, *rows.shape[1:])
    half = dim // 2
    return torch.cat([-heads[:, half:], heads[:, :half]], dim=1).reshape(rows.shape)


def _padding_bias(attention: torch.Tensor, kv_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """[B·kv_heads, 1, L]: 0 where a row's key is real, -inf on its left padding."""
    batch, length = attention.shape
    bias = torch.zeros((batch, length), dtype=dtype).masked_fill_(attention == 0, -torch.inf)
    return bias[:, None, None, :].expand(batch, kv_heads, 1, length).reshape(-1, 1, length)


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of one query per row, softmax(q·kᵀ·scale + bias)·v, as [B, heads·dim].

    For a single query, two batched matrix products beat `scaled_dot_product_attention`'s CPU
    kernel several times over (that kernel is tiled for long queries). `q` is [B, heads, dim];
    the cache's `keys`/`values` [B, kv_heads, L, dim] are viewed as [B·kv_heads, L, dim], and
    grouped-query heads sharing a key/value head are the rows of one product, without copying.
    """
    batch, heads, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    q = q.reshape(batch * kv_heads, heads // kv_heads, dim)
    keys = keys.reshape(batch * kv_heads, length, dim)
    values = values.reshape(batch * kv_heads, length, dim)
    scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=scale)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.bmm(weights, values).reshape(batch, heads * dim)
