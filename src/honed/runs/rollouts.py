"""A bounded sample of each GRPO step's rollouts in the run directory, for `honed view`.

    rollouts/step_000012.json    one file per step, written atomically

Each file holds the first `logging.rollouts_per_step` groups of the step as the trainer saw
them (built by `honed.rl.rollout_log`: prompt, completions, reward components, advantages,
filtered groups, and for multi-turn or memory environments the conversation turn by turn)
and a snapshot of every environment's curriculum (item difficulty histogram, bin counts and
sampling probabilities). A file never exceeds `logging.rollouts_max_bytes`: texts are cut
(head and tail kept, the cut said in the text) until it fits, then trailing groups are left
out, and the record says what was cut. On resume, files of steps after the checkpoint are
removed with the other logs (`RunDir.truncate_logs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from honed.runs.files import atomic_write_text

FORMAT = 1
FOLDER = "rollouts"
STEP_FILE = re.compile(r"^step_(\d{6,})\.json$")
# Texts are cut to this many characters first; the cap halves until the record fits.
TEXT_CHARS = 4_000
MIN_TEXT_CHARS = 64
HISTOGRAM_BINS = 10


def step_file(step: int) -> str:
    """The file name of a step's record; names sort in step order."""
    return f"step_{step:06d}.json"


def step_of(name: str) -> int | None:
    """The step a record's file name is for, or None for any other name."""
    m = STEP_FILE.match(name)
    return int(m.group(1)) if m else None


def cut_text(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and tail with the number cut in between, so
    a reader sees how a long completion starts and how it ends."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}\n… [{len(text) - head - tail} characters cut] …\n{text[-tail:]}"


def _cut_strings(value: Any, limit: int) -> tuple[Any, int]:
    """A copy of a JSON value with every string cut to `limit`; and how many were cut."""
    if isinstance(value, str):
        out = cut_text(value, limit)
        return out, int(out is not value)
    if isinstance(value, list):
        pairs = [_cut_strings(v, limit) for v in value]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    if isinstance(value, dict):
        out, count = {}, 0
        for k, v in value.items():
            out[k], n = _cut_strings(v, limit)
            count += n
        return out, count
    return value, 0


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"


def fit(record: dict[str, Any], max_bytes: int) -> str:
    """`record` as JSON text of at most `max_bytes` bytes (UTF-8).

    Texts are cut to `TEXT_CHARS`, then to half as much, and so on down to `MIN_TEXT_CHARS`;
    if it still does not fit, groups are left out from the end. `cut` in the record says how
    many texts were cut, to how many characters, and how many groups were left out.
    """
    groups = list(record.get("groups", []))
    limit = TEXT_CHARS
    while True:
        body, cut = _cut_strings({**record, "groups": groups}, limit)
        body["cut"] = {"texts": cut, "text_chars": limit, "groups_left_out": 0}
        text = _dumps(body)
        if len(text.encode("utf-8")) <= max_bytes or limit <= MIN_TEXT_CHARS:
            break
        limit //= 2
    left_out = 0
    while len(text.encode("utf-8")) > max_bytes and groups:
        groups.pop()
        left_out += 1
        body, cut = _cut_strings({**record, "groups": groups}, limit)
        body["cut"] = {"texts": cut, "text_chars": limit, "groups_left_out": left_out}
        text = _dumps(body)
    return text


def write_step(path: Path, record: dict[str, Any], max_bytes: int) -> None:
    """Write one step's record to `path` (`RunDir.rollouts_path(step)`, confined to the run)
    atomically, within `max_bytes`."""
    atomic_write_text(path, fit({"format": FORMAT, **record}, max_bytes))


class Curriculum(Protocol):
    """What the snapshot reads of a curriculum (`honed.sampling.CurriculumScheduler`)."""

    def item_keys(self) -> list[str]: ...

    def get_item_difficulty(self, item_key: str) -> float | None: ...

    def bin_probabilities(self, current_step: int = 0, total_steps: int = 1000) -> list[float]: ...


def histogram(values: Iterable[float], bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Counts of `values` in equal-width bins over [0, 1], widened to their range when some
    fall outside (scores that are rewards rather than success rates)."""
    values = list(values)
    lo = min([0.0, *values])
    hi = max([1.0, *values])
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"edges": [lo + i * width for i in range(bins + 1)], "counts": counts}


def curriculum_snapshot(
    curricula: Mapping[str, Curriculum], step: int, total_steps: int
) -> dict[str, Any]:
    """Per environment: the difficulty histogram of the items scored so far, how many are
    still unseen, and each difficulty bin's probability of being drawn at this step (the
    items per bin are in the metrics, `curriculum/<env>/bin_<i>_count`)."""
    out: dict[str, Any] = {}
    for env, curriculum in curricula.items():
        keys = curriculum.item_keys()
        scores = [curriculum.get_item_difficulty(k) for k in keys]
        seen = [s for s in scores if s is not None]
        out[env] = {
            "difficulty": histogram(seen),
            "items": len(keys),
            "unseen": len(keys) - len(seen),
            "bin_probabilities": curriculum.bin_probabilities(step, total_steps),
        }
    return out
