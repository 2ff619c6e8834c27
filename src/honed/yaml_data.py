"""YAML is data: every config honed reads, the user's or a run directory's, is read here.

PyYAML's `safe_load` builds no objects beyond plain ones, but it still has more than data
needs, and a config from someone else may use all of it: tags beyond the core schema
(`!!binary` gives bytes, which later code decoded into a string no check had seen;
`!!timestamp`, `!!set`, merge keys), and aliases, which let a 2.7 kB file stand for a
structure of billions of nodes that any walk over it (a check, pydantic) expands. Here:

- the text is at most `MAX_CHARS` characters;
- nesting is at most `MAX_DEPTH` levels, checked on the event stream before any tree is built
  (PyYAML's composer recurses once per level);
- the document, with every alias expanded, is at most `MAX_NODES` nodes, counted on the node
  graph with each shared node counted once per use but computed once (so counting is linear
  in the text, however large the expansion); a recursive alias is refused;
- tags are the core schema's alone (null, bool, int, float, str, seq, map), and timestamps
  and merge keys are not recognised in plain text: `2024-01-01` stays a string, `<<` a key.

Anything else is a `HonedError` naming the file and what was refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from honed.errors import HonedError

MAX_CHARS = 2 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 100_000

_CORE = "tag:yaml.org,2002:"
CORE_TAGS = frozenset(_CORE + t for t in ("null", "bool", "int", "float", "str", "seq", "map"))


class _CoreLoader(yaml.SafeLoader):
    """The safe loader with the core schema's tags only (see the module docstring)."""


_CoreLoader.yaml_constructors = {
    tag: constructor
    for tag, constructor in yaml.SafeLoader.yaml_constructors.items()
    if tag in CORE_TAGS
}
_CoreLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in CORE_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check_depth(text: str, source: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_CoreLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise HonedError(f"{source}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_nodes(root: yaml.Node, source: str) -> None:
    """Core tags only, no recursive alias, at most `MAX_NODES` nodes once expanded."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_NODES:
                raise HonedError(
                    f"{source}: more than {MAX_NODES:,} values once its aliases are expanded"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise HonedError(f"{source}: an alias refers to the structure that holds it")
        if node.tag not in CORE_TAGS:
            line = node.start_mark.line + 1
            raise HonedError(
                f"{source}, line {line}: the tag {node.tag!r} is not accepted (a config holds "
                "plain values: text, numbers, true/false, null, lists and mappings)"
            )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def read_yaml(path: Path) -> Any:
    """The plain data in the YAML file `path` (see `load_yaml`); reading stops past the limit,
    so a huge file costs no more than a large one."""
    try:
        with path.open(encoding="utf-8") as handle:
            text = handle.read(MAX_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise HonedError(f"{path}: cannot read it ({exc})".splitlines()[0]) from exc
    return load_yaml(text, str(path))


def load_yaml(text: str, source: str) -> Any:
    """The plain data in `text`, read within the limits above; `source` names it in errors."""
    if len(text) > MAX_CHARS:
        raise HonedError(f"{source}: {len(text):,} characters, more than a config may hold")
    try:
        _check_depth(text, source)
        loader = _CoreLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_nodes(node, source)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise HonedError(f"{source} is not valid YAML: {_yaml_problem(exc)}") from exc


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What PyYAML found wrong and where (1-based line and column): its own message spreads
    these over several lines, of which the first ("while parsing a block mapping") names
    neither."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None or mark is None:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return f"{where}: {problem}" + (f" ({context})" if context else "")
