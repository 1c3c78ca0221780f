"""The per-step checks of an ordinary step in C++ (``tensor_table.cpp``), where they were built for this torch.

An ordinary step (``engine/plan.py``) is checked in full on every step: each gradient's type, layout, dtype,
device, sizes, contiguity, address and storage bounds, each variable's identity, dtype, device, sizes, contiguity,
address, storage bounds, kind and writability, and the same of every state tensor a compiled rule writes. The
module uses public ATen/c10 and CPython APIs only, and builds with all warnings as errors. Asked from Python, each property is a call into torch's
bindings; on many small tensors those calls were most of a step. The C++ module reads them from the tensors
themselves, in one pass per list, with exactly the Python path's verdicts (it refuses a few more exotic tensors
outright: lazily negated or conjugated views and Python-dispatch wrappers, which then take the full path).

The module is built against torch's C++ API, so a build is loaded only under the torch it was built for. Two
builds may be there: a source install's (``pip install --no-build-isolation``, against the environment's very
torch: loaded only under the same version and commit) and a wheel's (``builds/<tag>/``, one per torch minor
version and C++ ABI, made by tools/build_wheel_checks.py: loaded under the same minor version, and trusted only
after it gave the known answers on a few tensors). The first that loads runs; :func:`status` says which. Anywhere
else, or with ``SLOTOPT_TENSOR_TABLE=0`` in the environment, the Python checks run, with the same results.
:func:`use` switches at run time (the tests run both), :func:`choose` between builds.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import operator
import os
from collections.abc import Sequence
from itertools import repeat
from typing import Any, Optional

import torch

__all__ = ["active", "use", "status", "builds", "choose", "make_plan", "fits", "fits_params", "same_tensors", "readable", "bump_versions",
           "gradients", "pin", "still", "first_out_of_range", "scalar", "increment", "slices", "slices_fit", "step_mode", "same_kind"]

_module: Any = None
_grad, _is = operator.attrgetter("grad"), operator.is_
_load_error: Optional[str] = None
_enabled = os.environ.get("SLOTOPT_TENSOR_TABLE", "1").strip().lower() not in ("0", "off", "false", "no")


def _torch_build() -> str:
    return f"{torch.__version__}+{torch.version.git_version}"


def _release(build: str) -> str:
    """``"2.13"`` of ``"2.13.0+cpu+<commit>"``."""
    return ".".join(build.split("+")[0].split(".")[:2])


def _wheel_tag() -> str:
    """The folder under ``builds/`` of the wheel's checks for this torch (setup.py ``wheel_checks_tag``)."""
    major, minor = _release(_torch_build()).split(".")
    return f"torch{major}_{minor}_abi{int(torch.compiled_with_cxx11_abi())}"


def _verified(module: Any) -> Optional[str]:
    """None when ``module`` gives the known answers on a few tensors, else what it got wrong: a build for another
    patch release of this torch line (or a torch whose tensors are laid out otherwise) is not trusted unproven."""
    try:
        t = torch.zeros(4)
        plan = module.make_plan([t])
        param = torch.nn.Parameter(torch.zeros(3))
        param.grad = torch.ones(3)
        counter = torch.zeros((), dtype=torch.int64)
        version = counter._version
        checks = {
            "make_plan": plan is not None,
            "same_tensors": module.same_tensors(plan, [t], False) is True
            and module.same_tensors(plan, [torch.zeros(4)], False) is False,
            "readable": module.readable([t], True) is True and module.readable([torch.zeros(8)[::2]], False) is False,
            "scalar": module.scalar(torch.tensor(0.5)) == 0.5
            and module.scalar(torch.tensor(0.25, dtype=torch.float64)) == 0.25,
            "same_kind": module.same_kind(t, torch.float32, t.device, (4,)) is True
            and module.same_kind(t, torch.float64, t.device, (4,)) is False
            and module.same_kind(t, torch.float32, t.device, (5,)) is False,
            "first_out_of_range": module.first_out_of_range(torch.tensor([0, 2, 7]), 5) == 2,
            "gradients": [tuple(map(id, pair)) for pair in module.gradients([param, torch.nn.Parameter(
                torch.zeros(2))])] == [(id(param.grad), id(param))],
            "increment": module.increment(counter) is True and int(counter) == 1 and counter._version > version,
        }
    except Exception as error:  # (a build that cannot answer is not trusted either)
        return f"{type(error).__name__}: {error}"
    wrong = [name for name, right in checks.items() if not right]
    return f"wrong answers from {', '.join(wrong)}" if wrong else None


def _wheel_build() -> tuple[Any, str]:
    """The wheel's checks for this torch and Python (``builds/<tag>/``), verified, or None and why not."""
    tag = _wheel_tag()
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builds", tag)
    paths = [os.path.join(folder, "_tensor_table" + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    path = next((path for path in paths if os.path.isfile(path)), None)
    if path is None:
        have = sorted(os.listdir(os.path.dirname(folder))) if os.path.isdir(os.path.dirname(folder)) else []
        return None, f"no wheel build for torch {_release(_torch_build())} ({tag}; this wheel has {have or 'none'})"
    try:
        spec = importlib.util.spec_from_file_location(f"{__package__}.builds.{tag}._tensor_table", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as error:
        return None, f"the wheel build for torch {_release(_torch_build())} does not load ({error})"
    if _release(module.torch_version) != _release(_torch_build()):
        return None, f"the wheel build in {tag} is for torch {module.torch_version}"
    problem = _verified(module)
    if problem is not None:
        return None, (f"the wheel build for torch {module.torch_version} failed its check under "
                      f"{_torch_build()} ({problem})")
    return module, f"the wheel's build for torch {_release(module.torch_version)} (built against {module.torch_version})"


def _source_build() -> tuple[Any, str]:
    """The checks a source install built against this torch, or None and why not."""
    try:
        # (by name: an import statement of this package's own module reads, to the layout check, as a circle)
        built = importlib.import_module(f"{__package__}._tensor_table")
    except ImportError as error:
        why = f"not built ({error})"
        try:  # what setup.py recorded: the build failed, or had no torch (plain text, never imported)
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensor_table_build.txt"),
                      encoding="utf-8") as record:
                why = f"not built: {record.read(2000).strip()}"
        except OSError:
            pass
        return None, f"source build {why}"
    if built.torch_version != _torch_build():
        return None, (f"source build for torch {built.torch_version}, this is {_torch_build()}: rebuild slotopt "
                      "from its source against this torch (`pip install --no-build-isolation --force-reinstall "
                      "--no-deps <checkout>`)")
    return built, f"source build, for this torch ({built.torch_version})"


_builds: dict[str, Any] = {}  # the builds that loaded: "source", "wheel"
_build_name: Optional[str] = None


def _load(everything: bool = False) -> None:
    """The source install's build where it is for this torch, else the wheel's for this torch minor version (with
    ``everything``, the other one too where it loads, for :func:`choose`)."""
    global _module, _load_error, _build_name
    reasons = []
    for name, find in (("source", _source_build), ("wheel", _wheel_build)):
        if name in _builds or (_builds and not everything):
            continue
        module, why = find()
        if module is None:
            reasons.append(why)
            continue
        _builds[name] = (module, why)
    if _build_name is None and _builds:
        _build_name = next(iter(_builds))
        _module = _builds[_build_name][0]
    elif not _builds:
        _load_error = "; ".join(reasons) + "; the checks run in Python"


def builds() -> list[str]:
    """The builds of the C++ checks that loaded for this torch and Python, the one in use first: ``"source"``
    (a source install's, built against this very torch) and ``"wheel"`` (the wheel's, for this minor version)."""
    _load(everything=True)
    return sorted(_builds, key=lambda name: name != _build_name)


def choose(name: str) -> str:
    """Runs the checks of build ``name`` (one of :func:`builds`) from now on; returns the one it replaces.

    >>> choose(builds()[0]) in builds() if builds() else True
    True
    """
    global _module, _build_name
    if name not in _builds:
        raise ValueError(f"no {name!r} build of the C++ checks loaded here (loaded: {builds()})")
    previous, _build_name = _build_name, name
    _module = _builds[name][0]
    return previous


def active() -> bool:
    """Whether the C++ checks run now."""
    return _module is not None and _enabled


def use(on: bool) -> bool:
    """Turns the C++ checks on or off (where they loaded); returns the previous setting.

    >>> previous = use(False)
    >>> active()
    False
    >>> _ = use(previous)
    """
    global _enabled
    previous, _enabled = _enabled, bool(on)
    return previous


def status() -> dict[str, Any]:
    """``{"active", "reason"}``: whether the C++ checks run, and why not; with ``"build"`` (``"source"`` or
    ``"wheel"``) when they run."""
    if _module is None:
        return {"active": False, "reason": _load_error or "unavailable"}
    if not _enabled:
        return {"active": False, "reason": "turned off (SLOTOPT_TENSOR_TABLE=0 or use(False))"}
    return {"active": True, "build": _build_name, "reason": _builds[_build_name][1]}


def make_plan(variables: list[torch.Tensor]) -> Any:
    """What ``fits`` compares a step with (the variables' addresses, dtypes, devices and sizes), or None when
    the C++ checks are off or a variable is not a plain contiguous tensor."""
    return _module.make_plan(variables) if active() else None


def fits(table: Any, pairs: Any) -> Optional[tuple[list[torch.Tensor], Optional[bytes], Optional[bool]]]:
    """``(gradients, their addresses, constrained)`` of an ordinary step of ``table``'s plan (addresses None when
    one is not contiguous; ``constrained``: whether a variable has a ``constraint``, None when reading one raised),
    or None: exactly ``StepPlan.fits``'s checks."""
    return _module.fits(table, pairs)


def fits_params(table: Any, params: list[torch.Tensor]) -> Optional[tuple[
        list[torch.Tensor], Optional[bytes], Optional[bool], list[tuple[torch.Tensor, torch.Tensor]]]]:
    """``fits`` for a torch ``step()``: the gradients are the ``.grad`` of ``params`` (plain tensors or
    parameters), read in the same pass; also returns the ``(p.grad, p)`` pairs. None when not ordinary."""
    return _module.fits_params(table, params)


def same_tensors(record: Any, tensors: Sequence[torch.Tensor], bump: bool = False) -> bool:
    """Whether ``tensors`` are the tensors ``record`` (a ``make_plan`` of them) recorded, each unchanged: the same
    object, address, dtype, device and sizes, contiguous, inside its storage and writable now; with ``bump``, when
    they are, each one's version counter moves as well (they are about to be written)."""
    return bool(_module.same_tensors(record, tensors, bump))


def readable(tensors: Sequence[torch.Tensor], written: bool = False) -> bool:
    """Whether a kernel may take every tensor by address: a tensor read directly (no wrapper subclass, functional or
    nested tensor), contiguous and inside its storage, and, when ``written``, writable now (no inference tensor
    outside inference mode)."""
    return _enabled and _module is not None and _module.readable(tensors, written) is True


def bump_versions(tensors: list[torch.Tensor]) -> None:
    """Moves each tensor's version counter, as an in-place torch op does (``torch.autograd.graph.increment_version``
    without its per-tensor cost)."""
    _module.bump_versions(tensors)


def still(table: Any, pairs: Sequence[Any], grads: Sequence[torch.Tensor], addresses: Any) -> bool:
    """Whether the pairs of an ordinary step that ``fits`` proved are still exactly that, with the same gradient
    objects (``grads``) at the same ``addresses`` (a C-contiguous uint64 numpy array, or None): every check of the
    tensors ``fits`` makes, without building its results again. False when the C++ checks are off."""
    if not (_enabled and _module is not None):
        return False
    return _module.still(table, pairs, grads, 0 if addresses is None else addresses.ctypes.data) is True


def pin(rows: Sequence[Any], table: Any, offsets: Any, n: int, itemsize: int) -> Any:
    """A holder of every operand's storage for a kernel call (``pins.pin``: ``table`` uint64 and ``offsets`` int64
    numpy arrays, C-contiguous, kept alive by the caller during this call), or None when an address lies outside
    its tensor's storage now."""
    return _module.pin(rows, table.ctypes.data, offsets.ctypes.data, n, itemsize)


def gradients(params: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(p.grad, p) for p in params if p.grad is not None]``."""
    if not active():
        grads = list(map(_grad, params))  # (each ``.grad`` read once, in one C-level pass)
        if any(map(_is, grads, repeat(None))):
            return [(g, p) for g, p in zip(grads, params) if g is not None]
        return list(zip(grads, params))
    return _module.gradients(params)


# (The per-step helpers below test ``_enabled`` and ``_module`` inline rather than call ``active()``: each is
# called on every step, where a Python call more costs a few microseconds with the caches cold.)
def first_out_of_range(indices: torch.Tensor, rows: int) -> Optional[int]:
    """-1 when every element of ``indices`` is in ``[0, rows)``, else the flat position of the first that is not;
    None when the C++ checks are off or ``indices`` is not a contiguous CPU int64/int32 tensor."""
    return _module.first_out_of_range(indices, rows) if _enabled and _module is not None else None


def scalar(tensor: torch.Tensor) -> Optional[float]:
    """The value of a one-element float32/float64 CPU tensor (exact), or None (off, or another kind)."""
    return _module.scalar(tensor) if _enabled and _module is not None else None


def increment(tensor: torch.Tensor) -> bool:
    """``tensor += 1`` for a one-element int64 CPU tensor autograd does not track (its version counter moves, as
    with ``add_``); False, with nothing done, for anything else or when the C++ checks are off."""
    return _enabled and _module is not None and _module.increment(tensor) is True



def slices(rule_address: int, scalar_type: int, param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
           state: Optional[torch.Tensor], scalars: tuple[float, ...]) -> Optional[int]:
    """Runs the compiled rule on slices at ``rule_address`` (for c10 scalar type ``scalar_type``) after checking its
    operands as ``native.apply_slices`` does: -1 when it ran (the written tensors' versions moved), the position of
    the first index outside the table (nothing written), or None when the operands are not all plain contiguous
    CPU tensors of the expected kinds (the caller's Python path then decides)."""
    return _module.slices(rule_address, scalar_type, param, indices, values, state, scalars)



def slices_fit(values: Any, indices: Any, dense_shape: Any, variable: torch.Tensor) -> bool:
    """True when slices of these parts surely fit ``variable`` (``validation.check_gradient``'s checks, read in
    one call: rows of its row shape, contiguous CPU int64/int32 indices all inside it, a dense shape that is None or
    its shape); False when the C++ checks are off or cannot tell (the Python checks then decide)."""
    return _enabled and _module is not None and _module.slices_fit(values, indices, dense_shape, variable) is True



def same_kind(variable: torch.Tensor, dtype: torch.dtype, device: torch.device, shape: tuple[int, ...]) -> Optional[bool]:
    """Whether ``variable`` has this dtype, device and shape, read in one call; None when the C++ table is off or
    cannot tell (the caller compares in Python)."""
    return _module.same_kind(variable, dtype, device, shape) if _enabled and _module is not None else None


def step_mode() -> Optional[tuple[Any, Any]]:
    """``(enter, leave)``: ``enter()`` turns autograd off and flushes subnormals to zero on this thread (what
    ``torch.no_grad()`` and ``numerics.flush_to_zero()`` do) and returns a token, ``leave(token)`` puts back what it
    found; None when the C++ table is off or was built without the x86 control register (the caller then makes the
    same calls through torch and the kernel library)."""
    enter = getattr(_module, "enter_step", None) if _enabled else None  # (x86 builds only)
    return None if enter is None else (enter, _module.leave_step)


_load()
