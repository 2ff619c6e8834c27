"""The policy: sampling that depends only on each row's seed, stopping, top-p, greedy, I/O."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from honed.models.batching import make_batch
from honed.models.policy import Policy, SamplingParams
from honed.models.tiny import build_char_tokenizer


def _ids(policy, texts):
    return [policy.encode(t) for t in texts]


def test_a_completion_depends_on_its_prompt_and_seed_not_on_its_batch(small_policy):
    params = SamplingParams(temperature=1.0, max_tokens=8)
    prompts = _ids(small_policy, ["1+2=", "1+2=", "77+8=", "1+2=", "abc"])
    seeds = [11, 12, 13, 11, 14]
    together = small_policy.generate(prompts, seeds, params)
    alone = [
        small_policy.generate([p], [s], params)[0] for p, s in zip(prompts, seeds, strict=True)
    ]
    for a, b in zip(together, alone, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    # same prompt and seed -> same completion; another seed -> (almost surely) another one
    assert together[0].completion_ids == together[3].completion_ids
    assert together[0].completion_ids != together[1].completion_ids


def test_a_prefix_shared_by_the_batch_is_run_once_and_changes_no_sample(small_policy):
    """Multi-turn prompts repeat a long system message in every row; with `share_prefix` it is
    prefilled once. Samples are those of each prompt alone here (a separate forward rounds
    differently in the last bits, so log-probs agree to float32 accumulation error, not bit for
    bit; on a 49k vocabulary a tail token can differ now and then, which is why it is opt-in)."""
    from honed.models import generation

    system = "You sort numbers. Reply with the sorted list only, smallest first. " * 2
    prompts = _ids(small_policy, [system + q for q in ("3 1 2", "9 8", "5 5 1 0", "3 1 2")])
    prompts.append(_ids(small_policy, [system])[0])  # the prefix itself, as a whole prompt
    assert generation.shared_prefix(prompts) == len(prompts[-1]) - 1
    seeds = [1, 2, 3, 4, 5]
    params = SamplingParams(temperature=1.0, max_tokens=8, share_prefix=True)
    widths = []
    forward = small_policy.model.forward

    def counting(*args, **kwargs):
        widths.append(kwargs["input_ids"].shape)
        return forward(*args, **kwargs)

    small_policy.model.forward = counting
    try:
        together = small_policy.generate(prompts, seeds, params)
    finally:
        del small_policy.model.forward
    # the prefix once (one row), then each distinct prompt's own tokens (four rows)
    assert widths[0] == (1, len(prompts[-1]) - 1)
    assert widths[1] == (4, max(len(p) for p in prompts) - widths[0][1])
    alone = [
        small_policy.generate([p], [s], params)[0] for p, s in zip(prompts, seeds, strict=True)
    ]
    for a, b in zip(together, alone, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    # off (the default), every row runs its whole prompt: its sample is its own, bit for bit
    widths.clear()
    small_policy.model.forward = counting
    try:
        small_policy.generate(prompts, seeds, SamplingParams(temperature=1.0, max_tokens=8))
    finally:
        del small_policy.model.forward
    assert widths[0] == (4, max(len(p) for p in prompts))
    # a short common prefix is not worth a forward of its own
    assert generation.shared_prefix(_ids(small_policy, ["ab 1", "ab 2"])) == 0
    assert generation.shared_prefix(prompts[:1]) == 0


def test_generation_stops_at_eos_and_flags_truncation(small_policy):
    eos = small_policy.eos_id
    # make EOS overwhelmingly likely after the first token
    with torch.no_grad():
        small_policy.model.get_output_embeddings().weight[eos] *= 0
        small_policy.model.get_output_embeddings().weight[eos] += 5.0
    out = small_policy.generate(
        _ids(small_policy, ["1+1="] * 4), [1, 2, 3, 4], SamplingParams(1.0, 1.0, 6)
    )
    for s in out:
        assert s.completion_ids[-1] == eos and not s.truncated
        assert eos not in s.completion_ids[:-1]
    short = small_policy.generate(_ids(small_policy, ["1+1="]), [0], SamplingParams(0.0, 1.0, 1))
    assert len(short[0].completion_ids) == 1


def test_truncated_completion_has_no_eos(small_policy):
    out = small_policy.generate(_ids(small_policy, ["hello"]), [3], SamplingParams(1.0, 1.0, 3))
    s = out[0]
    assert len(s.completion_ids) <= 3
    assert s.truncated == (small_policy.eos_id not in s.completion_ids)


def test_greedy_picks_the_argmax_and_tiny_top_p_matches_it(small_policy):
    prompts = _ids(small_policy, ["12+30=", "4+4="])
    greedy = small_policy.generate(prompts, [1, 2], SamplingParams(0.0, 1.0, 5))
    nucleus = small_policy.generate(prompts, [7, 8], SamplingParams(1.0, 1e-6, 5))
    assert [g.completion_ids for g in greedy] == [n.completion_ids for n in nucleus]
    batch = make_batch(
        [g.prompt_ids for g in greedy],
        [g.completion_ids for g in greedy],
        [[1] * len(g.completion_ids) for g in greedy],
        small_policy.pad_id,
    )
    ids = small_policy.model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits.argmax(-1)
    p_width = batch.input_ids.shape[1] - batch.completion_width
    first = ids[:, p_width - 1]
    assert first.tolist() == [g.completion_ids[0] for g in greedy]


def test_save_and_load_are_standard_and_lossless(tmp_path, small_policy):
    small_policy.save(tmp_path / "ckpt")
    loaded = Policy.load(tmp_path / "ckpt")
    for a, b in zip(small_policy.model.parameters(), loaded.model.parameters(), strict=True):
        assert torch.equal(a, b)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    tok = AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    assert tok("ab")["input_ids"] == small_policy.encode("ab")
    assert plain.config.model_type == "llama"


def test_character_tokenizer_round_trips_text():
    tok = build_char_tokenizer()
    text = 'make 22 from 3 5 7= [{"i":"s","c":"Ann lives in Oslo"}]\nnext'
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_the_trainers_share_prefix_reaches_the_sampler(tmp_path, small_policy):
    from honed.config import Config
    from honed.distributed import build_backend

    for share in (False, True):
        config = Config.model_validate({"trainer": {"share_prefix": share}})
        backend = build_backend(config, {}, small_policy, tmp_path)
        assert backend.generator.params.share_prefix is share
