"""A run's `metrics.jsonl` as the viewer serves it: whole, or only the rows after those a page
already has, so that a page polling a running run gets its new points without reading the
file again from the start.

The supervised warm-start's `warmstart.jsonl` comes first in the same stream, its keys under
`warmstart/` and each row marked `"phase": "warmstart"`: its steps count warm-start batches, not
GRPO steps, and its rows carry neither `time` nor `sampling/rollouts_total`, so a page can place
them on the step axis only. The warm-start always ends before GRPO logs its first row, and
starting it again starts its log again (a new file), so the rows before a page's count never
change under it.

The log only grows while a run trains; on resume honed rewrites it (atomically, so under a new
inode) without the lines after the checkpoint. A reader keyed by (device, inode) sees that as a
new `generation` and the page starts over.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from honed.runs.files import no_follow
from honed.view.catalog import NotFound, RunFiles, finite


@dataclass
class _Parsed:
    generation: str
    offset: int = 0  # bytes of the file parsed so far (whole lines only)
    rows: list[dict[str, Any]] = field(default_factory=list)


class MetricsCache:
    """Parsed metrics per run file, extended by the bytes appended since the last read."""

    def __init__(self) -> None:
        self._files: dict[str, _Parsed] = {}
        self._lock = threading.Lock()

    def rows(self, run: RunFiles, name: str = "metrics.jsonl") -> tuple[str, list[dict[str, Any]]]:
        """(generation, every whole row so far) of the run's log `name`. A line still being
        written is left for the next read; a line that is not a JSON object is skipped."""
        try:
            path = run.path(name)
            stat = path.stat()
        except (NotFound, OSError):
            return "none", []
        generation = f"{stat.st_dev}-{stat.st_ino}"
        key = str(path)
        with self._lock:
            parsed = self._files.get(key)
            if parsed is None or parsed.generation != generation or stat.st_size < parsed.offset:
                parsed = self._files[key] = _Parsed(generation)
            if stat.st_size > parsed.offset:
                with open(path, "rb", opener=no_follow) as fh:
                    fh.seek(parsed.offset)
                    chunk = fh.read(stat.st_size - parsed.offset)
                end = chunk.rfind(b"\n") + 1
                for line in chunk[:end].splitlines():
                    row = _row(line)
                    if row is not None:
                        parsed.rows.append(row)
                parsed.offset += end
            return parsed.generation, parsed.rows


def _row(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("step"), int | float):
        return None
    return finite(value)


def _warmstart_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": row["step"],
        "phase": "warmstart",
        **{f"warmstart/{k}": v for k, v in row.items() if k != "step"},
    }


def since(cache: MetricsCache, run: RunFiles, after: int, generation: str | None) -> dict[str, Any]:
    """The rows after the first `after` of `generation` (the warm-start's, then GRPO's); all of
    them (with `reset`) when the page's generation is not the files' any more."""
    warm_generation, warm = cache.rows(run, "warmstart.jsonl")
    grpo_generation, grpo = cache.rows(run)
    current = f"{warm_generation}+{grpo_generation}"
    total = len(warm) + len(grpo)
    reset = generation != current or after > total
    start = 0 if reset else after
    rows = [_warmstart_row(r) for r in warm[start:]] + grpo[max(0, start - len(warm)) :]
    return {"generation": current, "reset": reset, "total": total, "rows": rows}
