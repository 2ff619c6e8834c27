"""Versioned skill files: `skills/v0001.md`, `skills/v0002.md`, ... in a run directory.

Every file is written atomically (`honed.runs.files.atomic_write_text`), so a run killed
mid-write leaves either the old set of versions or the new one, never a truncated skill that `--resume` would read back as the current skill.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from honed.errors import HonedError
from honed.runs.files import atomic_write_text, confined
from honed.skills.document import SkillDocument

_VERSION_FILE = re.compile(r"^v(\d{4,})\.md$")


@dataclass(frozen=True)
class SkillVersion:
    """One saved version: its number, file and content hash."""

    number: int
    path: Path
    content_hash: str


class SkillStore:
    """The numbered skill versions in one directory (a run's `skills/`).

    Numbers start at 1 and only grow; `save` always writes the next one. The store keeps no
    state of its own beyond the files, so a resumed run sees exactly what was written.
    """

    def __init__(self, directory: str | Path, claim: Callable[[Path], Path] | None = None) -> None:
        """`claim` is the run's (`RunDir.claim`): it lists each version in the run's manifest
        before it is written."""
        self.directory = Path(directory)
        self.claim = claim or (lambda path: path)

    def path(self, number: int) -> Path:
        return confined(self.directory, self.directory / f"v{number:04d}.md")

    def versions(self) -> list[int]:
        """The saved version numbers, ascending."""
        if not self.directory.is_dir():
            return []
        found = (_VERSION_FILE.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, document: SkillDocument | str) -> SkillVersion:
        """Write the next version and return it."""
        doc = document if isinstance(document, SkillDocument) else SkillDocument(document)
        numbers = self.versions()
        number = numbers[-1] + 1 if numbers else 1
        path = atomic_write_text(self.claim(self.path(number)), doc.text)
        return SkillVersion(number, path, doc.content_hash)

    def load(self, number: int | None = None) -> SkillDocument:
        """Version `number`, or the latest when `None`; a missing one is a `HonedError`."""
        if number is None:
            numbers = self.versions()
            if not numbers:
                raise HonedError(f"no skill versions in {self.directory}")
            number = numbers[-1]
        path = self.path(number)
        if not path.is_file():
            raise HonedError(f"skill version {number} not found: {path} does not exist")
        return SkillDocument.load(path)

    def latest(self) -> SkillVersion | None:
        """The newest saved version, or `None` when nothing has been saved."""
        numbers = self.versions()
        if not numbers:
            return None
        doc = self.load(numbers[-1])
        return SkillVersion(numbers[-1], self.path(numbers[-1]), doc.content_hash)
