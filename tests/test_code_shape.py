"""A function in `src/honed` longer than 60 lines says why in its docstring, with a sentence
starting "Long because": a reader who meets a long function learns whether it is one piece
on purpose or a split waiting to happen, and a new long function cannot slip in unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "honed"
MAX_LINES = 60


def long_without_reason(source: str) -> list[str]:
    """The functions of `source` over `MAX_LINES` lines whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
        if lines > MAX_LINES and "Long because" not in (ast.get_docstring(node) or ""):
            found.append(f"{node.name} ({lines} lines)")
    return found


def test_every_long_function_says_why():
    found = [
        f"{path.relative_to(SRC.parent)}: {name}"
        for path in sorted(SRC.rglob("*.py"))
        for name in long_without_reason(path.read_text())
    ]
    assert found == []


def test_the_check_sees_a_long_function_and_its_reason():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    assert long_without_reason(f"def f():\n{body}") == [f"f ({MAX_LINES + 1} lines)"]
    reason = '    """Long because it is a table."""\n'
    assert long_without_reason(f"def f():\n{reason}{body}") == []
    assert long_without_reason(f"def f():\n{body[: -len(body.splitlines()[-1]) - 1]}") == []
