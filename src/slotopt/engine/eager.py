"""Steps run eagerly, never traced by ``torch.compile``, at no cost when nothing is being compiled.

A step reproduces TensorFlow's float32 roundings with Python-float scalar math and calls compiled C kernels
through opaque calls: traced by Dynamo it would give other bits. So ``step()`` and ``run_step`` are kept out of
Dynamo, as ``torch._disable_dynamo(recursive=True)`` keeps a function out: a compiled training step that calls
them breaks its graph there and runs them whole, eagerly, with no frame inside them compiled.

That decorator costs a Python wrapper on every call (it switches the frame-evaluation hook off and back on, and
asks whether an export is running): about 30 µs per call with the caches cold, as they are between two training
steps, which was a tenth of a small sparse step. ``outside_dynamo`` gives the same guarantee cheaper:

* Dynamo never compiles the entry function's own frame (its code is marked SKIP in Dynamo's C frame hook, as
  ``torch._dynamo.skip`` marks code) and does not inline it when tracing a caller (``_torchdynamo_disable``, the
  marker ``torch.compiler.disable`` leaves): a caller's graph breaks at the call.
* At run time the entry asks the C hook whether a frame-evaluation callback is installed. With none (plain eager
  code, or already inside a disabled region) the wrapper would change nothing, so the function is called
  directly; otherwise (a compiled function running on, or an export) the call goes through the wrapper.

Where the private hooks this reads are missing (another torch), the decorator is used as it is.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import torch

__all__ = ["outside_dynamo"]

F = TypeVar("F", bound=Callable[..., Any])


def _hooks() -> Any:
    """``(callback getter, code marker)`` from Dynamo's C frame hook, or None on a torch without them."""
    try:
        frames = torch._C._dynamo.eval_frame
        skip = frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.DEFAULT)
        get_callback, set_strategy = frames.get_eval_frame_callback, frames.set_code_exec_strategy
    except (AttributeError, TypeError, RuntimeError):
        return None
    return get_callback, lambda code: set_strategy(code, skip)


_HOOKS = _hooks()


def outside_dynamo(fn: F) -> F:
    """``fn`` kept out of ``torch.compile`` (see the module docstring)."""
    disabled = torch._disable_dynamo(fn, recursive=True)
    if _HOOKS is None:
        return disabled  # type: ignore[return-value]
    callback, mark_skipped = _HOOKS
    exporting = getattr(torch.compiler, "is_exporting", lambda: False)

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        if callback() is None and not exporting():  # nothing to switch off: the wrapper would change nothing
            return fn(*args, **kwargs)
        return disabled(*args, **kwargs)

    mark_skipped(entry.__code__)
    entry._torchdynamo_disable = True  # type: ignore[attr-defined]
    return entry  # type: ignore[return-value]
