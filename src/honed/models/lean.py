"""Lean forward passes for Llama-architecture models: decoding and scoring.

For a small model, a forward through `transformers` spends much of its time outside the
arithmetic: building 4-D attention masks, cache and attention dispatch, output wrappers,
per-module calls, three projections where one product would do, and RoPE's `rotate_half`
(two slices, a negation and a concatenation per tensor, and their backward). This module runs
the same function with the model's own weights and sub-modules (embeddings, rotary embedding,
activation) and fewer, larger tensor operations:

- each layer's query, key and value projections are one matrix product, and RoPE rotates
  queries and keys together, once per layer. In decoding, the product's output also holds the
  queries and keys already rotated by `rotate_half` (a signed permutation of the output rows,
  folded into the weights exactly), so RoPE is one multiply-add: that costs two thirds more
  projection arithmetic, which pays where per-call overhead dominates (one token per row) and
  not in scoring, where the arithmetic does;
- the MLP's gate and up projections are one product;
- RMSNorm is torch's `rms_norm` (float32 only, where the two are the same computation).

`LeanDecoder` is the sampler's decoding step (one query per row, the in-place KV cache, a
two-product attention instead of `scaled_dot_product_attention`'s kernel, which is tiled for
long queries, weights stored transposed so each projection is one `mm`, the residual added
inside the product, RoPE's angles read from a table). `lean_forward` is the scoring forward of
the update, with gradients: the fused weights are concatenated from the parameters inside the
autograd graph on every call, so the gradients reach the parameters exactly as through
`transformers`' forward; RoPE, RMSNorm and the gated MLP activation are autograd functions
whose backward passes take about half the passes over the activations that autograd through
their pieces would. Tests compare logits, log-probs and gradients with `transformers`, and the
hand-written backward passes with finite differences.

Only plain Llama models (`model_type == "llama"`, full attention, no attention or MLP
peculiarities beyond optional biases) take these paths (`supports_lean`); any other model
runs its own `forward`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from honed.models.kvcache import InPlaceLayer

# `lean_forward` packs a batch's real tokens when at least this share of its positions is padding:
# below it, moving rows in and out of the packed layout costs more than the padding does.
PACK_MIN_PADDING = 0.125


def supports_lean(model: PreTrainedModel) -> bool:
    """Whether this module's forwards compute exactly `model`'s forward.

    Only for a plain Llama whose projections are plain `nn.Linear`s holding plain tensors: a
    peft model (LoRA layers wrap the projections) or a sharded one (FSDP's parameters are
    `DTensor`s, gathered by hooks around each layer's own forward) runs its own forward.
    """
    if not isinstance(model, PreTrainedModel):
        return False
    config = model.config
    if getattr(config, "model_type", None) != "llama":
        return False
    if getattr(config, "pretraining_tp", 1) != 1:
        return False  # tensor-parallel slicing of the projections changes the arithmetic
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return False
    layer = model.model.layers[0]
    linears = [getattr(layer.self_attn, f"{n}_proj") for n in "qkvo"]
    linears += [getattr(layer.mlp, f"{n}_proj") for n in ("gate", "up", "down")]
    linears.append(model.lm_head)
    return all(type(m) is torch.nn.Linear and type(m.weight.data) is torch.Tensor for m in linears)


def checkpointing(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on (`transformers` renamed the property in v5)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    if flag is None:
        flag = getattr(model, "is_gradient_checkpointing", False)
    return bool(flag)


def supports_lean_decoding(model: PreTrainedModel) -> bool:
    """Whether `LeanDecoder` computes this model's decoding step (in eval mode only).

    The decoder reads RoPE's angles from a table built once; a rotary embedding whose
    frequencies change with the sequence length (`dynamic`, `longrope`) is left to the model.
    """
    if not supports_lean(model) or model.training:
        return False
    return getattr(model.model.rotary_emb, "rope_type", "default") not in ("dynamic", "longrope")


class LeanDecoder:
    """One model's decoding step without `transformers`' per-step machinery.

    Built once per `generate` call: the weights it fuses are a snapshot (build it again after
    an optimizer step). They are stored transposed, [in, out], so that every projection is one
    `mm` (the residual ones one `addmm`, which adds the residual inside the product), and RoPE's
    cos/sin come from a table over `positions` positions computed by the model's own rotary
    embedding: a row's angles are the same numbers whichever batch they are computed in.
    """

    @torch.inference_mode()
    def __init__(self, model: PreTrainedModel, positions: int) -> None:
        self.model = model
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.head = model.lm_head.weight  # often tied to `embed`: a view, never a copy
        self.head_bias = model.lm_head.bias
        steps = torch.arange(positions, device=self.embed.device)
        cos, sin = inner.rotary_emb(self.embed, steps[None])
        self.cos, self.sin = cos[0, :, None], sin[0, :, None]  # [positions, 1, head_dim]
        self.layers = [_DecodeLayer(layer, _activation(model)) for layer in inner.layers]

    def padding_bias(self, attention: torch.Tensor) -> torch.Tensor:
        """The additive mask `step` takes, [B·kv_heads, 1, L]: 0 on real keys, -inf on padding.

        `attention` is [B, L] (1 real, 0 left padding); a step attending to its first L' keys
        takes the view `bias[..., :L']`, so one mask serves every step until rows leave.
        """
        config = self.model.config
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        batch, length = attention.shape
        bias = torch.zeros((batch, length), dtype=self.embed.dtype, device=attention.device)
        bias.masked_fill_(attention == 0, -torch.inf)
        return bias[:, None, None, :].expand(batch, kv_heads, 1, length).reshape(-1, 1, length)

    @torch.inference_mode()
    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        bias: torch.Tensor,
        layers: list[InPlaceLayer],
    ) -> torch.Tensor:
        """Logits [B, V] for one new token per row, appending its keys and values to `layers`.

        `tokens` and `positions` are [B]; `bias` is `padding_bias` over the L keys this step
        attends to, the new token's included; `layers` are the cache's layers, prefilled.
        """
        hidden = F.embedding(tokens, self.embed)  # [B, H]: one query per row, no sequence axis
        bias = bias.contiguous()  # once for all layers: a strided one slows every `baddbmm`
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        for layer, cache in zip(self.layers, layers, strict=True):
            hidden = layer.step(hidden, cos, sin, bias, cache)
        return F.linear(_norm(self.model.model.norm, hidden), self.head, self.head_bias)


class _DecodeLayer:
    """One decoder layer's fused, transposed weights and its single-token step."""

    def __init__(self, layer: torch.nn.Module, act: Callable | None) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        qkv_w, self.qkv_b, q_heads, qk_size, up_w, self.up_b = _fuse(layer)
        self.qkv = qkv_w.t().contiguous()  # [H, q+k+rot(q)+rot(k)+v]
        qk_heads = qk_size // attn.head_dim
        # heads of the product: q and k, the same rotated, v; then q and k apart
        self.splits = [qk_heads, qk_heads, qkv_w.shape[0] // attn.head_dim - 2 * qk_heads]
        self.qk_splits = [q_heads, qk_heads - q_heads]
        self.up = up_w.t().contiguous()  # [H, gate+up]
        self.o = attn.o_proj.weight.t().contiguous()
        self.o_b = attn.o_proj.bias
        self.down = mlp.down_proj.weight.t().contiguous()
        self.down_b = mlp.down_proj.bias
        self.dim, self.scale = attn.head_dim, attn.scaling
        self.norms = layer.input_layernorm, layer.post_attention_layernorm
        self.act = act if act is not None else mlp.act_fn

    def step(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        bias: torch.Tensor,
        cache: InPlaceLayer,
    ) -> torch.Tensor:
        heads = _project(_norm(self.norms[0], hidden), self.qkv, self.qkv_b)
        qk, rotated, v = heads.view(hidden.shape[0], -1, self.dim).split(self.splits, dim=1)
        q, k = torch.addcmul(qk * cos, rotated, sin).split(self.qk_splits, dim=1)
        keys, values = cache.append(k, v)
        attended = _attend(q, keys, values, bias, self.scale)
        hidden = torch.addmm(hidden, attended, self.o)  # the residual added inside the product
        if self.o_b is not None:
            hidden = hidden + self.o_b
        gate, up = _project(_norm(self.norms[1], hidden), self.up, self.up_b).chunk(2, -1)
        hidden = torch.addmm(hidden, self.act(gate).mul_(up), self.down)
        return hidden if self.down_b is None else hidden + self.down_b


def _project(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


def lean_forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    keep: int | None = None,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """`model`'s body with gradients: the final hidden states (after the last norm) of the last
    `keep` positions (all if None), and every layer's keys and values [B, kv_heads, S,
    head_dim], past ones included. The output head is left to the caller, which projects only
    the positions it scores, a chunk at a time (`honed.models.scoring.head_logprobs`).

    `input_ids` and `positions` are [B, T]; `key_mask` is [B, S] over every key a query may see
    (1 real, 0 padding), the T new positions being the last T of the S; `past` holds each
    layer's keys and values for the first S - T. Attention is causal over real keys. A padding
    query, which may have no real key at or before it, attends to itself so that it stays
    finite; nothing real attends to it, so it changes no other output and no gradient.

    Padding costs arithmetic in every per-token product, and completions of one batch differ in
    length. When at least `PACK_MIN_PADDING` of the T positions are padding, the real tokens
    are packed into one row for everything but attention (projections, RoPE, norms, MLP), and
    laid out [B, T] only for attention; padding positions then come out as zero states.

    With gradient checkpointing on (`honed.models.policy.enable_checkpointing`), in training and
    under autograd, each layer is recomputed in the backward pass instead of keeping its
    activations (`torch.utils.checkpoint`), as `transformers`' layers do.

    Long because it is one forward pass written out as the steps it fuses (packing,
    projections, RoPE, attention, MLP, unpacking): the hot loop reads top to bottom.
    """
    inner = model.model
    act = _activation(model)
    batch, length = input_ids.shape
    real = key_mask[:, -length:].bool()
    packed = None
    if int(real.sum()) <= (1.0 - PACK_MIN_PADDING) * real.numel():
        packed = real.flatten().nonzero().squeeze(1)
        input_ids = input_ids.flatten()[packed][None]  # [1, N]: the real tokens only
        positions = positions.flatten()[packed][None]
    hidden = inner.embed_tokens(input_ids)
    cos, sin = inner.rotary_emb(hidden, positions)  # [b, t, head_dim]
    cos, sin = cos[:, :, None], sin[:, :, None]
    bias = _mask_bias(key_mask, length, hidden.dtype)
    present = []
    layer_fn = _lean_layer
    if checkpointing(model) and model.training and torch.is_grad_enabled():
        layer_fn = partial(checkpoint, _lean_layer, use_reentrant=False)
    for index, layer in enumerate(inner.layers):
        hidden, kv = layer_fn(
            layer,
            hidden,
            (cos, sin),
            bias,
            packed,
            (batch, length),
            None if past is None else past[index],
            act,
            model.training,
        )
        present.append(kv)
    if packed is not None:
        hidden = hidden.new_zeros((batch * length, hidden.shape[-1])).index_copy(
            0, packed, hidden[0]
        )
        hidden = hidden.view(batch, length, -1)
    if keep is not None:
        hidden = hidden[:, -keep:]
    return _norm(inner.norm, hidden), present


def _lean_layer(
    layer: torch.nn.Module,
    hidden: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    bias: torch.Tensor,
    packed: torch.Tensor | None,
    shape: tuple[int, int],
    past: tuple[torch.Tensor, torch.Tensor] | None,
    act: Callable[..., torch.Tensor] | None,
    training: bool,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One decoder layer of `lean_forward` (apart so that it reads as embed, layers, norm): the
    new hidden state and the layer's keys and values [B, kv_heads, S, head_dim], `past` first.

    `rope` is (cos, sin) [b, t, 1, head_dim], `shape` the batch's (B, T), `packed` the indices
    of its real tokens when they are packed into one row (see `lean_forward`), `act` the
    model's SiLU or None, `training` whether attention dropout applies.
    """
    cos, sin = rope
    batch, length = shape
    qkv_w, qkv_b, q_heads, qk_size, up_w, up_b = _fuse(layer, rotated=False)
    attn = layer.self_attn
    dim = attn.head_dim
    out = F.linear(_norm(layer.input_layernorm, hidden), qkv_w, qkv_b)
    heads = out.view(*out.shape[:2], -1, dim)
    qk_heads = qk_size // dim
    # split, not slicing: its backward is one concatenation, not a zero-filled tensor each
    qk, v = heads.split([qk_heads, heads.shape[2] - qk_heads], dim=2)
    qk = _Rope.apply(qk, cos, sin)  # queries and keys at once
    if packed is not None:  # to [B, T] for attention, zeros at padding
        heads = torch.cat([qk, v], dim=2)[0]
        heads = heads.new_zeros((batch * length, *heads.shape[1:])).index_copy(0, packed, heads)
        qk, v = heads.view(batch, length, -1, dim).split([qk_heads, v.shape[2]], dim=2)
    q, k = (t.transpose(1, 2) for t in qk.split([q_heads, qk_heads - q_heads], dim=2))
    v = v.transpose(1, 2)
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    present = (k, v)
    group = q_heads // k.shape[1]
    if group > 1:  # grouped-query heads: each key/value head serves `group` query heads
        k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    attended = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=bias,
        dropout_p=attn.attention_dropout if training else 0.0,
        scale=attn.scaling,
    )
    attended = attended.transpose(1, 2).reshape(batch * length, -1)
    if packed is not None:
        attended = attended.index_select(0, packed)
    attended = attended.view(*hidden.shape[:2], -1)
    hidden = hidden + F.linear(attended, attn.o_proj.weight, attn.o_proj.bias)
    x = _norm(layer.post_attention_layernorm, hidden)
    return hidden + _lean_mlp(layer.mlp, x, up_w, up_b, act), present


def _lean_mlp(
    mlp: torch.nn.Module,
    x: torch.Tensor,
    up_w: torch.Tensor,
    up_b: torch.Tensor | None,
    act: Callable[..., torch.Tensor] | None,
) -> torch.Tensor:
    """A layer's gated MLP on the normed `x`, with the fused gate and up weights of `_fuse`:
    the part of `_lean_layer` after attention, apart so that each function reads in one go."""
    gate_up = F.linear(x, up_w, up_b)
    if act is not None:
        gated = _SwiGLU.apply(gate_up)
    else:  # an activation other than SiLU: the model's own module
        gate, up = gate_up.chunk(2, -1)
        gated = mlp.act_fn(gate) * up
    down = mlp.down_proj
    return F.linear(gated, down.weight, down.bias)


class _Rope(torch.autograd.Function):
    """RoPE, x·cos + rotate_half(x)·sin, with a hand-written backward.

    Through autograd, rotate_half (two halves, a negation, a concatenation) and the products
    cost about ten passes over the queries and keys, forward and backward; here each direction
    is one product and two half-width multiply-adds into it. rotate_half is a signed
    permutation R, so the gradient is g·cos + Rᵀ(g·sin), with Rᵀ(y₁, y₂) = (y₂, -y₁).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        out = x * cos
        out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1)
        out[..., half:].addcmul_(x[..., :half], sin[..., half:])
        ctx.save_for_backward(cos, sin)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        half = grad.shape[-1] // 2
        out = grad * cos
        out[..., :half].addcmul_(grad[..., half:], sin[..., half:])
        out[..., half:].addcmul_(grad[..., :half], sin[..., :half], value=-1)
        return out, None, None


class _SwiGLU(torch.autograd.Function):
    """silu(gate)·up from the fused [gate; up] product, with a hand-written backward.

    Autograd would compute the two halves' gradients apart and concatenate them for the fused
    product's backward; here they are written into one tensor (the SiLU derivative by torch's
    own `silu_backward`), one pass and one allocation fewer.
    """

    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, -1)
        ctx.save_for_backward(gate_up)
        return F.silu(gate).mul_(up)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (gate_up,) = ctx.saved_tensors
        gate, up = gate_up.chunk(2, -1)
        out = torch.empty_like(gate_up)
        grad_gate, grad_up = out.chunk(2, -1)
        torch.mul(grad, F.silu(gate), out=grad_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=grad_gate)
        return out


class _RMSNorm(torch.autograd.Function):
    """`LlamaRMSNorm` in float32, x·rsqrt(mean(x²) + ε)·w, with a hand-written backward.

    Autograd through the composite (square, mean, add, rsqrt, two products) takes about a
    dozen passes over the activations; with x̂ = x·r and g' = g·w, the gradients are
    dx = r·(g' - x̂·mean(g'·x̂)) and dw = Σ g·x̂, about half as many.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        r = torch.rsqrt(x.square().mean(-1, keepdim=True).add_(eps))
        normed = x * r
        ctx.save_for_backward(normed, r, weight)
        return normed * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        normed, r, weight = ctx.saved_tensors
        grad_weight = (grad * normed).flatten(0, -2).sum(0)
        grad_normed = grad * weight
        mean = torch.linalg.vecdot(grad_normed, normed).unsqueeze(-1).div_(normed.shape[-1])
        return torch.addcmul(grad_normed, normed, mean, value=-1).mul_(r), grad_weight, None


def _mask_bias(key_mask: torch.Tensor, queries: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask [B, 1, T, S]: 0 where query i may see key j, -inf elsewhere.

    Query i sits at key position S - T + i; it sees real keys at or before it, and itself.
    """
    keys = key_mask.shape[1]
    offset = keys - queries
    rows = torch.arange(queries, device=key_mask.device)[:, None] + offset
    cols = torch.arange(keys, device=key_mask.device)[None, :]
    allowed = (cols <= rows) & key_mask.bool()[:, None, :]
    allowed |= cols == rows
    bias = torch.zeros(allowed.shape, dtype=dtype, device=key_mask.device)
    bias.masked_fill_(~allowed, -torch.inf)
    return bias[:, None]


def _activation(model: PreTrainedModel):
    """torch's SiLU for a `silu` model (transformers' module is it behind a module call)."""
    return F.silu if getattr(model.config, "hidden_act", None) in ("silu", "swish") else None


def _fuse(layer: torch.nn.Module, rotated: bool = True) -> tuple:
    """A layer's fused weights: [q; k; rotate_half(q); rotate_half(k); v] rows (without the
    rotated blocks if not `rotated`) and their bias, the number of query heads, the q+k width,
    and the [gate; up] rows and bias.

    Built from the parameters with ordinary tensor operations, so under autograd the fused
    weights pass their gradients back to the parameters.
    """
    attn, mlp = layer.self_attn, layer.mlp
    dim = attn.head_dim
    q, k, v = attn.q_proj, attn.k_proj, attn.v_proj
    qk_w = torch.cat([q.weight, k.weight])
    qk_b = _cat_bias([q, k])
    qkv_b = None
    if qk_b is not None or v.bias is not None:
        qk_b = qk_b if qk_b is not None else qk_w.new_zeros(qk_w.shape[0])
        v_b = v.bias if v.bias is not None else v.weight.new_zeros(v.out_features)
        qkv_b = torch.cat([qk_b, _rotated(qk_b, dim), v_b] if rotated else [qk_b, v_b])
    up = [mlp.gate_proj, mlp.up_proj]
    return (
        torch.cat([qk_w, _rotated(qk_w, dim), v.weight] if rotated else [qk_w, v.weight]),
        qkv_b,
        q.out_features // dim,
        qk_w.shape[0],
        torch.cat([m.weight for m in up]),
        _cat_bias(up),
    )


def _norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """`LlamaRMSNorm` as one call (torch's `rms_norm`) or, under autograd, `_RMSNorm`.

    Only in float32, where these are the same computation; `LlamaRMSNorm` normalises a
    half-precision input in float32 and rounds before the weight, so it keeps those.
    """
    if hidden.dtype != torch.float32:
        return norm(hidden)
    if torch.is_grad_enabled() and (hidden.requires_grad or norm.weight.requires_grad):
        return _RMSNorm.apply(hidden, norm.weight, norm.variance_epsilon)
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


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of one query per row, softmax(q·kᵀ·scale + bias)·v, as [B, heads·dim].

    For a single query, two batched matrix products beat `scaled_dot_product_attention`'s CPU
    kernel several times over (that kernel is tiled for long queries). `q` is [B, heads, dim];
    `keys`/`values` are the cache's [B·kv_heads, L, dim]; grouped-query heads sharing a
    key/value head are the rows of one product.
    """
    batch, heads, dim = q.shape
    q = q.reshape(keys.shape[0], batch * heads // keys.shape[0], dim)
    scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=scale)
    if scores.dtype == torch.float32:
        weights = torch.softmax(scores, dim=-1)
    else:  # softmax in float32, as `transformers`' eager attention does
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.bmm(weights, values).view(batch, heads * dim)
