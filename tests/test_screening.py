"""Screening (`trainer.screening.rollouts`): k rollouts per item first; those whose rewards agree
stop there, the others get the rest of the group, seeded as an unscreened group's, and their
advantages use all of them. Here in the rollout layer every backend shares, and in-process in
the trainer, where every completion generated is counted (tests/test_distributed_ray.py and
tests/test_distributed_server.py run it on Ray workers and against inference servers)."""

from __future__ import annotations

import pytest
from rollout_fakes import CountingGenerator, OutcomeEnv
from tiny_run import half_spread_env_data, small_config

from honed.config import TrainerConfig
from honed.distributed.shard import roll_out
from honed.errors import HonedError
from honed.rl.advantages import compute_advantages
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir
from honed.types import Group

N, K, SEED = 6, 2, 11


def _roll(env, screening: int) -> tuple[dict[str, Group], CountingGenerator]:
    generator = CountingGenerator()
    settings = TrainerConfig(num_generations=N, screening={"rollouts": screening})
    pairs = roll_out({env.name: env}, generator, env.items("train"), SEED, settings)
    return {g.item_key: g for g, _ in pairs}, generator


def _ids(group: Group) -> list[list[int]]:
    return [s.completion_ids for t in group.trajectories for s in t.segments]


def test_agreeing_screens_stop_at_k_and_the_others_are_the_unscreened_group():
    env = OutcomeEnv()
    screened, generator = _roll(env, K)
    whole, _ = _roll(env, 0)
    going_on = [k for k, g in whole.items() if len({t.reward for t in g.trajectories[:K]}) > 1]
    stopped = [k for k in whole if k not in going_on]
    assert len(going_on) >= 2 and any(k.startswith("mixed") for k in stopped)
    for key in stopped:  # solved, failed, and mixed items whose first K rollouts agreed
        assert len(screened[key].trajectories) == K
        assert generator.calls[key] == K
        assert _ids(screened[key]) == _ids(whole[key])[:K]
    for key in going_on:
        assert generator.calls[key] == N
        assert _ids(screened[key]) == _ids(whole[key])  # same seeds, same completions
        # the advantages are computed over the screening rollouts and the rest together
        assert compute_advantages([screened[key].rewards()], "group") == compute_advantages(
            [whole[key].rewards()], "group"
        )
    assert generator.total == K * len(stopped) + N * len(going_on)


class OldSignatureEnv(OutcomeEnv):
    """An environment written before `first_generation` existed."""

    def rollout(self, items, generator, num_generations, seed):
        return super().rollout(items, generator, num_generations, seed)


def test_an_environment_without_first_generation_gets_the_rest_under_a_seed_of_their_own():
    screened, generator = _roll(OldSignatureEnv(), K)
    whole, unscreened = _roll(OutcomeEnv(), 0)
    going_on = [k for k, g in screened.items() if len(g.trajectories) == N]
    assert going_on
    for key in going_on:
        assert _ids(screened[key])[:K] == _ids(whole[key])[:K]
        assert _ids(screened[key])[K:] != _ids(whole[key])[K:]
    # the rest's seeds are none of the unscreened group's: no completion is drawn twice
    rest = generator.seeds[K * len(screened) :]
    assert len(rest) == (N - K) * len(going_on) and not set(rest) & set(unscreened.seeds)


class ShortEnv(OutcomeEnv):
    def rollout(self, items, generator, num_generations, seed, first_generation=0):
        groups = super().rollout(items, generator, num_generations, seed, first_generation)
        groups[0].trajectories.pop()
        return groups


def test_a_group_of_the_wrong_size_is_an_error_naming_the_item():
    with pytest.raises(
        HonedError, match=r"returned 1 trajectories for item 'solved0', asked for 2"
    ):
        _roll(ShortEnv(), K)


@pytest.mark.parametrize("k", [1, 4])
def test_screening_needs_two_rollouts_and_fewer_than_the_group(k):
    with pytest.raises(ValueError, match=r"screening\.rollouts must be 0"):
        TrainerConfig(num_generations=4, screening={"rollouts": k})


class CountedTrainer(GRPOTrainer):
    """The trainer with its rollouts' generator counted: every completion it returns."""

    completions = tokens = 0

    def _setup_rollouts(self, checkpoint):
        super()._setup_rollouts(checkpoint)
        inner, trainer = self.rollouts.generator, self

        class Counted:
            def encode(self, prompt):
                return inner.encode(prompt)

            def generate(self, prompts, seeds):
                samples = inner.generate(prompts, seeds)
                trainer.completions += len(samples)
                trainer.tokens += sum(len(s.completion_ids) for s in samples)
                return samples

        self.rollouts.generator = Counted()


def test_every_completion_generated_is_counted_screened_and_filtered_ones_included(tmp_path):
    cfg = small_config(
        tmp_path,
        "trainer.screening.rollouts=2",
        "trainer.dynamic_sampling=true",
        "trainer.max_sampling_rounds=2",
        data=half_spread_env_data(tmp_path),
    )
    trainer = CountedTrainer(cfg, RunDir(tmp_path / "run"))
    summary = trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    last = rows[-1]
    assert last["rollouts/generated"] == trainer.completions == summary["rollouts"]
    assert last["tokens/generated"] == trainer.tokens == summary["tokens_generated"]
    assert last["sampling/rollouts_total"] == last["rollouts/generated"]
    drawn = sum(r["sampling/groups_drawn"] for r in rows)
    # groups stopped after 2 rollouts (fewer than 4 each), others went on, and were filtered
    assert 2 * drawn < last["rollouts/generated"] < 4 * drawn
    assert sum(r["groups/filtered"] for r in rows) > 0
    assert last["rollouts/kept"] == 4 * sum(r["groups/trained"] for r in rows)
    assert 0 < last["tokens/kept"] < last["tokens/generated"]
