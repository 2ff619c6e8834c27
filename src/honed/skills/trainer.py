"""The skill trainer: the only place that knows the order of a skill-optimisation step.

    budget = edit_budget.step()
    sample items ─▶ target answers with the current skill ─▶ env scores (hard, soft)
        ─▶ failures / successes in minibatches ─▶ reflector reflects on each (+ step buffer)
        ─▶ merge (dedupe, optional LLM merge) ─▶ rank ─▶ keep the top k ≤ budget
        ─▶ apply ─▶ candidate ─▶ gate on the selection split ─▶ accept, or remember the rejection

At an epoch's end: optional consolidation of the protected guidance region, and the step buffer
is cleared. The best skill by selection score is kept in `best_skill.md`; at the end the initial
and best skills are evaluated on the held-out split and `summary.json` is written.

Everything with state (the edit budget's position, sampler, step buffer, skill versions,
scores) is saved in `state.json` after every step; target answers are cached on disk by skill
hash as they arrive, and every request and reply of both models is journaled before it is used
(`journal.jsonl`, `honed.models.journal`), so `--resume` continues after the last finished
step, takes what a crashed step had received from the journal instead of paying again, counts
what the run spent from the journal, and ends with the same skills as an uninterrupted run. The
settings come from the config in force, not the checkpoint (`honed.skills.resume`), and a
finished run is left as it is.

The `budget` is checked before every request (`honed.models.budget`): a request that could pass
a cap is not sent, the step stops there (its record written, its state not saved: `--resume`
with a larger budget redoes it from the journal), and the summary names the cap; the held-out
evaluation counts against the budget too, and is skipped, said so, when it does not fit.

A misbehaving server costs a step's proposals, not the run: a failed reflection drops its
minibatch's proposals, a step whose every reflection failed is `skipped`, a failed target
request leaves its item out of the scores. What stops a run goes through the run lifecycle,
with the state of the last finished step saved and the reason in `summary.json`: a step in
which more than `target.max_failed_fraction` of the target's replies failed, three skipped
steps in a row, the last steps of the run included (both errors: exit code 2), a `budget` cap
reached, or `train.patience` steps in a row without an accepted candidate.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from honed.config import dump_config
from honed.envs.base import SingleTurnEnv
from honed.envs.registry import build_envs
from honed.errors import HonedError
from honed.models.budget import BudgetStop, Caps, spent_reason
from honed.models.chat import BYTES_PER_TOKEN, USAGE_FIELDS, ChatClient, UsageMeter
from honed.models.journal import Journal
from honed.runs.files import (
    atomic_write_dir,
    atomic_write_json,
    atomic_write_text,
    no_follow,
    read_text,
)
from honed.runs.lifecycle import (
    Change,
    RunLifecycle,
    RunStopped,
    Stop,
    StopRun,
    check_format,
)
from honed.runs.progress import Reporter
from honed.runs.sinks import Sinks
from honed.sampling.sampler import Sampler
from honed.skills.agent import is_tool_env
from honed.skills.config import SkillsConfig
from honed.skills.consolidate import EXAMPLES_PER_OUTCOME, OUTCOMES, consolidation_prompt, propose
from honed.skills.cost import (
    FirstStep,
    Shape,
    StageEstimate,
    estimate_stages,
    most_minibatches,
)
from honed.skills.document import ApplyReport, SkillDocument, SkillFormatError
from honed.skills.edits import Edit
from honed.skills.gate import Gate, GateDecision
from honed.skills.merge import (
    MergeResult,
    PoolEdit,
    Ranking,
    dedupe,
    llm_merge,
    merge_prompt,
    rank,
    rank_prompt,
)
from honed.skills.reflect import (
    FAILURE,
    Evidence,
    Minibatch,
    Reflection,
    StepBuffer,
    fitted_prompt,
    minibatches,
    reflect,
)
from honed.skills.reflector import Reflector
from honed.skills.resume import check_changes, config_changes
from honed.skills.rollout import (
    Rollout,
    RolloutCache,
    Scores,
    TargetRunner,
    aggregate,
    check_single_turn,
    evaluation_items,
    metrics,
)
from honed.skills.rundir import SkillRunDir
from honed.types import Group, Item, Trajectory, derive_seed, prompt_text
from honed.yaml_data import load_yaml

log = logging.getLogger(__name__)

STATE_FORMAT = 1
# Steps in a row whose every reflection failed before the run stops: one is a bad minute of
# the server's, three are a server that needs a person.
SKIPPED_STEPS_TO_STOP = 3
# Share of a step's fresh target replies cut at max_tokens above which the run warns (once).
TRUNCATED_SHARE_TO_WARN = 0.1
# What a dry run assumes a proposed edit is, for the merge and rank prompts: a sentence or two.
ASSUMED_EDIT = "- " + "When the task says so, answer in the form it asks for. " * 3


def _largest_skill(initial: SkillDocument, max_chars: int) -> SkillDocument:
    """`initial` grown to `max_chars` characters of plain words: the largest skill a run can
    send, for the dry run's bound on prompt tokens."""
    room = max_chars - len(initial.text) - 1
    if room <= 0:
        return initial
    filler = ("- Follow the rule. " * (room // 19 + 1))[:room]
    return SkillDocument(f"{initial.text}\n{filler}")


def build_skill_envs(config: SkillsConfig) -> dict[str, SingleTurnEnv]:
    """The configured environments (seeded as the GRPO trainer seeds them), all single-turn."""
    return check_single_turn(build_envs(config.envs, config.seed))


def _groups(rollouts: list[Rollout], items: Mapping[tuple[str, str], Item]) -> list[Group]:
    """Answered rollouts as one-trajectory groups: what the sampler's curriculum learns from (an
    item without an answer says nothing about its difficulty)."""
    return [
        Group(
            r.env,
            r.item_key,
            [Trajectory([], r.soft, r.hard, prompt_text=r.prompt, completion_text=r.reply)],
            level=items[(r.env, r.item_key)].level,
        )
        for r in rollouts
        if r.answered
    ]


def _changed_items(before: list[Rollout], after: list[Rollout]) -> list[dict[str, Any]]:
    return [
        {"env": a.env, "item": a.item_key, "before": [b.hard, b.soft], "after": [a.hard, a.soft]}
        for b, a in zip(before, after, strict=True)
        if (b.hard, b.soft) != (a.hard, a.soft)
    ]


def _both_answered(before: list[Rollout], after: list[Rollout]) -> tuple[list[Rollout], ...]:
    """The pairs of rollouts (same items, same order) where both skills got an answer: scores
    compared on different items would compare the items, not the skills."""
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b.answered and a.answered]
    return [b for b, _ in pairs], [a for _, a in pairs]


def _fresh(rollouts: list[Rollout]) -> list[Rollout]:
    """The distinct rollouts that were asked for now (not from the cache)."""
    return [r for r in {(r.env, r.item_key): r for r in rollouts}.values() if not r.cached]


def _usage_delta(
    before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """The counts a step added, flat (`tokens/<stage>/<counter>`), for its stages only."""
    out: dict[str, float] = {}
    for stage, row in after.items():
        old = before.get(stage, {})
        delta = {k: v - old.get(k, 0) for k, v in row.items()}
        if any(delta.values()):
            for key in (*USAGE_FIELDS, "usd"):
                if key in delta:
                    out[f"tokens/{stage}/{key}"] = delta[key]
    return out


@dataclass
class _Verdict:
    """What the gate made of a step's candidate."""

    outcome: str  # accepted, rejected or unchanged
    reason: str
    before: Scores  # the current skill's selection scores
    decision: GateDecision | None = None
    changed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, split: str, items: int) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "split": split,
            "items": items,
            "decision": None if self.decision is None else self.decision.to_dict(),
            "items_changed": self.changed,
        }


def _write_files(folder: Path, files: Mapping[str, Any]) -> None:
    """Each entry as a file of `folder`: Markdown text as is, the rest as JSON."""
    for name, content in files.items():
        if name.endswith(".md"):
            atomic_write_text(folder / name, content)
        else:
            atomic_write_json(folder / name, content)


class SkillTrainer:
    """One skill-optimisation run over a run directory: `train()` starts it (or resumes the
    saved one), runs its steps through the run lifecycle, evaluates the initial and best skills
    on the held-out split and returns the summary.

    It is the lifecycle's `Loop` and owns the run's state (skill versions, edit budget, sampler,
    step buffer, usage); the target and reflector are OpenAI-compatible servers reached through
    `ChatClient`s, which `close()` shuts.
    """

    def __init__(
        self, config: SkillsConfig, run: SkillRunDir, reporter: Reporter | None = None
    ) -> None:
        self.config = config
        self.run = run
        self.reporter = reporter or Reporter(enabled=False)
        self.envs = build_skill_envs(config)
        self.usage = UsageMeter()
        budget = config.budget
        self.caps = Caps(
            self._spent,
            budget.max_tokens,
            budget.max_requests,
            budget.max_usd,
            budget.require_usage,
        )
        cap = config.train.max_stored_reply_chars
        self.target = ChatClient(config.target, self.usage, self.caps, cap)
        self.reflector_client = ChatClient(config.reflector, self.usage, self.caps, cap)
        self.journal: Journal | None = None
        # usage a run saved before it had a journal (None: everything is in the journal)
        self._usage_before_journal: dict[str, dict[str, float]] | None = None
        # the settings the run last saved with, to tell whether a resume gives the budget room
        self._saved_config: dict[str, Any] = {}
        # a budget cap an epoch's end ran into (after its step was done): the run stops there,
        # and the journal's replay for the resumed run starts where that epoch's end began
        self._budget_stop: Stop | None = None
        self._journal_mark: int | None = None
        self.reflector = Reflector(
            self.reflector_client, config.reflector.max_prompt_tokens, config.key
        )
        self.evidence = Evidence(config.train.max_evidence_chars, config.train.show_reasoning)
        self.sampler = Sampler.from_config(self.envs, config.envs, config.curriculum, config.seed)
        train_items = sum(len(env.items("train")) for env in self.envs.values())
        self.steps_per_epoch, self.total_steps = config.total_steps(train_items)
        try:
            self.edit_budget = config.edit_budget.build(self.total_steps)
        except ValueError as exc:
            raise HonedError(f"edit_budget: {exc}") from None
        self.gate = Gate(config.gate)
        self.gate_items = evaluation_items(self.envs, config.gate.split, config.gate.num_items)
        if not self.gate_items:
            raise HonedError(
                f"the gate has no items: no environment has a '{config.gate.split}' split; give "
                "the environments one (e.g. validation_fraction) or set gate.split"
            )
        self.buffer = StepBuffer()
        self.step = 0
        self.epochs_closed = 0
        self.history: list[dict[str, Any]] = []
        self.versions: list[dict[str, Any]] = []
        self._last_step_skipped = False  # by a step this process ran, not a resumed one
        self._warned_truncated = False
        self._step_target = [0, 0]  # the step's fresh target replies, and how many failed

    # ------------------------------------------------------------------ set-up

    def preflight(self) -> None:
        """Fail before any work if either chat server is unreachable or misconfigured."""
        self.target.check()
        self.reflector_client.check()

    def close(self) -> None:
        """Close both clients (cutting what is still in flight: a second Ctrl-C must not wait
        for a hanging server) and the journal."""
        self.target.close()
        self.reflector_client.close()
        if self.journal is not None:
            self.journal.close()

    def _spent(self) -> dict[str, float]:
        """What the budget is checked against: the usage totals, with the requests a crash
        lost counted as requests (the server may have billed them)."""
        totals = self.usage.totals()
        totals["requests"] = totals.get("requests", 0) + totals.get("lost", 0)
        return totals

    def setup(self, resume: bool) -> bool:
        """Start a run, or load the one to resume; False when that one had already finished, in
        which case nothing is written (no second evaluation or summary)."""
        self.life = RunLifecycle(self.run, self.reporter)
        state = self.life.open(resume, self.run.read_state)
        self.journal = Journal(self.run.claim(self.run.journal_path), opener=no_follow)
        if state is None:
            self.run.discard_progress()
            self._count_from_journal(None)
        else:  # checked and loaded before anything is written: a refused resume changes nothing
            changes = self._restore(state)
            self._count_from_journal(state)
            self.life.resumed(self.run.state_path, self.step, [escape(str(c)) for c in changes])
            if self._finished():
                stopped = self._persistent_stop()
                how = "finished" if stopped is None else f"stopped ({stopped.reason})"
                self.reporter.note(f"the run {how} after step {self.step}: nothing to do")
                return False
        self.life.start(dump_config(self.config), Sinks(self.run, self.config), self.step)
        self._warn_unbounded()
        self.cache = RolloutCache(self.run.claim(self.run.cache_path))
        self.runner = TargetRunner(
            self.target,
            self.envs,
            self.config.skill.preamble,
            self.cache,
            self.config.target.max_failed_fraction,
        )
        note = self.gate.resolution_note(len(self.gate_items))
        if note:
            self.reporter.note(note)
        if state is not None:
            self.run.discard_after(self.step, len(self.versions), self.epochs_closed)
            self.current = self.run.skills.load(self.current_version)
            atomic_write_text(
                self.run.claim(self.run.best_path), self.run.skills.load(self.best_version).text
            )
            return True
        with self.life.running():
            self._start_from_initial_skill()
        return True

    def _count_from_journal(self, state: dict[str, Any] | None) -> None:
        """Count the run's usage from its journal (plus what a run saved before it had one),
        and offer the replies journaled since the saved state to the steps that redo them."""
        assert self.journal is not None
        saved = (state or {}).get("journal")
        if isinstance(saved, dict):
            self._usage_before_journal = saved.get("before")
            self.journal.replay_from(int(saved.get("offset", 0)))
        else:  # a new run, or one saved by a honed that kept its usage in state.json alone
            before = (state or {}).get("usage")
            self._usage_before_journal = before.get("stages") if isinstance(before, dict) else None
            self.journal.replay_from(0)
        self.usage.attach(self.journal, self._usage_before_journal)

    def _warn_unbounded(self) -> None:
        """A cap on tokens or USD cannot hold a request without `max_tokens` to its worst case:
        say so once, naming the key to set."""
        budget = self.config.budget
        if budget.max_tokens is None and budget.max_usd is None:
            return
        for role in ("target", "reflector"):
            if getattr(self.config, role).max_tokens is None:
                log.warning(
                    "%s is not set: a request's completion has no bound, so budget.max_tokens "
                    "and budget.max_usd can be passed by the completions in flight; set it",
                    self.config.key(f"{role}.max_tokens"),
                )

    def _start_from_initial_skill(self) -> None:
        """Version 1: the configured initial skill, scored on the selection items."""
        try:
            initial = SkillDocument(self.config.skill.initial_text())
        except SkillFormatError as exc:
            raise HonedError(f"skill.init: {exc}") from None
        limit = self.config.skill.max_chars
        if len(initial.text) > limit:
            raise HonedError(
                f"skill.init has {len(initial.text)} characters, more than skill.max_chars "
                f"({limit}); shorten it or raise skill.max_chars"
            )
        try:
            with self.reporter.status("scoring the initial skill on the selection split"):
                scores, rollouts = self.score(initial, "gate")
        except BudgetStop as exc:
            if exc.error:
                raise HonedError(exc.reason) from None
            raise HonedError(
                f"{exc.reason}, before the initial skill was scored: raise the budget (what was "
                "received is journaled and not paid again)"
            ) from None
        self._check_target(rollouts, "scoring the initial skill", in_step=False)
        self.current = initial
        self.initial_scores = self.current_scores = self.best_scores = scores
        self._save_version(initial, scores, step=0, source="initial")
        self.current_version = self.best_version = self.epoch_start_version = 1
        atomic_write_text(self.run.claim(self.run.best_path), initial.text)
        self.save()

    def score(self, skill: SkillDocument, stage: str) -> tuple[Scores, list[Rollout]]:
        """The skill's scores on the gate's selection items (cached by skill hash)."""
        rollouts = self.runner.run(skill, self.gate_items, stage)
        return aggregate(rollouts), rollouts

    def _check_target(self, rollouts: list[Rollout], where: str, in_step: bool = True) -> None:
        """Count the step's fresh target replies and failures; stop the run (`StopRun` in a
        step, a `HonedError` outside one) when more than `target.max_failed_fraction` of them
        failed. `where` says what the target was doing, for the message."""
        fresh = _fresh(rollouts)
        failed = [r for r in fresh if not r.answered]
        self._step_target[0] += len(fresh)
        self._step_target[1] += len(failed)
        asked, lost = self._step_target
        allowed = self.config.target.max_failed_fraction
        if not failed or lost <= allowed * asked:
            return
        message = (
            f"the target server is misbehaving: {lost} of {asked} replies failed while "
            f"{where} (more than {self.config.key('target.max_failed_fraction')} = {allowed:g}); "
            f"last problem: {failed[-1].error}"
        )
        if in_step:
            raise StopRun(Stop("server", message, error=True))
        raise HonedError(message)

    # ------------------------------------------------------------------ cost

    def estimate(self) -> list[StageEstimate]:
        """Each stage's calls and tokens over the run, expected and at most, from the real
        prompts of its first step (`honed skills train --dry-run`; see `honed.skills.cost`).
        Asks no model and writes nothing."""
        config = self.config
        try:
            initial = SkillDocument(config.skill.initial_text())
        except SkillFormatError as exc:
            raise HonedError(f"skill.init: {exc}") from None
        train_items = sum(len(env.items("train")) for env in self.envs.values())
        ev = config.eval
        eval_items = evaluation_items(self.envs, ev.split, ev.num_items)

        def turns(item: Item) -> int:
            env = self.envs[item.env]
            return int(getattr(env, "max_turns", 1)) if is_tool_env(env) else 1

        shape = Shape(
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            consolidation_items=min(config.consolidation.num_items, train_items),
            turns_per_item=max(
                (turns(i) for env in self.envs.values() for i in env.items("train")), default=1
            ),
            gate_requests=sum(turns(i) for i in self.gate_items),
            eval_requests=sum(turns(i) for i in eval_items),
        )
        usual = self.first_step(initial, StepBuffer())
        worst = self.first_step(
            _largest_skill(initial, config.skill.max_chars), self._full_buffer()
        )
        return estimate_stages(config, usual, worst, shape)

    def _full_buffer(self) -> StepBuffer:
        """The step buffer as full as an epoch can make it before its last step: every earlier
        step's pattern from each minibatch, and its candidate's edits rejected."""
        train = self.config.train
        buffer = StepBuffer()
        batches = most_minibatches(train.batch_size, train.minibatch_size, train.failure_only)
        edits = [Edit("append", "", ASSUMED_EDIT)] * self.edit_budget.max_lr
        for step in range(1, min(self.steps_per_epoch, self.total_steps)):
            buffer.patterns += [
                {"step": step, "source": FAILURE, "summary": ASSUMED_EDIT}
            ] * batches
            buffer.add_rejected(step, edits, 0.0, 0.0, "")
        return buffer

    def first_step(self, skill: SkillDocument, buffer: StepBuffer) -> FirstStep:
        """The estimated prompt tokens of the first step's calls with `skill` and `buffer`: the
        target's real requests, and the reflector's prompts built from the step's real items
        with replies as long as the reflector may be shown."""
        config = self.config
        runner = TargetRunner(self.target, self.envs, config.skill.preamble)
        sampler = Sampler.from_config(self.envs, config.envs, config.curriculum, config.seed)
        items = sampler.next_items(config.train.batch_size, 0, self.total_steps)
        ev = config.eval

        def target_tokens(chosen: list[Item]) -> list[int]:
            return [
                self.target.estimate_tokens(runner.messages(skill, self.envs[i.env].prompt(i)))
                for i in chosen
            ]

        # the longest reply the reflector can be shown: cut as evidence, or the target's cap
        reply_chars = config.train.max_evidence_chars
        if config.target.max_tokens is not None:
            reply_chars = min(reply_chars, int(config.target.max_tokens * BYTES_PER_TOKEN))
        answers = [
            Rollout(i.env, i.key, prompt_text(self.envs[i.env].prompt(i)), "x" * reply_chars, 0, 0)
            for i in items
        ]
        batch = Minibatch(FAILURE, answers[: config.train.minibatch_size])
        budget = self.edit_budget.max_lr
        prompt, _ = fitted_prompt(self.reflector, skill, batch, buffer, budget, self.evidence)
        # no prompt: not even one attempt fits under max_prompt_tokens (every reflection fails)
        reflect_tokens = self.reflector.estimate_tokens(prompt) if prompt else 0
        train = config.train
        pool = [
            PoolEdit(Edit("append", "", ASSUMED_EDIT), first_seen=n)
            for n in range(
                most_minibatches(train.batch_size, train.minibatch_size, train.failure_only)
                * budget
            )
        ]
        pairs = [(a, a) for a in answers[:EXAMPLES_PER_OUTCOME]]
        classes = {name: list(pairs) for name in OUTCOMES}
        return FirstStep(
            rollout=target_tokens(items),
            gate=target_tokens(self.gate_items),
            eval=target_tokens(evaluation_items(self.envs, ev.split, ev.num_items)),
            reflect=reflect_tokens,
            merge=self.reflector.estimate_tokens(merge_prompt(skill, pool))
            if train.merge == "llm"
            else None,
            rank=self.reflector.estimate_tokens(
                rank_prompt(skill, pool, budget, self.edit_budget.is_autonomous)
            )
            if train.rank == "llm"
            else None,
            consolidate=self.reflector.estimate_tokens(
                consolidation_prompt(skill, config.consolidation.region, classes, self.evidence)
            ),
        )

    # ------------------------------------------------------------------ state

    def _check_resume(self, state: dict[str, Any]) -> list[Change]:
        """The settings the config in force changes against the run's; refuses (exit code 2)
        a state this honed cannot read and a change that cannot apply to the run."""
        check_format(state, self.run.state_path, STATE_FORMAT)
        before = state.get("config")
        if before is None and self.run.config_path.is_file():  # states written before it held it
            try:
                before = load_yaml(read_text(self.run.config_path), str(self.run.config_path))
            except HonedError:
                before = None
        changes = config_changes(before, self.config.model_dump(mode="json"))
        check_changes(
            changes,
            state["step"],
            steps_per_epoch=(state.get("steps_per_epoch"), self.steps_per_epoch),
            total_steps=self.total_steps,
        )
        return changes

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "step": self.step,
            "epochs_closed": self.epochs_closed,
            "current_version": self.current_version,
            "best_version": self.best_version,
            "epoch_start_version": self.epoch_start_version,
            "initial_scores": self.initial_scores.to_dict(),
            "current_scores": self.current_scores.to_dict(),
            "best_scores": self.best_scores.to_dict(),
            # "scheduler": the edit budget's position, under the name earlier runs wrote it
            "scheduler": self.edit_budget.state_dict(),
            "sampler": self.sampler.state_dict(),
            "buffer": self.buffer.state_dict(),
            # what the run has spent, for a person reading this file: a resumed run counts it
            # from the journal, whose length at this save is where its replay starts
            "usage": self.usage.state_dict(),
            "journal": {
                "offset": self._journal_offset(),
                "before": self._usage_before_journal,
            },
            "history": self.history,
            "versions": self.versions,
            # the settings this state was reached with, to say what a resume changes
            "config": self.config.model_dump(mode="json"),
            "steps_per_epoch": self.steps_per_epoch,
        }

    def _restore(self, state: dict[str, Any]) -> list[Change]:
        """Check a saved state against the config and load it; what changed. The state is plain
        data from a file, so a part missing or of the wrong shape is a damaged run, said in one
        line naming the file (exit 2), not a traceback."""
        try:
            changes = self._check_resume(state)
            self.load_state_dict(state)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            problem = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise HonedError(
                f"{self.run.state_path}: the skill loop's state cannot be restored "
                f"({type(exc).__name__}: {problem[:200]}); the run is damaged or was not "
                "written by honed"
            ) from None
        return changes

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the run's state; the edit budget keeps the config's settings and takes only
        its position, so later steps get the budgets the config in force gives them. The usage
        is counted from the journal (`_count_from_journal`), not from here."""
        self.step = state["step"]
        self.epochs_closed = state["epochs_closed"]
        self.current_version = state["current_version"]
        self.best_version = state["best_version"]
        self.epoch_start_version = state["epoch_start_version"]
        self.initial_scores = Scores(**state["initial_scores"])
        self.current_scores = Scores(**state["current_scores"])
        self.best_scores = Scores(**state["best_scores"])
        self.edit_budget.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        self.buffer.load_state_dict(state["buffer"])
        self.history = list(state["history"])
        saved = state.get("config")
        self._saved_config = dict(saved) if isinstance(saved, dict) else {}
        self.versions = list(state["versions"])

    # ------------------------------------------------------------------ the lifecycle's loop

    def done(self) -> bool:
        return self.step >= self.total_steps

    def after_step(self, record: dict[str, Any]) -> None:
        """Close the epoch when the step ended one. A budget cap met there leaves the step done
        and saved and the epoch open (a resumed run closes it): the run stops (`stop_reason`)."""
        if self._epoch_ends_now():
            self._close_epoch_within_budget()

    def _close_epoch_within_budget(self) -> None:
        """Close the epoch; a budget cap met there stops the run (`_budget_stop`) with the epoch
        left open, and the replies its end had received offered again to the resumed run."""
        mark = self._journal_offset()
        try:
            self.close_epoch()
        except BudgetStop as exc:
            self._budget_stop = Stop("budget", exc.reason, error=exc.error)
            self._journal_mark = mark

    def _journal_offset(self) -> int:
        """Where a resumed run's replay starts: the journal's end, or the start of an epoch's
        end that the budget cut short."""
        if self._journal_mark is not None:
            return self._journal_mark
        return 0 if self.journal is None else self.journal.size

    def checkpoint_due(self) -> bool:
        """Always: a step costs model calls, so its state is never recomputed."""
        return True

    def save(self) -> Path:
        self.run.write_state(self.state_dict())
        return self.run.state_path

    def saved(self) -> Path | None:
        return self.run.state_path if self.run.state_path.is_file() else None

    def describe(self, record: dict[str, Any]) -> str:
        return (
            f"v{self.current_version:04d} {record['outcome']}  "
            f"selection {self.gate.metric(self.current_scores):.3f}"
        )

    def _budget_has_room(self) -> bool:
        """Whether the config in force may let a run its budget stopped go on: a cap raised (or
        lifted), or a model's `max_tokens` or `price` changed (a request's worst case with it)."""
        saved = self._saved_config
        caps = saved.get("budget") if isinstance(saved.get("budget"), dict) else {}
        for key in ("max_tokens", "max_requests", "max_usd"):
            before, now = caps.get(key), getattr(self.config.budget, key)
            if before is not None and (now is None or now > before):
                return True
        now = self.config.model_dump(mode="json")
        for role in ("target", "reflector"):
            model = saved.get(role) if isinstance(saved.get(role), dict) else {}
            for key in ("max_tokens", "price"):
                if key in model and model[key] != now[role][key]:
                    return True
        return False

    def _persistent_stop(self) -> Stop | None:
        """A stop that holds until the config changes: a budget cap reached (or a request it had
        no room for, while the caps stay as they were), patience spent."""
        limits = self.config.budget.model_dump(include={"max_tokens", "max_requests", "max_usd"})
        spent = spent_reason(limits, self._spent())
        if spent is not None:
            return Stop("budget", spent)
        summary = self.run.read_summary()
        stopped = summary.get("stopped") or {}
        if (
            summary.get("steps") == self.step
            and stopped.get("kind") == "budget"
            and not self._budget_has_room()
        ):
            return Stop("budget", str(stopped.get("reason")))
        patience = self.config.train.patience
        waited = 0
        for record in reversed(self.history):
            if record["outcome"] == "accepted":
                break
            waited += 1
        if patience is not None and waited >= patience:
            return Stop(
                "patience",
                f"no candidate was accepted in the last {waited} steps (train.patience: "
                f"{patience})",
            )
        return None

    def agree_to_stop(self, requested: bool) -> bool:
        """`requested`: the skill loop runs in one process."""
        return requested

    def _skipped_stop(self) -> Stop | None:
        """`SKIPPED_STEPS_TO_STOP` skipped steps in a row, the last run by this process: the
        reflector's server needs a person (an error, at the run's last step too)."""
        if not self._last_step_skipped:
            return None
        skipped = 0
        for record in reversed(self.history):
            if record["outcome"] != "skipped":
                break
            skipped += 1
        if skipped < SKIPPED_STEPS_TO_STOP:
            return None
        return Stop(
            "reflector",
            f"every reflection failed in {skipped} steps in a row: the reflector server is "
            f"misbehaving (last problem: {self.history[-1]['reason']})",
            error=True,
        )

    def stop_reason(self) -> Stop | None:
        """Why the run must stop now (asked by the lifecycle before and after each step)."""
        return self._budget_stop or self._skipped_stop() or self._persistent_stop()

    # ------------------------------------------------------------------ skills

    def _save_version(self, doc: SkillDocument, scores: Scores, step: int, source: str) -> int:
        saved = self.run.skills.save(doc)
        self.versions.append(
            {
                "version": saved.number,
                "step": step,
                "source": source,
                "hash": saved.content_hash,
                "scores": scores.to_dict(),
                "metric": self.gate.metric(scores),
            }
        )
        return saved.number

    def _adopt(self, doc: SkillDocument, scores: Scores, step: int, source: str) -> None:
        """Make an accepted candidate the current skill, and the best one if it beats it."""
        self.current = doc
        self.current_scores = scores
        self.current_version = self._save_version(doc, scores, step, source)
        if self.gate.compare(self.best_scores, scores)[0]:
            self.best_scores = scores
            self.best_version = self.current_version
            atomic_write_text(self.run.claim(self.run.best_path), doc.text)

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        """One SkillOpt step, by name: take the step's edit budget, answer a batch with the
        current skill, reflect on its failures (and successes), merge and rank the proposed
        edits, apply the top ones within the budget, and let the gate decide on the candidate.
        Everything the step saw and decided is written to its step directory. A step whose
        every reflection failed is skipped: no candidate, nothing else asked.

        A request the `budget` has no room for stops the step where it is: what the step had
        done and spent is written to its directory (`outcome: stopped`), and the run stops
        without saving the step (`StopRun`), so `--resume` with a larger budget redoes it,
        taking what it had received from the journal."""
        step = self.step + 1
        usage_before = self.usage.usage()
        self._step_target = [0, 0]
        record: dict[str, Any] = {"step": step, "epoch": self._epoch_of(step)}
        files: dict[str, Any] = {}
        try:
            self._step(step, record, files)
        except BudgetStop as exc:
            record.update(outcome="stopped", reason=exc.reason)
            record.update(_usage_delta(usage_before, self.usage.usage()))
            files["step.json"] = record
            atomic_write_dir(
                self.run.claim(self.run.step_dir(step), tree=True),
                lambda tmp: _write_files(tmp, files),
            )
            raise StopRun(Stop("budget", exc.reason, error=exc.error)) from None
        record.update(_usage_delta(usage_before, self.usage.usage()))
        files["step.json"] = record
        atomic_write_dir(
            self.run.claim(self.run.step_dir(step), tree=True), lambda tmp: _write_files(tmp, files)
        )
        self.history.append(record)
        self.step = step
        return record

    def _step(self, step: int, record: dict[str, Any], files: dict[str, Any]) -> None:
        """The work of `train_step`, filling the step's `record` and `files` as it goes (so a
        step stopped half-way can still say what it had done)."""
        budget = self.edit_budget.step()
        record.update(budget=budget, autonomous=self.edit_budget.is_autonomous)
        rollouts = self._answer_batch(step)
        files["rollouts.json"] = [r.to_dict() for r in rollouts]
        batches, reflections = self._reflect(step, rollouts)
        failed = [r for r in reflections if r.error is not None]
        record["proposed"] = sum(len(r.edits) for r in reflections)
        files["proposed_edits.json"] = [r.to_dict() for r in reflections]
        if batches and len(failed) == len(reflections):
            reason = f"every reflection failed ({len(failed)}); last problem: {failed[-1].error}"
            log.warning("step %d skipped: %s", step, reason)
            verdict = _Verdict("skipped", reason, self.current_scores)
            record.update(pool=0, kept=0, applied=0, skipped=0, merge=None, rank=None)
            merge_dropped = 0
        else:
            verdict, merge_dropped = self._candidate(step, reflections, budget, record, files)
        self._last_step_skipped = verdict.outcome == "skipped"
        record.update(self._step_counts(rollouts, reflections, merge_dropped))
        record.update(self._verdict_record(verdict, rollouts, len(batches)))
        files["gate.json"] = verdict.to_dict(self.config.gate.split, len(self.gate_items))

    def _candidate(
        self,
        step: int,
        reflections: list[Reflection],
        budget: int,
        record: dict[str, Any],
        files: dict[str, Any],
    ) -> tuple[_Verdict, int]:
        """Merge and rank the proposals, apply the top ones, gate the candidate; fills the
        step's record and files, and gives the verdict and how many merged edits were dropped."""
        merged, ranking = self._merge_and_rank(step, reflections, budget)
        kept = [entry.edit for entry in ranking.kept]
        candidate, report = self._apply(step, kept, budget)
        verdict = self._gate(step, candidate, kept, report)
        self.buffer.add_patterns(step, reflections)
        record.update(
            pool=len(merged.pool),
            kept=len(kept),
            applied=report.applied,
            skipped=report.skipped,
            merge=merged.method,
            rank=ranking.method,
        )
        files.update(
            {
                "merged_edits.json": merged.to_dict(),
                "ranked_edits.json": {"budget": budget, **ranking.to_dict()},
                "candidate_skill.md": candidate.text,
                "apply_report.json": report.to_dict(),
            }
        )
        return verdict, len(merged.dropped)

    def _verdict_record(
        self, verdict: _Verdict, rollouts: list[Rollout], minibatches: int
    ) -> dict[str, Any]:
        batch = aggregate(rollouts)
        return {
            "outcome": verdict.outcome,
            "reason": verdict.reason,
            "version": self.current_version,
            "metric_before": self.gate.metric(verdict.before),
            "metric_after": None if verdict.decision is None else verdict.decision.metric_after,
            "train_hard": batch.hard,
            "train_soft": batch.soft,
            "minibatches": minibatches,
        }

    def _step_counts(
        self, rollouts: list[Rollout], reflections: list[Reflection], merge_dropped: int
    ) -> dict[str, Any]:
        """What the step lost to the servers, for its record: the target's fresh replies that
        failed or were cut, the reflections that failed, the attempts left out of reflection
        prompts, merged edits no proposal supports. Warns (once a run) when many replies were
        cut at the target's max_tokens."""
        fresh = _fresh(rollouts)
        truncated = sum(r.truncated for r in fresh if r.answered)
        answered = sum(r.answered for r in fresh)
        if (
            answered
            and truncated > TRUNCATED_SHARE_TO_WARN * answered
            and not self._warned_truncated
        ):
            self._warned_truncated = True
            log.warning(
                "step %d: %d of %d target replies were cut at max_tokens (%s); they are scored "
                "as given: raise %s",
                self.step + 1,
                truncated,
                answered,
                self.config.target.max_tokens,
                self.config.key("target.max_tokens"),
            )
        return {
            "target_replies": self._step_target[0],
            "target_failed": self._step_target[1],
            "target_truncated": truncated,
            "reflections_failed": sum(r.error is not None for r in reflections),
            "reflection_errors": [r.error for r in reflections if r.error is not None],
            "attempts_left_out": sum(r.left_out for r in reflections),
            "merge_dropped": merge_dropped,
        }

    def _answer_batch(self, step: int) -> list[Rollout]:
        """The step's training items answered with the current skill; the curriculum learns
        from their scores."""
        items = self.sampler.next_items(self.config.train.batch_size, self.step, self.total_steps)
        rollouts = self.runner.run(self.current, items, "rollout")
        self._check_target(rollouts, f"step {step} answered its batch")
        self.sampler.observe(_groups(rollouts, {(i.env, i.key): i for i in items}))
        return rollouts

    def _reflect(
        self, step: int, rollouts: list[Rollout]
    ) -> tuple[list[list[Rollout]], list[Reflection]]:
        """Minibatches of the answers (failures only, or failures and successes), and the
        reflector's proposed edits for each, given the step buffer."""
        train = self.config.train
        rng = random.Random(derive_seed(self.config.seed, "minibatches", step))
        batches = minibatches(rollouts, train.minibatch_size, train.failure_only, rng)
        reflections = reflect(
            self.reflector,
            self.current,
            batches,
            self.buffer,
            self.edit_budget.max_lr,
            self.evidence,
        )
        for r in reflections:
            if r.error is not None:
                log.warning(
                    "step %d: a reflection failed, its proposals are lost: %s", step, r.error
                )
        return batches, reflections

    def _merge_and_rank(
        self, step: int, reflections: list[Reflection], budget: int
    ) -> tuple[MergeResult, Ranking]:
        """The proposals deduplicated (and merged by the reflector with `merge: llm`),
        then ranked against the budget. A failed LLM merge or ranking falls back to the
        deterministic one, with a warning."""
        train = self.config.train
        pool = dedupe(reflections)
        merged = (
            llm_merge(self.reflector, self.current, pool)
            if train.merge == "llm"
            else MergeResult(pool, "deterministic")
        )
        ranking = rank(
            self.reflector,
            self.current,
            merged.pool,
            budget,
            self.edit_budget.is_autonomous,
            train.rank == "llm",
        )
        for what, method, problems in (
            ("merge", merged.method, merged.problems),
            ("ranking", ranking.method, ranking.problems),
        ):
            if "failed" in method:
                log.warning("step %d: %s fell back to %s: %s", step, what, method, problems)
        return merged, ranking

    def _apply(self, step: int, kept: list[Edit], budget: int) -> tuple[SkillDocument, ApplyReport]:
        """The candidate skill: the kept edits applied to the current one. Exceeding the budget
        is a bug in honed, never a user error, so it stops the run."""
        candidate, report = self.current.apply_edits(kept, self.config.skill.max_edit_chars)
        if len(kept) > budget or report.applied > budget:
            raise RuntimeError(
                f"step {step} would apply {report.applied} of {len(kept)} kept edits over a "
                f"budget of {budget}"
            )
        return candidate, report

    def _gate(
        self, step: int, candidate: SkillDocument, kept: list[Edit], report: ApplyReport
    ) -> _Verdict:
        """Score the candidate on the selection items and accept it (it becomes the current
        skill, and the best if it beats it) or reject it (its edits go to the step buffer). A
        candidate longer than `skill.max_chars` is rejected before the gate. Both skills are
        compared on the items both got answers for."""
        if candidate == self.current:
            reason = "no edit was applied" if not report.applied else "the edits changed nothing"
            return _Verdict("unchanged", reason, self.current_scores)
        limit = self.config.skill.max_chars
        if len(candidate.text) > limit:
            reason = (
                f"the candidate has {len(candidate.text)} characters, more than "
                f"skill.max_chars ({limit}); not scored"
            )
            self.buffer.add_rejected(
                step, kept, self.gate.metric(self.current_scores), None, reason
            )
            return _Verdict("rejected", reason, self.current_scores)
        _, before_rollouts = self.score(self.current, "gate")  # cached
        self._check_target(before_rollouts, f"step {step} scored the current skill")
        _, after_rollouts = self.score(candidate, "gate")
        self._check_target(after_rollouts, f"step {step} scored its candidate")
        before_rollouts, after_rollouts = _both_answered(before_rollouts, after_rollouts)
        before, after = aggregate(before_rollouts), aggregate(after_rollouts)
        decision = self.gate.decide(before, after)
        changed = _changed_items(before_rollouts, after_rollouts)
        if decision.accepted:
            self._adopt(candidate, after, step, "step")
            return _Verdict("accepted", decision.reason, before, decision, changed)
        self.buffer.add_rejected(
            step, kept, decision.metric_before, decision.metric_after, decision.reason
        )
        return _Verdict("rejected", decision.reason, before, decision, changed)

    # ------------------------------------------------------------------ epochs

    def _epoch_of(self, step: int) -> int:
        return (step - 1) // self.steps_per_epoch + 1

    def _epoch_ends_now(self) -> bool:
        if self.step == 0:
            return False
        at_boundary = self.step % self.steps_per_epoch == 0 or self.step == self.total_steps
        return at_boundary and self.epochs_closed < self._epoch_of(self.step)

    def close_epoch(self) -> None:
        epoch = self._epoch_of(self.step)
        if self.config.consolidation.enabled:
            self.consolidate(epoch)
        self.buffer.clear()
        self.epochs_closed = epoch
        self.epoch_start_version = self.current_version

    def consolidate(self, epoch: int) -> None:
        """Rewrite the protected guidance region from the epoch's outcomes, gated unless
        `consolidation.gated` is false. A target that failed on too many of the items (more
        than `target.max_failed_fraction`) costs this epoch's consolidation, with a warning."""
        consolidation = self.config.consolidation
        pool = [item for env in self.envs.values() for item in env.items("train")]
        rng = random.Random(derive_seed(self.config.seed, "consolidate", epoch))
        items = rng.sample(pool, min(consolidation.num_items, len(pool)))
        start = self.run.skills.load(self.epoch_start_version)
        before = self.runner.run(start, items, "consolidate_rollout")
        after = self.runner.run(self.current, items, "consolidate_rollout")
        fresh = _fresh(before) + _fresh(after)
        lost = [r for r in fresh if not r.answered]
        candidate = None
        if lost and len(lost) > self.config.target.max_failed_fraction * len(fresh):
            reason = f"{len(lost)} of {len(fresh)} target replies failed: {lost[-1].error}"
            log.warning("epoch %d: no consolidation, %s", epoch, reason)
            record: dict[str, Any] = {"epoch": epoch, "outcome": "failed", "reason": reason}
        else:
            result = propose(
                self.reflector, self.current, consolidation.region, before, after, self.evidence
            )
            record = {"epoch": epoch, **result.to_dict()}
            candidate = result.candidate
            record.update(self._judge_consolidation(candidate))
        record["version"] = self.current_version

        def fill(tmp: Path) -> None:
            atomic_write_json(tmp / "consolidation.json", record)
            if candidate is not None:
                atomic_write_text(tmp / "candidate_skill.md", candidate.text)

        atomic_write_dir(self.run.claim(self.run.consolidation_dir(epoch), tree=True), fill)

    def _judge_consolidation(self, candidate: SkillDocument | None) -> dict[str, Any]:
        """Adopt the consolidated skill if it passes the gate (or the gate is off for it); what
        happened, for `consolidation.json`."""
        if candidate is None or candidate == self.current:
            return {"outcome": "unchanged"}
        limit = self.config.skill.max_chars
        if len(candidate.text) > limit:
            return {
                "outcome": "rejected",
                "reason": f"{len(candidate.text)} characters, more than skill.max_chars ({limit})",
            }
        _, current = self.score(self.current, "gate")
        _, rollouts = self.score(candidate, "gate")
        current, rollouts = _both_answered(current, rollouts)
        after_scores = aggregate(rollouts)
        out: dict[str, Any] = {}
        if self.config.consolidation.gated:
            decision = self.gate.decide(aggregate(current), after_scores)
            out["decision"] = decision.to_dict()
            accepted = decision.accepted
        else:
            accepted = True
            out["scores"] = after_scores.to_dict()
        out["outcome"] = "accepted" if accepted else "rejected"
        if accepted:
            self._adopt(candidate, after_scores, self.step, "consolidation")
        return out

    # ------------------------------------------------------------------ the loop

    def _finished(self) -> bool:
        """Whether the run has done all its steps, or stopped for a budget or patience that the
        config in force still has, and written its summary. A run that did all its steps with
        its budget spent skipped the held-out evaluation: with a larger budget it is not done."""
        summary = self.run.read_summary()
        if summary.get("steps") != self.step:
            return False
        if self.step < self.total_steps:
            return self._persistent_stop() is not None
        stopped = summary.get("stopped") or {}
        return stopped.get("kind") != "budget" or self._persistent_stop() is not None

    def train(self, resume: bool = False) -> dict[str, Any]:
        """Run (or resume) the whole loop; the summary. A stop on an error (a misbehaving
        server) raises `RunStopped` once the summary is written."""
        if not self.setup(resume):
            return self.run.read_summary()
        with self.life.running():
            if self._epoch_ends_now():  # a resumed run that stopped right at an epoch's end
                self._close_epoch_within_budget()
                self.save()
            stop = self.life.steps(self, "skill steps", self.total_steps)
            if stop is None:  # the last step: asked here, as the lifecycle asks only before one
                stop = self._budget_stop or self._skipped_stop() or self._persistent_stop()
                if stop is not None and stop.kind == "patience":
                    stop = None  # the run ended at its last step, patience or not
            held_out, skipped, stop = self._held_out(stop)
            summary = self.life.close(self.summary(self.life.seconds, stop, held_out, skipped))
            if stop is not None and stop.error:
                raise RunStopped(stop, self.step, self.saved())
        return summary

    def evaluate(self, skill: SkillDocument) -> dict[str, float]:
        ev = self.config.eval
        items = evaluation_items(self.envs, ev.split, ev.num_items)
        rollouts = self.runner.run(skill, items, "eval")
        self._step_target = [0, 0]
        self._check_target(rollouts, f"evaluating on {ev.split}", in_step=False)
        return metrics(rollouts)

    def _held_out(self, stop: Stop | None) -> tuple[dict[str, Any], str | None, Stop | None]:
        """The held-out evaluation of the initial, best (and final) skills, or why it was
        skipped: a run stopped by its budget must not spend more, nor one stopped by a server
        that misbehaves; and the run's stop, which is the budget's when the evaluation meets
        a request the budget has no room for (what it received stays cached)."""
        if stop is not None and stop.kind != "patience":
            return (
                {},
                f"stopped ({stop.kind}): score best_skill.md with honed skills eval --run-dir",
                stop,
            )
        store = self.run.skills
        try:
            with self.reporter.status(
                f"evaluating the initial and best skills on {self.config.eval.split}"
            ):
                held_out = {
                    "initial": self.evaluate(store.load(1)),
                    "best": self.evaluate(store.load(self.best_version)),
                }
                if self.current_version != self.best_version:
                    held_out["final"] = self.evaluate(self.current)
        except BudgetStop as exc:
            skipped = (
                f"cut short by the budget ({exc.reason}): score best_skill.md with honed "
                "skills eval --run-dir (the answers received are in the run's cache)"
            )
            return {}, skipped, Stop("budget", exc.reason, error=exc.error)
        return held_out, None, stop

    def summary(
        self,
        seconds: float,
        stop: Stop | None = None,
        held_out: dict[str, Any] | None = None,
        skipped: str | None = None,
    ) -> dict[str, Any]:
        """The run's summary, with the held-out evaluation's results (`_held_out`)."""
        held_out = held_out or {}
        by_outcome: dict[str, list[int]] = {
            "accepted": [],
            "rejected": [],
            "unchanged": [],
            "skipped": [],
        }
        for record in self.history:
            by_outcome[record["outcome"]].append(record["step"])
        return {
            "steps": self.step,
            "epochs": self.epochs_closed,
            "steps_per_epoch": self.steps_per_epoch,
            "stopped": None if stop is None else stop.to_dict(self.step),
            "accepted_steps": by_outcome["accepted"],
            "rejected_steps": by_outcome["rejected"],
            "unchanged_steps": by_outcome["unchanged"],
            "skipped_steps": by_outcome["skipped"],
            "budget_per_step": [r["budget"] for r in self.history],
            "applied_per_step": [r["applied"] for r in self.history],
            "gate": {
                "mode": self.config.gate.mode,
                "split": self.config.gate.split,
                "items": len(self.gate_items),
            },
            "selection": {
                "initial": self.initial_scores.to_dict(),
                "best": self.best_scores.to_dict(),
                "final": self.current_scores.to_dict(),
            },
            "versions": self.versions,
            "best_version": self.best_version,
            "final_version": self.current_version,
            "best_skill": str(self.run.best_path),
            "eval_split": self.config.eval.split,
            "eval": held_out,
            "eval_skipped": skipped,
            "tokens": self.usage.usage(),
            "cache": {
                "entries": len(self.cache),
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "seconds": round(seconds, 1),
        }


def evaluate_skill(
    config: SkillsConfig,
    skill: SkillDocument,
    split: str,
    num_items: int | None,
    cache: RolloutCache,
    reporter: Reporter | None = None,
) -> dict[str, float]:
    """`honed skills eval`: the skill's scores on a split, per environment and kind. Checks the
    target server first; answers already in `cache` (a run's) cost nothing."""
    reporter = reporter or Reporter(enabled=False)
    envs = build_skill_envs(config)
    with ChatClient(config.target, max_reply_chars=config.train.max_stored_reply_chars) as client:
        client.check()
        runner = TargetRunner(client, envs, config.skill.preamble, cache)
        items = evaluation_items(envs, split, num_items)
        if not items:
            raise HonedError(f"no environment has items in the '{split}' split")
        with reporter.status(f"evaluating on {len(items)} {split} items"):
            rollouts = runner.run(skill, items, "eval")
        lost = [r for r in rollouts if not r.answered]
        if lost:
            log.warning(
                "%d of %d items got no answer and are left out of the scores: %s",
                len(lost),
                len(rollouts),
                lost[-1].error,
            )
        return metrics(rollouts)
