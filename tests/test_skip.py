"""Skipping before rollout (`curriculum.skip`, `honed.sampling.skip`): a skipped item is never
generated, the skip probability is 1 − max(p^k, p_min) of the item's streak, p moves toward the
target share of groups without spread, probes estimate the false-skip rate, and it composes with
every curriculum strategy, the mixture and a difficulty key."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from rollout_fakes import CountingGenerator, OutcomeEnv
from tiny_run import DigitShareEnv

from honed.config import CurriculumConfig, EnvConfig, SkipConfig, TrainerConfig
from honed.distributed.shard import roll_out
from honed.runs.state import load_state, save_state
from honed.sampling.curriculum import STRATEGIES
from honed.sampling.sampler import Sampler
from honed.sampling.skip import SkipFilter, outcome_of
from honed.types import Group, Item, Trajectory


def _group(key: str, outcome: str, env: str = "e", n: int = 4) -> Group:
    rewards = {"solved": [1.0] * n, "failed": [0.0] * n, "spread": [1.0, 0.0] * (n // 2)}
    return Group(env, key, [Trajectory([], reward=r, success=r) for r in rewards[outcome]])


def _filter(**settings) -> SkipFilter:
    return SkipFilter(SkipConfig(enabled=True, **settings), lambda env, key: key, seed=1)


def test_outcomes_are_solved_failed_or_spread():
    assert outcome_of(_group("a", "solved")) == "solved"
    assert outcome_of(_group("a", "failed")) == "failed"
    assert outcome_of(_group("a", "spread")) == "spread"
    partial = Group("e", "a", [Trajectory([], reward=0.5, success=0.0)] * 3)
    assert outcome_of(partial) == "failed"  # no spread, not solved


def test_the_chance_of_being_generated_is_max_p_to_the_streak_and_p_min():
    f = _filter(p_min=0.05)
    assert f.chance("e", "never-drawn") == 1.0
    for k in range(1, 6):
        f.observe([_group("a", "solved")])
        assert f.streak("e", "a") == k
        assert f.chance("e", "a") == max(f.p_easy**k, 0.05)
    assert f.chance("e", "a") == 0.05  # 0.55^5 is below the floor
    f.observe([_group("a", "failed")])  # another kind starts a new streak, on p_hard
    assert f.streak("e", "a") == -1 and f.chance("e", "a") == f.p_hard
    f.observe([_group("a", "failed")])
    assert f.chance("e", "a") == max(f.p_hard**2, 0.05)
    f.observe([_group("a", "spread")])  # spread: eligible again
    assert f.streak("e", "a") == 0 and f.chance("e", "a") == 1.0


def test_p_moves_by_one_step_per_round_toward_the_target_and_stays_in_range():
    f = _filter(target_zero_share=0.3, p_step=0.1, p_start=0.5, p_min=0.2)
    # a round with a share of all-solved groups above 0.3 / 3, and none all-failed (below 0.2):
    # p_easy goes down (skip more of them), p_hard up (skip fewer)
    round_ = [_group(f"s{i}", "solved") for i in range(2)] + [_group("m", "spread")] * 8
    expected_easy, expected_hard = 0.5, 0.5
    for _ in range(8):
        f.observe(round_)
        expected_easy = max(expected_easy - 0.1, 0.2)
        expected_hard = min(expected_hard + 0.1, 1.0)
        assert f.p_easy == pytest.approx(expected_easy)
        assert f.p_hard == pytest.approx(expected_hard)
    assert (f.p_easy, f.p_hard) == (0.2, 1.0)  # clipped to [p_min, 1]


def test_adaptation_brings_the_share_without_spread_near_the_target():
    """A closed loop on a synthetic population: 60 % of the items always solved or always
    failed, 40 % with spread. Without skipping 60 % of the groups have no spread; with it the
    share settles near the target."""
    population = [("solved", 30), ("failed", 30), ("spread", 40)]
    items = [f"{kind}{i}" for kind, n in population for i in range(n)]
    rng = random.Random(0)
    f = _filter(target_zero_share=0.25)
    shares = []
    for _ in range(400):
        batch = [f.choose("e", lambda: Item(rng.choice(items), "e", {})) for _ in range(16)]
        groups = [_group(item.key, item.key.rstrip("0123456789")) for item in batch]
        f.observe(groups)
        shares.append(sum(outcome_of(g) != "spread" for g in groups) / len(groups))
    late = sum(shares[200:]) / 200
    assert 0.18 < late < 0.34, late
    assert f.metrics()["sampling/skipped_total"] > 1000


def test_a_false_skip_is_counted_and_the_rate_weighs_each_probe_by_what_it_stands_for():
    f = _filter(p_start=0.5, p_step=1e-9, p_min=0.01)
    for _ in range(2):
        f.observe([_group("a", "failed"), _group("b", "failed"), _group("c", "failed")])
    # a streak of 2: each candidate is let through with q = p_hard^2, about 0.25
    probe = f.choose("e", lambda: Item("a", "e", {}))  # drawn until one is let through
    q = f.chance("e", "a")
    assert probe.key == "a"
    f.observe([_group("a", "spread")])  # the probe had spread: skipping it would have been false
    m = f.metrics()
    assert (m["sampling/probes"], m["sampling/false_skips"]) == (1.0, 1.0)
    assert m["sampling/false_skip_rate"] == 1.0
    f.observe([_group("b", "failed")])  # b's streak grows to 3 without a draw
    f.choose("e", lambda: Item("b", "e", {}))
    q_b = f.chance("e", "b")
    f.observe([_group("b", "failed")])  # a probe that was rightly predicted
    m = f.metrics()
    assert (m["sampling/probes"], m["sampling/false_skips"]) == (2.0, 1.0)
    weight_a, weight_b = (1 - q) / q, (1 - q_b) / q_b
    assert m["sampling/false_skip_rate"] == pytest.approx(weight_a / (weight_a + weight_b))
    # an item without a streak is no probe, whatever its group shows
    f.choose("e", lambda: Item("fresh", "e", {}))
    f.observe([_group("fresh", "spread")])
    assert f.metrics()["sampling/probes"] == 2.0


def test_a_probe_drawn_before_a_checkpoint_is_matched_with_its_group_after_it():
    """With rollouts ahead of the learner (`distributed.max_staleness`), a checkpoint falls
    between a draw and its group: the chance the draw had is in the state."""
    f = _filter()
    f.observe([_group("a", "failed")] * 3)
    f.choose("e", lambda: Item("a", "e", {}))
    resumed = _filter()
    resumed.load_state_dict(f.state_dict())
    resumed.observe([_group("a", "spread")])
    m = resumed.metrics()
    assert (m["sampling/probes"], m["sampling/false_skips"]) == (1.0, 1.0)


def test_when_every_candidate_is_skipped_the_last_is_generated_and_counted():
    f = _filter(p_start=0.01, p_min=0.0, max_draws=3)
    f.observe([_group("a", "solved")] * 3)
    assert f.chance("e", "a") == 0.0
    assert f.choose("e", lambda: Item("a", "e", {})).key == "a"
    m = f.metrics()
    assert (m["sampling/candidates"], m["sampling/skipped"], m["sampling/skip_exhausted"]) == (
        3.0,
        2.0,
        1.0,
    )
    f.observe([_group("a", "spread")])
    assert f.metrics()["sampling/probes"] == 0.0  # forced through: not a random probe


# ------------------------------------------------------------------------------ in the sampler


def _sampler(env=None, strategy="uniform", **skip) -> Sampler:
    env = env or OutcomeEnv()
    curriculum = CurriculumConfig(strategy=strategy, skip=SkipConfig(**skip))
    return Sampler.from_config({env.name: env}, [EnvConfig(name=env.name)], curriculum, 0)


def test_a_skipped_item_is_never_generated():
    env = OutcomeEnv()
    sampler = _sampler(env, enabled=True)
    settings = TrainerConfig(num_generations=4, prompts_per_step=6)
    generator = CountingGenerator()
    candidates: list[str] = []
    real_draw = sampler._draw

    def drawn(*args):
        item = real_draw(*args)
        candidates.append(item.key)
        return item

    sampler._draw = drawn
    generated: Counter[str] = Counter()
    skipped = 0
    for step in range(30):
        items = sampler.next_items(6, step, 30)
        generated.update(item.key for item in items)
        pairs = roll_out({env.name: env}, generator, items, step, settings)
        sampler.observe([group for group, _ in pairs])
        skipped += sampler.metrics()["sampling/skipped"]
    # every completion went to an item the sampler handed out, num_generations each ...
    assert generator.calls == Counter({key: 4 * n for key, n in generated.items()})
    # ... and the candidates it skipped cost none: they are the draws it did not hand out
    assert skipped == len(candidates) - sum(generated.values()) > 20
    streaky = sum(n for key, n in generated.items() if not key.startswith("mixed"))
    assert streaky < sum(generated.values()) / 2  # 2/3 of the items have no spread


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_skipping_composes_with_every_strategy_and_the_mixture(strategy):
    envs = {"a": DigitShareEnv("a"), "b": DigitShareEnv("b")}
    configs = [EnvConfig(name="a", weight=3.0), EnvConfig(name="b", weight=1.0, min_share=0.25)]
    keys = [item.key for item in envs["a"].items("train")]

    def sampler(skip: bool) -> Sampler:
        curriculum = CurriculumConfig(strategy=strategy, skip=SkipConfig(enabled=skip, p_min=0.01))
        s = Sampler.from_config(envs, configs, curriculum, seed=4)
        for _ in range(4):  # all of env a's items but two always solved, the two with spread
            s.observe([_group(k, "spread" if k in keys[:2] else "solved", "a") for k in keys])
        return s

    plain, skipping = sampler(False), sampler(True)
    drawn: dict[bool, Counter[str]] = {False: Counter(), True: Counter()}
    for step in range(40):
        batches = {s is skipping: s.next_items(8, step, 40) for s in (plain, skipping)}
        # the mixture's split of every batch is untouched: its draws are its own
        assert [i.env for i in batches[True]] == [i.env for i in batches[False]]
        for skip, batch in batches.items():
            drawn[skip].update(i.key for i in batch if i.env == "a")
    assert skipping.metrics()["sampling/skipped_total"] > 0
    solved = {k: n for k, n in drawn[True].items() if k not in keys[:2]}
    plain_solved = {k: n for k, n in drawn[False].items() if k not in keys[:2]}
    assert sum(solved.values()) < sum(plain_solved.values())


def test_the_history_can_be_kept_by_difficulty_key():
    by_item = _sampler(enabled=True)
    by_kind = _sampler(enabled=True, key="difficulty")
    for sampler in (by_item, by_kind):
        sampler.observe([_group("solved0", "solved", "outcomes")] * 3)
    # solved5 was never drawn: eligible by item, but its kind has a streak of 3
    assert by_item.skip.chance("outcomes", "solved5") == 1.0
    assert by_kind.skip.chance("outcomes", "solved5") < 1.0
    assert by_kind.skip.streak("outcomes", "solved") == 3
    assert by_kind.skip.chance("outcomes", "failed0") == 1.0


def test_an_environment_without_a_difficulty_key_keeps_the_history_by_item():
    sampler = _sampler(DigitShareEnv("digits"), enabled=True, key="difficulty")
    sampler.observe([_group("digits:train0", "solved", "digits")])
    assert sampler.skip.streak("digits", "digits:train0") == 1


def test_the_skip_state_round_trips_through_a_checkpoint_file(tmp_path):
    def run(sampler: Sampler, steps: range) -> list[tuple]:
        env, generator = OutcomeEnv(), CountingGenerator()
        out = []
        for step in steps:
            items = sampler.next_items(6, step, 20)
            pairs = roll_out({env.name: env}, generator, items, step, TrainerConfig())
            sampler.observe([g for g, _ in pairs])
            out.append(([i.key for i in items], sampler.metrics()))
        return out

    straight = _sampler(enabled=True)
    whole = run(straight, range(12))
    first = _sampler(enabled=True)
    run(first, range(6))
    save_state({"step": 6, "sampler": first.state_dict()}, tmp_path / "state.pt")
    resumed = _sampler(enabled=True)
    resumed.load_state_dict(load_state(tmp_path / "state.pt")["sampler"])
    assert run(resumed, range(6, 12)) == whole[6:]
    assert resumed.state_dict() == straight.state_dict()
    assert straight.metrics()["sampling/skipped_total"] > 0


def test_without_skipping_the_sampler_state_holds_no_history():
    assert "skip" not in _sampler().state_dict()
    assert _sampler().skip is None


def test_a_history_kept_by_another_key_is_dropped_on_resume():
    by_item = _sampler(enabled=True)
    by_item.observe([_group("solved0", "solved", "outcomes")] * 2)
    p_easy = by_item.skip.p_easy
    by_kind = _sampler(enabled=True, key="difficulty")
    by_kind.load_state_dict(by_item.state_dict())
    # the item keys' streaks would never be read again under difficulty keys: none is kept
    assert by_kind.state_dict()["skip"]["streaks"] == {}
    assert by_kind.skip.p_easy == p_easy  # the rest of the state is kept
