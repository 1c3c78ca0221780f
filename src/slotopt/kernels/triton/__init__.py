"""The CUDA path: update rules as Triton kernels, bit-identical to the foreach kernels, one launch per group.

Each dense rule (``RULES``) is one multi-tensor kernel (``rules.py``): a whole group of tensors, however many,
is one launch over a table of their addresses and chunks (``table.py``), each program one chunk of one tensor in
exactly the foreach kernel's evaluation order (no fused multiply-add, correctly rounded division and root). The
per-step scalars of a float32 group travel in the launch itself, as kernel arguments (no copy, however often
they change); a float64 group's in one small copy that does not block (a Python float argument would be a float32
parameter), sent once per distinct vector. Nothing in a call waits for the device.
Rules on slices (``apply_slices``, Keras 3 on slices leaving untouched rows alone): ``sgd_slices``,
``adagrad_slices``. Other rules, and machines without Triton, use the foreach kernels. Triton is an optional
extra (``pip install 'slotopt[triton]'``); it ships with the CUDA builds of torch. With no GPU, the kernels run
under Triton's interpreter (``TRITON_INTERPRET=1`` set before the first use), which is how the tests check
them against the foreach kernels on the CPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import torch

from ..native import pins, tensor_table
from ..native.scalars import DESCRIPTIONS
from ..native.scalars import SLICE_RULES as _SLICE_STATE
from . import launcher, table
from .rules import RULES, SLICE_RULES, build, generated

try:
    from torch.autograd.graph import increment_version as _increment_version
except ImportError:  # older torch
    _increment_version = torch._C._increment_version  # type: ignore[attr-defined]

__all__ = ["available", "interpreting", "status", "apply", "RULES", "apply_slices", "SLICE_RULES", "launches", "configure",
           "recording", "replay", "note_launch", "failed"]

BLOCK = table.BLOCK
configure = table.configure

_RULES = frozenset(RULES)
_kernels: Optional[dict[str, Any]] = None
_import_error: Optional[str] = None
_launches = 0
#: Rules whose kernel failed to compile or launch here (another Triton: the kernels are proven on 3.6 and later),
#: with the error: they take the foreach kernels from then on (a missing form falls back, never crashes).
_failed: dict[str, str] = {}


def available() -> bool:
    """Whether the ``triton`` package can be imported."""
    global _import_error
    try:
        import triton  # noqa: F401
    except Exception as error:  # ImportError, or a broken install
        _import_error = str(error)
        return False
    return True


def interpreting() -> bool:
    """Whether Triton's kernels run under its interpreter here (``TRITON_INTERPRET=1``: CPU tensors stand in
    for a GPU's, ``kernels.native.use("triton")``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_interpreting = interpreting


def status() -> str:
    """One line: which path CUDA tensors take here, and why."""
    if not available():
        return (f"foreach kernels for CUDA tensors (Triton cannot be imported: {_import_error}; "
                "pip install 'slotopt[triton]')")
    rules = f"{len(RULES)} dense rules + {len(SLICE_RULES)} slice rules"
    if _failed:
        rules += f"; failed here, on foreach: {', '.join(sorted(_failed))}"
    if _interpreting():
        return f"Triton multi-tensor kernels under TRITON_INTERPRET=1 ({rules}; the interpreter: for tests, slow)"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        fixed = table._fixed()
        chunks = (f"chunks of {fixed[0]} in {fixed[1]} warps (SLOTOPT_TRITON_BLOCK)" if fixed else
                  f"chunks of {table.BLOCK} in 4 warps, {table.LARGE[0]} in {table.LARGE[1]} for large tensors")
        return (f"Triton multi-tensor kernels on {name}, one launch per group ({rules}; {chunks}); other rules: "
                "foreach kernels")
    return f"Triton installed, no CUDA device here (CUDA tensors would take the Triton kernels: {rules})"


def launches() -> int:
    """How many Triton launches ran in this process (tests, benchmarks)."""
    return _launches


def _count_launch(count: int = 1) -> None:
    global _launches
    _launches += count


def _kernel(name: str) -> Any:
    global _kernels
    if _kernels is None:
        _kernels = build()
    kernel = _kernels.get(name)
    return kernel if kernel is not None else generated(name, _kernels)  # (described after the first build)


def _unread(rule: str) -> tuple[int, ...]:
    _kernel(rule)
    assert _kernels is not None
    return _kernels[f"_unread_{rule}"]


def apply(rule: str, lists: Sequence[Optional[Sequence[torch.Tensor]]], scalars: Sequence[float],
          read_only: Sequence[int] = (1,), vector: Optional[torch.Tensor] = None) -> bool:
    """Runs ``rule`` with Triton over every tensor of the lists in one launch; False (nothing done) when it does
    not apply.

    Applies to CUDA tensors, or to CPU tensors under ``TRITON_INTERPRET=1``; float32 and float64 only
    (contiguous, one dtype and device), with the compiled rules' scalar vector (see ``kernels/native/rules.inc``).
    An operand list after the first may be one flat tensor holding the whole group (slotopt's packed state). The
    lists at ``read_only`` positions are not written; every other tensor's version counter moves, as torch's own
    in-place ops do.

    ``vector`` (a capturable step, ``engine/capture.py``): the rule's scalar vector as a contiguous tensor of the
    variables' dtype on their device, which the kernel reads (``BY_VALUE=False``) instead of taking ``scalars``
    as arguments: a launch whose arguments do not change from step to step, as a CUDA graph replays it. Its flags
    are still ``scalars``' (they choose the kernel's code).
    """
    global _launches
    first = lists[0]
    if rule not in _RULES or not first or rule in _failed or not available():
        return False
    dtype, device = first[0].dtype, first[0].device
    if dtype not in (torch.float32, torch.float64):
        return False
    if device.type != "cuda" and not _interpreting():
        return False
    description = DESCRIPTIONS.get(rule)  # its operand lists and flags (kernels/native/scalars.py)
    if description is None or len(lists) != description.operands \
            or len(scalars) > len(description.entries):
        return False
    if any(scalars[k] for k in _unread(rule) if k < len(scalars)):
        return False  # an entry of the description the Triton body does not read yet: the other paths know it
    if getattr(lists[1], "gradient_map", None) is not None if len(lists) > 1 else False:
        return False  # gradients still to be mapped as the compiled CPU rules load them (engine/compiled_maps.py)
    launch = table.launch_table(lists, read_only)
    if launch is None:
        return False
    flags = {name: i < len(scalars) and bool(scalars[i]) for name, i in description.flags}
    if flags.get("DECAY") and launch.aliased:
        return False  # a gradient that IS its variable must be read after the decay: the separate ops do that
    if vector is not None and (vector.dtype != dtype or vector.device != device or not vector.is_contiguous()
                               or vector.numel() < len(description.entries)):
        return False
    # Every operand's storage held until the launch is queued, each address of the table proven inside it now
    # (one C++ pass; a slot list the step's Python record holds already, ``Matched.held``, is not taken again):
    # another thread may let one go between reading the addresses and the launch (then torch's ops take the
    # call). Once queued, the caching allocator reuses a freed block only after it, in stream order, as for
    # torch's own ops.
    n = len(first)
    held = pins.pin([_pinned(ts, first, n) for ts in lists], launch.host, launch.offsets, first[0].element_size())
    if held is None:
        return False
    # The written tensors' versions move before the launch, as torch's in-place ops move them (whatever refuses
    # that, an inference tensor outside inference mode, refuses it with nothing written); a slot list proven with
    # its versions moved in the same C++ pass (``Matched.bumped``, ``StepPlan.state_operands``) is not moved again.
    written: list[torch.Tensor] = []
    for i, ts in enumerate(lists):
        if ts is not None and i not in read_only and not getattr(ts, "bumped", False):
            whole = getattr(ts, "flat", None)
            if whole is not None:
                written.append(whole)
            else:
                written.extend(ts)
    if written:
        if tensor_table.active():
            tensor_table.bump_versions(written)
        else:
            _increment_version(written)
    if launch.programs:
        kernel = _kernel(rule)
        if vector is not None:  # the scalars in device memory (a capturable step's, written there on the device)
            by_value, values = False, [0.0] * len(description.entries)
        elif dtype == torch.float32:  # the scalars by value, in the launch: no copy, however often they change
            # (only the pointer's type is used: float32; a tensor with elements, whose address is a real one)
            by_value, vector = True, next(t for t in first if t.numel())
            # (one S argument per entry of the description; missing trailing entries read as 0)
            values = [float(v) for v in scalars] + [0.0] * (len(description.entries) - len(scalars))
        else:  # float64: one small copy that does not block, sent once per distinct vector
            by_value, vector = False, table.scalar_vector(scalars, dtype, device)
            values = [0.0] * len(description.entries)
        arguments = (launch.addresses, launch.meta, vector, launch.tensors, *values)
        options = dict(flags, BY_VALUE=by_value, ALIGNED=launch.aligned, BLOCK=launch.block, ROW=launch.row,
                       num_warps=launch.warps, enable_fp_fusion=False)
        try:
            with torch.cuda.device(device) if device.type == "cuda" else _nothing():
                launcher.launch(kernel, (launch.programs,), arguments, options)  # kernel[grid](...), prepared
        except Exception as error:  # compiling or launching failed: the kernel never ran, nothing is written
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise  # (a capture cannot fall back: the engine names the refusal)
            _fallen_back(rule, error)
            return False
        _launches += 1
        note_launch(kernel, (launch.programs,), arguments, options)
    del held
    return True


def _fallen_back(rule: str, error: Exception) -> None:
    import warnings

    import triton

    _failed[rule] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
    warnings.warn(f"slotopt: the Triton kernel of {rule!r} failed on Triton {triton.__version__} ({_failed[rule]}); "
                  "its foreach kernel runs instead (same bits, more launches). slotopt's Triton kernels are proven "
                  "on Triton 3.6 and later.", RuntimeWarning, stacklevel=3)


def failed() -> dict[str, str]:
    """The rules whose Triton kernel failed here, with the error (they take the foreach kernels)."""
    return dict(_failed)


def _pinned(tensors: Optional[Sequence[torch.Tensor]], first: Sequence[torch.Tensor], n: int) -> Any:
    """What ``pins.pin`` holds of one operand list: nothing where the step's record holds it already, the one
    buffer of a group packed back to back, else each tensor."""
    if tensors is None:
        return first
    if getattr(tensors, "held", False):
        return None
    whole = getattr(tensors, "flat", None)
    if whole is not None:
        return whole
    return tensors[0] if len(tensors) == 1 and n > 1 else tensors


_recorded: Optional[list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]] = None


def note_launch(kernel: Any, grid: tuple[int, ...], arguments: tuple[Any, ...], options: dict[str, Any]) -> None:
    """Adds a launch to the record :func:`recording` keeps (nothing when none is kept)."""
    if _recorded is not None:
        _recorded.append((kernel, grid, arguments, options))


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]]:
    """Records the dense rules' and the capturable scalars' launches made inside (kernel, grid, arguments,
    options): what a CUDA graph records of them. With :func:`replay`, the interpreter's stand-in for
    ``torch.cuda.graph`` (the tests: a capturable step's launches replayed give the bits of steps run anew)."""
    global _recorded
    previous, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = previous


def replay(launches: Sequence[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]) -> None:
    """Runs recorded launches again with the very arguments they were recorded with, in order (the caller keeps
    their operands alive, as a CUDA graph's user does)."""
    for kernel, grid, arguments, options in launches:
        kernel[grid](*arguments, **options)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _on_triton_device(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cuda" or (tensor.is_cpu and _interpreting())


def apply_slices(rule: str, param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                 state: Optional[torch.Tensor], scalars: Sequence[float]) -> bool:
    """Runs the rule on slices ``rule`` (``SLICE_RULES``) with Triton: slice ``j`` (``values[j]``) updates row
    ``indices[j]`` of ``param`` (and of ``state``), the slices in order; the scalar vector is the compiled CPU
    rule's (``kernels.native.apply_slices``). False (nothing done) when it does not apply: Triton missing, not
    CUDA tensors (CPU tensors under ``TRITON_INTERPRET=1``), not float32/float64, anything not contiguous or not
    of ``param``'s dtype, device and row shape, indices not integers, or autograd recording an in-place change.

    Every index is checked before anything is written (one ``aminmax`` on the device, read back: the one
    transfer from the device of this path): one outside ``[0, param.shape[0])`` raises ``ValueError`` naming
    it, and nothing changes.
    """
    global _launches
    if rule not in SLICE_RULES or _SLICE_STATE.get(rule) != (state is not None) \
            or not all([isinstance(v, (float, int)) for v in scalars]):  # Python numbers, as the compiled rule
        return False
    dtype, device = param.dtype, param.device
    if dtype not in (torch.float32, torch.float64) or not _on_triton_device(param) or param.dim() == 0 \
            or not param.is_contiguous():
        return False
    if values.dtype is not dtype or values.device != device or values.dim() != param.dim() \
            or values.shape[1:] != param.shape[1:] or not values.is_contiguous():
        return False
    if state is not None and (state.dtype is not dtype or state.device != device or state.shape != param.shape
                              or not state.is_contiguous()):
        return False
    if indices.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8) \
            or indices.dim() != 1 or indices.shape[0] != values.shape[0] or indices.device != device:
        return False
    if torch.is_grad_enabled() and (param.requires_grad or (state is not None and state.requires_grad)):
        return False  # torch's in-place ops raise their own error there
    if not available():
        return False
    k, rows = values.shape[0], param.shape[0]
    if k:
        low, high = torch.stack(torch.aminmax(indices)).tolist()  # one transfer from the device
        if low < 0 or high >= rows:  # the message names the first bad index, as the other paths do
            from ..rows import check_rows

            check_rows(indices, rows)
        import triton

        width = param.numel() // rows
        block = min(BLOCK, max(32, triton.next_power_of_2(width)))
        # A block at least as wide as its threads (32 per warp): no element is held by two warps, which could
        # otherwise be at different slices and store one slice's value over the next's.
        grid = (triton.cdiv(width, block),)
        tensors = [param, values] if state is None else [param, values, state]
        _kernel(rule)[grid](*tensors, indices.to(torch.int64).contiguous(),
                            table.scalar_vector(scalars, dtype, device), k, width, BLOCK=block,
                            num_warps=max(1, min(4, block // 32)), num_stages=1, enable_fp_fusion=False)
        _launches += 1
    _increment_version([param] if state is None else [param, state])
    return True
