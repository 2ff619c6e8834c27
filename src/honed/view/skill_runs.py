"""A skill run as the skills page shows it: the versions of the document with their gate
scores, each step's proposed, merged and ranked edits, what applying them did, the gate's
verdict, and the diff between any two versions or between a step's candidate and the skill it
started from (`honed.skills.rundir` has the layout)."""

from __future__ import annotations

import difflib
from typing import Any

from markdown_it import MarkdownIt

from honed.view.catalog import NotFound, RunFiles

STEP_FILES = {
    "proposed": "proposed_edits.json",
    "merged": "merged_edits.json",
    "ranked": "ranked_edits.json",
    "applied": "apply_report.json",
    "gate": "gate.json",
    "record": "step.json",
}

# CommonMark without raw HTML: a skill written by a model is shown, never run, in the page.
_MARKDOWN = MarkdownIt("commonmark", {"html": False})


def overview(run: RunFiles, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Versions and steps so far: from `state.json` (rewritten after every step), else from
    `summary.json`; steps also from the metrics rows."""
    state = run.json("state.json", default={})
    state = state if isinstance(state, dict) else {}
    summary = run.json("summary.json", default={})
    summary = summary if isinstance(summary, dict) else {}
    versions = state.get("versions") or summary.get("versions") or []
    history = state.get("history") or [r for r in rows if "outcome" in r]
    on_disk = _version_numbers(run)
    return {
        "versions": [v for v in versions if isinstance(v, dict)],
        "files": on_disk,
        "steps": [h for h in history if isinstance(h, dict)],
        "current_version": state.get("current_version"),
        "best_version": state.get("best_version", summary.get("best_version")),
        "epochs": _epochs(run),
    }


def _version_numbers(run: RunFiles) -> list[int]:
    try:
        folder = run.path("skills")
    except NotFound:
        return []
    numbers = []
    for child in folder.iterdir():
        name = child.name
        if name.startswith("v") and name.endswith(".md") and name[1:-3].isdigit():
            numbers.append(int(name[1:-3]))
    return sorted(numbers)


def _epochs(run: RunFiles) -> list[dict[str, Any]]:
    """Consolidation records, one per closed epoch."""
    try:
        folder = run.path("consolidation")
    except NotFound:
        return []
    out = []
    for child in sorted(folder.iterdir()):
        if child.name.startswith("epoch_"):
            record = run.json("consolidation", child.name, "consolidation.json", default={})
            out.append({"epoch": child.name, "record": record})
    return out


def version(run: RunFiles, number: int) -> dict[str, Any]:
    text = run.text("skills", f"v{number:04d}.md")
    return {"version": number, "text": text, "html": render(text)}


def render(text: str) -> str:
    """The Markdown as HTML, raw HTML in it shown as text."""
    return _MARKDOWN.render(text)


def diff(before: str, after: str) -> list[dict[str, Any]]:
    """Line-level differences: runs of `equal`, `delete`, `insert` or `replace` with the lines
    on each side (difflib's opcodes)."""
    a, b = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [
        {"op": op, "before": a[i1:i2], "after": b[j1:j2], "at": [i1 + 1, j1 + 1]}
        for op, i1, i2, j1, j2 in matcher.get_opcodes()
    ]


def version_diff(run: RunFiles, a: int, b: int) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "diff": diff(run.text("skills", f"v{a:04d}.md"), run.text("skills", f"v{b:04d}.md")),
    }


def step_detail(run: RunFiles, step: int, versions: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything the step wrote, and its candidate's diff against the skill in force when the
    step began (the newest version made before it)."""
    folder = ("steps", f"step_{step:04d}")
    if not run.exists(*folder):
        raise NotFound(f"step {step}")
    out: dict[str, Any] = {"step": step}
    for key, name in STEP_FILES.items():
        out[key] = run.json(*folder, name)
    earlier = [
        int(v["version"])
        for v in versions
        if isinstance(v.get("version"), int) and isinstance(v.get("step"), int) and v["step"] < step
    ]
    base = max(earlier, default=None)
    out["base_version"] = base
    try:
        candidate = run.text(*folder, "candidate_skill.md")
    except NotFound:
        candidate = None
    out["candidate"] = candidate
    if base is not None and candidate is not None:
        try:
            out["diff"] = diff(run.text("skills", f"v{base:04d}.md"), candidate)
        except NotFound:
            out["diff"] = None
    return out
