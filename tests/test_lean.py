"""The lean forwards compute what `transformers`' forward computes: logits, samples, gradients."""

from __future__ import annotations

import copy
import inspect
import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import honed.models.generation as generation_module
import honed.models.lean as lean_module
import honed.models.scoring as scoring_module
from honed.models.batching import PrefixBatch, build_batch, left_pad, make_batch
from honed.models.kvcache import InPlaceLayer, cache_argument, sampling_cache
from honed.models.lean import LeanDecoder, _mask_bias, supports_lean, supports_lean_decoding
from honed.models.policy import Policy, SamplingParams
from honed.models.scoring import score
from honed.models.tiny import build_char_tokenizer


def _llama(**overrides) -> Policy:
    tokenizer = build_char_tokenizer()
    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**(settings | overrides))).eval()
    if overrides.get("attention_bias") or overrides.get("mlp_bias"):
        with torch.no_grad():  # biases start at zero: make them count
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
    return Policy(model, tokenizer)


SHAPES = {
    "plain": {},
    "grouped-query": {"num_key_value_heads": 2},
    "biases": {"attention_bias": True, "mlp_bias": True},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_lean_step_gives_the_logits_of_the_models_forward(shape):
    policy = _llama(**SHAPES[shape])
    model = policy.model
    assert supports_lean_decoding(model)
    prompts = [policy.encode(t) for t in ["12+3=", "7+7=", "100+20="]]  # ragged: left padding
    ids, attention = left_pad(prompts, policy.pad_id)
    positions = (attention.cumsum(-1) - 1).clamp_min(0)
    caches = [sampling_cache(model.config, ids.shape[1] + 4) for _ in range(2)]
    with torch.inference_mode():
        for cache in caches:
            model(
                input_ids=ids,
                attention_mask=attention,
                position_ids=positions,
                **cache_argument(model, cache),
                use_cache=True,
            )
        lean = LeanDecoder(model, ids.shape[1] + 4)
        token = torch.tensor([5, 9, 11])
        pos = positions[:, -1] + 1
        for _ in range(3):
            attention = torch.cat([attention, attention.new_ones((3, 1))], dim=1)
            expected = model(
                input_ids=token[:, None],
                attention_mask=attention,
                position_ids=pos[:, None],
                **cache_argument(model, caches[0]),
                use_cache=True,
            ).logits[:, -1]
            got = lean.step(token, pos, lean.padding_bias(attention), caches[1].layers)
            assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
            token, pos = expected.argmax(-1), pos + 1


@pytest.mark.parametrize("shape", list(SHAPES))
def test_sampling_is_the_same_with_and_without_the_lean_step(shape, monkeypatch):
    policy = _llama(**SHAPES[shape])
    prompts = [policy.encode(t) for t in ["1+2=", "1+2=", "345+6=", "9="]]
    seeds = [3, 4, 5, 6]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=12)
    lean = policy.generate(prompts, seeds, params)
    monkeypatch.setattr(generation_module, "supports_lean_decoding", lambda model: False)
    plain = policy.generate(prompts, seeds, params)
    for a, b in zip(lean, plain, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_transformers_forward_takes_the_cache_by_the_name_its_forward_declares(monkeypatch):
    """transformers 5 renamed the cache argument to `cache`, warns on `past_key_values` and
    drops it in 5.40: sampling and prefix scoring through transformers' own forward (the path
    every model the lean forwards do not cover takes) must not use the old name, bare or under
    a peft adapter, while a forward that only knows `past_key_values` still gets it."""
    peft = pytest.importorskip("peft", reason="pip install peft (the dev extras) to run this")
    monkeypatch.setattr(generation_module, "supports_lean_decoding", lambda model: False)
    monkeypatch.setattr(scoring_module, "supports_lean", lambda model: False)
    policy = _llama()
    adapted = peft.get_peft_model(
        copy.deepcopy(policy.model), peft.LoraConfig(r=2, target_modules=["q_proj"])
    )
    texts = ["12+3=", "12+3=", "7-1="]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values")
        for model in (policy.model, adapted):
            samples = Policy(model, policy.tokenizer).generate(
                [policy.encode(t) for t in texts], [1, 2, 3], params
            )
            batch = build_batch(
                [s.prompt_ids for s in samples],
                [s.completion_ids for s in samples],
                [[1] * len(s.completion_ids) for s in samples],
                policy.pad_id,
            )
            assert isinstance(batch, PrefixBatch)  # the prompt's cache is reused
            assert score(model, batch).logprobs.isfinite().all()

    class OlderForward(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    expected = (
        "cache"
        if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters
        else "past_key_values"
    )
    assert cache_argument(policy.model, "C") == {expected: "C"}
    assert cache_argument(adapted, "C") == {expected: "C"}
    assert cache_argument(OlderForward(), "C") == {"past_key_values": "C"}


def test_other_models_and_training_mode_take_transformers_forward():
    policy = _llama()
    policy.model.train()
    assert not supports_lean_decoding(policy.model)
    assert supports_lean(policy.model)  # scoring: the lean forward trains
    policy.model.eval()
    policy.model.config.pretraining_tp = 2
    assert not supports_lean_decoding(policy.model)
    assert not supports_lean(policy.model)
    policy.model.config.pretraining_tp = 1
    policy.model.config.model_type = "mistral"
    assert not supports_lean(policy.model)


def test_rope_whose_frequencies_follow_the_length_takes_transformers_forward():
    """The lean step reads RoPE from a table built once, which a `dynamic` RoPE would break."""
    policy = _llama(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    assert supports_lean(policy.model)
    assert not supports_lean_decoding(policy.model)


def test_appending_one_position_is_an_update_of_one_position():
    a, b = InPlaceLayer(capacity=3), InPlaceLayer(capacity=3)
    first = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    a.update(*first)
    b.update(*first)
    new = torch.randn(2, 2, 4), torch.randn(2, 2, 4)
    expected = a.update(new[0][:, :, None], new[1][:, :, None])
    got = b.append(*new)
    assert b.get_seq_length() == a.get_seq_length() == 2
    for x, y in zip(got, expected, strict=True):  # batch and heads merged
        assert torch.equal(x, y.reshape(4, 2, 4))
    b.append(*new)
    with pytest.raises(ValueError, match="holds 3 positions"):
        b.append(*new)


# ------------------------------------------------------------------ the scoring forward


def test_the_hand_written_backwards_are_the_derivatives():
    """The scoring forward's hand-written backward passes, against finite differences."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    cos = torch.randn(2, 3, 1, 8, dtype=torch.float64, generator=gen)
    sin = torch.randn(2, 3, 1, 8, dtype=torch.float64, generator=gen)
    rotated = torch.cat([-x[..., 4:], x[..., :4]], dim=-1)
    assert torch.allclose(lean_module._Rope.apply(x, cos, sin), x * cos + rotated * sin)
    assert torch.autograd.gradcheck(lambda t: lean_module._Rope.apply(t, cos, sin), (x,))
    weight = torch.randn(8, dtype=torch.float64, generator=gen, requires_grad=True)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight
    assert torch.allclose(lean_module._RMSNorm.apply(x, weight, 1e-5), expected)
    assert torch.autograd.gradcheck(
        lambda t, w: lean_module._RMSNorm.apply(t, w, 1e-5), (x, weight)
    )
    gate, up = x.chunk(2, dim=-1)
    assert torch.allclose(lean_module._SwiGLU.apply(x), torch.nn.functional.silu(gate) * up)
    assert torch.autograd.gradcheck(lean_module._SwiGLU.apply, (x,))


def _scored(policy: Policy, batch, monkeypatch, lean: bool):
    """Log-probs, entropy and the gradient of an advantage-weighted loss, in training mode."""
    if not lean:
        monkeypatch.setattr(scoring_module, "supports_lean", lambda model: False)
    model = copy.deepcopy(policy.model).train()
    scores = score(model, batch, temperature=0.7, with_entropy=True)
    logp, entropy = scores.logprobs, scores.entropy
    mask = batch.completion_mask.float()
    adv = torch.linspace(-1.0, 1.0, mask.shape[0])[:, None]
    (logp * adv * mask).sum().backward()
    if not lean:
        monkeypatch.setattr(scoring_module, "supports_lean", supports_lean)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach() * mask, entropy * mask, grads


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("kind", ["prefix", "plain"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_lean_scoring_forward_gives_transformers_log_probs_and_gradients(
    shape, kind, layout, monkeypatch
):
    # real tokens packed into one row (any padding at all) or left in the padded [B, T] layout
    monkeypatch.setattr(lean_module, "PACK_MIN_PADDING", 1e-9 if layout == "packed" else 1.1)
    policy = _llama(**SHAPES[shape])
    texts = [t for t in ("12+3=", "7-1=", "100+23=") for _ in range(3)]
    samples = policy.generate(
        [policy.encode(t) for t in texts],
        list(range(len(texts))),
        SamplingParams(temperature=1.0, top_p=1.0, max_tokens=7),
    )
    assert len({len(s.completion_ids) for s in samples}) > 1, "ragged completions wanted"
    args = (
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        [[1] * len(s.completion_ids) for s in samples],
        policy.pad_id,
    )
    batch = build_batch(*args) if kind == "prefix" else make_batch(*args)
    assert isinstance(batch, PrefixBatch) == (kind == "prefix")
    logp, entropy, grads = _scored(policy, batch, monkeypatch, lean=True)
    ref_logp, ref_entropy, ref_grads = _scored(policy, batch, monkeypatch, lean=False)
    assert torch.allclose(logp, ref_logp, atol=1e-5, rtol=0)
    assert torch.allclose(entropy, ref_entropy, atol=1e-5, rtol=0)
    assert grads.keys() == ref_grads.keys() and len(grads) == len(list(policy.model.parameters()))
    for name, grad in grads.items():
        scale = max(1.0, float(ref_grads[name].abs().max()))
        assert torch.allclose(grad, ref_grads[name], atol=1e-5 * scale, rtol=0), name


def test_the_mask_lets_queries_see_real_keys_up_to_themselves():
    # two rows of 4 keys, the last 2 being the queries; row 1 has one key of left padding
    bias = _mask_bias(torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]]), 2, torch.float32)
    seen = (bias == 0).squeeze(1).int().tolist()
    assert seen == [[[1, 1, 1, 0], [1, 1, 1, 1]], [[0, 1, 1, 0], [0, 1, 1, 1]]]
    # a padding query with no real key before it still sees itself (finite attention)
    alone = _mask_bias(torch.tensor([[0, 0, 1]]), 3, torch.float32)
    assert (alone == 0).squeeze().int().tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_a_bfloat16_model_scores_like_transformers(monkeypatch):
    # half precision: transformers' RMSNorm instead of torch's kernel. Large weights make
    # attention sharp, so that a wrong rotation would show despite bfloat16's rounding.
    policy = _llama(initializer_range=0.3)
    texts = ["12+3=", "12+3=", "7-1=", "7-1="]
    samples = policy.generate(
        [policy.encode(t) for t in texts],
        list(range(len(texts))),
        SamplingParams(temperature=1.0, top_p=1.0, max_tokens=5),
    )
    policy.model.to(torch.bfloat16)
    batch = build_batch(
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        [[1] * len(s.completion_ids) for s in samples],
        policy.pad_id,
    )
    logp, _, grads = _scored(policy, batch, monkeypatch, lean=True)
    ref_logp, _, ref_grads = _scored(policy, batch, monkeypatch, lean=False)
    assert torch.allclose(logp, ref_logp, atol=0.15, rtol=0)
    for name, grad in grads.items():
        scale = max(1.0, float(ref_grads[name].abs().max()))
        assert torch.allclose(grad.float(), ref_grads[name].float(), atol=0.15 * scale), name
