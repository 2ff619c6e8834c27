"""The import graph of `src/honed` keeps the architecture's arrows: no module imports itself
back through others (no cycles, type-only imports included), and each package imports only the
packages below it (docs/architecture.md). The graph is read from the source with `ast`, so a
lazy import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# What each part of honed may import (besides itself). The core (`types`, `errors`, `text`)
# and the reward statistics (`rewards`: Welford, normaliser, units) take plain values, so
# that everything above can use them and they never change with what is above.
ALLOWED: dict[str, set[str]] = {
    "types": set(),
    "errors": set(),
    "text": set(),
    "rewards": {"types", "errors"},
    # what a config reaches outside honed (import specs, endpoints), and YAML read as data:
    # parsed below the config, so that the config, the loader and the clients share them
    "reach": {"errors"},
    "yaml_data": {"errors"},
    "user_code": {"errors", "reach"},
    "config": {"rewards", "types", "errors", "reach", "yaml_data"},  # the normaliser's modes
    "models": {"config", "types", "errors", "text", "reach"},
    "runs": {"config", "types", "errors", "reach", "yaml_data"},
    "envs": {"models", "config", "types", "errors", "text", "user_code", "reach"},
    "sampling": {"envs", "config", "types", "errors"},
    "distributed": {
        *("envs", "models", "rewards", "runs", "config", "types", "errors", "user_code"),
        "reach",
    },
    "skills": {
        *("envs", "models", "runs", "sampling", "config", "types", "errors", "text"),
        "yaml_data",
    },
    "rl": {
        *("distributed", "envs", "models", "rewards", "runs", "sampling"),
        *("config", "types", "errors", "text", "yaml_data"),
    },
    "view": {"runs", "errors", "yaml_data"},
    # `honed serve`: the sampler, the chat templates and tool-call parsing of the tool
    # environments, a run's latest checkpoint, and the viewer's loopback and socket helpers
    "serve": {"envs", "models", "runs", "view", "config", "types", "errors", "text"},
    # the configuration reference: both configs' fields, for `honed config` and the README
    "config_reference": {"config", "skills"},
    "cli": {
        *("rl", "skills", "view", "serve", "distributed", "envs", "models", "runs", "sampling"),
        *("rewards", "config", "config_reference", "types", "errors", "text", "user_code"),
        *("reach", "yaml_data", "honed"),
    },
    "__main__": {"cli", "distributed"},  # learner processes start through distributed.launch
    "honed": set(),  # the package's __init__
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "honed").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the honed modules it imports (`from pkg import name` names the submodule when
    `name` is one, else the package)."""
    modules = _modules()

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "honed"]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{module}: relative import; honed imports absolutely"
                if not (node.module or "").startswith("honed"):
                    continue
                targets = [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in modules
                    else node.module
                    for a in node.names
                ]
            else:
                continue
            edges[module].update(known(t) for t in targets if known(t) != module)
    return edges


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "honed"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    assert _cycles(_graph()) == []


def _wrong_arrows(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if _part(target) != _part(module) and _part(target) not in ALLOWED[_part(module)]
    )


def test_each_part_imports_only_what_is_below_it():
    edges = _graph()
    assert set(map(_part, edges)) <= set(ALLOWED), "a new part of honed: give it its place"
    assert _wrong_arrows(edges) == []


def test_the_checks_see_a_cycle_and_a_wrong_arrow():
    """The two checks above fail on graphs that break them (they are not vacuous), and the
    graph read from the source holds the edges it should."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    upward = {"honed.rewards.welford": {"honed.config"}, "honed.rl.loss": {"honed.types"}}
    assert _wrong_arrows(upward) == ["honed.rewards.welford -> honed.config"]
    edges = _graph()
    assert "honed.rl.loss" in edges["honed.rl.update"]
    assert "honed.types" in edges["honed.config"]
