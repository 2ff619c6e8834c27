"""The GRPO trainer: the only place that knows the order of a step.

    sample items ─▶ roll out groups ─▶ (dynamic sampling) ─▶ advantages per group
        ─▶ clipped surrogate (+KL) over micro-batches ─▶ optimizer step ─▶ send the weights
        to the rollout backend ─▶ log, checkpoint

Rollouts go through a backend (`honed.distributed`): in this process by default, or on Ray
workers or inference servers, possibly `max_staleness` steps ahead. The trainer alone owns the
sampler, curricula, normalisers and optimizer. Everything with state (policy, optimizer
moments, step, sampler, RNGs, requests submitted ahead) goes into each checkpoint, so
`--resume` continues bit-for-bit on CPU in synchronous mode with one thread; settings (the
learning-rate schedule, hyperparameters) come from the config in force.
"""

from __future__ import annotations

import copy
import random
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from honed.config import Config, PolicyConfig, dump_config, format_change, moved_keys
from honed.distributed import RolledGroup, RolloutPipeline, RolloutRequest, build_backend, fsdp
from honed.distributed.learner import LearnerGroup, ShardedBackend
from honed.envs.base import Environment
from honed.envs.metrics import step_metrics
from honed.envs.registry import build_envs as build_config_envs
from honed.errors import HonedError
from honed.models.device import (
    dtype_name,
    peak_memory_gb,
    reset_peak_memory,
    resolve_device,
    resolve_dtype,
)
from honed.models.dropout import disable_dropout
from honed.models.lora import AdapterFreeReference, is_checkpoint
from honed.models.policy import Policy
from honed.rewards import NormalizerSet
from honed.rl.counts import RolloutCounts
from honed.rl.evaluate import evaluate
from honed.rl.nonfinite import NonFinite, check_advantages, check_rollouts, check_weights
from honed.rl.prepare import (
    Penalties,
    Prepared,
    labelled_advantages,
    prepare,
    reward_penalties,
    zero_spread,
)
from honed.rl.rollout_log import step_record
from honed.rl.schedule import apply_optimizer_settings, build_lr_scheduler, build_optimizer
from honed.rl.sft import run_sft
from honed.rl.update import PolicyUpdate
from honed.runs.best import BestCheckpoint
from honed.runs.files import check_tree, read_text
from honed.runs.lifecycle import (
    Change,
    RunInterrupted,
    RunLifecycle,
    RunStopped,
    Stop,
    StopRun,
    changes_environments,
    check_format,
    refuse,
    resume_changes,
)
from honed.runs.plots import plot_rewards
from honed.runs.progress import Reporter
from honed.runs.rollouts import curriculum_snapshot
from honed.runs.rundir import STATE_FILE, ReadOnlyRunDir, RunDir
from honed.runs.sinks import NoSinks, Sinks
from honed.runs.state import load_state, rng_state, save_state, set_rng_state
from honed.sampling.sampler import Sampler
from honed.types import Group, derive_seed
from honed.yaml_data import load_yaml

# Settings a resumed run cannot take from a new config: the checkpoint's weights are those of
# this model, trained after this warm-start.
FIXED_ON_RESUME = ("policy.model", "policy.gguf_file", "policy.tiny", "policy.lora", "sft.")
# Settings baked into the requests an asynchronous run has already drawn for coming steps.
FIXED_WHILE_QUEUED = ("trainer.prompts_per_step", "distributed.max_staleness")
# The trainer state's layout; `honed.runs.lifecycle.check_format` refuses others.
STATE_FORMAT = 1

# The name this exception had before both loops shared the run lifecycle.
TrainingInterrupted = RunInterrupted


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_envs(config: Config) -> dict[str, Environment]:
    return build_config_envs(config.envs, config.seed)


class GRPOTrainer:
    """One GRPO run over a run directory: `train()` sets up (policy, optimiser, rollouts,
    sinks; from the latest checkpoint with `resume`), runs `trainer.max_steps` steps through the
    run lifecycle and returns the summary.

    It is the lifecycle's `Loop` (`train_step`, `save`, `done`, ...) and the one owner of the
    run's state: rollouts, rewards and the update are components it calls in the order the
    module docstring draws. In a multi-process learner every process builds one; rank 0 alone
    writes the run directory and prints.
    """

    def __init__(self, config: Config, run: RunDir, reporter: Reporter | None = None) -> None:
        self.config = config
        self.device = resolve_device(config.policy.device)
        self.learners = LearnerGroup.from_env(self.device)
        self.world_size = self.learners.world_size
        # fsdp with one process is the single-process learner: there is nothing to shard over
        self.sharded = config.trainer.parallel == "fsdp" and self.learners.distributed
        # rank 0 alone writes the run directory and prints
        self.run = run if self.learners.is_main else ReadOnlyRunDir(run.path)
        self.best = BestCheckpoint(self.run, config.checkpoint.keep_best)
        self.reporter = reporter if reporter and self.learners.is_main else Reporter(enabled=False)
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        seed_everything(config.seed)
        self.envs = build_envs(config)
        self.sampler = Sampler.from_config(self.envs, config.envs, config.curriculum, config.seed)
        norm = config.reward_norm
        self.normalizers = NormalizerSet(self.envs, norm.mode, norm.clip, norm.warmup, norm.eps)
        self.step = 0
        # the step of the newest checkpoint this run holds, known alike to every process (the
        # run directory is rank 0's to write: another process may not see its last save yet)
        self.saved_step: int | None = None
        self.counts = RolloutCounts()  # rollouts and tokens generated so far, and kept
        self.initial_eval: dict[str, float] = {}
        self.initial_eval_few_shot: dict[str, float] = {}
        self.warmstart: dict[str, float] = {}
        self.policy: Policy | None = None
        self.resume_changes: list[Change] = []
        self.final_eval: dict[str, float] | None = None
        self.out_of_time = False  # `trainer.max_time_s` has run out (`after_step`)

    @property
    def rollouts_generated(self) -> int:
        """Completions generated so far, filtered or not (`RolloutCounts`)."""
        return self.counts.rollouts_generated

    # ------------------------------------------------------------------ set-up

    def evaluate_policy(self, split: str | None = None, few_shot: int = 0) -> dict[str, float]:
        """The current policy on the held-out split, with the run's `eval` settings."""
        ev = self.config.eval
        with fsdp.gathered(self.policy.model):
            return self._evaluate(split or ev.split, few_shot)

    def _evaluate(self, split: str, few_shot: int) -> dict[str, float]:
        ev = self.config.eval
        return evaluate(
            self.policy,
            self.envs,
            split=split,
            num_items=ev.num_items,
            temperature=ev.temperature,
            max_tokens=self.config.trainer.max_completion_length,
            top_p=self.config.trainer.top_p,
            seed=derive_seed(self.config.seed, "eval"),
            few_shot=few_shot,
            samples=ev.samples,
        )

    def warm_start(self) -> Policy:
        """The policy GRPO starts from: the model itself, or after supervised warm-start, whose
        loss (a row per hundredth of `sft.steps`) and checks go to `warmstart.jsonl` as it runs:
        a warm-start of half an hour is not silent in a run started with --quiet."""
        policy = self._build()
        if self.config.sft.steps == 0:
            return policy
        if is_checkpoint(self.run.warmstart):
            self.reporter.note(f"using the warm-start checkpoint in {self.run.warmstart}")
            return self._load(self.run.warmstart)
        check, steps = self.config.sft.check, self.config.sft.steps
        log = self.run.warmstart_log
        self.run.restart_log(log)  # a warm-start that starts again starts its log again
        every = max(1, steps // 100)
        losses: list[float] = []

        def on_step(step: int, loss: float) -> None:
            losses.append(loss)
            if step % every == 0 or step == steps:
                self.run.append(log, {"step": step, "loss": sum(losses) / len(losses)})
                losses.clear()
            advance(f"loss {loss:.3f}")

        def on_check(step: int, value: float) -> None:
            self.run.append(
                log,
                {"step": step, f"check/{check.metric}": value, "check/threshold": check.threshold},
            )
            self.reporter.note(
                f"warm-start check at step {step}: {check.metric} {value:.3f} "
                f"(passes at {check.threshold})"
            )

        if self.sharded:  # every process trains its shards on its share of each batch
            fsdp.shard(policy.model, self.device)
        with self.reporter.task("warm-start (SFT)", steps) as advance:
            self.warmstart = run_sft(
                policy,
                self.envs,
                self.config.sft,
                derive_seed(self.config.seed, "sft"),
                on_step=on_step,
                on_check=on_check,
                learners=self.learners,
            )
        if self.warmstart.get("sft/check/passed") == 0.0:
            self.reporter.note(
                f"the warm-start check did not pass within sft.steps ({self.config.sft.steps}); "
                "the warm-start is its last step"
            )
        whole = fsdp.full_model_state(policy.model) if self.sharded else None
        if self.learners.is_main:
            self.run.write_checkpoint(self.run.warmstart, lambda tmp: policy.save(tmp, whole))
        if self.sharded:
            # the rest of the set-up starts from rank 0 holding the whole model, as it does
            # from a warm-start checkpoint written before
            self.learners.barrier()
            return self._load(self.run.warmstart)
        return policy

    def policy_settings(self) -> PolicyConfig:
        """The policy config models are built with: the run's, or with fsdp the same model
        built on the CPU (in the dtype the device takes) by rank 0, which sends each process
        its shard on the device (`honed.distributed.fsdp.shard`): no process holds the whole
        model there, and no process but rank 0 holds it anywhere."""
        if not self.sharded:
            return self.config.policy
        dtype = resolve_dtype(self.config.policy.dtype, self.device)
        return self.config.policy.model_copy(update={"device": "cpu", "dtype": dtype_name(dtype)})

    def _build(self) -> Policy:
        """The policy the config describes; with fsdp, on processes other than rank 0, its
        structure alone (`Policy.skeleton`), whose shards rank 0 fills."""
        if self.sharded and not self.learners.is_main:
            return Policy.skeleton(self.policy_settings(), self.config.seed)
        return Policy.from_config(self.policy_settings(), self.config.seed)

    def _load(self, path: Path) -> Policy:
        """The checkpoint in `path`, refused (exit code 2) when a link is inside it."""
        if self.sharded and not self.learners.is_main:  # the same model; rank 0 reads it
            return self._build()
        check_tree(path)
        return Policy.from_checkpoint(path, self.policy_settings(), self.config.seed)

    def _reference(self, resumed: bool) -> torch.nn.Module | AdapterFreeReference | None:
        """A frozen copy of the policy GRPO started from (with LoRA, the policy's own model
        with its adapters off); none at all when beta is 0 (unless `log_reference_kl`). Built before the policy trains
        (or is sharded): a fresh run copies it, a resumed one builds the model again."""
        if self.config.trainer.beta == 0 and not self.config.trainer.log_reference_kl:
            return None
        if self.policy.has_adapters:
            return AdapterFreeReference(self.policy.model)
        if self.config.sft.steps and is_checkpoint(self.run.warmstart):
            ref = self._load(self.run.warmstart).model
        elif not resumed:
            ref = copy.deepcopy(self.policy.model)
        else:
            ref = self._build().model
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    def setup(self, resume: bool) -> None:
        """Open the run (reading the checkpoint to resume, if any), then build what a step
        uses, in this order: the policy and its reference, the optimiser with the checkpoint's
        state put back and the update, the rollouts; then start the lifecycle."""
        self.life = RunLifecycle(self.run, self.reporter)
        checkpoint = self._open_checkpoint(resume)
        reference = self._setup_policy(checkpoint)
        self._setup_update(checkpoint, reference)
        self._setup_rollouts(checkpoint)
        resumed_step = self.step if checkpoint is not None else None
        sinks = Sinks(self.run, self.config) if self.learners.is_main else NoSinks()
        self.life.start(dump_config(self.config), sinks, resumed_step)

    def _open_checkpoint(self, resume: bool) -> tuple[dict[str, Any], Path] | None:
        """The state and folder of the checkpoint to resume from (checked against the config
        in force), or None for a new run."""
        latest = self.life.open(resume, self.run.latest_checkpoint)
        if latest is None:
            return None
        _step, path = latest
        check_tree(path)
        state = load_state(path / STATE_FILE)
        check_format(state, path / STATE_FILE, STATE_FORMAT)
        self.resume_changes = self._check_changes(state)
        return state, path

    def _setup_policy(
        self, checkpoint: tuple[dict[str, Any], Path] | None
    ) -> torch.nn.Module | AdapterFreeReference | None:
        """The policy (the checkpoint's, or the warm-start) and the KL reference, sharded with
        fsdp; the reference is returned for the update."""
        self.policy = self._load(checkpoint[1]) if checkpoint else self.warm_start()
        holds_weights = not self.sharded or self.learners.is_main  # else rank 0 sends them
        if holds_weights:
            where = str(checkpoint[1]) if checkpoint else "the starting policy"
            check_weights(self.policy.model, where)
        if self.config.trainer.disable_dropout:
            disable_dropout(self.policy.model)
        reference = self._reference(resumed=checkpoint is not None)
        if holds_weights and isinstance(reference, torch.nn.Module):
            check_weights(reference, "the reference model")
        if self.sharded:
            fsdp.shard(self.policy.model, self.device)
            if isinstance(reference, torch.nn.Module):
                fsdp.shard(reference, self.device)
        self.reporter.note(describe_policy(self.policy, self.world_size, self.sharded))
        trainer = self.config.trainer
        if (
            trainer.beta > 0
            and not trainer.kl_in_reward
            and trainer.kl_estimator == "k1"
            and not trainer.use_bias_correction_kl
        ):
            self.reporter.note(
                "trainer.kl_estimator: k1 in the loss has zero expected gradient: it adds noise, "
                "not regularisation; use k2 (gradient of KL(pi || ref)), k3 (of KL(ref || pi)), "
                "trainer.use_bias_correction_kl: true or trainer.kl_in_reward: true (docs/kl.md)"
            )
        return reference

    def _setup_update(
        self,
        checkpoint: tuple[dict[str, Any], Path] | None,
        reference: torch.nn.Module | AdapterFreeReference | None,
    ) -> None:
        """The optimiser, the checkpoint's state put back (step, moments, sampler, statistics,
        RNGs), the learning-rate schedule from that step, and the update that steps them."""
        trainer = self.config.trainer
        self.optimizer = build_optimizer(
            self.policy.model.parameters(),
            trainer.learning_rate,
            trainer.weight_decay,
            (trainer.adam_beta1, trainer.adam_beta2),
        )
        if checkpoint is not None:
            self._restore(*checkpoint)
        self.scheduler = build_lr_scheduler(
            self.optimizer,
            trainer.lr_scheduler_type,
            trainer.warmup_steps,
            trainer.max_steps,
            start_step=self.step,
        )
        self.update = PolicyUpdate(
            self.policy,
            self.optimizer,
            self.scheduler,
            trainer,
            reference,
            self.learners,
            sharded=self.sharded,
        )

    def _setup_rollouts(self, checkpoint: tuple[dict[str, Any], Path] | None) -> None:
        """The rollout backend (split across learner processes), the pipeline with the
        requests a checkpoint had submitted ahead, and the backend's first weights."""
        self.rollouts = build_backend(
            self.config, self.envs, self.policy, self.run.path, self.learners
        )
        if self.learners.distributed:
            self.rollouts = ShardedBackend(self.rollouts, self.learners)
        self.pipeline = RolloutPipeline(self.rollouts, self.config.distributed.max_staleness)
        if checkpoint is not None:
            self.pipeline.load_state_dict(
                checkpoint[0].get("rollout_queue", []), self.sampler.items
            )
        self.rollouts.sync_weights(self.policy, self.step)

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        """Put a checkpoint's state back (`_restore_state`). The state is plain data from a
        file (`honed.runs.state.load_state`), so a part missing or of the wrong shape is a
        damaged checkpoint, said in one line naming it (exit 2), not a traceback."""
        try:
            self._restore_state(state, path)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            problem = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise HonedError(
                f"{path}: the trainer state cannot be restored ({type(exc).__name__}: "
                f"{problem[:200]}); the checkpoint is damaged or was not written by honed"
            ) from None

    def _restore_state(self, state: dict[str, Any], path: Path) -> None:
        """The step, optimizer moments, sampler and curricula, normaliser statistics and RNGs.
        Settings stay the config's: the optimizer's hyperparameters, the curricula's and the
        normalisers' settings are re-applied, and each changed setting is printed in one
        line."""
        self.step = self.saved_step = state["step"]
        self.counts.load_state_dict(state)
        self.best.restore(self.step)
        fsdp.load_optimizer_state(self.policy.model, self.optimizer, state["optimizer"])
        apply_optimizer_settings(
            self.optimizer,
            self.config.trainer.learning_rate,
            self.config.trainer.weight_decay,
            (self.config.trainer.adam_beta1, self.config.trainer.adam_beta2),
        )
        # The sampler and normalisers report the settings they changed; a checkpoint that
        # holds its config has reported them already (`resume_changes`), once per key.
        reported = self.sampler.load_state_dict(state["sampler"])
        norm = self.config.reward_norm
        for name, saved in state["reward_norm"].items():  # Atropos environments' included
            normalizer = self.normalizers[name]
            normalizer.load_state_dict(saved)
            changed = normalizer.configure(norm.mode, norm.clip, norm.warmup, norm.eps)
            reported += [format_change(f"reward_norm.{k}", a, b) for k, a, b in changed]
        set_rng_state(state["rng"])
        self.initial_eval = state["initial_eval"]
        self.initial_eval_few_shot = state.get("initial_eval_few_shot", {})
        self.warmstart = state.get("warmstart", {})
        known = {c.key for c in self.resume_changes}
        lines = [str(c) for c in self.resume_changes]
        for line in reported:
            key = line.partition(":")[0]
            if key not in known:
                known.add(key)
                lines.append(line)
        self.life.resumed(path, self.step, lines)

    def _check_changes(self, state: dict[str, Any]) -> list[Change]:
        """The settings the config in force changes against the checkpoint's run.

        The checkpoint supplies the state and the config the settings; a setting that cannot
        apply to a run in progress stops the resume (exit code 2) before anything is written.
        """
        before = state.get("config")
        if before is None and self.run.config_path.is_file():  # a checkpoint without it
            before = load_yaml(read_text(self.run.config_path), str(self.run.config_path))
        # a run saved before a key moved reports no change for it (`MOVED_KEYS`)
        before = moved_keys(before, warn=False)
        changes = resume_changes(before, self.config.model_dump(mode="json"))
        queued = bool(state.get("rollout_queue"))
        for change in changes:
            if change.key.startswith(FIXED_ON_RESUME):
                refuse(
                    change, "the checkpoint holds the weights, optimizer and warm-start of the run"
                )
            if changes_environments(change.key):
                refuse(change, "the checkpoint holds each environment's curriculum and statistics")
            if queued and change.key in FIXED_WHILE_QUEUED:
                refuse(
                    change,
                    "requests for the next steps were drawn with it and are in the checkpoint",
                )
        return changes

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "step": self.step,
            **self.counts.state_dict(),
            # keyed by parameter name, whole (gathered on rank 0 with fsdp)
            "optimizer": fsdp.optimizer_state(self.policy.model, self.optimizer),
            "sampler": self.sampler.state_dict(),
            "reward_norm": {name: n.state_dict() for name, n in self.normalizers.items()},
            "rng": rng_state(),
            "initial_eval": self.initial_eval,
            "initial_eval_few_shot": self.initial_eval_few_shot,
            "warmstart": self.warmstart,
            "rollout_queue": self.pipeline.state_dict(),
            # the settings this state was trained with, to say what a resume changes
            "config": self.config.model_dump(mode="json"),
        }

    def save_checkpoint(self) -> Path:
        path = self.run.checkpoints / f"step_{self.step}"
        state = self.state_dict()  # with fsdp, every process takes part in gathering it
        weights = fsdp.full_model_state(self.policy.model) if self.sharded else None

        def fill(tmp: Path) -> None:
            self.policy.save(tmp, weights)
            save_state(state, tmp / STATE_FILE)

        if self.learners.is_main:  # the state is the same on every process: written once
            self.run.write_checkpoint(path, fill)
            self.run.prune(self.config.checkpoint.keep_last)
        self.best.keep(path, write=self.learners.is_main)
        self.saved_step = self.step
        return path

    # ------------------------------------------------------------------ one step

    def draw(self, step: int, round_index: int, count: int) -> RolloutRequest:
        """A request for `count` items of `step`, drawn from the sampler now."""
        if self.config.distributed.backend == "atropos":
            items = []  # Atropos environments choose their own items
        else:
            items = self.sampler.next_items(count, step, self.config.trainer.max_steps)
        seed = derive_seed(self.config.seed, "rollout", step, round_index)
        return self.pipeline.request(step, round_index, items, seed)

    def rollout(self, round_index: int, count: int) -> list[RolledGroup]:
        """A round of groups. Every completion generated (a screened group's too), kept or
        not, counts towards `trainer.max_rollouts`; every group drawn (once its sampled
        log-probs and rewards are found finite) updates its item's curriculum and its
        environment's reward statistics (merged in item order, so the normaliser's state is the
        same however the groups were spread over workers)."""
        # in the learner, each process generates at its own pace on the whole weights, gathered
        # first; servers and Ray actors need nothing gathered here (they are sent the weights
        # after each step, gathered for them)
        here = self.config.distributed.backend == "inprocess"
        with fsdp.gathered(self.policy.model) if here else nullcontext():
            if round_index == 0:
                rolled = self.pipeline.first_round(
                    self.step, self.config.trainer.max_steps, count, self.draw
                )
            else:
                rolled = self.pipeline.now(self.draw(self.step, round_index, count))
        self.counts.generated(r.group for r in rolled)
        check_rollouts([r.group for r in rolled])  # before any statistic takes them in
        self.sampler.observe([r.group for r in rolled])
        for r in rolled:
            self.normalizers[r.group.env].observe(r.reward_stats)
        return rolled

    def budget_spent(self) -> bool:
        """Whether `trainer.max_rollouts` completions have been generated (never, without one)."""
        limit = self.config.trainer.max_rollouts
        return limit is not None and self.rollouts_generated >= limit

    def collect(self) -> tuple[list[RolledGroup], list[Penalties | None], dict[str, float]]:
        """One step's groups (and their KL reward penalties, with `kl_in_reward`); with dynamic
        sampling, draw more until enough have spread.

        Spread is judged on the signal the advantages will use: rewards mapped by the
        normalisers as they stand after every group drawn so far, less the KL penalties. The
        whole pool is judged again after each round, so the groups chosen are judged by the
        very map `prepare` then applies.
        """
        want = self.config.trainer.prompts_per_step
        pool = self.rollout(0, want)
        penalties = self._penalties(pool)
        rounds = 1
        chosen = pool
        if self.config.trainer.dynamic_sampling:
            useful = self._with_spread(pool, penalties)
            while len(useful) < want and rounds < self.config.trainer.max_sampling_rounds:
                more = self.rollout(rounds, want - len(useful))
                rounds += 1
                penalties += self._penalties(more)
                pool = pool + more
                useful = self._with_spread(pool, penalties)
            # Batches stay the same size: the first `want` useful groups, topped up with
            # zero-spread ones (which the filter then drops) only when the cap was reached.
            picked = useful[:want]
            if len(picked) < want:
                taken = set(picked)
                picked += [i for i in range(len(pool)) if i not in taken][: want - len(picked)]
            chosen = [pool[i] for i in picked]
            penalties = [penalties[i] for i in picked]
        metrics = {"sampling/rounds": float(rounds), "sampling/groups_drawn": float(len(pool))}
        return chosen, penalties, metrics

    def _penalties(self, rolled: list[RolledGroup]) -> list[Penalties | None]:
        """The KL reward penalties of each group (`kl_in_reward`), else none."""
        if not self.config.trainer.kl_in_reward:
            return [None] * len(rolled)
        groups = [r.group for r in rolled]
        return reward_penalties(
            self.policy,
            self.update.reference,
            groups,
            self.config.trainer,
            self.learners,
            self.sharded,
        )

    def _reference_kl(self, groups: list[Group]) -> dict[str, float]:
        """`kl/reference`: the mean per-token log π_old − log π_ref of the step's sampled
        tokens, before the update (`log_reference_kl`)."""
        per_token = self.config.trainer.model_copy(update={"beta": 1.0})
        penalties = reward_penalties(
            self.policy, self.update.reference, groups, per_token, self.learners, self.sharded
        )
        return {"kl/reference": _reward_kl(groups, list(penalties), 1.0)["kl"]}

    def _with_spread(self, pool: list[RolledGroup], penalties: list[Penalties | None]) -> list[int]:
        """Indices of the groups of `pool` whose signal has spread."""
        groups = [r.group for r in pool]
        spread = zero_spread(groups, self.config.trainer, self.normalize, penalties)
        return [i for i, zero in enumerate(spread) if not zero]

    def train_step(self) -> dict[str, float]:
        """One step; a non-finite value found on the way stops the run there or drops the step
        (`trainer.on_nonfinite`, `honed.rl.nonfinite`)."""
        try:
            return self._train_step()
        except NonFinite as found:
            return self._nonfinite(found)

    def _nonfinite(self, found: NonFinite) -> dict[str, float]:
        """Stop the run at a step with a non-finite value (`StopRun`: nothing of the step is
        saved), or skip the step: no optimizer step, the schedule advances, the step counts."""
        step = self.step + 1
        message = found.message(step)
        if self.config.trainer.on_nonfinite == "stop":
            hint = "trainer.on_nonfinite: skip_step would skip such steps"
            raise StopRun(Stop("nonfinite", f"{message} ({hint})", error=True))
        self.reporter.note(f"step {step} skipped: {message}")
        metrics = self.update.skip()
        self.step = step
        self.rollouts.sync_weights(self.policy, self.step)
        metrics.update(self.counts.metrics())
        metrics["nonfinite/skipped"] = 1.0
        metrics[f"nonfinite/{found.quantity}"] = 1.0
        return metrics

    def _train_step(self) -> dict[str, float]:
        started = time.perf_counter()
        reset_peak_memory(self.policy.device)
        rolled, penalties, metrics = self.collect()
        rollout_time = time.perf_counter() - started
        groups = [r.group for r in rolled]
        # tokens from older weights, or from another engine, are importance-weighted
        staleness = [self.step - r.version for r in rolled]
        off_policy = [lag > 0 or not r.exact for r, lag in zip(rolled, staleness, strict=True)]
        prepared = prepare(groups, self.config.trainer, self.normalize, off_policy, penalties)
        check_advantages(groups, prepared.advantages)
        metrics.update(prepared.metrics)
        metrics.update(labelled_advantages(groups, prepared.advantages))
        if self.config.trainer.log_reference_kl:
            metrics.update(self._reference_kl(groups))
        update_started = time.perf_counter()
        if prepared.sequences:
            mine = self.learners.shard(len(groups))  # whole groups per learner process
            owned = [s.group in mine for s in prepared.sequences]
            try:
                metrics.update(self.update.step(prepared.sequences, owned))
            except NonFinite as found:
                raise found.among(groups) from None
        else:
            metrics.update(self.update.skip())
        if self.config.trainer.kl_in_reward:
            metrics.update(_reward_kl(groups, penalties, self.config.trainer.beta))
        self.counts.kept(prepared.kept_groups)
        metrics.update(self.counts.metrics())
        self.step += 1
        self.rollouts.sync_weights(self.policy, self.step)
        elapsed = time.perf_counter() - started
        metrics.update(self.rollout_metrics(groups))
        metrics.update(self.sampler.metrics())
        metrics.update(self.rollouts.metrics())
        metrics["async/staleness_mean"] = sum(staleness) / len(staleness)
        metrics["async/staleness_max"] = float(max(staleness))
        if self.config.reward_norm.mode != "none":
            for name, normalizer in self.normalizers.items():
                for key, value in normalizer.metrics_dict().items():
                    head, _, rest = key.partition("/")
                    metrics[f"{head}/{name}/{rest}"] = float(value)
        completion_tokens = sum(
            len(s.completion_ids) for g in groups for t in g.trajectories for s in t.segments
        )
        metrics["perf/step_time"] = elapsed
        metrics["perf/rollout_time"] = rollout_time
        metrics["perf/update_time"] = time.perf_counter() - update_started
        metrics["perf/tokens_per_second"] = completion_tokens / max(elapsed, 1e-9)
        metrics["perf/peak_memory_gb"] = peak_memory_gb(self.policy.device)
        self.log_samples(groups)
        self.log_rollouts(groups, prepared, staleness)
        return metrics

    def normalize(self, env: str, rewards: list[float]) -> list[float]:
        return self.normalizers[env].apply(rewards)

    def rollout_metrics(self, groups: list[Group]) -> dict[str, float]:
        trajs = [(g.env, t) for g in groups for t in g.trajectories]
        rewards = torch.tensor([t.reward for _, t in trajs], dtype=torch.float64, device="cpu")
        lengths = [len(s.completion_ids) for _, t in trajs for s in t.segments]
        out = {
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "success/mean": sum(t.success for _, t in trajs) / len(trajs),
            "completions/mean_length": sum(lengths) / max(1, len(lengths)),
            "completions/max_length": float(max(lengths, default=0)),
            "completions/truncated_frac": sum(s.truncated for _, t in trajs for s in t.segments)
            / max(1, len(lengths)),
        }
        out.update(step_metrics(self.envs, groups))
        per_env: dict[str, list] = defaultdict(list)
        for env, t in trajs:
            per_env[env].append(t)
        for env, ts in per_env.items():
            out[f"reward/{env}/mean"] = sum(t.reward for t in ts) / len(ts)
            out[f"success/{env}/mean"] = sum(t.success for t in ts) / len(ts)
            components: dict[str, list[float]] = defaultdict(list)
            for t in ts:
                for key, value in t.components.items():
                    components[key].append(float(value))
            for key, values in components.items():
                out[f"reward/{env}/{key}"] = sum(values) / len(values)
        return out

    def log_samples(self, groups: list[Group]) -> None:
        n = self.config.logging.samples_per_step
        for g in groups[:n]:
            t = g.trajectories[0]
            self.run.append(
                self.run.samples_path,
                {
                    "step": self.step,
                    "env": g.env,
                    "item": g.item_key,
                    "prompt": t.prompt_text,
                    "completion": t.completion_text,
                    "reward": t.reward,
                    "success": t.success,
                    "group_rewards": g.rewards(),
                },
            )

    def log_rollouts(self, groups: list[Group], prepared: Prepared, staleness: list[int]) -> None:
        """The step's first `logging.rollouts_per_step` groups as trained, with the curricula
        as they stand for the next draw, in `rollouts/` (size-capped; for `honed view`)."""
        n = self.config.logging.rollouts_per_step
        if not n:
            return
        filtered = [z and self.config.trainer.filter_zero_std for z in prepared.zero_std]
        record = step_record(
            self.step,
            groups[:n],
            prepared.advantages[:n],
            prepared.group_stds[:n],
            filtered[:n],
            self._decode_all,
            staleness[:n],
        )
        record["groups_in_step"] = len(groups)
        record["curriculum"] = curriculum_snapshot(
            self.sampler.curricula, self.step, self.config.trainer.max_steps
        )
        self.run.write_rollouts(record, self.config.logging.rollouts_max_bytes)

    def _decode_all(self, ids: list[int]) -> str:
        """Token ids as text, special tokens included (a template's turn markers show)."""
        return self.policy.tokenizer.decode(list(ids), skip_special_tokens=False)

    # ------------------------------------------------------------------ the loop

    def train(self, resume: bool = False) -> dict[str, Any]:
        self.setup(resume)
        clean = False
        try:
            with self.life.running():
                summary = self._train()
            clean = True
            return summary
        except RunInterrupted as stop:
            clean = stop.finished  # every process agreed to stop after the same step
            raise
        finally:
            self.rollouts.close()
            self.learners.close(wait=clean)

    def _train(self) -> dict[str, Any]:
        self._initial_evaluations()
        self.final_eval = self._logged_eval()
        halt = self.life.steps(self, "GRPO", self.config.trainer.max_steps)
        if halt is not None:  # a non-finite value: its step is not saved, the last one stays
            self.life.close_sinks()
            raise RunStopped(halt, self.saved_step, self.saved())
        if self.ended_by() == "max_time_s":
            self.reporter.note(
                f"stopped after step {self.step}: trainer.max_time_s "
                f"({self.config.trainer.max_time_s:g} s) has passed; --resume goes on"
            )
        if self.saved_step != self.step:
            self.save_checkpoint()
        final_eval = self.final_eval
        if final_eval is None:
            with self.reporter.status("final evaluation"):
                final_eval = self.evaluate_policy()
            self.life.log(self.step, {f"eval/{k}": v for k, v in final_eval.items()})
            if self._consider_best(final_eval):
                self.best.keep(self.run.checkpoints / f"step_{self.step}", self.learners.is_main)
        else:
            self.reporter.note(f"final evaluation: the one already logged at step {self.step}")
        summary = self.life.close(self.summary(final_eval, self.life.seconds))
        if self.learners.is_main:
            plot_rewards(
                self.run.read_jsonl(self.run.metrics_path),
                self.run.claim(self.run.file("reward.png")),
            )
        return summary

    def _initial_evaluations(self) -> None:
        """The starting policy on the held-out split (and with k solved examples in its prompt,
        with `eval.few_shot`), logged at step 0; a resumed run has them already."""
        if not self.initial_eval:
            with self.reporter.status("initial evaluation"):
                self.initial_eval = self.evaluate_policy()
            self.life.log(0, {f"eval/{k}": v for k, v in self.initial_eval.items()})
        shots = self.config.eval.few_shot
        if shots and not self.initial_eval_few_shot:
            with self.reporter.status(f"initial evaluation, {shots}-shot"):
                self.initial_eval_few_shot = self.evaluate_policy(few_shot=shots)
            self.life.log(
                0, {f"eval_{shots}_shot/{k}": v for k, v in self.initial_eval_few_shot.items()}
            )
        self.best.check(self.initial_eval)

    # ------------------------------------------------------------------ the lifecycle's loop

    def done(self) -> bool:
        return self.ended_by() is not None

    def ended_by(self) -> str | None:
        """The limit that ends the run now, by its config key; None while none has been met."""
        trainer = self.config.trainer
        if self.step >= trainer.max_steps:
            return "max_steps"
        if self.budget_spent():
            return "max_rollouts"
        return "max_time_s" if self.out_of_time else None

    def after_step(self, record: dict[str, Any]) -> None:
        """The held-out evaluation every `eval.every` steps, logged with the step; whether
        `trainer.max_time_s` has run out, decided once a step and by every learner process
        alike (their clocks differ, and one that stopped alone would leave the others waiting)."""
        limit = self.config.trainer.max_time_s
        if limit is not None:
            self.out_of_time = self.learners.any(self.life.seconds >= limit, self.policy.device)
        self.final_eval = None
        every = self.config.eval.every
        if every and self.step % every == 0:
            self.final_eval = self.evaluate_policy()
            record.update({f"eval/{k}": v for k, v in self.final_eval.items()})
            self._consider_best(self.final_eval)  # its checkpoint is then due

    def _consider_best(self, results: dict[str, float]) -> bool:
        """Whether this step's evaluation is the best so far (`checkpoint.keep_best`), decided
        on rank 0's and shared: every process must save the same steps (with fsdp a save is a
        collective call), and their evaluations may differ in the last bits on GPUs."""
        best = self.best
        if best.metric is None:
            return False
        best.consider(self.step, results)
        best.step, best.value, best.pending = self.learners.from_main(
            (best.step, best.value, best.pending)
        )
        return best.pending

    def stop_reason(self) -> Stop | None:
        """None: a GRPO run ends only at its step or rollout budget (`done`) or on Ctrl-C."""
        return None

    def agree_to_stop(self, requested: bool) -> bool:
        """Whether any learner process was asked to stop (Ctrl-C): all stop after the same
        step, so that the checkpoint rank 0 writes is the state of every process."""
        return self.learners.any(requested, self.policy.device)

    def checkpoint_due(self) -> bool:
        every = self.config.checkpoint.every
        return (bool(every) and self.step % every == 0) or self.best.pending

    def save(self) -> Path:
        return self.save_checkpoint()

    def saved(self) -> Path | None:
        latest = self.run.latest_checkpoint()
        return latest[1] if latest else None

    def describe(self, record: dict[str, Any]) -> str:
        if "nonfinite/skipped" in record:
            return "step skipped: a non-finite value"
        return f"reward {record['reward/mean']:.3f}  zero-std {record['frac_reward_zero_std']:.2f}"

    def _logged_eval(self) -> dict[str, float] | None:
        """The evaluation a resumed run already logged at its checkpoint's step, if any.

        A run resumed after it finished, or at a step where it evaluated, reuses it as its
        final evaluation instead of logging a second one (unless `eval.*` settings changed).
        """
        if self.step == 0 or any(c.key.startswith("eval.") for c in self.resume_changes):
            return None
        found = None
        for row in self.run.read_jsonl(self.run.metrics_path):
            if row.get("step") == self.step and any(k.startswith("eval/") for k in row):
                found = {k[len("eval/") :]: v for k, v in row.items() if k.startswith("eval/")}
        return found

    def summary(self, final_eval: dict[str, float], seconds: float) -> dict[str, Any]:
        rows = self.run.read_jsonl(self.run.metrics_path)
        latest = self.run.latest_checkpoint()
        environments = {}
        for name, curriculum in self.sampler.curricula.items():
            env_head, env_tail = _head_tail(rows, f"reward/{name}/mean")
            bins = curriculum.metrics_dict()
            environments[name] = {
                "train_reward_first_10": env_head,
                "train_reward_last_10": env_tail,
                "curriculum_bins": [
                    int(bins[f"curriculum/bin_{i}_count"]) for i in range(curriculum.n_bins)
                ],
                "items_tracked": curriculum.n_items_tracked,
            }
        head, tail = _head_tail(rows, "reward/mean")
        return {
            "steps": self.step,
            "ended_by": self.ended_by(),  # the limit met: max_steps, max_rollouts or max_time_s
            "rollouts": self.rollouts_generated,
            "tokens_generated": self.counts.tokens_generated,
            "initial_eval": self.initial_eval,
            "initial_eval_few_shot": self.initial_eval_few_shot,
            "final_eval": final_eval,
            "accuracy_gain": final_eval["accuracy"] - self.initial_eval.get("accuracy", 0.0),
            "train_reward_first_10": head,
            "train_reward_last_10": tail,
            "environments": environments,
            "warmstart": self.warmstart,
            "eval_split": self.config.eval.split,
            "seconds": round(seconds, 1),
            "checkpoint": str(latest[1]) if latest else None,
            # `checkpoint.keep_best`: the step whose evaluation was the best, kept whole
            "best_checkpoint": self.best.summary(),
            # steps dropped for a non-finite value (`trainer.on_nonfinite: skip_step`)
            "nonfinite_skipped": int(sum(r.get("nonfinite/skipped", 0.0) for r in rows)),
            # how the last session trained: learner processes, and whether their weights,
            # gradients and optimizer state were sharded (fsdp over two or more)
            "learner_processes": self.world_size,
            "sharded": self.sharded,
        }


def describe_policy(policy: Policy, world_size: int, sharded: bool = False) -> str:
    """The line a run starts with: where it trains, in which precision, on how many processes
    (and whether sharded), and how many of the parameters train."""
    params = list(policy.model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    dtype = dtype_name(params[0].dtype)  # the embeddings: the base model's dtype
    adapters = ", LoRA" if policy.has_adapters else ""
    mode = " (fsdp: sharded)" if sharded else ""
    return (
        f"policy on {policy.device}, {dtype}{adapters}, {world_size} learner process"
        f"{'es' if world_size > 1 else ''}{mode}; trainable parameters {trainable:,} of {total:,} "
        f"({100 * trainable / max(total, 1):.2f}%)"
    )


def _reward_kl(
    groups: list[Group], penalties: list[Penalties | None], beta: float
) -> dict[str, float]:
    """`kl`: the mean per-token log π_old − log π_ref of the step's groups (what `kl_in_reward`
    subtracts, divided by β), and the mean penalty a sequence's reward lost."""
    total = tokens = 0.0
    count = 0
    for group, penalty in zip(groups, penalties, strict=True):
        for traj, row in zip(group.trajectories, penalty or [], strict=True):
            for seg, value in zip(traj.segments, row, strict=True):
                total += value
                tokens += sum(seg.mask())
                count += 1
    return {"kl": total / beta / max(tokens, 1.0), "kl/reward_penalty_mean": total / max(count, 1)}


def _head_tail(rows: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    """Mean of a metric over the first and the last ten steps that logged it."""
    values = [r[key] for r in rows if key in r]
    if not values:
        return None, None
    head, tail = values[:10], values[-10:]
    return sum(head) / len(head), sum(tail) / len(tail)
