"""A run's `metrics.jsonl` as the viewer serves it: whole, or only the rows after those a page
already has, so that a page polling a running run gets its new points without reading the
file again from the start.

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

    def rows(self, run: RunFiles) -> tuple[str, list[dict[str, Any]]]:
        """(generation, every whole row so far). A line still being written is left for the
        next read; a line that is not a JSON object is skipped."""
        try:
            path = run.path("metrics.jsonl")
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


def since(cache: MetricsCache, run: RunFiles, after: int, generation: str | None) -> dict[str, Any]:
    """The rows after the first `after` of `generation`; all of them (with `reset`) when the
    page's generation is not the file's any more."""
    current, rows = cache.rows(run)
    reset = generation != current or after > len(rows)
    start = 0 if reset else after
    return {"generation": current, "reset": reset, "total": len(rows), "rows": rows[start:]}
