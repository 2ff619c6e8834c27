"""Scoring without the whole vocabulary at once: the chunked head against the naive float32
log-softmax (log-probs, entropy, gradients), the recomputing backward, only completion
positions projected, and gradient checkpointing (lean forward and `transformers`' layers)."""

from __future__ import annotations

import copy

import pytest
import torch
from numerics import token_logprobs
from transformers import Qwen2Config, Qwen2ForCausalLM

from honed.models import scoring
from honed.models.batching import build_batch, make_batch
from honed.models.policy import enable_checkpointing
from honed.models.scoring import head_logprobs, score


def _naive(model, batch, temperature):
    """The whole model's logits over every position, the whole float32 log-softmax."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits
    width = batch.completion_width
    logits = out[:, -width - 1 : -1]
    return token_logprobs(logits, batch.completion_ids, temperature, with_entropy=True)


def _rows(generator, count, vocab, longest):
    lengths = torch.randint(1, longest + 1, (count,), generator=generator).tolist()
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


def _batch(vocab, seed=0, share=False):
    g = torch.Generator().manual_seed(seed)
    prompts = _rows(g, 3 if share else 6, vocab, 7)
    if share:
        prompts = [p for p in prompts for _ in range(2)]
    completions = _rows(g, len(prompts), vocab, 9)
    masks = [[int(i % 3 != 1) for i in range(len(c))] for c in completions]
    return prompts, completions, masks


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _qwen(seed=0):
    """A small model of a family the lean forward does not take (its own decoder runs)."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).float()


MODELS = {"lean (llama)": None, "transformers (qwen2)": _qwen}


@pytest.fixture(params=list(MODELS))
def model(request, small_policy):
    build = MODELS[request.param]
    return copy.deepcopy(small_policy.model) if build is None else build()


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("share", [False, True])
def test_chunked_scoring_equals_the_naive_log_softmax(model, monkeypatch, recompute, share):
    """Same log-probs and entropy as the whole float32 log-softmax, and the same gradients,
    with chunks smaller than a row (the vocabulary split over several chunks' tokens) and with
    the backward pass recomputing each chunk."""
    vocab = model.config.vocab_size
    monkeypatch.setattr(scoring, "LOGITS_CHUNK_ELEMENTS", 5 * vocab)  # 5 tokens a chunk
    monkeypatch.setattr(scoring, "RECOMPUTE_ABOVE_ELEMENTS", 0 if recompute else 1 << 40)
    prompts, completions, masks = _batch(vocab, share=share)
    batch = build_batch(prompts, completions, masks, pad_id=0)
    plain = make_batch(prompts, completions, masks, pad_id=0)
    adv = torch.linspace(-1.0, 1.0, len(prompts))[:, None]
    mask = plain.completion_mask.float()

    ours = copy.deepcopy(model).train()
    got = score(ours, batch, temperature=0.7, with_entropy=True)
    (got.logprobs * adv * mask).sum().backward()
    reference = copy.deepcopy(model).train()
    logp, entropy = _naive(reference, plain, 0.7)
    (logp * adv * mask).sum().backward()

    assert got.logprobs.dtype == torch.float32 and got.entropy is not None
    # the same sums in another order (logsumexp against log_softmax, chunked matmuls): float32
    # rounding of values of magnitude ~10, far below a wrong token or position (~1e-1)
    assert torch.allclose(got.logprobs * mask, logp.detach() * mask, atol=1e-5, rtol=0)
    assert torch.allclose(got.entropy * mask, entropy * mask, atol=1e-5, rtol=0)
    a, b = _grads(ours), _grads(reference)
    assert torch.allclose(a, b, atol=1e-6 * max(1.0, float(b.abs().max())), rtol=0)


def test_only_completion_positions_reach_the_head(small_policy):
    """The head sees B·C positions (the completion's predictors), never the prompt's."""
    model = copy.deepcopy(small_policy.model)
    prompts = [[1, 5, 6, 7, 8, 9, 10], [1, 7]]
    completions = [[11, 12], [13, 14, 15]]
    batch = make_batch(prompts, completions, [[1, 1], [1, 1, 1]], pad_id=0)
    seen = []
    model.lm_head.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[:-1].numel()))
    score(model, batch)
    assert sum(seen) == 2 * 3


def test_head_logprobs_never_holds_more_than_a_chunk_of_logits(monkeypatch):
    """With the recomputing backward, no chunk's logits are kept for the backward pass: each
    is recomputed from its hidden states."""
    monkeypatch.setattr(scoring, "LOGITS_CHUNK_ELEMENTS", 64 * 50)
    monkeypatch.setattr(scoring, "RECOMPUTE_ABOVE_ELEMENTS", 0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(4, 40, 16, requires_grad=True)
    tokens = torch.randint(0, 50, (4, 40))
    kept = []

    def pack(t):
        kept.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = head_logprobs(head, hidden, tokens)
    # kept without recomputation: every chunk's logits, 4·40·50 values in all
    assert sum(kept) < 4 * 40 * 50 / 2, "the chunks' logits were kept for the backward pass"
    logp.sum().backward()
    assert hidden.grad is not None and torch.isfinite(hidden.grad).all()


@pytest.mark.filterwarnings("error:.*gradient_checkpointing_enable")
def test_gradient_checkpointing_gives_the_same_gradients(model):
    """Checkpointing recomputes the layers in the backward pass: the same gradients (within
    float32 rounding; the recomputation repeats the same kernels on the same shapes)."""
    prompts, completions, masks = _batch(model.config.vocab_size, share=True)
    batch = build_batch(prompts, completions, masks, pad_id=0)
    results = []
    for on in (False, True):
        m = copy.deepcopy(model).train()
        if on:
            enable_checkpointing(m)  # the policy's own switch (and no deprecated call)
        logp = score(m, batch).logprobs
        (logp * batch.completion_mask).sum().backward()
        results.append((logp.detach() * batch.completion_mask, _grads(m)))
    (logp_off, grad_off), (logp_on, grad_on) = results
    # through transformers' layers the checkpointed forward cannot continue a prompt's cache,
    # so it scores each row with its own prompt: the same sums in another order
    assert torch.allclose(logp_on, logp_off, atol=1e-5, rtol=0)
    assert torch.allclose(grad_on, grad_off, atol=1e-6 * max(1.0, float(grad_off.abs().max())))
