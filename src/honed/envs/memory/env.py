"""`MemoryEnv`: Mem-α's memory-construction task as a honed environment.

A rollout reads an instance's chunks in order. For every chunk the policy sees the memory's
description, the current memory and the chunk (`prompt.py`), generates once, and the calls in
its reply run in order against that rollout's memory; the chunk is one `Segment`. All rollouts
of all items advance together, one batched `generate` call per chunk index, with the seed of
(seed, item key, generation, chunk) so a rollout comes out the same in any batch. In the `chat`
prompt style each chunk is a one-turn episode of the multi-turn machinery
(`honed.envs.multiturn`): the prompt is the chat template's rendering with the official tools,
the reply its sampled ids, token-exact (as in the official code, every chunk starts from an empty
context; only the memory carries over). After the
last chunk the reader answers the questions from the final memory and the rewards are
computed (`rewards.py`).

Grouping, as in the paper: with `grouping="instance"` (default) every chunk segment carries
its own reward r_t, so the trainer normalises all chunk segments of the `num_generations`
rollouts of an instance as one GRPO group; with `grouping="trajectory"` segments carry no
reward and the trajectory's reward (the mean of its r_t) applies to all of them. Either way
`Trajectory.reward` is the mean chunk reward and `success` is r1 (evaluation's accuracy).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from statistics import mean
from typing import Any

from honed.envs.base import Generator, Table
from honed.envs.memory import baselines, paperdata
from honed.envs.memory.data import DataSpec, Instance, generate
from honed.envs.memory.diagnostics import (
    CallRecord,
    memory_step_metrics,
    segment_labels,
    written_shares,
)
from honed.envs.memory.extractive import ExtractiveReader
from honed.envs.memory.formats import CHUNK_TOKENS, load_data
from honed.envs.memory.parsing import parse_calls
from honed.envs.memory.prompt import (
    LABELS,
    PROMPT_CHARS,
    STYLES,
    Prompt,
    chat_messages,
    fit,
    render_prompt,
    shown_entries,
    visible_ids,
)
from honed.envs.memory.report import memory_report
from honed.envs.memory.retrieval import Chat, Reader, answer_scores_many, chat_model, make_reader
from honed.envs.memory.rewards import (
    COMPRESSION_WEIGHT,
    NO_CALL_CREDIT,
    VALIDITY_WEIGHT,
    ChunkOutcome,
    Judge,
    chunk_reward,
    compression,
    make_judge,
    tool_success,
    validity,
)
from honed.envs.memory.store import Memory, TokenCounter, ToolResult, word_tokens
from honed.envs.memory.tools import (
    DELETE,
    OFFICIAL_TOOL_SCHEMAS,
    ToolCall,
    chunk_sentences,
    execute,
    format_calls,
    official_call,
    quote_calls,
    resolve_quote,
)
from honed.envs.multiturn import ChatFormat, Episode, chat_format, run_episodes
from honed.errors import HonedError, did_you_mean, finite_number, positive_int, renamed_keys
from honed.types import (
    SPLITS,
    Group,
    Item,
    Message,
    Segment,
    Trajectory,
    derive_seed,
    prompt_text,
)

GROUPINGS = ("instance", "trajectory")
SFT_TARGETS = ("reference", "rule")
_DATA_ARGS = tuple(f.name for f in fields(DataSpec))


# The reward weights' names before (old -> new).
RENAMED_ARGS = {"beta": "compression_weight", "gamma": "validity_weight"}


def _reward_weights(
    env: str, data: dict[str, Any], compression_weight: float | None, validity_weight: float | None
) -> tuple[float, float]:
    """The chunk reward's weights of compression r3 and validity r4, defaults filled in.

    They were called `beta` and `gamma`, Mem-α's names, until the trainer's KL coefficient
    `beta` made one of them ambiguous; configs that still use the old names keep working: they
    arrive in `data` (the constructor's `**data`), are taken out of it here and renamed as
    config keys are (`renamed_keys`: one warning each, attributed to whoever built the env)."""
    given = {
        name: value
        for name, value in (
            ("compression_weight", compression_weight),
            ("validity_weight", validity_weight),
        )
        if value is not None
    }
    old = {name: data.pop(name) for name in RENAMED_ARGS if name in data}
    try:
        # stacklevel 3: _reward_weights, MemoryEnv.__init__, its caller
        weights = renamed_keys(
            {**old, **given}, RENAMED_ARGS, what="memory env argument", stacklevel=3
        )
    except ValueError as exc:
        raise HonedError(f"memory env {env!r}: {exc}") from None
    where = f"memory env {env!r}"
    return (
        finite_number(
            where, "compression_weight", weights.get("compression_weight", COMPRESSION_WEIGHT)
        ),
        finite_number(where, "validity_weight", weights.get("validity_weight", VALIDITY_WEIGHT)),
    )


def _unplanned(inst: Instance) -> Callable[[str], bool]:
    """What the rule skips when told the distractors: chatter, and every sentence the
    reference plan does not mention (neither writes, changes nor retracts with it). The rule
    built with it measures how much of the room above the rule is in leaving distractors out."""
    mentioned = inst.mentioned()
    return lambda sentence: paperdata.is_chatter(sentence) or sentence not in mentioned


def _check_choices(name: str, choices: Mapping[str, str], data: Mapping[str, Any]) -> None:
    """`choices` (`grouping`, `prompt_style`, `sft_target`, `labels`: their values) are known
    values; `data` (the constructor's `**data`) holds only `DataSpec`'s sizes."""
    options_of = {
        "grouping": GROUPINGS,
        "prompt_style": STYLES,
        "sft_target": SFT_TARGETS,
        "labels": LABELS,
    }
    for arg, value in choices.items():
        options = options_of[arg]
        if value not in options:
            raise HonedError(
                f"memory env {name!r}: {arg} {value!r}{did_you_mean(value, options)} is not one of "
                f"{', '.join(options)}"
            )
    for key in data:
        if key not in _DATA_ARGS:
            known = [*_DATA_ARGS, *inspect.signature(MemoryEnv).parameters]
            raise HonedError(
                f"memory env {name!r}: unknown argument {key!r}{did_you_mean(key, known)}"
            )


def _reader_and_judge(
    name: str, reader: str | Mapping[str, Any], judge: str, chat: Chat | Mapping[str, Any] | None
) -> tuple[Reader | ExtractiveReader, Judge]:
    """The reader that answers questions from a memory and the judge of its answers; the chat
    model they share is built (and its server checked) only when one of them is an LLM."""
    if "llm" in (reader, judge):
        chat = chat_model(chat, f"memory env {name!r}")
    built_reader = (
        ExtractiveReader()
        if reader == "extract"
        else make_reader(reader, chat, f"memory env {name!r}")  # type: ignore[arg-type]
    )
    return built_reader, make_judge(judge, chat)  # type: ignore[arg-type]


@dataclass
class _Run:
    """One rollout in progress: its memory and what each chunk's reply did."""

    memory: Memory
    prompts: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    outcomes: list[ChunkOutcome] = field(default_factory=list)
    calls: list[list[CallRecord]] = field(default_factory=list)  # per chunk, for diagnostics
    log: list[str] = field(default_factory=list)
    # per chunk: the chunk, the reply with its calls, the results and the memory after it
    turns: list[dict[str, Any]] = field(default_factory=list)


class MemoryEnv:
    """Read chunks, write a memory with tools, get scored on questions answered from it.

    Arguments (all optional): `grouping` ("instance" | "trajectory"), `compression_weight`
    (0.05) and `validity_weight` (0.1), the weights of compression r3 and validity r4 in the
    chunk reward (Mem-α's beta and gamma, renamed because the trainer's `beta` is the KL
    coefficient; `beta` and `gamma` still work, with a deprecation warning),
    `tool_success_weight` (1.0, the paper's: the weight of tool success r2), `compression_clip`
    (None: a floor for r3), `no_call_credit` (0.0, as the official code: r2/r4 of a clean empty reply), `reader`
    ("retrieval" | "llm", or `{type: llm, concurrency: N, chat: {...}}`: `retrieval.py`;
    "extract": `extractive.py`, one sentence chosen without the answer key),
    `judge` ("rule" | "llm"), `chat` (the chat model of the llm reader or
    judge: a `ChatModelConfig`-shaped mapping, `{base_url, model, api_key_env, ...}`, from which
    a `ChatClient` is built and checked before any work, or any object with
    `chat(messages) -> str`), `top_k` (entries per store retrieved per question; default 5 for
    honed's data, Mem-α's setting for its data: `retrieval.retrieval_defaults`),
    `core_tokens` (512), `count` (token counter, default word tokens), `recent` (5 entries of
    each store shown), `prompt_style` ("compact" | "full" | "chat": the official agent's prompt
    and tools through the policy's chat template, one token-exact turn per chunk), `prompt_chars` (the prompt budget:
    400 for compact, 8000 for full and chat, whose header alone is about 1500 characters),
    `max_prompt_tokens` (None: the budget in tokens of the policy's tokenizer instead; entry
    contents are cut to fit, ids never), `tool_format` ("auto": the `chat` style's call format,
    from the template), `memory_budget` (None: tokens the memory may hold, for instances that
    carry no `budget` of their own), `sft_target` ("reference": the warm-start imitates the
    reference plan; "rule": the rule baseline's inserts, `baselines.rule_calls`, which need no
    plan and leave what to skip, update and delete to the reward), `quote`
    (False: whether the reference plan, the warm-start's target, writes a content that is a
    sentence of the chunk as a quote of it, `"c": 2`; replies may quote either way), `labels`
    ("before" | "after": where the compact and full prompts put a sentence's number and an
    entry's id, before its text or after it, `prompt.render_prompt`), `path` (a
    file, a folder or `{split: file}` of real instances instead of generated ones), `format`
    (None: detected; `formats.FORMATS`), `chunk_tokens` (2048: chunk size for original
    MemoryAgentBench records), `long_context_tokens` (32768: the long-context baseline's
    window), and the data sizes of `DataSpec`
    (`train_size`, `validation_size`, `test_size`, `entities`, `facts`, `events`, `updates`,
    `relations`, `chatter`, `chatter_rate`).
    """

    def __init__(
        self,
        name: str = "memory",
        seed: int = 0,
        *,
        grouping: str = "instance",
        compression_weight: float | None = None,
        validity_weight: float | None = None,
        compression_clip: float | None = None,
        no_call_credit: float = NO_CALL_CREDIT,
        tool_success_weight: float = 1.0,
        reader: str | Mapping[str, Any] = "retrieval",
        judge: str = "rule",
        chat: Chat | Mapping[str, Any] | None = None,
        top_k: int | None = None,
        core_tokens: int = 512,
        count: TokenCounter = word_tokens,
        recent: int = 5,
        prompt_chars: int | None = None,
        max_prompt_tokens: int | None = None,
        prompt_style: str = "compact",
        tool_format: str = "auto",
        quote: bool = False,
        labels: str = "before",
        sft_target: str = "reference",
        memory_budget: int | None = None,
        path: str | Path | Mapping[str, str] | None = None,
        format: str | None = None,
        chunk_tokens: int = CHUNK_TOKENS,
        long_context_tokens: int = baselines.LONG_CONTEXT_TOKENS,
        **data: Any,
    ) -> None:
        """Long because each keyword is one of the environment's config arguments (the class
        docstring and docs/memory.md say what each means), checked and stored here in one
        place."""
        weights = _reward_weights(name, data, compression_weight, validity_weight)
        _check_choices(
            name,
            {
                "grouping": grouping,
                "prompt_style": prompt_style,
                "sft_target": sft_target,
                "labels": labels,
            },
            data,
        )
        self.name = name
        self.seed = seed
        self.grouping = grouping
        self.compression_weight, self.validity_weight = weights
        where = f"memory env {name!r}"
        self.compression_clip = (
            None
            if compression_clip is None
            else finite_number(where, "compression_clip", compression_clip)
        )
        self.no_call_credit = finite_number(where, "no_call_credit", no_call_credit)
        self.tool_success_weight = finite_number(where, "tool_success_weight", tool_success_weight)
        self.reader, self.judge = _reader_and_judge(name, reader, judge, chat)
        self.top_k = top_k
        self.core_tokens = core_tokens
        self.count = count
        self.recent, self.prompt_style = recent, prompt_style
        self.quote, self.sft_target, self.labels = quote, sft_target, labels
        self.tool_format = tool_format
        self.prompt_chars = prompt_chars or PROMPT_CHARS[prompt_style]
        for arg, value in (
            ("max_prompt_tokens", max_prompt_tokens),
            ("memory_budget", memory_budget),
        ):
            if value is not None:
                positive_int(where, arg, value)
        self.max_prompt_tokens = max_prompt_tokens
        self.memory_budget = memory_budget
        self._count_prompt: TokenCounter | None = None
        self.path = path
        self.format, self.chunk_tokens = format, chunk_tokens
        self.long_context_tokens = long_context_tokens
        self.spec = DataSpec(**data)  # type: ignore[arg-type]
        self.spec.check()
        self._items: dict[str, list[Item]] = {}

    # -- items -----------------------------------------------------------------------------

    def items(self, split: str) -> Sequence[Item]:
        if split not in SPLITS:
            raise HonedError(
                f"memory env {self.name!r}: unknown split {split!r}{did_you_mean(split, SPLITS)}"
            )
        if not self._items:
            if self.path is not None:
                path = dict(self.path) if isinstance(self.path, Mapping) else self.path
                by_split = load_data(path, self.format, self.count, self.chunk_tokens)
            else:
                make = paperdata.generate if self.spec.synthetic == "paper" else generate
                by_split = {s: make(s, self.spec, self.seed) for s in SPLITS}
            self._items = {
                s: [Item(inst.id, self.name, inst.to_dict()) for inst in instances]
                for s, instances in by_split.items()
            }
        return self._items[split]

    def instances(self, split: str) -> list[Instance]:
        return [Instance.from_dict(item.data) for item in self.items(split)]

    # -- rollout ---------------------------------------------------------------------------

    def rollout(
        self,
        items: Sequence[Item],
        generator: Generator,
        num_generations: int,
        seed: int,
        first_generation: int = 0,
    ) -> list[Group]:
        """One group per item: generations `first_generation`, ... of each, every chunk's turn
        seeded from (seed, item, generation, chunk) as in the whole group."""
        self._bind(generator)
        chat = None
        if self.prompt_style == "chat":
            chat = chat_format(
                generator, f"memory env {self.name!r}", OFFICIAL_TOOL_SCHEMAS, self.tool_format
            )
        instances = [Instance.from_dict(item.data) for item in items]
        runs = [[self._memory_run(inst) for _ in range(num_generations)] for inst in instances]
        for t in range(max((len(inst.chunks) for inst in instances), default=0)):
            batch = [
                (i, g)
                for i, inst in enumerate(instances)
                if t < len(inst.chunks)
                for g in range(num_generations)
            ]
            seeds = [derive_seed(seed, items[i].key, first_generation + g, t) for i, g in batch]
            jobs = [(runs[i][g].memory, instances[i].chunks[t]) for i, g in batch]
            if chat is None:
                prompts = [self._prompt(memory, chunk).text for memory, chunk in jobs]
                samples = generator.generate(prompts, seeds)
                turns = [(p, s.text, s.segment()) for p, s in zip(prompts, samples, strict=True)]
            else:
                turns = self._chat_turns(chat, generator, jobs, seeds)
            for (i, g), (prompt, text, segment) in zip(batch, turns, strict=True):
                self._step(runs[i][g], instances[i].chunks[t], prompt, text, segment)
        # every rollout's questions in one reader call: an LLM reader's requests run concurrently
        cases = [
            (run.memory, inst.questions, inst.source)
            for inst, rs in zip(instances, runs, strict=True)
            for run in rs
        ]
        scores = iter(answer_scores_many(cases, self.reader, self.top_k))
        return [
            Group(
                self.name,
                item.key,
                [self._trajectory(inst, run, next(scores)) for run in item_runs],
                level=item.level,
            )
            for item, inst, item_runs in zip(items, instances, runs, strict=True)
        ]

    def _memory(self, inst: Instance) -> Memory:
        """An empty memory with the instance's budget (else the environment's)."""
        budget = inst.budget if inst.budget is not None else self.memory_budget
        return Memory(self.core_tokens, self.count, budget)

    def _memory_run(self, inst: Instance) -> _Run:
        return _Run(self._memory(inst))

    def _bind(self, holder: object) -> None:
        """Count prompt tokens with the policy's tokenizer (`max_prompt_tokens`); `holder` is
        the policy, or a generator that has one."""
        if self.max_prompt_tokens is None:
            return
        policy = getattr(holder, "policy", holder)
        tokenizer = getattr(policy, "tokenizer", None)
        if tokenizer is None:
            raise HonedError(
                f"memory env {self.name!r}: max_prompt_tokens counts the policy's tokens, but "
                f"{type(holder).__name__} has no tokenizer; use prompt_chars instead"
            )
        encode = getattr(policy, "encode", None)
        if callable(encode):
            self._count_prompt = lambda text: len(encode(text))
        else:
            self._count_prompt = lambda text: len(tokenizer(text)["input_ids"])

    def __getstate__(self) -> dict[str, Any]:
        # the prompt counter closes over a policy: a Ray worker binds its own at rollout
        return {**self.__dict__, "_count_prompt": None}

    def _prompt(self, memory: Memory, chunk: str) -> Prompt:
        if self.max_prompt_tokens is not None and self._count_prompt is None:
            raise HonedError(
                f"memory env {self.name!r}: max_prompt_tokens needs the policy's tokenizer "
                "before a prompt is rendered (rollout and warm-start give it)"
            )
        return render_prompt(
            memory,
            chunk,
            self.prompt_style,
            self.recent,
            self.prompt_chars,
            numbered=self.quote,
            labels=self.labels,
            max_tokens=self.max_prompt_tokens,
            count=self._count_prompt,
        )

    def _chat_messages(self, memory: Memory, chunk: str, chat: ChatFormat) -> list[Message]:
        """The `chat` style's messages for one chunk, entry contents cut to fit the budget
        (`max_prompt_tokens` of the templated prompt, else `prompt_chars` of its text)."""
        if self.max_prompt_tokens is not None:
            budget = self.max_prompt_tokens
            fits = lambda m: len(chat.prompt_ids(m)) <= budget  # noqa: E731
        else:
            fits = lambda m: len(chat.render(m, True)) <= self.prompt_chars  # noqa: E731
        return fit(
            lambda cap: chat_messages(memory, chunk, self.recent, cap),
            fits,
            shown_entries(memory, self.recent),
        )

    def _chat_turns(
        self,
        chat: ChatFormat,
        generator: Generator,
        jobs: list[tuple[Memory, str]],
        seeds: list[int],
    ) -> list[tuple[str, str, Segment]]:
        """One reply per (memory, chunk) through the multi-turn machinery: the prompt rendered
        by the chat template with the official tools, one turn, token-exact (`Episode`)."""
        episodes = []
        for memory, chunk in jobs:
            messages = self._chat_messages(memory, chunk, chat)
            episodes.append(Episode(messages, chat.prompt_ids(messages)))
        run_episodes(
            episodes,
            generator,  # type: ignore[arg-type]  # chat_format checked it is a ChatGenerator
            chat,
            lambda k, _turn: seeds[k],
            lambda took: [None] * len(took),  # the chunk's reply is its only turn
            max_turns=1,
        )
        return [
            (prompt_text(e.prompt), e.turns[0].text if e.turns else "", e.segment())
            for e in episodes
        ]

    def _step(self, run: _Run, chunk: str, prompt: str, text: str, segment: Segment) -> None:
        """Run one chunk's reply against the rollout's memory and judge what it wrote."""
        parsed = parse_calls(text)
        outcome = ChunkOutcome(parse_failed=parsed.failed)
        records: list[CallRecord] = []
        sentences = chunk_sentences(chunk)
        for call in parsed.calls:
            resolved = resolve_quote(call, sentences)
            if isinstance(resolved, str):
                outcome.results.append(ToolResult(False, resolved))
                records.append(CallRecord(None, False))
                continue
            call = resolved
            result = execute(run.memory, call)
            outcome.results.append(result)
            record = CallRecord(result.store, result.ok)
            if result.ok and call.name != DELETE and result.written is not None:
                others = run.memory.others(result.store, result.memory_id)
                verdict = self.judge.validity(result.store, result.written, others)
                record.wrote, record.verdict = True, verdict
                record.memory_id, record.content = result.memory_id, result.written
                if verdict is None:
                    outcome.judge_errors += 1
                else:
                    outcome.verdicts.append(verdict)
            records.append(record)
        run.calls.append(records)
        run.prompts.append(prompt)
        run.segments.append(segment)
        run.outcomes.append(outcome)
        said = (
            "parse failure"
            if parsed.failed
            else "; ".join(r.message for r in outcome.results) or "no calls"
        )
        run.log.append(f"chunk: {chunk}\n> {text}\n= {said}")
        run.turns += [
            {"role": "user", "content": chunk},
            {
                "role": "assistant",
                "content": text,
                "segment": len(run.segments) - 1,
                "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in parsed.calls],
            },
            {"role": "tool", "content": said, "memory": run.memory.to_dict()},
        ]

    def _trajectory(self, inst: Instance, run: _Run, scores: list[float | None]) -> Trajectory:
        scored = [s for s in scores if s is not None]
        r1 = mean(scored) if scored else 0.0
        memory_tokens = run.memory.tokens()
        input_tokens = sum(self.count(c) for c in inst.chunks)
        r3 = compression(memory_tokens, input_tokens, self.compression_clip)
        r2s = [tool_success(o, self.no_call_credit) for o in run.outcomes]
        r4s = [validity(o, self.no_call_credit) for o in run.outcomes]
        rewards = [
            chunk_reward(
                r1,
                r2,
                r3,
                r4,
                self.compression_weight,
                self.validity_weight,
                self.tool_success_weight,
            )
            for r2, r4 in zip(r2s, r4s, strict=True)
        ]
        per_chunk = self.grouping == "instance"
        shares = written_shares(inst, run.calls) if inst.plan else {}
        return Trajectory(
            segments=[
                replace(s, reward=r if per_chunk else None)
                for s, r in zip(run.segments, rewards, strict=True)
            ],
            reward=mean(rewards),
            success=r1,
            components={
                "accuracy": r1,
                "tool_success": mean(r2s),
                "compression": r3,
                "validity": mean(r4s),
                "memory_tokens": float(memory_tokens),
                "input_tokens": float(input_tokens),
                "parse_failures": float(sum(o.parse_failed for o in run.outcomes)),
                "calls": float(sum(len(o.results) for o in run.outcomes)),
                "judge_errors": float(sum(o.judge_errors for o in run.outcomes)),
                "reader_errors": float(len(scores) - len(scored)),
                **shares,
            },
            prompt_text=run.prompts[0] if run.prompts else "",
            completion_text="\n\n".join(run.log),
            info={
                "instance": inst.id,
                "source": inst.source,
                "memory": run.memory.to_dict(),
                "chunk_rewards": rewards,
                "answers": scores,
                "turns": run.turns,
                "calls": [[c.to_dict() for c in chunk] for chunk in run.calls],
                "store_tokens": run.memory.store_tokens(),
                "segment_labels": segment_labels(run.calls, run.memory, inst.questions, scores),
            },
        )

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """Per-store tool success, validity, writes and tokens, and the share of chunk
        positions whose rewards spread (`diagnostics.py`)."""
        return memory_step_metrics(self.name, groups)

    # -- reference solution ----------------------------------------------------------------

    def sft_examples(self, item: Item) -> list[tuple[str, str]]:
        """(prompt, target calls) per chunk, prompts built from the memory the target builds
        (`sft_target`: the reference plan, or the rule's inserts).

        Empty for the reference target on data without a reference plan (JSONL files), and for
        the `chat` style, whose references are token sequences of the policy's chat template
        (`sft_sequences`).
        """
        if self.prompt_style == "chat":
            return []
        inst = Instance.from_dict(item.data)
        return [
            (self._prompt(memory, chunk).text, format_calls(shown, self.prompt_style))
            for memory, chunk, shown in self._replay(inst, self.sft_target)[0]
        ]

    def sft_sequences(
        self, item: Item, policy: Any
    ) -> list[tuple[list[int], list[int], list[int]]]:
        """The reference replies as token ids of `policy` (prompt ids, reply ids, mask), whose
        tokenizer also measures the prompt budget (`max_prompt_tokens`), as in rollouts. In the
        `chat` style the prompt and the reply (its calls as the official agent names them) are
        the chat template's own rendering, with the official tools."""
        self._bind(policy)
        inst = Instance.from_dict(item.data)
        if self.prompt_style != "chat":
            out = []
            for prompt, target in self.sft_examples(item):
                ids = policy.encode_target(target)
                out.append((policy.encode(prompt), ids, [1] * len(ids)))
            return out
        chat = ChatFormat(
            policy.tokenizer, policy.end_of_turn_id, OFFICIAL_TOOL_SCHEMAS, self.tool_format
        )
        out = []
        for memory, chunk, calls in self._replay(inst, self.sft_target)[0]:
            messages = self._chat_messages(memory, chunk, chat)
            reply: Message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": official_call(c)} for c in calls],
            }
            ids = chat.assistant_ids(messages, reply)
            out.append((chat.prompt_ids(messages), ids, [1] * len(ids)))
        return out

    def reference_memory(self, item: Item) -> Memory:
        """The memory the reference plan builds (what a perfect warm-start would write)."""
        return self._replay(Instance.from_dict(item.data))[1]

    def _replay(
        self, inst: Instance, target: str = "reference"
    ) -> tuple[list[tuple[Memory, str, list[ToolCall]]], Memory]:
        """The reference plan (or, `target="rule"`, the rule's inserts) run against a memory:
        per chunk, the memory before it (a copy), the chunk and the calls as written (quotes
        when `quote`), and the memory it leaves. The ids an update can target are those a
        prompt shows, which do not depend on the prompt budget."""
        memory = self._memory(inst)
        if target == "reference" and inst.plan is None:
            return [], memory
        steps = []
        for t, chunk in enumerate(inst.chunks):
            if target == "rule":
                calls = baselines.rule_calls(chunk)
            else:
                visible = visible_ids(memory, self.recent)
                calls = [c for op in inst.plan[t] if (c := op.call(memory, visible)) is not None]
            shown = quote_calls(calls, chunk_sentences(chunk)) if self.quote else calls
            steps.append((Memory.from_dict(memory.to_dict(), self.count), chunk, shown))
            for call in calls:
                execute(memory, call)
        return steps, memory

    # -- evaluation ------------------------------------------------------------------------

    def baselines(self, split: str = "test") -> list[baselines.BaselineResult]:
        """The memory-free baselines, the rules, and the reference plan's memory when the data
        has one."""
        return self.baselines_on(self.items(split))

    def baselines_on(self, items: Sequence[Item]) -> list[baselines.BaselineResult]:
        instances = [Instance.from_dict(item.data) for item in items]
        results = baselines.run_baselines(
            instances, self.reader, count=self.count, long_context_tokens=self.long_context_tokens
        )
        rules = [
            baselines.rule_memory(
                i, core_tokens=self.core_tokens, count=self.count, budget=self.memory_budget
            )
            for i in instances
        ]
        results.append(
            baselines.memories_result("rule", instances, rules, self.reader, self.top_k, self.count)
        )
        results += baselines.rule_results(instances, self.reader, self.top_k, self.count)
        planned = [inst for inst in instances if inst.plan is not None]
        if planned:
            told = [
                baselines.rule_memory(
                    i,
                    chatter=_unplanned(i),
                    core_tokens=self.core_tokens,
                    count=self.count,
                    budget=self.memory_budget,
                )
                for i in planned
            ]
            memories = [self._replay(inst)[1] for inst in planned]
            results += [
                baselines.memories_result(
                    "rule, told the distractors", planned, told, self.reader, self.top_k, self.count
                ),
                baselines.memories_result(
                    "reference plan", planned, memories, self.reader, self.top_k, self.count
                ),
            ]
        return results

    def report(
        self,
        agents: Mapping[str, Generator],
        split: str = "test",
        num_items: int | None = None,
        seed: int = 0,
    ) -> Table:
        """Baselines and agents side by side on the same items (see `report.py`); the last
        agent's policy also writes the MemAgent-style rolling memory."""
        items = list(self.items(split))[:num_items]
        runs = {
            label: [g.trajectories[0] for g in self.rollout(items, generator, 1, seed)]
            for label, generator in agents.items()
        }
        rows = self.baselines_on(items)
        if agents:
            label, generator = list(agents.items())[-1]
            instances = [Instance.from_dict(item.data) for item in items]
            rows.append(
                baselines.rolling_memory(
                    instances, self.reader, generator, label, count=self.count, seed=seed
                )
            )
        return memory_report(rows, runs, len(items))
