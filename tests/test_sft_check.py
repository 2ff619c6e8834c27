"""The warm-start's held-out check: what it counts, that it stops the warm-start when it passes,
and that passing means what it says (greedy decoding then copies)."""

from __future__ import annotations

import random

import pytest
import torch

from honed.config import PolicyConfig, SFTCheckConfig, SFTConfig, TinyModelConfig
from honed.errors import HonedError
from honed.models.generation import SamplingParams
from honed.models.policy import Policy
from honed.rl import sft_check
from honed.rl.sft import run_sft
from honed.rl.sft_check import check_accuracy, common_prompt_words, copied_words


def _chars(ids: list[int]) -> str:
    """A stand-in tokenizer for the word tests: token i is the character chr(i)."""
    return "".join(chr(i) for i in ids)


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def _words(example, common=frozenset()):
    target = example[1]
    return ["".join(chr(target[p]) for p in ps) for ps in copied_words(example, _chars, common)]


def test_copied_words_are_the_targets_words_that_its_context_holds():
    prompt = _ids("price of kx? kx costs 47.")
    target = _ids("kx is 47, not 99 or q")
    # "is" and "99" are not in the context, "q" is one character (never a word).
    assert _words((prompt, target, [1] * len(target))) == ["kx", "47"]


def test_earlier_turns_and_tool_results_are_context_and_masked_words_are_not_counted():
    prompt = _ids("look up kx")
    target = _ids("call kx|R: 47|it is 47 kx")
    mask = [1] * 8 + [0] * 6 + [1] * 11  # the tool result `R: 47|` is not the model's
    # "47" inside the tool result is masked (not the model's own), and counted later, when the
    # model repeats it from the result; "kx" both times, from the prompt.
    assert _words((prompt, target, mask)) == ["kx", "47", "kx"]


def test_words_every_prompt_holds_are_not_copies():
    examples = [(_ids("tools: lookup. find kx"), _ids("lookup kx"), [1] * 9)]
    examples.append((_ids("tools: lookup. find qd"), _ids("lookup qd"), [1] * 9))
    common = common_prompt_words(examples, _chars)
    assert common == {"tools", "lookup", "find"}
    assert [_words(e, common) for e in examples] == [["kx"], ["qd"]]


class _Policy:
    """The parts `check_accuracy` uses; `score` is replaced by the test."""

    pad_id = 0
    model = torch.nn.Linear(1, 1)

    @staticmethod
    def decode(ids):
        return _chars(ids)


def test_counts_against_chosen_log_probabilities(monkeypatch):
    prompt = _ids("a kx 47")
    target = _ids("kx 47")  # words kx (positions 0, 1) and 47 (3, 4)
    sure, unsure = 0.0, -1.0  # log-probabilities above and below log(1/2)
    logprobs = torch.tensor([[sure, sure, unsure, sure, unsure]])
    monkeypatch.setattr(
        sft_check, "score", lambda model, batch: type("S", (), {"logprobs": logprobs})
    )
    examples = [(prompt, target, [1, 1, 1, 1, 0])]
    # kx right; 47's second token is masked: not the model's own word, so not counted
    assert check_accuracy(_Policy(), examples, "copy_accuracy", 8) == 1.0
    # own tokens: positions 0-3, of which 0, 1 and 3 are right
    assert check_accuracy(_Policy(), examples, "token_accuracy", 8) == 0.75
    examples = [(prompt, target, [1] * 5)]
    assert check_accuracy(_Policy(), examples, "copy_accuracy", 8) == 0.5


class _CopyEnv:
    """Say a two-letter name back: the 16 held-out names are never trained on."""

    name = "copy"

    def __init__(self) -> None:
        names = [a + b for a in "abcdefgh" for b in "abcdefgh"]
        random.Random(0).shuffle(names)
        self.splits = {"train": names[:48], "validation": names[48:], "test": []}

    def items(self, split):
        return self.splits[split]

    def sft_examples(self, item):
        return [(f"say {item}: ", item)]


def _policy() -> Policy:
    shape = TinyModelConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    return Policy.from_config(PolicyConfig(tiny=shape), seed=0)


def test_the_warm_start_stops_at_the_first_check_that_passes():
    checked: list[tuple[int, float]] = []
    sft = SFTConfig(
        steps=1000,
        batch_size=32,
        learning_rate=3e-3,
        prompt_loss_weight=0.2,
        check=SFTCheckConfig(every=10, threshold=0.95, examples=16),
    )
    policy = _policy()
    stats = run_sft(
        policy, {"copy": _CopyEnv()}, sft, seed=0, on_check=lambda s, v: checked.append((s, v))
    )
    steps = [s for s, _ in checked]
    assert steps == list(range(10, steps[-1] + 1, 10)), "a check every 10 steps"
    assert checked[-1][1] >= 0.95 and all(v < 0.95 for _, v in checked[:-1])
    assert len(checked) > 2, "copying is learnt, not there from the start"
    assert stats["sft/steps"] == steps[-1] < 1000, "stopped when the check passed"
    assert stats["sft/check/copy_accuracy"] == checked[-1][1]
    assert stats["sft/check/passed"] == 1.0
    # Passing means greedy decoding copies: held-out names it never trained on come back.
    env = _CopyEnv()
    prompts = [policy.encode(f"say {name}: ") for name in env.items("validation")]
    greedy = SamplingParams(temperature=0.0, max_tokens=4)
    said = [s.text for s in policy.generate(prompts, [0] * len(prompts), greedy)]
    right = sum(s == n for s, n in zip(said, env.items("validation"), strict=True))
    assert right / len(said) >= 0.9, said


def test_a_check_that_never_passes_runs_to_the_cap_and_says_so():
    sft = SFTConfig(steps=7, batch_size=8, check=SFTCheckConfig(every=3, threshold=1.0, examples=8))
    checked: list[int] = []
    stats = run_sft(
        _policy(), {"copy": _CopyEnv()}, sft, seed=0, on_check=lambda s, v: checked.append(s)
    )
    assert checked == [3, 6, 7], "every 3 steps, and after the last"
    assert stats["sft/steps"] == 7 and stats["sft/check/passed"] == 0.0


def test_without_a_check_nothing_changes():
    stats = run_sft(_policy(), {"copy": _CopyEnv()}, SFTConfig(steps=2, batch_size=4), seed=0)
    assert stats["sft/steps"] == 2 and not any(k.startswith("sft/check") for k in stats)


def test_the_check_is_held_out_and_needs_its_split():
    with pytest.raises(ValueError, match="held out"):
        SFTCheckConfig(split="train")
    sft = SFTConfig(steps=2, check=SFTCheckConfig(every=1, split="test"))
    with pytest.raises(HonedError, match="no reference solutions in its test split"):
        run_sft(_policy(), {"copy": _CopyEnv()}, sft, seed=0)


class _NoCopyEnv(_CopyEnv):
    """Answers that never repeat the prompt: nothing to copy."""

    def sft_examples(self, item):
        return [(f"say {item}: ", "ok")]


def test_a_check_with_nothing_to_measure_says_so_at_once():
    sft = SFTConfig(steps=50, check=SFTCheckConfig(every=5))
    with pytest.raises(HonedError, match="nothing to measure copy_accuracy on"):
        run_sft(_policy(), {"copy": _NoCopyEnv()}, sft, seed=0)
