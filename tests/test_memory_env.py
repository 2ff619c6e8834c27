"""MemoryEnv rollouts with a scripted generator: batching, seeds, grouping, rewards."""

from collections.abc import Callable

import pytest

from honed.envs.base import Environment, Sample
from honed.envs.memory import MemoryEnv
from honed.envs.memory.data import Instance, Question
from honed.envs.registry import build_env
from honed.errors import HonedDeprecationWarning, HonedError
from honed.types import Item, derive_seed


class ScriptedGenerator:
    """Answers each prompt with `reply(prompt, seed)`; records every batch it was given."""

    def __init__(self, reply: Callable[[str, int], str]) -> None:
        self.reply = reply
        self.batches: list[tuple[list[str], list[int]]] = []

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def generate(self, prompts, seeds):
        self.batches.append((list(prompts), list(seeds)))
        out = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            text = self.reply(prompt, seed)
            ids = self.encode(text)
            out.append(Sample(self.encode(prompt), ids, [-0.5] * len(ids), text, False))
        return out


def _item(key: str, chunks: list[str], questions: list[Question]) -> Item:
    return Item(key, "memory", Instance(key, chunks, questions).to_dict())


HAND = _item(
    "hand",
    ["Ann lives in Oslo. It rained.", "The tea was cold.", "Day 3: Ann sang."],
    [
        Question("Where does Ann live?", ["Oslo"], "fact", evidence=[["Ann", "Oslo"]]),
        Question("When did Ann sing?", ["day 3"], "event-time", evidence=[["Ann", "day 3"]]),
    ],
)
# input tokens: 6 + 4 + 4 = 14


def _chunk(prompt: str) -> str:
    return prompt.rsplit("chunk: ", 1)[1].split("\n", 1)[0]


def test_per_instance_grouping_rewards_each_chunk():
    def reply(prompt: str, seed: int) -> str:
        chunk = _chunk(prompt)
        if chunk.startswith("Ann lives"):
            return '[{"i":"s","c":"Ann lives in Oslo"}]'
        if chunk.startswith("The tea"):
            # Generation 0 skips chatter; generation 1 stores it and then fails a delete.
            return "[]" if seed == seeds[1][0] else '[{"i":"s","c":"The tea was cold"},{"d":"s9"}]'
        return "I am not sure" if seed == seeds[2][1] else '[{"i":"e","c":"Day 3: Ann sang"}]'

    seeds = [[derive_seed(7, "hand", g, t) for g in range(2)] for t in range(3)]
    env = MemoryEnv("memory")
    gen = ScriptedGenerator(reply)
    (group,) = env.rollout([HAND], gen, num_generations=2, seed=7)

    assert group.item_key == "hand" and group.env == "memory" and len(group.trajectories) == 2
    assert [s for _, s in gen.batches] == seeds  # one batched call per chunk, derived seeds
    good, bad = group.trajectories
    assert all(len(t.segments) == 3 for t in group.trajectories)

    # Generation 0 keeps the two facts: "Ann lives in Oslo" (4 tokens) and "Day 3: Ann sang" (4).
    # The skipped chatter chunk earns nothing on r2 and r4 (the official default).
    r3 = 1 - 8 / 14
    wrote = 1 + 1 + 0.05 * r3 + 0.1 * 1
    expected = [wrote, 1 + 0 + 0.05 * r3 + 0, wrote]
    assert [s.reward for s in good.segments] == pytest.approx(expected)
    assert good.reward == pytest.approx(sum(expected) / 3)
    assert good.success == 1.0
    assert good.components["compression"] == pytest.approx(r3)
    assert good.components["memory_tokens"] == 8 and good.components["input_tokens"] == 14

    # Generation 1: chatter stored (4 tokens), a failed delete, the event lost to a parse failure.
    r3, r1 = 1 - 8 / 14, 0.5
    expected = [
        r1 + 1 + 0.05 * r3 + 0.1,
        r1 + 0.5 + 0.05 * r3 + 0.1,  # 1 of 2 calls succeeded; the write is valid
        r1 + 0 + 0.05 * r3 + 0,  # parse failure
    ]
    assert [s.reward for s in bad.segments] == pytest.approx(expected)
    assert bad.components["accuracy"] == 0.5
    assert bad.components["parse_failures"] == 1 and bad.components["calls"] == 3
    assert bad.components["tool_success"] == pytest.approx(1.5 / 3)
    assert bad.components["validity"] == pytest.approx(2 / 3)
    assert "parse failure" in bad.completion_text and "no entry s9" in bad.completion_text
    assert bad.info["memory"]["semantic"] == {"s1": "Ann lives in Oslo", "s2": "The tea was cold"}
    assert bad.segments[0].completion_ids == [ord(c) for c in '[{"i":"s","c":"Ann lives in Oslo"}]']


def test_trajectory_grouping_leaves_segment_rewards_unset():
    env = MemoryEnv("memory", grouping="trajectory", no_call_credit=1.0)
    (group,) = env.rollout([HAND], ScriptedGenerator(lambda p, s: "[]"), num_generations=3, seed=0)
    for t in group.trajectories:
        assert all(s.reward is None for s in t.segments)
        # Nothing stored: r1 = 0, r2 = r4 = 1 (clean empty replies, as configured), r3 = 1.
        assert t.reward == pytest.approx(0 + 1 + 0.05 + 0.1)
        assert t.success == 0.0


def test_tool_success_weight_scales_r2_alone():
    """`tool_success_weight` multiplies r2 in every chunk reward and leaves r1, r3, r4 and the
    logged components as they are (1, the paper's, by default)."""
    reply = lambda p, s: '[{"i":"s","c":"Ann lives in Oslo"},{"d":"s9"}]'  # noqa: E731
    (paper,) = MemoryEnv("memory").rollout([HAND], ScriptedGenerator(reply), 1, seed=0)
    (light,) = MemoryEnv("memory", tool_success_weight=0.1).rollout(
        [HAND], ScriptedGenerator(reply), 1, seed=0
    )
    a, b = paper.trajectories[0], light.trajectories[0]
    assert a.components == b.components
    r2s = [0.5, 0.0, 0.0]  # chunk 1: the insert succeeds, the delete fails; then duplicates
    assert a.components["tool_success"] == pytest.approx(sum(r2s) / 3)
    assert [y.reward for y in b.segments] == pytest.approx(
        [x.reward - 0.9 * r2 for x, r2 in zip(a.segments, r2s, strict=True)]
    )


@pytest.mark.parametrize("grouping", ["instance", "trajectory"])
def test_a_chunk_without_calls_earns_nothing_on_r2_and_r4_by_default(grouping):
    """The official reward: a chunk without memory calls scores 0 on tool success and validity
    (`generation.py` appends 0.0; the judge's mean over no calls is 0.0); 1 only when
    `no_call_credit: 1` is configured."""
    silent = ScriptedGenerator(lambda p, s: "[]")
    (group,) = MemoryEnv("memory", grouping=grouping).rollout([HAND], silent, 2, seed=0)
    for t in group.trajectories:
        assert t.components["tool_success"] == 0.0 and t.components["validity"] == 0.0
        # r1 = 0 (nothing stored), r3 = 1: only the compression term is left
        assert t.reward == pytest.approx(0.05)
        assert t.info["chunk_rewards"] == pytest.approx([0.05] * 3)
    configured = MemoryEnv("memory", grouping=grouping, no_call_credit=1.0)
    (group,) = configured.rollout([HAND], silent, 2, seed=0)
    for t in group.trajectories:
        assert t.components["tool_success"] == 1.0 and t.components["validity"] == 1.0
        assert t.info["chunk_rewards"] == pytest.approx([1.15] * 3)


def test_items_of_different_lengths_are_batched_together():
    short = _item("short", ["Bo has a cat."], [Question("What pet does Bo have?", ["cat"])])
    gen = ScriptedGenerator(lambda p, s: "[]")
    groups = MemoryEnv("memory").rollout([HAND, short], gen, num_generations=2, seed=1)
    assert [g.item_key for g in groups] == ["hand", "short"]
    assert [len(p) for p, _ in gen.batches] == [4, 2, 2]
    assert [len(t.segments) for t in groups[1].trajectories] == [1, 1]


def test_following_the_reference_scores_full_accuracy_at_a_fraction_of_the_tokens():
    # no_call_credit 1: the reference skips chatter chunks, and every call it makes succeeds
    env = MemoryEnv("memory", test_size=4, no_call_credit=1.0)
    items = env.items("test")
    targets = dict(pair for item in items for pair in env.sft_examples(item))
    groups = env.rollout(
        items, ScriptedGenerator(lambda p, s: targets[p]), num_generations=2, seed=0
    )
    for group in groups:
        for t in group.trajectories:
            assert t.success == 1.0
            assert t.components["tool_success"] == 1.0 and t.components["validity"] == 1.0
            assert t.components["memory_tokens"] <= 0.5 * t.components["input_tokens"]
    rows = {r.name: r for r in env.baselines("test")}
    assert rows["reference plan"].accuracy == 1.0 == rows["store everything"].accuracy
    assert rows["no memory"].accuracy == 0.0 and rows["no memory"].memory_tokens == 0
    assert rows["RAG top-2 chunks"].accuracy < 1.0
    # the inputs are far shorter than 32K tokens: long-context sees all of them
    assert rows["long-context (last 32K tokens)"].accuracy == 1.0
    assert rows["reference plan"].memory_tokens <= 0.5 * rows["store everything"].memory_tokens


def test_rollouts_are_reproducible_and_independent_of_batch():
    env = MemoryEnv("memory", test_size=2)
    items = env.items("test")

    def reply(prompt: str, seed: int) -> str:  # a "policy" whose output depends on its seed
        return f'[{{"i":"s","c":"x{seed % 3} y"}}]' if seed % 2 else "[]"

    together = env.rollout(items, ScriptedGenerator(reply), 2, seed=5)
    alone = env.rollout(items[1:], ScriptedGenerator(reply), 2, seed=5)
    assert [t.info for t in together[1].trajectories] == [t.info for t in alone[0].trajectories]


def test_generations_from_first_generation_on_are_those_of_the_whole_group():
    """Screening asks for the rest of a group with `first_generation`: it must be the whole
    group's rest, chunk turn for chunk turn."""
    env = MemoryEnv("memory", test_size=2)
    items = env.items("test")

    def reply(prompt: str, seed: int) -> str:
        return f'[{{"i":"s","c":"x{seed % 5} y"}}]' if seed % 3 else "[]"

    whole = env.rollout(items, ScriptedGenerator(reply), 4, seed=5)
    rest = env.rollout(items, ScriptedGenerator(reply), 2, seed=5, first_generation=2)
    for w, r in zip(whole, rest, strict=True):
        assert [t.info for t in r.trajectories] == [t.info for t in w.trajectories[2:]]
        assert [t.info for t in r.trajectories] != [t.info for t in w.trajectories[:2]]


def test_env_satisfies_the_protocol_and_checks_its_arguments():
    env = MemoryEnv("memory", seed=1, train_size=3, chatter=1)
    assert isinstance(env, Environment)
    assert len(env.items("train")) == 3
    with pytest.raises(HonedError, match="did you mean 'top_k'"):
        MemoryEnv("memory", topk=3)
    with pytest.raises(HonedError, match="grouping"):
        MemoryEnv("memory", grouping="batch")
    with pytest.raises(HonedError, match="unknown split"):
        env.items("dev")
    # reward weights are numbers, checked at once (given as text they failed mid-run)
    weights = ("tool_success_weight", "compression_weight", "validity_weight", "no_call_credit")
    for arg in (*weights, "compression_clip"):
        for bad in ("0.1", float("nan"), True):
            with pytest.raises(HonedError, match=f"'memory': {arg} must be a finite number"):
                MemoryEnv("memory", **{arg: bad})


def test_jsonl_path_feeds_items_without_a_reference(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"id": "x", "chunks": ["Ann lives in Oslo."], "questions": [{"question": "Where?", "answer": "Oslo"}]}\n'
    )
    env = MemoryEnv("memory", path=str(path))
    (item,) = env.items("test")
    assert item.key == "x" and env.items("train") == []
    assert env.sft_examples(item) == []
    assert [r.name for r in env.baselines("test")] == [
        "no memory",
        "store everything",
        "long-context (last 32K tokens)",
        "RAG top-2 chunks",
        "rule",
    ]


def test_quoting_reference_builds_the_same_memory_as_writing_the_text_out():
    # no_call_credit 1: the reference skips chatter chunks (tool success then counts failures)
    written = MemoryEnv("memory", test_size=4, no_call_credit=1.0)
    quoted = MemoryEnv("memory", test_size=4, quote=True, no_call_credit=1.0)
    items = written.items("test")
    quoted_targets = dict(pair for item in items for pair in quoted.sft_examples(item))
    assert any('"c":1' in t or '"c":2' in t for t in quoted_targets.values())
    assert all("chunk:\n1 " in p for p in quoted_targets)  # numbered sentences to quote from
    a = written.rollout(
        items,
        ScriptedGenerator(
            lambda p, s: dict(pair for i in items for pair in written.sft_examples(i))[p]
        ),
        num_generations=1,
        seed=0,
    )
    b = quoted.rollout(
        items, ScriptedGenerator(lambda p, s: quoted_targets[p]), num_generations=1, seed=0
    )
    for ga, gb in zip(a, b, strict=True):
        ta, tb = ga.trajectories[0], gb.trajectories[0]
        assert ta.info["memory"] == tb.info["memory"] and tb.success == 1.0
        assert tb.components["tool_success"] == 1.0


def test_a_quote_copies_its_sentence_and_a_missing_one_fails_with_the_reason():
    env = MemoryEnv("memory")
    replies = {
        "Ann lives in Oslo": '[{"i":"s","c":1},{"i":"e","c":3}]',
        "The tea was cold": '[{"i":"s","c":0}]',
        "Day 3: Ann sang": '[{"i":"e","c":1}]',
    }

    def reply(prompt: str, seed: int) -> str:
        return next(r for key, r in replies.items() if key in _chunk(prompt))

    group = env.rollout([HAND], ScriptedGenerator(reply), num_generations=1, seed=0)[0]
    t = group.trajectories[0]
    assert t.info["memory"]["semantic"] == {"s1": "Ann lives in Oslo"}
    assert t.info["memory"]["episodic"] == {"e1": "Day 3: Ann sang"}
    assert "quote 3: the chunk has 2 sentence(s)" in t.completion_text
    assert "quote 0: the chunk has 1 sentence(s)" in t.completion_text
    assert t.success == 1.0 and t.components["tool_success"] == pytest.approx((0.5 + 0 + 1) / 3)


def test_old_reward_weight_names_beta_and_gamma_still_work_and_warn():
    """`beta` / `gamma` are deprecated aliases of `compression_weight` / `validity_weight`."""

    def rewards(env: MemoryEnv) -> list[list[float | None]]:
        def reply(prompt: str, seed: int) -> str:  # r3 and r4 both non-zero, r4 differs per chunk
            chunk = _chunk(prompt)
            if chunk.startswith("Ann lives"):
                return '[{"i":"s","c":"Ann lives in Oslo"}]'
            return "[]" if chunk.startswith("The tea") else "not a call"

        (group,) = env.rollout([HAND], ScriptedGenerator(reply), num_generations=1, seed=3)
        return [[s.reward for s in t.segments] + [t.reward] for t in group.trajectories]

    new = MemoryEnv("memory", compression_weight=0.3, validity_weight=0.7)
    with pytest.warns(HonedDeprecationWarning) as caught:
        old = MemoryEnv("memory", beta=0.3, gamma=0.7)
    assert [str(w.message) for w in caught] == [
        "memory env argument 'beta' is deprecated: use 'compression_weight' (same meaning)",
        "memory env argument 'gamma' is deprecated: use 'validity_weight' (same meaning)",
    ]
    assert all(w.filename == __file__ for w in caught)  # points at the caller, not honed
    assert (old.compression_weight, old.validity_weight) == (0.3, 0.7)
    assert rewards(old) == rewards(new) != rewards(MemoryEnv("memory"))
    default = MemoryEnv("memory")
    assert (default.compression_weight, default.validity_weight) == (0.05, 0.1)

    with pytest.warns(HonedDeprecationWarning) as caught:  # one name, one warning
        only_gamma = MemoryEnv("memory", gamma=0.7)
    assert len(caught) == 1 and "'gamma'" in str(caught[0].message)
    assert (only_gamma.compression_weight, only_gamma.validity_weight) == (0.05, 0.7)

    # From a config's envs[].args, as `honed train` builds it.
    with pytest.warns(HonedDeprecationWarning, match="'beta' is deprecated"):
        built = build_env("memory", "mem", 0, {"beta": 0.3})
    assert built.compression_weight == 0.3  # type: ignore[attr-defined]

    for old_name, new_name in (("beta", "compression_weight"), ("gamma", "validity_weight")):
        with pytest.raises(
            HonedError, match=f"'mem': '{old_name}' is the old name of '{new_name}' and both"
        ):
            MemoryEnv("mem", **{old_name: 0.3, new_name: 0.3})
