"""The skill document: plain Markdown with protected regions, changed only by reported edits.

Protected regions are spans that normal edits cannot touch (in the original, the slow-update
guidance block that is rewritten only at epoch boundaries). They are marked with HTML comments,
which Markdown renderers hide and LLMs copy faithfully:

    <!-- protected:guidance -->
    ...text only `rewrite_protected` may change...
    <!-- /protected:guidance -->

A name is letters, digits, `_`, `.` or `-`; names are unique; regions do not nest. A document
whose markers are unbalanced, nested or duplicated is refused with `SkillFormatError` naming
the line, since guessing where a region ends could expose it to edits.

Edits (`honed.skills.edits`) are applied in order, each to the result of the previous one, and
every one is reported as applied or skipped with a reason. The rules, chosen so that an edit
either does exactly what its author meant or nothing:

- A target must match the document exactly once. If it does not match, the same target with
  surrounding whitespace trimmed is tried (LLMs often add or drop a trailing newline), and the
  report says so. Zero matches: skipped, "target not found". Several matches: skipped as
  ambiguous, since picking one would be a guess.
- `insert_after` puts the content on its own line(s) right after the line where the target ends;
  it never splits a line. An `insert_after` whose target is not found *becomes an append* (the
  original's behaviour, kept because such edits are usually still useful advice); it is reported
  as applied with the reason "target not found; appended at the end". An ambiguous target is
  still skipped.
- `append` adds the content on new line(s) at the end of the document.
- `replace` swaps the target for the content; `delete` removes the target, and the rest of its
  line too when the target was a whole line, so no blank line is left behind.
- An edit whose target overlaps a protected region, whose insertion point falls inside one, or
  whose content contains a protected marker is skipped. As a safety net, an edit after which the
  protected regions are not exactly as before (same names, same text) is skipped too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honed.errors import HonedError
from honed.runs.files import read_text
from honed.skills.edits import Edit, InvalidEdit
from honed.text import valid_text

_NAME = r"[A-Za-z0-9_.-]+"
_MARKER = re.compile(rf"<!--\s*(/?)protected:\s*({_NAME})\s*-->", re.IGNORECASE)
_VALID_NAME = re.compile(rf"^{_NAME}$")


class SkillFormatError(HonedError):
    """A skill document whose protected-region markers do not form well-formed regions."""


@dataclass(frozen=True)
class Region:
    """A protected region: `start`/`end` span the markers too; `content` is what lies between
    them, without the newline that follows the opening marker or precedes the closing one."""

    name: str
    start: int
    end: int
    body_start: int
    body_end: int
    content: str


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_regions(text: str) -> tuple[Region, ...]:
    """The protected regions of `text`, in order; raises `SkillFormatError` if malformed."""
    regions: list[Region] = []
    opened: re.Match[str] | None = None
    for m in _MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        where = f"line {_line_of(text, m.start())}"
        if not closing:
            if opened is not None:
                raise SkillFormatError(
                    f"{where}: protected region '{name}' opens inside region "
                    f"'{opened.group(2)}'; regions cannot nest"
                )
            if any(r.name == name for r in regions):
                raise SkillFormatError(f"{where}: protected region '{name}' appears twice")
            opened = m
            continue
        if opened is None:
            raise SkillFormatError(f"{where}: '{m.group(0)}' closes a region that is not open")
        if name != opened.group(2):
            raise SkillFormatError(
                f"{where}: '{m.group(0)}' closes region '{opened.group(2)}' under another name"
            )
        body = text[opened.end() : m.start()]
        body = body[1:] if body.startswith("\n") else body
        body = body[:-1] if body.endswith("\n") else body
        regions.append(Region(name, opened.start(), m.end(), opened.end(), m.start(), body))
        opened = None
    if opened is not None:
        raise SkillFormatError(
            f"line {_line_of(text, opened.start())}: protected region '{opened.group(2)}' "
            f"is never closed (add '<!-- /protected:{opened.group(2)} -->')"
        )
    return tuple(regions)


def skill_hash(text: str) -> str:
    """sha256 hex digest of the text (UTF-8): the key under which a skill's scores are cached."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class EditOutcome:
    """What happened to one edit: applied or skipped, and why (or how, for a fallback)."""

    index: int
    op: str
    applied: bool
    reason: str
    edit: Any

    def to_dict(self) -> dict[str, Any]:
        edit = self.edit.to_dict() if isinstance(self.edit, Edit) else self.edit
        status = "applied" if self.applied else "skipped"
        return {
            "index": self.index,
            "op": self.op,
            "status": status,
            "reason": self.reason,
            "edit": edit,
        }


@dataclass
class ApplyReport:
    """One outcome per edit, in the order the edits were given."""

    outcomes: list[EditOutcome] = field(default_factory=list)

    @property
    def applied(self) -> int:
        return sum(o.applied for o in self.outcomes)

    @property
    def skipped(self) -> int:
        return len(self.outcomes) - self.applied

    def to_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "skipped": self.skipped,
            "edits": [o.to_dict() for o in self.outcomes],
        }


class _Skip(Exception):
    """Internal: this edit cannot be applied, for the reason given."""


def _occurrences(text: str, target: str) -> list[int]:
    """Start offsets of every (possibly overlapping) match of `target`."""
    found, i = [], text.find(target)
    while i != -1:
        found.append(i)
        i = text.find(target, i + 1)
    return found


def _as_lines(content: str) -> str:
    return content if content.endswith("\n") else content + "\n"


def _append(text: str, content: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + _as_lines(content)


class SkillDocument:
    """An immutable skill text with its protected regions; edits return a new document."""

    def __init__(self, text: str = "") -> None:
        # text from a reflector reply may hold lone surrogates; hashing and writing need UTF-8
        self.text = valid_text(text).replace("\r\n", "\n")
        self.regions = parse_regions(self.text)

    @classmethod
    def load(cls, path: str | Path) -> SkillDocument:
        """Read a skill file; unreadable files and malformed markers name the file."""
        path = Path(path)
        try:
            text = read_text(path)  # a link in the file's place is refused
        except (OSError, UnicodeDecodeError) as exc:
            raise HonedError(f"cannot read skill file {path}: {exc}") from exc
        try:
            return cls(text)
        except SkillFormatError as exc:
            raise SkillFormatError(f"{path}: {exc}") from exc

    @property
    def content_hash(self) -> str:
        return skill_hash(self.text)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        names = ", ".join(r.name for r in self.regions) or "none"
        raise KeyError(f"no protected region '{name}' (regions: {names})")

    def apply_edits(
        self, edits: Iterable[Edit | Mapping[str, Any]], max_edit_chars: int | None = None
    ) -> tuple[SkillDocument, ApplyReport]:
        """Apply edits in order; the new document and one outcome per edit.

        Edits may be `Edit`s or raw mappings straight from JSON; a malformed one is skipped with
        its reason, never raised, and so is one whose content is longer than `max_edit_chars`
        (`skill.max_edit_chars`: a runaway reply must not become a runaway skill).
        """
        text, report = self.text, ApplyReport()
        for index, raw in enumerate(edits, start=1):
            op = (
                raw.op
                if isinstance(raw, Edit)
                else raw.get("op")
                if isinstance(raw, Mapping)
                else ""
            )
            try:
                edit = Edit.from_raw(raw)
                if max_edit_chars is not None and len(edit.content) > max_edit_chars:
                    raise _Skip(
                        f"content is {len(edit.content)} characters, more than "
                        f"skill.max_edit_chars ({max_edit_chars})"
                    )
                text, note = self._apply_one(text, edit)
            except (InvalidEdit, _Skip) as exc:
                label = op if isinstance(op, str) else repr(op)
                report.outcomes.append(EditOutcome(index, label, False, str(exc), raw))
            else:
                report.outcomes.append(EditOutcome(index, edit.op, True, note, raw))
        return SkillDocument(text), report

    def _apply_one(self, text: str, edit: Edit) -> tuple[str, str]:
        regions = parse_regions(text)
        if edit.op != "delete" and _MARKER.search(edit.content):
            raise _Skip("content contains a protected-region marker")
        note = ""
        if edit.op == "append":
            new = _append(text, edit.content)
        else:
            target = edit.target
            starts = _occurrences(text, target)
            if not starts and target.strip() != target:
                target = target.strip()
                starts = _occurrences(text, target)
                note = "matched after trimming whitespace around the target"
            if not starts:
                if edit.op != "insert_after":
                    raise _Skip("target not found")
                new, note = _append(text, edit.content), "target not found; appended at the end"
            elif len(starts) > 1:
                raise _Skip(
                    f"target is ambiguous: it occurs {len(starts)} times; quote enough text to "
                    "match exactly once"
                )
            else:
                new = self._splice(text, regions, edit, starts[0], starts[0] + len(target))
        before = [(r.name, text[r.start : r.end]) for r in regions]
        try:
            after = [(r.name, new[r.start : r.end]) for r in parse_regions(new)]
        except SkillFormatError:
            after = None
        if after != before:
            raise _Skip("edit would change a protected region")
        return new, note

    @staticmethod
    def _splice(text: str, regions: tuple[Region, ...], edit: Edit, s: int, e: int) -> str:
        for r in regions:
            if s < r.end and e > r.start:
                raise _Skip(f"target is inside protected region '{r.name}'")
        if edit.op == "replace":
            return text[:s] + edit.content + text[e:]
        if edit.op == "delete":
            at_line_start = s == 0 or text[s - 1] == "\n"
            whole_line = at_line_start and text[e - 1] != "\n" and e < len(text) and text[e] == "\n"
            return text[:s] + text[e + 1 if whole_line else e :]
        # insert_after: after the end of the line the target ends on.
        if text[e - 1] == "\n":
            point = e
        else:
            newline = text.find("\n", e)
            point = len(text) if newline == -1 else newline + 1
        for r in regions:
            if r.start < point < r.end:
                raise _Skip(f"insertion point is inside protected region '{r.name}'")
        block = _as_lines(edit.content)
        if point == len(text) and not text.endswith("\n"):
            block = "\n" + block
        return text[:point] + block + text[point:]

    def rewrite_protected(self, name: str, content: str, create: bool = False) -> SkillDocument:
        """A new document whose protected region `name` holds `content` (for epoch-end
        consolidation, the only sanctioned way to change a protected region).

        With `create=True` a missing region is appended at the end of the document. Raises
        `ValueError` for an invalid name, a missing region (without `create`), or content that
        contains a protected marker (it would break the region structure); the caller, holding
        LLM output, should keep the old document and record the reason.
        """
        if not _VALID_NAME.match(name):
            raise ValueError(f"invalid protected region name {name!r} (use letters, digits, _ . -)")
        if _MARKER.search(content):
            raise ValueError("content for a protected region must not contain protected markers")
        body = "\n" + content.strip("\n") + "\n"
        try:
            r = self.region(name)
        except KeyError as exc:
            if not create:
                raise ValueError(exc.args[0]) from None
            block = f"<!-- protected:{name} -->{body}<!-- /protected:{name} -->"
            return SkillDocument(_append(self.text, block))
        return SkillDocument(self.text[: r.body_start] + body + self.text[r.body_end :])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SkillDocument) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"SkillDocument({len(self.text)} chars, sha256={self.content_hash[:12]})"
