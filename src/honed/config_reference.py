"""The configuration reference, generated from the config models where each key is declared.

Every config field carries its help in `Field(description=...)`, beside its type and default,
so there is one place to write it. This module turns the models into what people read:

- the Markdown tables of the configuration references, the GRPO config's in README.md and the
  skills config's in docs/skills.md, between the `BEGIN` and `END` markers (the prose around
  them is hand-written). `python -m honed.config_reference` (or `make docs`) rewrites them;
  `--check` only says whether they are current, and tests/test_docs.py fails when they are not;
- the commented YAML that `honed config CONFIG` prints: the resolved config, every key with
  its description, type and default.

`honed config --schema` needs nothing from here: pydantic's JSON schema carries the same
descriptions.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from honed.config import Config
from honed.skills.config import SkillsConfig

# Each document's generated reference, and the model it is generated from.
DOCS: dict[str, type[BaseModel]] = {"README.md": Config, "docs/skills.md": SkillsConfig}
REGENERATE = "`make docs` (or `python -m honed.config_reference` from the repository root)"
BEGIN = (
    "<!-- BEGIN generated config reference: edit the fields' descriptions in the code, then "
    "run `make docs` -->"
)
END = "<!-- END generated config reference -->"

# Width of `honed config`'s comment lines, indentation included.
COMMENT_WIDTH = 100


@dataclass(frozen=True)
class Row:
    """One key of the reference: its dotted name (`trainer.max_steps`, `envs[].name`), what it
    takes, its default and what it does."""

    key: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """The keys of one config section (`trainer`, `policy.lora`, `envs[]`; `""`: the top
    level), with the description of the field that holds the section."""

    key: str
    description: str
    required: bool
    rows: list[Row]


# --------------------------------------------------------------------------- the models read


def _model_in(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The config section a field holds, and how: `section` (always there), `optional` (a
    section or null) or `list` (a list of sections); `None` for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "section"
    args = get_args(annotation)
    if get_origin(annotation) is list and _model_in(args[0]):
        return args[0], "list"
    if _is_union(annotation) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and _model_in(inner[0]):
            return inner[0], "optional"
    return None


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """What a field takes, in words a config's author reads: `int ≥ 1 | null`, `grpo | dapo`,
    `list of str`. Alternatives are separated by `|`; the field's bounds follow its number."""
    origin, args = get_origin(annotation), get_args(annotation)
    if _is_union(annotation):
        parts = [type_text(a, metadata) for a in args if a is not type(None)]
        return " | ".join([*parts, "null"] if type(None) in args else parts)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    # a type may say how the reference names it (`honed.reach.Endpoint` is a `URL`)
    name = getattr(annotation, "shown_as", None) or getattr(annotation, "__name__", str(annotation))
    if any(getattr(item, "min_length", None) == 1 for item in metadata):
        return f"non-empty {name}"
    return " ".join([name, *_bounds(metadata)])


def _bounds(metadata: Sequence[Any]) -> list[str]:
    """A field's constraints (pydantic keeps `Field(ge=0, ...)` as metadata objects)."""
    words = []
    for item in metadata:
        for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(item, attr, None) is not None:
                words.append(f"{symbol} {getattr(item, attr)}")
        if getattr(item, "min_length", None):
            words.append(f"of length ≥ {item.min_length}")
        if getattr(item, "pattern", None):
            words.append(f"matching {item.pattern}")
    return [", ".join(words)] if words else []


def value_text(value: Any) -> str:
    """A value as YAML spells it, on one line: `null`, `true`, `1e-6`, `[{name: addition}]`."""
    if isinstance(value, list | tuple):  # a list of sections shows the keys set
        value = [
            v.model_dump(mode="json", exclude_defaults=True) if isinstance(v, BaseModel) else v
            for v in value
        ]
    if isinstance(value, float) and math.isfinite(value):
        return repr(value).replace("e-0", "e-").replace("e+0", "e+")
    if value == "":
        return '""'
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=math.inf)
    return text.strip().removesuffix("...").strip()


def default_text(field: FieldInfo) -> str:
    return (
        "required"
        if field.is_required()
        else value_text(field.get_default(call_default_factory=True))
    )


def field_type(field: FieldInfo) -> str:
    """`type_text` of a field, a list of sections named as such."""
    held = _model_in(field.annotation)
    if held and held[1] == "list":
        return "list of sections"
    return type_text(field.annotation, field.metadata)


def sections(
    model: type[BaseModel], key: str = "", description: str = "", required: bool = False
) -> list[Section]:
    """The model's keys, section by section, in the order they are declared: a section's own
    keys, then its subsections'. A field that holds a section always present gives its table
    the heading and the description; an optional section or a list of them is a row of its
    parent, and its table has only the heading."""
    rows: list[Row] = []
    nested: list[Section] = []
    for name, field in model.model_fields.items():
        dotted = f"{key}.{name}" if key else name
        held = _model_in(field.annotation)
        kind = held[1] if held else None
        if kind != "section":
            help_text = " ".join((field.description or "").split())
            rows.append(Row(dotted, field_type(field), default_text(field), help_text))
        if kind == "section":
            nested += sections(held[0], dotted, field.description or "", field.is_required())
        elif held:  # its row says what it is, and whether it is required
            nested += sections(held[0], f"{dotted}[]" if kind == "list" else dotted)
    return [Section(key, " ".join(description.split()), required, rows), *nested]


def fields_without_description(model: type[BaseModel], key: str = "") -> list[str]:
    """Dotted keys, at any depth, whose field has no description (for a test)."""
    missing = []
    for name, field in model.model_fields.items():
        dotted = f"{key}.{name}" if key else name
        if not field.description:
            missing.append(dotted)
        held = _model_in(field.annotation)
        if held:
            missing += fields_without_description(held[0], dotted)
    return missing


# --------------------------------------------------------------------------- Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(model: type[BaseModel]) -> str:
    """The reference tables of a config: a heading, the section's description and a table of
    key, type, default and description for each section."""
    out: list[str] = []
    for section in sections(model):
        if not section.rows:
            continue
        title = f"`{section.key}`" if section.key else "Top level"
        out.append(f"### {title}{' (required)' if section.required else ''}\n")
        if section.description:
            out.append(f"{section.description}\n")
        out.append("| key | type | default | description |\n|---|---|---|---|")
        for row in section.rows:
            default = row.default if row.default == "required" else f"`{_cell(row.default)}`"
            out.append(
                f"| `{row.key}` | {_cell(row.type)} | {default} | {_cell(row.description)} |"
            )
        out.append("")
    return "\n".join(out)


def regenerated(text: str, model: type[BaseModel], where: str = "the document") -> str:
    """`text` with the region between `BEGIN` and `END` replaced by `markdown(model)`."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{where} must hold one '{BEGIN}' line and, after it, one '{END}' line")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n\n{markdown(model)}\n{END}{tail}"


def sync(root: Path, check: bool = False) -> list[str]:
    """Regenerate every document of `DOCS` under `root` (unless `check`); the ones that were
    out of date."""
    stale = []
    for name, model in DOCS.items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        new = regenerated(text, model, str(path))
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new, encoding="utf-8")
    return stale


# --------------------------------------------------------------------------- honed config


def annotated_yaml(config: BaseModel) -> str:
    """The config as YAML, every key preceded by a comment with its description, type and
    default: what `honed config CONFIG` prints. It loads back as the same config."""
    return "\n".join(_yaml_lines(config, "")) + "\n"


def _yaml_lines(config: BaseModel, pad: str) -> list[str]:
    lines: list[str] = []
    dumped = config.model_dump(mode="json")
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        lines += _comment(field, pad, isinstance(value, BaseModel))
        if isinstance(value, BaseModel):
            lines += [f"{pad}{name}:", *_yaml_lines(value, pad + "  ")]
        elif value and isinstance(value, list) and isinstance(value[0], BaseModel):
            lines.append(f"{pad}{name}:")
            for item in value:
                first, *more = _yaml_lines(item, pad + "    ")
                lines += [f"{pad}  - {first.lstrip()}", *more]
        else:
            text = yaml.safe_dump(
                {name: dumped[name]}, sort_keys=False, allow_unicode=True, width=math.inf
            )
            lines += [pad + line for line in text.splitlines()]
    return lines


def _comment(field: FieldInfo, pad: str, section: bool) -> list[str]:
    """The description, wrapped; for a value, then `[type; default: ...]`, kept on one line."""
    width = max(40, COMMENT_WIDTH - len(pad) - 2)
    lines = textwrap.wrap(" ".join((field.description or "").split()), width)
    if not section:
        default = "required" if field.is_required() else f"default: {default_text(field)}"
        tail = f"[{field_type(field)}; {default}]"
        if lines and len(lines[-1]) + 1 + len(tail) <= width:
            lines[-1] += f" {tail}"
        else:
            lines.append(tail)
    return [f"{pad}# {line}" for line in lines]


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m honed.config_reference",
        description="Regenerate the configuration reference tables of README.md and "
        "docs/skills.md from the config models' field descriptions.",
    )
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a table is out of date"
    )
    args = parser.parse_args(argv)
    try:
        stale = sync(Path(args.root), check=args.check)
    except (OSError, ValueError) as exc:
        print(f"honed.config_reference: error: {exc}", file=sys.stderr)
        return 2
    for name in stale:
        print(f"{name}: {'out of date' if args.check else 'regenerated'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
