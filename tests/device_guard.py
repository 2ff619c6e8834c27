"""A second device on a machine that has only a CPU, to catch misplaced tensors in tests.

On a CPU-only machine every tensor is on the CPU, so a batch that was never moved to the GPU,
or a tensor factory called without `device=`, cannot fail there; on a GPU it fails with
"Expected all tensors to be on the same device". `DeviceGuard` makes such bugs fail here too.
While it is active, honed's device resolves to `VIRTUAL` (`torch.device("cpu", 0)`: a real CPU
device, but told apart from a plain `"cpu"`), and every tensor is followed in one of three
states, through a `TorchFunctionMode` that sees every torch call:

- *device*: the policy's weights after `model.to(VIRTUAL)`, tensors moved or created there
  (`.to(VIRTUAL)`, `device=VIRTUAL`, or `device=t.device` of a device tensor, whose `.device`
  reads `VIRTUAL` under the guard when it is on the CPU), and anything computed from a device
  tensor;
- *host*: tensors created on the plain CPU (a factory with no device or `device="cpu"`, or
  `.cpu()`), and anything computed from host tensors only;
- *unknown*: tensors the mode never saw made (the autograd engine's gradients, tensors that
  existed before): they mix with either.

An operation that mixes a device tensor with a host tensor of one element or more (CUDA
accepts 0-dim CPU scalars) is recorded as a violation, and so is a tensor factory called from
honed's own sources without an explicit device (or a `*_like` / `new_*` source). `copy_` and
`.to` cross devices legitimately and are not checked.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import honed

VIRTUAL = torch.device("cpu", 0)
HONED_SRC = str(Path(honed.__file__).resolve().parent)
TORCH_SRC = str(Path(torch.__file__).resolve().parent)

FACTORIES = {
    "zeros", "ones", "full", "empty", "tensor", "as_tensor", "arange", "range", "rand",
    "randn", "randint", "randperm", "linspace", "logspace", "eye", "scalar_tensor",
}  # fmt: skip
LIKE = {"zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
        "randint_like", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"}  # fmt: skip
UNCHECKED = {"copy_", "to", "cpu", "cuda", "__get__", "__set__", "backward", "detach"}

DEVICE, HOST = "device", "host"


def _state(t: torch.Tensor) -> str | None:
    return getattr(t, "_guard_state", None)


def _mark(out, state: str | None) -> None:
    if state is None:
        return
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            with contextlib.suppress(AttributeError, RuntimeError):  # a tensor without __dict__
                t._guard_state = state


def _placement(device) -> str:
    device = torch.device(device) if not isinstance(device, torch.device) else device
    return DEVICE if device == VIRTUAL or device.type != "cpu" else HOST


def _caller() -> str:
    """The file of the first frame outside torch (and this module) that made the call."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(TORCH_SRC) and name != __file__:
            return name
        frame = frame.f_back
    return ""


class DeviceGuard(TorchFunctionMode):
    """Records misplaced tensors in `violations` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []
        self._deepcopies: dict[type, object] = {}

    def __enter__(self):
        # `copy.deepcopy` of a parameter builds the copy without a torch call the mode sees
        # (`Parameter.__new__`): the copy keeps its source's state, as it keeps its device.
        for cls in (torch.Tensor, torch.nn.Parameter):
            original = cls.__deepcopy__
            self._deepcopies[cls] = original

            def deepcopy(t, memo, original=original):
                out = original(t, memo)
                _mark(out, _state(t))
                return out

            cls.__deepcopy__ = deepcopy
        return super().__enter__()

    def __exit__(self, *exc):
        for cls, original in self._deepcopies.items():
            cls.__deepcopy__ = original
        return super().__exit__(*exc)

    def _violation(self, message: str) -> None:
        where = [
            f"{Path(f.filename).name}:{f.lineno}"
            for f in traceback.extract_stack()
            if f.filename.startswith(HONED_SRC)
        ]
        self.violations.append(f"{message} (at {' <- '.join(reversed(where[-4:]))})")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__"):
            return self._attribute(func, name, args)
        out = func(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in FACTORIES or name in LIKE:
            _mark(out, self._created(name, tensors, kwargs))
        elif name in ("to", "cpu", "cuda"):
            _mark(out, self._moved(name, args, kwargs))
        else:
            states = {_state(t) for t in tensors}
            if name not in UNCHECKED and DEVICE in states:
                host = [t for t in tensors if _state(t) == HOST and t.dim() > 0]
                if host:
                    shapes = ", ".join(str(tuple(t.shape)) for t in host[:3])
                    self._violation(f"{name}: device tensors mixed with host tensors {shapes}")
            _mark(out, DEVICE if DEVICE in states else HOST if HOST in states else None)
        return out

    def _attribute(self, func, name: str, args):
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        out = func(*args)
        # Only a tensor really on the CPU reads as the virtual device: a meta tensor (a model
        # built before its weights are loaded) must read `meta`, or `transformers` takes its
        # meta-device construction for a real one and initialises weights there, marking them
        # done, and a loaded model's non-persistent buffers (RoPE's `inv_freq`) stay unwritten.
        if name == "__get__" and attribute == "device" and _state(args[0]) == DEVICE:
            return VIRTUAL if out.type == "cpu" else out
        if name == "__get__" and attribute in ("grad", "data"):
            _mark(out, _state(args[0]))
        if name == "__set__" and attribute == "data":
            _mark(args[0], _state(args[1]))
        return out

    def _created(self, name: str, tensors: list[torch.Tensor], kwargs) -> str | None:
        if "device" in kwargs and kwargs["device"] is not None:
            return _placement(kwargs["device"])
        if name in LIKE:
            return _state(tensors[0]) if tensors else None
        if _caller().startswith(HONED_SRC):
            self._violation(f"torch.{name} called without a device")
        return HOST

    def _moved(self, name: str, args, kwargs) -> str | None:
        if name == "cpu":
            return HOST
        if name == "cuda":
            return DEVICE
        rest = args[1:]
        if rest and isinstance(rest[0], torch.Tensor):
            return _state(rest[0])
        device = kwargs.get("device")
        if device is None and rest and isinstance(rest[0], str | torch.device | int):
            device = rest[0]
        return _state(args[0]) if device is None else _placement(device)
