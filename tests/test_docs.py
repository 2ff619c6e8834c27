"""The README's configuration reference names every config key, so it cannot fall behind."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from honed.config import Config
from honed.skills.config import SkillsConfig

ROOT = Path(__file__).resolve().parents[1]


def leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                keys += leaf_keys(item, f"{prefix}{name}[].")
                continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += leaf_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def documented(key: str, text: str) -> bool:
    """`a.b.c` itself; a table row that starts with `a.b.…` and names `c`; or a row for all of
    `a.b.*` that refers to another reference (`as for GRPO`) or whose keys have their own rows."""
    if f"`{key}`" in text:
        return True
    section, _, leaf = key.rpartition(".")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    if any(f"`{section}." in row and f"`{leaf}`" in row for row in rows):
        return True
    if section.endswith("[]"):
        return any(row.startswith(f"| `{section[:-2]}`") and f"`{leaf}`" in row for row in rows)
    wildcard = [row for row in rows if f"`{section}.*`" in row]
    return any("as for GRPO" in row for row in wildcard) or (
        bool(wildcard) and any(row.startswith(f"| `{leaf}`") for row in rows)
    )


@pytest.mark.parametrize(
    ("model", "doc"), [(Config, "README.md"), (SkillsConfig, "docs/skills.md")]
)
def test_every_config_key_is_documented(model, doc):
    text = (ROOT / doc).read_text()
    missing = [k for k in leaf_keys(model) if not documented(k, text)]
    assert not missing, f"{doc} does not document: {', '.join(missing)}"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_is_valid_and_builds_its_environments(path, monkeypatch):
    """The README sends newcomers to these files: each must load, and its environments build
    (relative data paths are relative to the repository root, where the README runs them)."""
    from honed.config import load_config
    from honed.rl.trainer import build_envs
    from honed.skills.config import load_skills_config

    monkeypatch.chdir(ROOT)
    if path.name.startswith("skills"):
        load_skills_config(path)
        return
    config = load_config(path)
    if any(e.env_type == "reasoning_gym" for e in config.envs):
        pytest.importorskip(
            "reasoning_gym",
            reason=f"reasoning-gym is not installed; to build {path.name}: "
            "pip install 'honed[reasoning-gym]'",
        )
    if path.name == "memalpha_qwen3_4b.yaml":
        return  # its data and vLLM servers live on a cluster: test_memory_recipe.py builds it on fakes
    assert build_envs(config)
