"""What a step's memory rollouts say about why GRPO moves the writer where it does.

Per store (core, semantic, episodic): the share of calls that succeeded (r2's parts), the mean
verdict on what was written (r4's parts), writes per rollout and the tokens each store holds at
the end. Per step: the share of chunk positions (an instance's chunk t across its rollouts)
whose rewards spread, the only positions GRPO can learn the chunk's choice from.

Each write is also labelled for the trainer (`Trajectory.info["segment_labels"]`, one mapping
of label to count per segment): `answering_writes` are writes whose entry is still in the final
memory as written and holds a gold answer of a question the reader got (score > 0),
`other_writes` every other successful insert or update; a chunk without either counts once as
`no_write`. The trainer logs the mean advantage per label (`advantage/<env>/<label>`), so a
step that pays writes which later answer nothing more than those which do shows in the curves.

On data with a reference plan, each rollout also says which kinds of sentence it wrote
(`written_shares`): the share of the instance's fact sentences, distractors and chatter it
wrote verbatim. That measures reading without the reader's noise: a writer can score like the
rule by writing a random half of every kind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from honed.envs.memory.data import Instance, Question
from honed.envs.memory.paperdata import is_chatter
from honed.envs.memory.store import CORE, STORES, Memory
from honed.envs.memory.tools import chunk_sentences
from honed.types import Group

ANSWERING, OTHER, NO_WRITE = "answering_writes", "other_writes", "no_write"
FACTS, DISTRACTORS, CHATTER = "facts", "distractors", "chatter"
SENTENCE_KINDS = (FACTS, DISTRACTORS, CHATTER)


@dataclass
class CallRecord:
    """One call of a chunk's reply: its store (None when it named none), whether it succeeded,
    whether it wrote (an insert or update), the entry it wrote, and the judge's verdict."""

    store: str | None
    ok: bool
    wrote: bool = False
    memory_id: str | None = None
    content: str | None = None
    verdict: float | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _kept(call: CallRecord, memory: Memory) -> bool:
    """Whether the entry a write made is still in `memory` with the text it wrote."""
    if call.store == CORE:
        return memory.core == call.content
    if call.store is None or call.memory_id is None:
        return False
    return memory.entries[call.store].get(call.memory_id) == call.content


def segment_labels(
    calls: Sequence[Sequence[CallRecord]],
    memory: Memory,
    questions: Sequence[Question],
    scores: Sequence[float | None],
) -> list[dict[str, int]]:
    """Per chunk, its writes counted as answering or not (`no_write` when it made none)."""
    answered = [
        answer.lower()
        for q, s in zip(questions, scores, strict=True)
        if s
        for answer in q.answers
        if answer.strip()
    ]
    out = []
    for chunk in calls:
        labels: dict[str, int] = {}
        for call in chunk:
            if not (call.ok and call.wrote):
                continue
            text = (call.content or "").lower()
            useful = _kept(call, memory) and any(a in text for a in answered)
            key = ANSWERING if useful else OTHER
            labels[key] = labels.get(key, 0) + 1
        out.append(labels or {NO_WRITE: 1})
    return out


def written_shares(inst: Instance, calls: Sequence[Sequence[CallRecord]]) -> dict[str, float]:
    """Of the instance's fact sentences (those the plan inserts or updates with), distractors
    (neither chatter nor mentioned by the plan) and chatter, the share this rollout wrote, a
    sentence counting when a successful write of its chunk holds it verbatim (as a quote
    does). A retraction (a delete's sentence) is none of them; a kind the instance lacks
    counts 0 of 0 as 0."""
    facts = {op.content for ops in inst.plan or [] for op in ops if op.op != "delete"}
    mentioned = inst.mentioned()
    present = dict.fromkeys(SENTENCE_KINDS, 0)
    written = dict.fromkeys(SENTENCE_KINDS, 0)
    for chunk, records in zip(inst.chunks, calls, strict=False):
        wrote = {(r.content or "").strip().rstrip(".") for r in records if r.ok and r.wrote}
        for sentence in chunk_sentences(chunk):
            if sentence in facts:
                kind = FACTS
            elif is_chatter(sentence):
                kind = CHATTER
            elif sentence not in mentioned:
                kind = DISTRACTORS
            else:
                continue
            present[kind] += 1
            written[kind] += sentence in wrote
    return {f"{k}_written": written[k] / max(present[k], 1) for k in SENTENCE_KINDS}


def memory_step_metrics(env: str, groups: Sequence[Group]) -> dict[str, float]:
    """Per-store success, validity, writes and tokens, and the share of chunk positions with
    reward spread, for one environment's groups (`memory/<env>/...`).

    `accuracy_spread` is the share of groups whose rollouts' accuracy (r1) differs. A group
    whose rollouts answer alike still spreads on tool success, compression or validity, and
    group-scaled advantages (`scale_rewards: group`) give those small differences the same
    weight as a question answered: where this share is low, most of a step's gradient is about
    them, not about what the reader answers."""
    calls: dict[str, list[float]] = defaultdict(list)
    verdicts: dict[str, list[float]] = defaultdict(list)
    writes: dict[str, float] = defaultdict(float)
    tokens: dict[str, float] = defaultdict(float)
    rollouts = 0
    positions = spread = answers_spread = 0
    for group in groups:
        for traj in group.trajectories:
            rollouts += 1
            for chunk in traj.info.get("calls", ()):
                for call in chunk:
                    store = call["store"]
                    if store is None:
                        continue
                    calls[store].append(float(call["ok"]))
                    if call["ok"] and call["wrote"]:
                        writes[store] += 1
                        if call["verdict"] is not None:
                            verdicts[store].append(call["verdict"])
            for store, count in traj.info.get("store_tokens", {}).items():
                tokens[store] += count
        chunk_rewards = [t.info.get("chunk_rewards", []) for t in group.trajectories]
        for t in range(max((len(r) for r in chunk_rewards), default=0)):
            values = [r[t] for r in chunk_rewards if t < len(r)]
            positions += 1
            spread += max(values) - min(values) > 1e-9
        accuracies = [t.components.get("accuracy", 0.0) for t in group.trajectories]
        answers_spread += max(accuracies, default=0.0) - min(accuracies, default=0.0) > 1e-9
    out: dict[str, float] = {}
    for store in STORES:
        head = f"memory/{env}/{store}"
        if calls[store]:
            out[f"{head}/tool_success"] = mean(calls[store])
        if verdicts[store]:
            out[f"{head}/validity"] = mean(verdicts[store])
        out[f"{head}/writes"] = writes[store] / max(rollouts, 1)
        out[f"{head}/tokens"] = tokens[store] / max(rollouts, 1)
    if positions:
        out[f"memory/{env}/chunk_spread"] = spread / positions
    if groups:
        out[f"memory/{env}/accuracy_spread"] = answers_spread / len(groups)
    return out
