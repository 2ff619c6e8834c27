"""The policy `honed serve` starts with, and the weights a reload swaps in.

`honed serve SOURCE` takes what `policy.model` takes (`tiny`, `smollm2-135m-instruct`, a GGUF
file, a Hugging Face folder, a Hub id in the local cache), a checkpoint of a run, or a run
directory (its latest checkpoint). A LoRA checkpoint is an adapter without its base: merge it
first with `honed export RUN OUT_DIR`. A model whose tokenizer has a chat template is served
with it, and its end-of-turn token ends completions.

A reload (`POST /update_weights_from_disk {"model_path": DIR}`, as SGLang names it and as
honed's trainer sends it) loads a Hugging Face folder from inside the directories given with
`--weights-dir`, links resolved, as every file honed reads from a run stays inside the run: a
client cannot make the server load weights from anywhere else. The new model must have the
served tokenizer's vocabulary (a trainer's checkpoint of the served model does); it is loaded
in the served dtype on the served device, and replaces the served one between batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from honed.config import PolicyConfig
from honed.errors import HonedError
from honed.models.device import dtype_name
from honed.models.policy import Policy
from honed.models.sources import is_adapter_dir
from honed.runs.files import check_tree
from honed.runs.rundir import RunDir
from honed.serve.protocol import ServeError


def with_chat_template(policy: Policy) -> Policy:
    """`policy` rendering chat prompts with its tokenizer's template, when it has one."""
    if policy.chat_template or not getattr(policy.tokenizer, "chat_template", None):
        return policy
    return Policy(policy.model, policy.tokenizer, chat_template=True)


def _refuse_adapter(path: Path) -> None:
    if is_adapter_dir(path):
        raise HonedError(
            f"{path} holds a LoRA adapter, not a whole model; merge it into its base with "
            "`honed export RUN OUT_DIR` and serve OUT_DIR"
        )


def load_policy(source: str, device: str, dtype: str, seed: int) -> Policy:
    """The policy `honed serve SOURCE` serves (see the module docstring)."""
    path = Path(source).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        latest = RunDir(path).latest_checkpoint()
        if latest is None and not is_adapter_dir(path):
            raise HonedError(f"{path} is neither a model folder nor a run with a checkpoint")
        if latest is not None:  # a run's checkpoint: its files are the run's, links refused
            path = latest[1]
            check_tree(path)
    if path.is_dir():
        _refuse_adapter(path)
        policy = Policy.load(path, dtype, False, None, device)
    else:
        settings = PolicyConfig(model=source, device=device, dtype=dtype)  # type: ignore[arg-type]
        policy = Policy.from_config(settings, seed)
    policy.model.eval()
    return with_chat_template(policy)


def _within(path: Path, root: Path) -> bool:
    """Whether `path`, every link resolved, is `root` or below it."""
    base, target = root.resolve(), path.resolve()
    return target == base or base in target.parents


def reload_policy(model_path: str, roots: Sequence[Path], current: Policy) -> Policy:
    """The folder a reload names, loaded like the served policy; a `ServeError` when it is
    outside `roots`, not a whole model, or has another vocabulary."""
    if not roots:
        raise ServeError(
            403,
            "weight reloads are off: start honed serve with --weights-dir DIR, the directory "
            "the trainer saves into (distributed.server.weights_dir)",
            kind="permission_error",
        )
    path = Path(model_path).expanduser()
    if not path.is_absolute() or not any(_within(path, root) for root in roots):
        shown = ", ".join(str(r) for r in roots)
        raise ServeError(
            403,
            f"{model_path} is not inside the weights directory ({shown}); give an absolute "
            "path inside it",
            kind="permission_error",
            param="model_path",
        )
    if not (path / "config.json").is_file():
        hint = " (a LoRA adapter: save whole weights)" if is_adapter_dir(path) else ""
        raise ServeError(400, f"{model_path} is not a Hugging Face model folder{hint}")
    params = next(current.model.parameters())
    try:
        new = Policy.load(
            path, dtype_name(params.dtype), current.chat_template, None, str(current.device)
        )
    except HonedError as err:
        raise ServeError(400, str(err), param="model_path") from None
    if new.tokenizer.get_vocab() != current.tokenizer.get_vocab():
        raise ServeError(
            400,
            f"{model_path} has another tokenizer than the served model; a reload changes the "
            "weights, not the vocabulary",
            param="model_path",
        )
    new.model.eval()
    return new
