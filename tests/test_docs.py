"""The configuration references (README.md for GRPO, docs/skills.md for skills) are generated
from the config fields' descriptions and name every key, so they cannot fall behind."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from honed.config import Config
from honed.config_reference import (
    DOCS,
    REGENERATE,
    fields_without_description,
    main,
    regenerated,
)
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


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_reference_tables_are_generated_from_the_field_descriptions(doc):
    text = (ROOT / doc).read_text()
    if regenerated(text, DOCS[doc], doc) != text:
        pytest.fail(
            f"{doc}: the configuration reference tables differ from the config's field "
            f"descriptions; run {REGENERATE} and commit the result"
        )


@pytest.mark.parametrize("model", [Config, SkillsConfig], ids=lambda m: m.__name__)
def test_every_config_field_has_a_description(model):
    """The description is the key's documentation: in the tables, `honed config` and the
    JSON schema alike."""
    missing = fields_without_description(model)
    assert not missing, f"fields without Field(description=...): {', '.join(missing)}"


def test_the_generator_checks_and_rewrites_a_stale_table(tmp_path):
    for name in DOCS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    assert main(["--root", str(tmp_path), "--check"]) == 0
    readme = tmp_path / "README.md"
    readme.write_text(
        readme.read_text().replace("| `trainer.max_steps` | int ≥ 0 | `100` |", "| x |")
    )
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert readme.read_text() == (ROOT / "README.md").read_text()
    readme.write_text("no markers")
    assert main(["--root", str(tmp_path)]) == 2


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
    if any(e.env_type == "verifiers" for e in config.envs):
        pytest.importorskip(
            "verifiers",
            reason=f"verifiers is not installed; to build {path.name}: "
            "pip install 'honed[verifiers]'",
        )
    if any(e.env_type == "reasoning_gym" for e in config.envs):
        pytest.importorskip(
            "reasoning_gym",
            reason=f"reasoning-gym is not installed; to build {path.name}: "
            "pip install 'honed[reasoning-gym]'",
        )
    if path.name == "memalpha_qwen3_4b.yaml":
        return  # its data and vLLM servers live on a cluster: test_memory_recipe.py builds it on fakes
    assert build_envs(config)


def test_the_json_schema_accepts_every_example_config_and_refuses_an_unknown_key():
    """Editors validate configs with `honed config --schema`: it must accept what loads (a
    single server URL too) and flag what does not."""
    jsonschema = pytest.importorskip("jsonschema")
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        model = SkillsConfig if path.name.startswith("skills") else Config
        jsonschema.validate(yaml.safe_load(path.read_text()) or {}, model.model_json_schema())
    schema = Config.model_json_schema()
    server = {"backend": "server", "server": {"base_url": "http://h:8000/v1", "model": "m"}}
    jsonschema.validate({"distributed": server}, schema)
    with pytest.raises(jsonschema.ValidationError, match="max_step"):
        jsonschema.validate({"trainer": {"max_step": 3}}, schema)
