"""The sampler: which items each step practises.

Two decisions per batch, each by a component with its own tests: how many items each
environment gets (`EnvironmentMixture`: by weight, with a guaranteed minimum share), and which
training items those are (one `CurriculumScheduler` per environment, fed back each group's mean
score). All randomness comes from their own generators, whose state is in every checkpoint, so a
resumed run draws the same items. The GRPO and skill loops share this class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from honed.config import CurriculumConfig, EnvConfig
from honed.envs.base import Environment
from honed.errors import HonedError
from honed.sampling.curriculum import CurriculumScheduler
from honed.sampling.mixture import EnvironmentMixture
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
        c = self.curriculum_config
        for name, env in self.envs.items():
            train = list(env.items("train"))
            if not train:
                raise HonedError(f"environment '{name}' has no training items")
            self.items[name] = {item.key: item for item in train}
            scheduler = CurriculumScheduler(
                strategy=c.strategy,
                n_bins=c.n_bins,
                temperature=c.temperature,
                ema_alpha=c.ema_alpha,
                competence_threshold=c.competence_threshold,
                unseen_share=c.unseen_share,
                seed=derive_seed(seed, "curriculum", name) % 2**31,
            )
            scheduler.register_items(self.items[name])
            self.curricula[name] = scheduler

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
            curriculum, items = self.curricula[name], self.items[name]
            out += [items[curriculum.sample_item(step, total_steps)] for _ in range(count)]
        return out

    def observe(self, groups: Sequence[Group]) -> None:
        """Feed each group's scores to its environment's curriculum.

        The curriculum tracks exact-task success by default (a rate in [0, 1], which the
        `frontier` strategy needs); `curriculum.score: reward` tracks the raw reward instead.
        """
        use_reward = self.curriculum_config.score == "reward"
        for g in groups:
            curriculum = self.curricula.get(g.env)
            if curriculum is None:
                continue
            scores = [t.reward if use_reward else t.success for t in g.trajectories]
            curriculum.update_batch(g.item_key, scores)

    def metrics(self) -> dict[str, float]:
        """Mixture shares and each curriculum's metrics, keyed `curriculum/<env>/...`."""
        out = dict(self.mixture.metrics_dict())
        for name, curriculum in self.curricula.items():
            for key, value in curriculum.metrics_dict().items():
                head, _, rest = key.partition("/")
                out[f"{head}/{name}/{rest}"] = float(value)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "mixture": self.mixture.state_dict(),
            "curricula": {name: c.state_dict() for name, c in self.curricula.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mixture.load_state_dict(state["mixture"])
        for name, curriculum in self.curricula.items():
            curriculum.load_state_dict(state["curricula"][name])
