"""The compiled CPU path: every element-wise update rule as one pass over memory, one call per group.

``slotopt_kernels.c`` (with ``rules.inc``) is built at install time into a plain shared library (no Python C
API, no torch C++ ABI, so one build serves every torch version) and loaded here with ``ctypes``. On x86-64 it is
built once per instruction set (``VARIANTS``: baseline SSE2, AVX2, AVX-512; all give the same bits) and the best
one this processor runs is loaded; ``SLOTOPT_KERNELS_ISA`` names one instead. Each rule
reproduces the foreach kernel of the same name operation for operation, so both paths give the same bits;
the foreach kernels stay the specification and the fallback.

Which path runs is chosen by the environment variable ``SLOTOPT_KERNELS``:

* ``auto`` (default): the compiled path where it was built and loads, the foreach kernels elsewhere;
* ``native``: the same, but a library that cannot be loaded is reported by :func:`status` as an error;
* ``foreach``: always the foreach kernels;
* ``triton`` (:func:`use` only, for tests and measurements): CPU tensors take the CUDA path, the Triton kernels
  under Triton's interpreter (``TRITON_INTERPRET=1``), with everything around them as a CUDA tensor's step has
  it (no compiled CPU kernel, map or check of values runs): whole steps of the CUDA path proven on the CPU.

:func:`use` switches at run time (tests compare the two paths this way). A call falls back to the foreach
kernel, silently and with the same result, whenever the compiled path does not apply: a dtype the library was
not built for (a library built before the float16/bfloat16 variants existed), non-contiguous or mixed tensors,
or a variant of a rule not compiled. float16 and bfloat16 rules compute each torch op in float32 and round its result to the half
type, as torch's CPU kernels do, so they too give the foreach kernels' bits. CUDA tensors go to the
Triton twin of the rule (``kernels.triton``) where Triton is installed and has the rule, else to foreach.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch._C._nn import unflatten_dense_tensors

from . import pins, tensor_table, variants
from .operands import _increment_version, _readable, in_storage, is_python_dispatch
from .scalars import SLICE_RULES, Flag, Integer, Scalar, describe, slices
from .variants import VARIANTS

__all__ = ["status", "use", "active", "routes", "compiled", "apply", "calls", "mapped_calls", "takes", "dtypes", "MODES", "Matched",
           "Verified", "FlatViews", "check_bounds", "BoundsError", "NotCompiled", "apply_slices", "SLICE_RULES",
           "VARIANTS", "Scalar", "Flag", "Integer", "slices", "capturable_launcher"]

MODES = ("auto", "native", "foreach", "triton")
ABI_VERSION = 1

_HERE = os.path.dirname(os.path.abspath(__file__))
_SUFFIXES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
_ARGTYPES = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

_library: Optional[ctypes.CDLL] = None
_load_error: Optional[str] = None
_library_path: Optional[str] = None
_mode = "auto"
_dtypes: frozenset[torch.dtype] = frozenset()  # the dtypes the loaded library has rules for
_functions: dict[str, Any] = {}  # the library's functions, looked up and typed once (``_library_function``)
_calls = 0  # compiled calls made so far (tests check that the compiled path really ran)
_mapped_calls = 0  # of which by a rule that mapped its gradients as it loaded them (maps.GradientMap)
#: Whether every call's pointer table is checked in C against its tensors' extents first (``check_bounds``).
_bounds_checks = False
_checked_calls = 0  # calls whose table the bounds check passed (tests check that it really ran)


class NotCompiled(RuntimeError):
    """A call made for the compiled path only (``Verified.chunks``) that the compiled path did not take; nothing
    ran."""


class BoundsError(RuntimeError):
    """A compiled call whose pointer table leaves its tensors (raised instead of running it; debug mode)."""


_variant: Optional[str] = None  # the variant loaded (variants.VARIANTS)
_skipped: list[str] = []  # the better variants not loaded, and why


def _load() -> None:
    """Loads the best variant of the library this processor runs, once; on any failure records why and leaves
    the foreach path in charge."""
    global _library, _load_error, _library_path, _dtypes, _variant, _skipped
    loaded = variants.load(_HERE, ABI_VERSION)
    _library_path, _load_error, _variant, _skipped = loaded.path, loaded.error, loaded.variant, loaded.skipped
    if loaded.library is None:
        return
    _library = library = loaded.library
    # A library built before the float16/bfloat16 variants existed has none of their rules: those dtypes then
    # run foreach.
    _dtypes = frozenset(dtype for dtype, suffix in _SUFFIXES.items() if hasattr(library, f"sgd_{suffix}"))
    if hasattr(library, "slotopt_bounds_checked") and library.slotopt_bounds_checked():
        check_bounds(True)  # built with SLOTOPT_NATIVE_DEBUG=1


def check_bounds(on: bool) -> bool:
    """Turns the debug bounds check of every compiled call on or off; returns the previous setting.

    When on, each call's pointer table is checked in C (``slotopt_check_table``) before the rule runs: every
    pointer with its length must lie inside the tensor it was computed for, as read from the tensor object
    itself, and the offsets must be consistent; a call that fails raises ``BoundsError`` and runs nothing. Also
    on with ``SLOTOPT_NATIVE_DEBUG=1`` in the environment, or with a library built with that variable.

    >>> previous = check_bounds(True)
    >>> _ = check_bounds(previous)
    """
    global _bounds_checks
    if on and _library is not None and not hasattr(_library, "slotopt_check_table"):
        raise RuntimeError(f"{_library_path} predates the bounds check: rebuild it (pip install -e .)")
    previous, _bounds_checks = _bounds_checks, bool(on)
    return previous


def _extent(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes a contiguous tensor covers, read from the tensor object (not from any pointer computed)."""
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def _check_table(table: np.ndarray, offsets: np.ndarray, extents: np.ndarray, element_size: int) -> None:
    """``slotopt_check_table`` on a call (see ``check_bounds``): ``extents[0]``/``[1]`` are each entry's bounds."""
    lists, n = table.shape
    fn = _library.slotopt_check_table
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 4 + [ctypes.c_int64]
    lo, hi = np.ascontiguousarray(extents[0]), np.ascontiguousarray(extents[1])
    table, offsets = np.ascontiguousarray(table), np.ascontiguousarray(offsets)
    bad = fn(lists, n, table.ctypes.data, offsets.ctypes.data, lo.ctypes.data, hi.ctypes.data, element_size)
    global _checked_calls
    _checked_calls += 1
    if bad != -1:
        where = "the offsets" if bad == -2 else f"operand {bad // n}, tensor {bad % n}"
        raise BoundsError(f"compiled call refused by the bounds check: {where} lies outside its tensor "
                          f"(offsets {offsets.tolist()[:8]}...)")


def _library_function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int64) -> Any:
    """The library's function ``name`` with its signature set (looked up once), or None when the loaded library
    predates it (the caller then takes another path)."""
    fn = _functions.get(name)
    if fn is None:
        fn = getattr(_library, name, None)
        if fn is None:
            return None
        fn.argtypes = argtypes
        fn.restype = restype
        _functions[name] = fn
    return fn


def _function(rule: str, dtype: torch.dtype) -> Any:
    """The compiled element-wise rule ``rule`` for ``dtype``, or None when the built library has none (a rule
    written in Python and not yet in C): found by name in what was built, so the foreach kernel runs instead."""
    return _library_function(f"{rule}_{_SUFFIXES[dtype]}", _ARGTYPES, None)


def use(mode: str) -> str:
    """Selects ``"auto"``, ``"native"``, ``"foreach"`` or ``"triton"`` (see the module docstring); returns the
    previous mode. ``"triton"`` is refused (``RuntimeError``, nothing changed) where Triton cannot run CPU
    tensors: not installed, or its interpreter not on (``TRITON_INTERPRET=1`` before Triton's first use).

    >>> previous = use("foreach")
    >>> active()
    False
    >>> _ = use(previous)
    """
    global _mode
    if mode not in MODES:
        raise ValueError(f"Argument `mode` must be one of {MODES}. Received: mode={mode!r}")
    if mode == "triton":
        from .. import triton

        if not triton.available():
            raise RuntimeError(f"use('triton'): Triton cannot be imported here ({triton.status()})")
        if not triton.interpreting():
            raise RuntimeError("use('triton') runs CPU tensors through the Triton kernels under Triton's interpreter: "
                               "set TRITON_INTERPRET=1 before Triton's first use (on a GPU, CUDA tensors take the "
                               "Triton kernels in every mode but 'foreach')")
    previous, _mode = _mode, mode
    return previous


def active() -> bool:
    """Whether element-wise rules on CPU tensors (of the dtypes in :func:`dtypes`) run the compiled kernels now."""
    return _library is not None and _mode != "foreach" and _mode != "triton"


def takes(tensor: torch.Tensor) -> bool:
    """Whether the compiled path runs element-wise rules on tensors like ``tensor`` (device, dtype and kind: a
    wrapper subclass such as torchao's or float8's, whose storage is not its elements, goes to torch's ops)."""
    return _library is not None and _mode != "foreach" and _mode != "triton" and tensor.dtype in _dtypes \
        and tensor.is_cpu and not is_python_dispatch(tensor)


def routes(tensor: torch.Tensor) -> Optional[str]:
    """Which kernels take element-wise rules on tensors like ``tensor`` by address: ``"native"`` (the compiled
    CPU path, :func:`takes`), ``"triton"`` (CUDA tensors where Triton is installed; CPU tensors in the
    ``"triton"`` mode), or None (torch's ops). What a step plan proves operands for (``engine/plan.py``); a rule
    without a form there still falls back, with the same bits."""
    if takes(tensor):
        return "native"
    if _mode == "foreach" or tensor.dtype not in _TRITON_DTYPES or is_python_dispatch(tensor):
        return None
    if tensor.is_cpu:
        return "triton" if _mode == "triton" else None
    if tensor.device.type != "cuda":
        return None
    from .. import triton

    return "triton" if triton.available() else None


_TRITON_DTYPES = (torch.float32, torch.float64)


def dtypes() -> frozenset[torch.dtype]:
    """The dtypes the loaded library has compiled rules for (empty when it is not loaded)."""
    return _dtypes


def status() -> dict[str, Any]:
    """Which kernel path is active and why: ``{"path", "mode", "library", "variant", "reason", "threads"}``
    (``variant``: the instruction set of the library loaded, a key of ``VARIANTS``)."""
    if _mode == "foreach":
        path, reason = "foreach", "forced by SLOTOPT_KERNELS=foreach"
    elif _mode == "triton":
        path, reason = "triton", "CPU tensors through the Triton kernels under Triton's interpreter (use('triton'))"
    elif _library is not None:
        path, reason = "native", f"compiled one-pass kernels loaded ({_variant} variant"
        reason += f"; not taken: {'; '.join(_skipped)})" if _skipped else ")"
    else:
        path, reason = "foreach", _load_error or "unavailable"
    return {"path": path, "mode": _mode, "library": _library_path, "variant": _variant, "reason": reason,
            "threads": torch.get_num_threads(), "error": _mode == "native" and _library is None}


def apply(rule: str, lists: Sequence[Optional[Sequence[torch.Tensor]]], scalars: Sequence[float],
          read_only: Sequence[int] = (1,)) -> bool:
    """Runs ``rule`` over parallel tensor lists in one compiled call; False (nothing done) when it does not apply.

    ``lists`` are the rule's operand lists in order; ``None`` for an absent optional list (the rule's flags in
    ``scalars`` say which are absent). Every tensor must be a contiguous CPU tensor of the first one's dtype and
    the size of its counterpart in the first list. An operand after the first may also be ONE flat tensor
    holding the whole group back to back (slotopt's packed state of small variables, ``engine.state``).
    The lists at ``read_only`` positions (the gradients by default) are not written; every other tensor gets
    its version counter bumped, as torch's own in-place ops do, so that autograd still detects a variable
    modified after it was saved for a backward pass.
    """
    if _library is None or _mode == "foreach" or _mode == "triton":
        return False
    first = lists[0]
    if not first:
        return False
    dtype = first[0].dtype
    if dtype not in _dtypes or first[0].device.type != "cpu":
        return False
    # A gradient list carrying a map (maps.GradientMap: clipping, unscaling, clipvalue of an ordinary step) takes
    # the rule's form that maps each element as it loads it; a rule without one leaves it to the caller.
    gm = getattr(lists[1], "gradient_map", None) if len(lists) > 1 and lists[1] is not None else None
    function = _function(rule, dtype) if gm is None else gm.function(rule, dtype)
    if function is None:  # no compiled form of this rule: the foreach kernel gives the same bits
        return False
    if gm is not None and gm.denominators is not None and len(gm.denominators) != len(first):
        return False
    n = len(first)
    verified = type(first) is Verified
    if verified:
        offsets = first.offsets
        numels: Any = None  # taken from the offsets if another list needs them
    else:
        numels = [t.numel() for t in first]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(numels, out=offsets[1:])
    total = int(offsets[-1])
    table = np.zeros((len(lists), n), dtype=np.uint64)  # an absent list keeps its (null) row
    bumped: list[torch.Tensor] = []  # written tensors whose version counters move (views share their base's)
    extents = np.zeros((2, len(lists), n), dtype=np.uint64) if _bounds_checks else None
    rows: list[Any] = [None] * len(lists)  # what holds each row of the table (``pins.pin``)
    for j, tensors in enumerate(lists):
        if tensors is None:
            continue
        rows[j] = None if type(tensors) is Matched and tensors.held else tensors  # (held already: operands.Held)
        if extents is not None:
            if len(tensors) == n:
                extents[:, j] = np.array([_extent(t) for t in tensors], dtype=np.uint64).T
            else:
                extents[:, j] = np.array(_extent(tensors[0]), dtype=np.uint64)[:, None]
            whole = getattr(tensors, "flat", None)
            if whole is not None:
                extents[:, j] = np.array(_extent(whole), dtype=np.uint64)[:, None]
        addresses = getattr(tensors, "addresses", None) if (j == 0 and verified) or type(tensors) is Matched else None
        if addresses is not None and len(tensors) == n:  # read and checked this step already (engine/plan.py)
            table[j] = addresses
            if j not in read_only and not getattr(tensors, "bumped", False):  # (bumped when checked, plan.py)
                bumped.extend(tensors)
            continue
        whole = getattr(tensors, "flat", None) if len(tensors) == n else None
        if (len(tensors) == 1 and n > 1) or whole is not None:  # one flat buffer for the whole group
            flat = tensors[0] if whole is None else whole
            if not (flat.is_contiguous() and flat.dtype == dtype and flat.is_cpu and flat.numel() == total
                    and _readable([flat], j not in read_only)):
                return False
            table[j] = flat.data_ptr() + offsets[:-1].astype(np.uint64) * flat.element_size()
            rows[j] = flat
            if j not in read_only:
                bumped.append(flat)
            continue
        # Each property once per tensor, in bulk: these loops are the whole Python cost of a step. What the
        # engine has checked already (``Matched``) is not checked again.
        if len(tensors) != n or not _readable(tensors, j not in read_only):
            return False  # (not contiguous, or a kind or a storage a kernel must not take by address)
        if numels is None:
            numels = np.diff(offsets).tolist()
        if (j == 0 or type(tensors) is not Matched) and (any([t.dtype != dtype or not t.is_cpu for t in tensors])
                                                        or (j and [t.numel() for t in tensors] != numels)):
            return False
        table[j] = [t.data_ptr() for t in tensors]
        if j not in read_only:
            bumped.extend(tensors)
    values = np.array(scalars, dtype=np.float64)
    if extents is not None:
        _check_table(table, offsets, extents.reshape(2, -1), first[0].element_size())
    # Every operand's storage held while the kernel runs without the GIL, each address proven inside it now.
    held = pins.pin(rows, table, offsets, first[0].element_size())
    if held is None:
        raise pins.Moved(rule)
    # The written tensors' versions move before the kernel runs, as torch's in-place ops move them: whatever
    # refuses that (an inference tensor outside inference mode) refuses it with nothing written.
    if tensor_table.active():
        tensor_table.bump_versions(bumped)
    else:
        _increment_version(bumped)
    if gm is None:
        function(n, table.ctypes.data, offsets.ctypes.data, values.ctypes.data, torch.get_num_threads())
    else:
        function(n, table.ctypes.data, offsets.ctypes.data, values.ctypes.data, torch.get_num_threads(),
                 gm.scalars.ctypes.data, None if gm.denominators is None else gm.denominators.ctypes.data)
        global _mapped_calls
        _mapped_calls += 1
    del held  # (the storages let go only now)
    global _calls
    _calls += 1
    return True


# SLICE_RULES, the compiled rules on slices (``apply_slices``): name -> whether the rule has a state tensor, derived
# from their descriptions (``scalars.slices``, next to their torch forms), one table with the Triton twins'.
_SLICE_ARGTYPES = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 5
_DOUBLES = [ctypes.c_double * n for n in range(4)]  # the scalar vectors' types (made once: a class per call is slow)


def _slice_function(rule: str, dtype: torch.dtype) -> Any:
    """The compiled rule on slices ``rule`` for ``dtype``, or None in a library built before them (the torch path
    runs)."""
    return _library_function(f"{rule}_{_SUFFIXES[dtype]}", _SLICE_ARGTYPES)


def apply_slices(rule: str, param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                 state: Optional[torch.Tensor], scalars: Sequence[float]) -> bool:
    """Runs the compiled rule on slices ``rule`` (``SLICE_RULES``): slice ``j`` (``values[j]``) updates row
    ``indices[j]`` of ``param`` (and of ``state``), one serial pass in slice order. False (nothing done) when the
    compiled path does not apply: not active, a dtype not compiled, anything not a contiguous CPU tensor of
    ``param``'s dtype and row shape, indices not integers, or autograd recording an in-place change of ``param``.
    CUDA tensors go to the Triton twin of the rule (``kernels.triton.apply_slices``) where Triton is installed.

    Every index is checked in C before anything is written: one outside ``[0, param.shape[0])`` raises
    ``ValueError`` naming it, and nothing changes. (This check is always on: indices are data, not pointers
    slotopt computed, so it does not depend on ``check_bounds``.)
    """
    if _mode == "foreach":
        return False
    dtype = param.dtype
    if _mode == "triton":  # (CPU tensors as a CUDA tensor's step takes them)
        from .. import triton

        return triton.apply_slices(rule, param, indices, values, state, scalars)
    address = _slice_address(rule, dtype) if _library is not None and dtype in _dtypes else 0
    if address and tensor_table.active():
        # The operand checks below and the call, in one C++ call (None: not taken there, e.g. a CUDA tensor; this
        # path decides).
        bad = tensor_table.slices(address, _SCALAR_TYPES[dtype], param, indices, values, state,
                                  tuple(map(float, scalars)))
        if bad is not None:
            if bad != -1:
                _refuse_indices(indices, param.shape[0])
            global _calls
            _calls += 1
            return True
    if param.device.type == "cuda":  # the Triton twin of the rule where Triton is installed
        from .. import triton

        return triton.apply_slices(rule, param, indices, values, state, scalars)
    if _library is None:
        return False
    if dtype not in _dtypes or not param.is_cpu or param.dim() == 0 or not param.is_contiguous():
        return False
    if values.dtype is not dtype or not values.is_cpu or values.shape[1:] != param.shape[1:] \
            or values.dim() != param.dim() or not values.is_contiguous():
        return False
    if state is not None and (state.dtype is not dtype or not state.is_cpu or state.shape != param.shape
                              or not state.is_contiguous()):
        return False
    if indices.dtype is not torch.int64:
        if indices.dtype not in (torch.int32, torch.int16, torch.int8, torch.uint8):
            return False
        indices = indices.to(torch.int64)
    if indices.dim() != 1 or indices.shape[0] != values.shape[0] or not indices.is_cpu:
        return False
    if torch.is_grad_enabled() and (param.requires_grad or (state is not None and state.requires_grad)):
        return False  # torch's in-place ops raise their own error there
    fn = _slice_function(rule, dtype)
    if fn is None:
        return False
    if not indices.is_contiguous():
        indices = indices.contiguous()
    k, rows = values.shape[0], param.shape[0]
    width = param.numel() // rows if rows else 0
    if any(map(is_python_dispatch, (param, indices, values, *([] if state is None else [state])))):
        return False  # a wrapper subclass: torch's ops take it
    written = [param] if state is None else [param, state]
    if not (all(map(in_storage, (param, indices, values, *written[1:])))
            and (torch.is_inference_mode_enabled() or not any([t.is_inference() for t in written]))):
        return False  # (torch's ops refuse or handle it; the versions below can then not fail after the kernel)
    values_array = _DOUBLES[len(scalars)](*scalars)
    # The operands' storages held while the rule runs without the GIL (ctypes releases it), their addresses read
    # and proven inside them once (``pins``).
    pinned = pins.pin_tensors([indices, values, *written])
    if pinned is None:
        raise pins.Moved(rule)
    held, addresses = pinned
    bad = fn(rows, width, k, int(addresses[0]), int(addresses[1]), int(addresses[2]),
             int(addresses[3]) if state is not None else None, values_array)
    del held
    if bad != -1:
        _refuse_indices(indices, rows)
    if tensor_table.active():
        tensor_table.bump_versions(written)
    else:
        _increment_version(written)
    _calls += 1
    return True


#: torch's dtypes by their number in c10's ``ScalarType`` (what the C++ table compares a tensor's dtype with).
_SCALAR_TYPES = {torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.bfloat16: 15}
_slice_addresses: dict[tuple[str, torch.dtype], int] = {}


def _slice_address(rule: str, dtype: torch.dtype) -> int:
    """The address of the compiled rule on slices ``rule`` for ``dtype``, 0 when the library lacks it."""
    key = (rule, dtype)
    address = _slice_addresses.get(key)
    if address is None:
        fn = _slice_function(rule, dtype)
        address = _slice_addresses[key] = ctypes.cast(fn, ctypes.c_void_p).value or 0 if fn is not None else 0
    return address


def _refuse_indices(indices: torch.Tensor, rows: int) -> None:
    """Raises the torch path's error for an index outside ``[0, rows)`` (a compiled rule on slices found one and
    wrote nothing): one message on every path."""
    from ..rows import check_rows  # (rows.py imports this package: imported when needed)

    check_rows(indices, rows)


class FlatViews(list):  # type: ignore[type-arg]
    """Per-variable views of one flat buffer, back to back in list order (slotopt's packed state of small
    variables). ``apply`` computes their pointers from the buffer's, with no per-tensor Python."""

    #: What the Triton launch table reads it as (``kernels/triton/table.py``, ``proven``): one buffer.
    launch_role = "packed"

    def __init__(self, views: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
        super().__init__(views)
        self.flat = flat


class Matched(list):  # type: ignore[type-arg]
    """Gradients the engine checked in this step against their variables, the first operand list of the call:
    each has its variable's dtype, device and shape. ``apply`` then only reads their contiguity and addresses
    (the variables themselves are always checked: their storage may have been swapped since), or takes
    ``addresses`` when the engine read them this step (all contiguous)."""

    addresses: Any
    #: What the Triton launch table reads it as (``proven``): operands proven in this step, by ``addresses``.
    launch_role = "proven"
    #: Whether their version counters already moved for this call (``StepPlan.state_operands``, checked in C++).
    bumped = False
    #: Whether their storages are held through this call by the record that proved them in this step
    #: (``operands.Held``, the Python checks): ``pins.pin`` need not take them again.
    held = False


class Verified(list):  # type: ignore[type-arg]
    """Variables whose dtype, device, contiguity, sizes and ``addresses`` the engine has checked this step (an
    ordinary step, engine/plan.py): a CPU float32/float64 group of one dtype. ``apply`` takes them as they are."""

    #: Pieces of one tensor (``chunks``) rather than tensors: never run by a foreach kernel.
    chunked = False
    #: What the Triton launch table reads it as (``proven``): the plan's variables, by ``addresses``/``offsets``.
    launch_role = "variables"

    def __init__(self, variables: Sequence[torch.Tensor], addresses: Sequence[int]) -> None:
        super().__init__(variables)
        self.dtype = variables[0].dtype
        self.addresses = np.array(addresses, dtype=np.uint64)
        self.offsets = np.zeros(len(variables) + 1, dtype=np.int64)
        np.cumsum([t.numel() for t in variables], out=self.offsets[1:])

    @classmethod
    def chunks(cls, tensor: torch.Tensor, chunk: int) -> Verified:
        """A contiguous CPU ``tensor`` as consecutive pieces of ``chunk`` elements (the last one shorter), for a
        compiled call whose other operands are the whole tensors' buffers or per-piece pointers (the one-pass
        sparse update, engine/sparse_pass.py). No Python object per piece: offsets and addresses in numpy."""
        total = tensor.numel()
        pieces = cls.__new__(cls)
        list.__init__(pieces, [tensor] * -(-total // chunk))
        pieces.dtype = tensor.dtype
        pieces.offsets = np.minimum(np.arange(len(pieces) + 1, dtype=np.int64) * chunk, total)
        pieces.addresses = (tensor.data_ptr() + pieces.offsets[:-1] * tensor.element_size()).astype(np.uint64)
        pieces.chunked = True
        return pieces


def _unpacked(lists: Sequence[Any]) -> list[Any]:
    """The lists with a flat group buffer (see ``apply``) cut back into views shaped like the first list."""
    first = lists[0]
    return [tensors if tensors is None or len(tensors) == len(first) or len(first) < 2
            else list(unflatten_dense_tensors(tensors[0], list(first))) for tensors in lists]


def mapped_calls() -> int:
    """How many of :func:`calls` mapped their gradients as they loaded them (no buffer of mapped gradients)."""
    return _mapped_calls


def calls() -> int:
    """How many compiled calls ran in this process (a group of any size counts once)."""
    return _calls


def _triton_apply(rule: str, lists: Sequence[Any], values: Sequence[float], read_only: Sequence[int]) -> bool:
    from .. import triton

    return rule in triton.RULES and triton.apply(rule, lists, values, read_only)


def compiled(rule: str, operands: int, scalars: Sequence[Scalar | Flag | Integer], read_only: Sequence[int] = (1,),
             foreach_if: Optional[str] = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorates a foreach kernel with its compiled twin ``rule``.

    ``operands`` is how many positional arguments are tensor lists; ``scalars`` describes the compiled rule's
    scalar vector, in order (``native.scalars``: a ``Scalar`` for a number, a ``Flag`` for 0/1, e.g. whether an
    optional list is present, an ``Integer`` computed from the arguments): the Python marshalling is generated
    from it (``run.scalar_vector``), and so is the C header the rule reads it through (``rules_scalars.h``).
    ``foreach_if``: a keyword argument (or ``"not <argument>"``) under which the variant has no compiled form (the
    foreach kernel then runs). ``read_only``: the positions of the lists the rule does not write (the gradients by
    default).
    """

    def decorate(kernel: Callable[..., None]) -> Callable[..., None]:
        scalar_vector = describe(rule, kernel, operands, tuple(scalars), foreach_if, tuple(read_only)).vector

        @functools.wraps(kernel)
        def run(*lists: Any, **kwargs: Any) -> None:
            while len(lists) > operands and lists[-1] is None:  # absent optional terms: the dense rule
                lists = lists[:-1]
            launcher = _capturable.launcher
            if launcher is not None and len(lists) == operands and lists[0] \
                    and (values := scalar_vector(*lists, **kwargs)) is not None \
                    and all([isinstance(v, (float, int)) for v in values]) and launcher(rule, lists, values, read_only):
                return None  # a capturable step's launch, its scalars on the device (engine/capture.py)
            if _mode != "foreach" and len(lists) == operands and lists[0]:
                on_cuda = _mode == "triton" or lists[0][0].device.type == "cuda"  # (the Triton kernels')
                if (_library is not None or on_cuda) and (values := scalar_vector(*lists, **kwargs)) is not None \
                        and all([isinstance(v, (float, int)) for v in values]):
                    # Python numbers only: a tensor-valued hyperparameter is a different foreach op.
                    if apply(rule, lists, values, read_only) if not on_cuda else _triton_apply(rule, lists, values, read_only):
                        return None
            if getattr(lists[0], "chunked", False):
                raise NotCompiled(rule)  # pieces of one tensor: the foreach kernel must not see them
            if len(lists) > 1 and (gm := getattr(lists[1], "gradient_map", None)) is not None:
                lists = (lists[0], gm.materialize(lists[1]), *lists[2:])  # (the foreach kernel: mapped first)
            return kernel(*_unpacked(lists), **kwargs)

        run.foreach = kernel  # type: ignore[attr-defined]
        run.rule = rule  # type: ignore[attr-defined]
        run.scalar_vector = scalar_vector  # type: ignore[attr-defined]
        return run

    return decorate


class _Capturable(threading.local):
    launcher: Optional[Callable[..., bool]] = None


_capturable = _Capturable()


def capturable_launcher(launcher: Optional[Callable[..., bool]]) -> Optional[Callable[..., bool]]:
    """Sets this thread's launcher of capturable steps (``engine/capture.py``; None: none) and returns the one
    before. While set, each compiled rule is offered to it first (``launcher(rule, lists, values, read_only)``,
    True when it ran the rule)."""
    previous, _capturable.launcher = _capturable.launcher, launcher
    return previous


def _initial_mode() -> str:
    mode = os.environ.get("SLOTOPT_KERNELS", "auto").strip().lower() or "auto"
    if mode not in MODES:
        warnings.warn(f"SLOTOPT_KERNELS must be one of {MODES}; got {mode!r}, using 'auto'", stacklevel=2)
        return "auto"
    return mode


_mode = _initial_mode()
if _mode == "triton":  # (proven runnable as use('triton') proves it)
    _mode = "auto"
    try:
        use("triton")
    except RuntimeError as refused:
        warnings.warn(f"SLOTOPT_KERNELS=triton: {refused}; using 'auto'", stacklevel=2)
_load()  # also under "foreach", so that use("native") can switch at run time
if _library is not None and os.environ.get("SLOTOPT_NATIVE_DEBUG", "").strip() not in ("", "0"):
    check_bounds(True)


#: The exponent field of each floating dtype: all ones in an inf or a NaN, and only there.
_EXPONENT_MASKS = {torch.float32: 0x7F800000, torch.float64: 0x7FF0000000000000, torch.float16: 0x7C00,
                   torch.bfloat16: 0x7F80}


def first_nonfinite(addresses: np.ndarray, offsets: np.ndarray, dtype: torch.dtype,
                    tensors: Optional[Callable[[], Sequence[torch.Tensor]]] = None) -> Optional[int]:
    """The index of the first of a group of contiguous CPU tensors of ``dtype`` (their data ``addresses``, uint64,
    and the ``offsets``, int64, the prefix sums of their element counts) holding an inf or a NaN, -1 when every
    element is finite, or None when the compiled path is off or its library predates this check (the caller
    checks another way). The caller vouches for the addresses (an ordinary step's, read this step); ``tensors()``
    gives the tensors themselves, whose storages are held while the check runs without the GIL (``pins``; without
    them, None: not taken)."""
    if not active() or dtype not in _EXPONENT_MASKS or tensors is None:
        return None
    fn = _library_function("slotopt_first_nonfinite", [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                                       ctypes.c_int64, ctypes.c_uint64, ctypes.c_int])
    if fn is None:
        return None
    addresses, offsets = np.ascontiguousarray(addresses, dtype=np.uint64), np.ascontiguousarray(offsets, np.int64)
    held = pins.pin([tensors()], addresses.reshape(1, -1), offsets, dtype.itemsize)
    if held is None:
        return None
    index = fn(len(addresses), addresses.ctypes.data, offsets.ctypes.data, dtype.itemsize, _EXPONENT_MASKS[dtype],
               torch.get_num_threads())
    del held
    return None if index < -1 else int(index)


#: The dtype codes of ``slotopt_unscale``.
_UNSCALE_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


def unscale_into(addresses: np.ndarray, offsets: np.ndarray, dtype: torch.dtype, out: torch.Tensor,
                 scale: float, tensors: Optional[Callable[[], Sequence[torch.Tensor]]] = None) -> Optional[bool]:
    """``out = cat(group).to(promote_types(dtype, float32)) / scale`` in one pass over a group of contiguous CPU
    tensors of ``dtype`` read where they are (``addresses`` and ``offsets`` as for :func:`first_nonfinite`), the
    same bits as torch's; returns whether an element of the group is inf or NaN (tested before the division; ``out``
    is then partly written), or None when the compiled path is off or its library predates this kernel (nothing
    done). ``out``: a contiguous CPU tensor of the unscaled dtype holding exactly the group's elements; ``scale``:
    the value of a float32 scale (a float32 ``out`` divides by it as float32, a float64 one as float64). The caller
    vouches for the addresses (an ordinary step's, read this step); ``tensors()``, the group itself, gives the
    storages held while the kernel runs without the GIL (``pins``; without it, None: not taken), and with the
    bounds check on (``check_bounds``) is checked against the addresses first."""
    if not active() or dtype not in _UNSCALE_DTYPES or tensors is None:
        return None
    unscale = _library_function("slotopt_unscale", [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                    ctypes.c_void_p, ctypes.c_double, ctypes.c_int])
    if unscale is None:
        return None
    total = int(offsets[-1])
    if not (out.dtype == torch.promote_types(dtype, torch.float32) and out.is_cpu and out.is_contiguous()
            and out.numel() == total and len(offsets) == len(addresses) + 1):
        raise ValueError(f"unscale_into: `out` must be a contiguous CPU tensor of "
                         f"{torch.promote_types(dtype, torch.float32)} and {total} elements for "
                         f"{len(addresses)} tensors. Received: out of {out.dtype}, {tuple(out.shape)} on "
                         f"{out.device}, offsets of length {len(offsets)}")
    if _bounds_checks and tensors is not None:
        extents = np.array([_extent(t) for t in tensors()], dtype=np.uint64).reshape(-1, 2).T
        _check_table(np.asarray(addresses, dtype=np.uint64).reshape(1, -1), offsets, extents, dtype.itemsize)
    addresses, offsets = np.ascontiguousarray(addresses, dtype=np.uint64), np.ascontiguousarray(offsets, np.int64)
    held = pins.pin([tensors()], addresses.reshape(1, -1), offsets, dtype.itemsize)
    pinned_out = pins.pin_tensors([out])
    if held is None or pinned_out is None:
        return None
    found = unscale(len(addresses), addresses.ctypes.data, offsets.ctypes.data, _UNSCALE_DTYPES[dtype],
                     int(pinned_out[1][0]), scale, torch.get_num_threads())
    del held, pinned_out
    if found < 0:  # a dtype code the library does not know (nothing done)
        return None
    _increment_version([out])  # written in place, as torch's own in-place ops record
    global _calls
    _calls += 1
    return found == 1
