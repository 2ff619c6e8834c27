"""The reflector's prompts: Markdown templates in `prompts/` beside this module.

They live in files, not string literals, so that they read as what the reflector sees and can be
reviewed and changed without touching code; `pyproject.toml` ships `**/*.md` in the wheel (the
original lost its prompts from the wheel once). Placeholders are `$name` (`string.Template`),
since prompts are full of JSON braces.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template


@cache
def _template(name: str) -> Template:
    path = resources.files(__package__).joinpath("prompts", f"{name}.md")
    return Template(path.read_text(encoding="utf-8"))


def render(name: str, **values: str) -> str:
    """The prompt `prompts/<name>.md` with its placeholders filled (all are required)."""
    return _template(name).substitute(values).strip() + "\n"
