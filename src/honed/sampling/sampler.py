"""The sampler: which items each step practises.

Two decisions per batch, each by a component with its own tests: how many items each
environment gets (`EnvironmentMixture`: by weight, with a guaranteed minimum share), and which
training items those are (one `CurriculumScheduler` per environment, fed back each group's mean
score). With `curriculum.skip.enabled`, a third (`SkipFilter`) passes each item the curriculum
draws before anything is generated for it, drawing another in place of one it skips, so the
mixture's counts and the strategy stay as they are. All randomness comes from their own
generators, whose state is in every checkpoint, so a resumed run draws the same items. The GRPO
and skill loops share this class.

The config supplies the settings and a checkpoint the state: `load_state_dict` restores the
scores, counts and generators, then re-applies the config in force and says what changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from honed.config import CurriculumConfig, EnvConfig, format_change
from honed.envs.base import Environment
from honed.errors import HonedError
from honed.sampling.curriculum import SETTINGS, CurriculumScheduler
from honed.sampling.mixture import EnvironmentMixture
from honed.sampling.skip import SkipFilter
from honed.types import Group, Item, derive_seed


class Sampler:
    def __init__(
        self,
        envs: Mapping[str, Environment],
        weights: Mapping[str, float],
        min_share: Mapping[str, float] | None = None,
        seed: int = 0,
        curriculum: CurriculumConfig | None = None,
    ) -> None:
        self.envs = dict(envs)
        self.curriculum_config = curriculum or CurriculumConfig()
        self.mixture = EnvironmentMixture(
            {name: float(weights[name]) for name in self.envs},
            {name: float(share) for name, share in (min_share or {}).items() if share},
            seed=derive_seed(seed, "mixture") % 2**31,
        )
        self.items: dict[str, dict[str, Item]] = {}
        self.curricula: dict[str, CurriculumScheduler] = {}
        for name, env in self.envs.items():
            train = list(env.items("train"))
            if not train:
                raise HonedError(f"environment '{name}' has no training items")
            self.items[name] = {item.key: item for item in train}
            scheduler = CurriculumScheduler(
                **self._scheduler_settings(), seed=derive_seed(seed, "curriculum", name) % 2**31
            )
            scheduler.register_items(self.items[name])
            self.curricula[name] = scheduler
        skip = self.curriculum_config.skip
        self.skip = (
            SkipFilter(skip, self.history_key, seed=derive_seed(seed, "skip") % 2**31)
            if skip.enabled
            else None
        )

    @classmethod
    def from_config(
        cls,
        envs: Mapping[str, Environment],
        env_configs: Sequence[EnvConfig],
        curriculum: CurriculumConfig,
        seed: int,
    ) -> Sampler:
        try:
            return cls(
                envs,
                {e.name: e.weight for e in env_configs},
                {e.name: e.min_share for e in env_configs},
                seed=derive_seed(seed, "sampler") % 2**31,
                curriculum=curriculum,
            )
        except ValueError as exc:
            raise HonedError(str(exc)) from None

    def next_items(self, n: int, step: int = 0, total_steps: int = 1) -> list[Item]:
        """`n` training items (with replacement), grouped by environment in config order."""
        out: list[Item] = []
        for name, count in self.mixture.allocate(n).items():
            draw = partial(self._draw, name, step, total_steps)
            if self.skip is None:
                out += [draw() for _ in range(count)]
            else:
                out += [self.skip.choose(name, draw) for _ in range(count)]
        return out

    def _draw(self, env: str, step: int, total_steps: int) -> Item:
        return self.items[env][self.curricula[env].sample_item(step, total_steps)]

    def history_key(self, env: str, item_key: str) -> str:
        """What the skip history keeps an item's outcomes by: with `curriculum.skip.key:
        difficulty`, the environment's `difficulty_key(item)` where it has one, else the key."""
        difficulty_key = getattr(self.envs.get(env), "difficulty_key", None)
        item = self.items.get(env, {}).get(item_key)
        if self.curriculum_config.skip.key == "difficulty" and difficulty_key and item:
            return str(difficulty_key(item))
        return item_key

    def _scheduler_settings(self) -> dict[str, Any]:
        c = self.curriculum_config
        return {name: getattr(c, name) for name in SETTINGS}

    def observe(self, groups: Sequence[Group]) -> None:
        """Feed each group's scores to its environment's curriculum.

        The curriculum tracks exact-task success by default (a rate in [0, 1], which `frontier`
        and the `platanios` competence need); `curriculum.score: reward` tracks the raw reward
        instead, mapped onto [0, 1] through `curriculum.reward_range` when that is given.
        """
        c = self.curriculum_config
        use_reward = c.score == "reward"
        known = [g for g in groups if g.env in self.curricula]
        for g in known:
            scores = [t.reward if use_reward else t.success for t in g.trajectories]
            if c.reward_range is not None:
                scores = [_unit(r, c.reward_range, g) for r in scores]
            self.curricula[g.env].update_batch(g.item_key, scores)
        if self.skip is not None:
            self.skip.observe(known)

    def metrics(self) -> dict[str, float]:
        """Mixture shares and each curriculum's metrics, keyed `curriculum/<env>/...`; with
        skipping, its `sampling/...` metrics (the per-step ones count since the last call)."""
        out = dict(self.mixture.metrics_dict())
        for name, curriculum in self.curricula.items():
            for key, value in curriculum.metrics_dict().items():
                head, _, rest = key.partition("/")
                out[f"{head}/{name}/{rest}"] = float(value)
        if self.skip is not None:
            out.update(self.skip.metrics())
        return out

    def _own_settings(self) -> dict[str, Any]:
        """The curriculum settings the sampler applies itself (each curriculum holds the rest)."""
        c = self.curriculum_config
        return {
            "score": c.score,
            "reward_range": None if c.reward_range is None else list(c.reward_range),
        }

    def state_dict(self) -> dict[str, Any]:
        state = {
            "mixture": self.mixture.state_dict(),
            "curricula": {name: cur.state_dict() for name, cur in self.curricula.items()},
            **self._own_settings(),
        }
        if self.skip is not None:
            state["skip"] = self.skip.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> list[str]:
        """Restore a checkpoint's state under the settings of the config in force.

        Each curriculum takes the checkpoint's scores, update count and generator (and, as its own
        `load_state_dict` does, its settings); then the config's settings are applied again,
        rebuilding the bins where `n_bins` changed. The mixture's state holds no settings. The
        training items are registered again, so items added to a dataset since are drawn as
        unseen ones. The skip history is restored when skipping is on (a checkpoint without one
        starts it empty) and left out when it is off. Returns one line per setting the config changes against the checkpoint,
        `curriculum.n_bins: 5 -> 3`, in the config's key order.
        """
        self.mixture.load_state_dict(state["mixture"])
        if self.skip is not None and "skip" in state:
            self.skip.load_state_dict(state["skip"])
        changed: dict[str, tuple[Any, Any]] = {}
        for name, curriculum in self.curricula.items():
            curriculum.load_state_dict(state["curricula"][name])
            unknown = [key for key in curriculum.item_keys() if key not in self.items[name]]
            if unknown:
                raise HonedError(
                    f"the checkpoint's curriculum of environment '{name}' holds {len(unknown)} "
                    f"items its training split lacks (e.g. '{unknown[0]}'); resume with the "
                    "environment's data of that run"
                )
            for key, value in self._scheduler_settings().items():
                before = getattr(curriculum, key)
                setattr(curriculum, key, value)
                if getattr(curriculum, key) != before:
                    changed.setdefault(key, (before, getattr(curriculum, key)))
            curriculum.register_items(self.items[name])
        for key, value in self._own_settings().items():
            if key in state and state[key] != value:  # older checkpoints lack them
                changed[key] = (state[key], value)
        return [
            format_change(f"curriculum.{key}", *changed[key])
            for key in CurriculumConfig.model_fields
            if key in changed
        ]


def _unit(reward: float, bounds: tuple[float, float], group: Group) -> float:
    """A reward mapped from `curriculum.reward_range` onto [0, 1]; outside it, an error."""
    lo, hi = bounds
    if not lo <= reward <= hi:
        raise HonedError(
            f"environment '{group.env}' gave item '{group.item_key}' the reward {reward!r}, "
            f"outside curriculum.reward_range [{lo}, {hi}]; widen the range to cover every reward "
            "(partial credit, penalties and KL terms included)"
        )
    return (reward - lo) / (hi - lo)
