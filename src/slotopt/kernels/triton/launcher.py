"""A Triton launch without Triton's per-call work in Python: the compiled kernel's launcher called directly.

``kernel[grid](*arguments, **options)`` makes Triton's ``JITFunction.run`` bind the arguments to the signature,
compute each argument's specialisation, build the cache key and look the compiled kernel up before it calls that
kernel's launcher: about ten microseconds of Python for every launch (``benchmarks/launch_overhead.py``). :func:`launch` takes that route the first time
a combination is seen and keeps what it found (the ``CompiledKernel``, its launcher, function handle and packed
metadata, and the constexprs' values in signature order). A later launch of the same combination calls the
launcher itself, with Triton's own argument list for it: the grid, the current stream, the function handle, the
packed metadata, no launch metadata and no hooks, then the arguments (the per-step values: the table's pointers,
the float scalars by value) followed, from Triton 3.3 on, by the constexprs' values (Triton 3.0-3.2 pass the
non-constexpr arguments only).

The combination (the prepared launch's key) holds everything that decides which kernel Triton would launch: the
kernel, every keyword (the constexprs, ``num_warps``, ``enable_fp_fusion``, ...), the current device, the knobs
that enter Triton's cache key (``TRITON_DEBUG``, the instrumentation mode, ...) and each argument's kind, at
least as fine as Triton's specialisation: a tensor's dtype and whether its address is a multiple of 16; an
integer's width class (i32, i64, u64), whether it is 1 and whether it is a multiple of 16; floats; bools. When
anything differs, the normal route runs (and prepares that combination in turn).

The normal route always runs, and nothing is prepared, when: the installed Triton is not one this module knows
(3.0 up to 3.x; the launcher's calling form is chosen by version), the kernel is interpreted (defined under
``TRITON_INTERPRET=1``: its launch gives no compiled kernel), ``SLOTOPT_TRITON_LAUNCHER=0`` is set (read at the
first launch and at each :func:`configure`) or :func:`configure` turned it off, a launch
hook is set (Triton's ``knobs.runtime.launch_enter_hook``/``launch_exit_hook``, or ``CompiledKernel``'s before
3.4), the kernel has pre-run hooks or a stages-inspection hook is set, an argument is of a kind not listed
above, a constexpr is passed by position, or the prepared argument list does not match the compiled kernel's
signature (checked once, when the launch is prepared). A failure of the direct call drops its entry and the
launch goes through ``kernel[grid]`` instead. Triton's own check that a kernel's globals did not change since it
was compiled is made when the launch is prepared only (slotopt's kernels read no global that changes).

Limits: written from Triton's sources and tested on the CPU only: the key against Triton's own specialisation,
the argument list against kernels compiled for a Hopper target, and the prepared call against the call Triton's
own route makes with a stand-in for the GPU driver (``tests/_hopper_driver.py``; Triton 3.0.0, 3.2.0, 3.3.1,
3.5.1, 3.6.0 and 3.9.0); the fallbacks. The direct call has not run on a GPU yet (``benchmarks/gpu_check.py``'s
``launch`` section checks it bit for bit against the normal route and times both). The prepared route saves the
Python before the launcher (about half of it: its own key costs the rest); the launcher's own work is the same
on both routes.
"""

from __future__ import annotations

import inspect
import operator
import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import torch

__all__ = ["launch", "configure", "enabled", "form", "kind", "plan", "stats", "clear", "Plan"]

#: Entries kept: a few kernels, each with a few tables (a table's alignment is part of the key).
_LIMIT = 512


class Plan(NamedTuple):
    """What a prepared launch passes after the grid: the constexprs' values (in signature order) appended to the
    per-call arguments, or nothing (``tail == ()``, Triton 3.0-3.2, or a kernel without constexprs)."""

    tail: tuple[Any, ...]
    names: tuple[str, ...]  # the launcher's argument names, in order (checked against the compiled signature)


class _Entry(NamedTuple):
    kernel: Any  # (held: the key holds its id)
    compiled: Any  # held, so that its module stays loaded
    run: Any
    function: Any
    packed: Any
    tail: tuple[Any, ...]
    pre_hooks: Any


_prepared: dict[tuple[Any, ...], _Entry] = {}
_refused: set[tuple[Any, ...]] = set()  # combinations whose prepared form did not check out: the normal route
_counts = {"prepared": 0, "normal": 0}
_switch: Optional[bool] = None  # configure(); None: the environment decides
_state: Optional[dict[str, Any]] = None  # the version's form, found once


def configure(enabled: Optional[bool] = None, forget: bool = True) -> None:
    """Turns the prepared route on or off (``None``: ``SLOTOPT_TRITON_LAUNCHER`` decides, on unless ``0``); for
    the device check's same-run comparison. Forgets every prepared launch unless ``forget`` is False."""
    global _switch, _decided
    _switch, _decided = enabled, False
    if forget:
        clear()


def clear() -> None:
    """Forgets every prepared launch (they are made again on the next launches)."""
    _prepared.clear()
    _refused.clear()


def stats() -> dict[str, int]:
    """Launches made each way in this process: ``prepared`` (the launcher called directly) and ``normal``."""
    return dict(_counts, entries=len(_prepared))


def _version(text: str) -> Optional[tuple[int, int]]:
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def form(version: str) -> Optional[str]:
    """The launcher's calling form for a Triton version: ``"all"`` (every bound argument in signature order,
    constexprs included: 3.3 and later 3.x), ``"non-constexpr"`` (the non-constexpr arguments only: 3.0-3.2), or
    None (a version this module does not know: the normal route only). The hooks are read wherever the version
    keeps them (``triton.knobs`` from 3.4 on, ``CompiledKernel`` before)."""
    parsed = _version(version)
    if parsed is None or parsed[0] != 3:
        return None
    return "non-constexpr" if parsed[1] <= 2 else "all"


def enabled() -> bool:
    """Whether a launch may take the prepared route here (a known Triton, not interpreting, not switched off)."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False  # (an interpreted kernel is never prepared: its launch returns no compiled kernel)
    return _decide() is not None


_decided = False  # whether _ready holds the decision (SLOTOPT_TRITON_LAUNCHER is read then: once, and at configure)
_ready: Optional[dict[str, Any]] = None


def _decide() -> Optional[dict[str, Any]]:
    global _decided, _ready
    on = _switch if _switch is not None else os.environ.get("SLOTOPT_TRITON_LAUNCHER", "1") != "0"
    _ready = _found() if on else None
    _decided = True
    return _ready


def _found() -> Optional[dict[str, Any]]:
    """The installed Triton's form and the functions a prepared launch calls, once (None: not known)."""
    global _state
    if _state is None:
        try:
            import triton

            shape = form(triton.__version__)
            _state = {"form": shape} if shape is not None else {}
        except Exception:  # no Triton, or a broken one: the normal route says why
            _state = {}
    return _state if _state.get("form") else None


def _bound(state: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The active driver's device and stream functions and the hook and knob readers, or None when they cannot
    be found (Triton makes its driver at its first launch: the first launch here takes the normal route)."""
    try:
        config = state.get("config")
        if config is None:
            from triton.runtime.driver import driver as config

            state["config"] = config
        active = config.active
        if state.get("driver") is active:
            return state
        state["device"] = active.get_current_device
        state["stream"] = active.get_current_stream
        # The hooks: in triton.knobs from 3.4 on, on CompiledKernel before; both read where they exist.
        try:
            from triton import knobs
        except ImportError:
            knobs = None
        from triton.compiler import CompiledKernel

        if knobs is not None:  # the knobs this version has, read at each launch by one attrgetter each
            present = [name for name in ("runtime.debug", "compilation.instrumentation_mode",
                                         "compilation.fpsan_homomorphic_casts") if _has(knobs, name)]
            state["settings"] = operator.attrgetter(*present)
            state["hooks"] = operator.attrgetter("runtime.launch_enter_hook", "runtime.launch_exit_hook")
            state["inspect"] = (operator.attrgetter("runtime.add_stages_inspection_hook")
                                if _has(knobs, "runtime.add_stages_inspection_hook") else lambda _: None)
            state["chain"] = getattr(knobs, "HookChain", type(None))
        state["knobs"], state["compiled_class"] = knobs, CompiledKernel
        state["driver"] = active
        return state
    except Exception:
        state.pop("driver", None)
        return None


def _quiet(hook: Any) -> bool:
    """No launch hook: None, or a ``HookChain`` (Triton 3.9's knobs) with no calls."""
    return hook is None or (hook.__class__.__name__ == "HookChain" and not getattr(hook, "calls", True))


def _knobs(state: dict[str, Any]) -> Optional[tuple[Any, ...]]:
    """What of Triton's switches enters its cache key or its launch, or None when a hook is set (then the
    normal route runs: it calls them)."""
    knobs = state["knobs"]
    if knobs is None:  # before 3.4: the hooks on CompiledKernel, TRITON_DEBUG read at each launch
        compiled = state["compiled_class"]
        if not (_quiet(getattr(compiled, "launch_enter_hook", None))
                and _quiet(getattr(compiled, "launch_exit_hook", None))):
            return None
        return (os.environ.get("TRITON_DEBUG", "0"),)
    enter, leave = state["hooks"](knobs)
    chain = state["chain"]
    if not (enter is None or enter.__class__ is chain and not enter.calls) \
            or not (leave is None or leave.__class__ is chain and not leave.calls) \
            or state["inspect"](knobs) is not None:
        return None
    return state["settings"](knobs)


def _has(root: Any, dotted: str) -> bool:
    try:
        operator.attrgetter(dotted)(root)
        return True
    except AttributeError:
        return False


_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter


def kind(value: Any) -> Any:
    """An argument's kind in the prepared launch's key: at least as fine as Triton's specialisation of it (a
    tensor's dtype and 16-byte alignment; an integer's width class, whether it is 1, whether it is a multiple of
    16; a float; a bool; None). Raises ``TypeError`` for any other argument (the normal route takes it)."""
    kind_of = type(value)
    if kind_of is float:
        return float
    if kind_of is int:
        width = 0 if -(1 << 31) <= value < (1 << 31) else 1 if -(1 << 63) <= value < (1 << 63) else 2
        if value >= (1 << 64):
            raise TypeError("an integer wider than 64 bits")
        return (width, value == 1, value % 16 == 0)
    if kind_of is _Tensor or kind_of is _Parameter:
        return (value.dtype, (value.data_ptr() & 15) == 0)
    if kind_of is bool:
        return (bool, value)
    if value is None:
        return None
    raise TypeError(f"an argument of type {kind_of.__name__}")


def plan(kernel: Any, arguments: Sequence[Any], options: dict[str, Any], shape: str,
         signature: Optional[dict[Any, str]] = None) -> Optional[Plan]:
    """The prepared argument list's form for ``kernel`` launched with these positional ``arguments`` and keyword
    ``options`` in the launcher form ``shape`` (see :func:`form`), checked against the compiled kernel's
    ``signature`` (``CompiledKernel.src.signature``) when given; None when it cannot be prepared (a constexpr
    by position, a non-constexpr by keyword or missing, a signature that does not match)."""
    params = list(getattr(kernel, "params", ()))
    if not params or len(arguments) > len(params):
        return None
    if any(param.is_constexpr for param in params[:len(arguments)]):
        return None  # (its value would have to enter the key by value: the normal route takes it)
    tail = []
    for param in params[len(arguments):]:
        if not param.is_constexpr:
            return None
        if param.name in options:
            tail.append(options[param.name])
        elif param.default is not inspect.Parameter.empty:
            tail.append(param.default)
        else:
            return None
    if shape == "non-constexpr":
        result = Plan((), tuple(p.name for p in params[:len(arguments)]))
    else:
        result = Plan(tuple(tail), tuple(p.name for p in params))
    if signature is not None and not _matches(result, arguments, params, signature):
        return None
    return result


def _declared(value: Any, declared: str, by_position: bool) -> bool:
    """Whether a signature entry's type fits the argument given for it."""
    if not by_position:
        return declared == "constexpr"
    if isinstance(value, torch.Tensor):
        return declared.startswith("*")
    if type(value) is bool:
        return declared in ("u1", "i1")
    if type(value) is int:  # (Triton 3.3 on: an integer equal to 1 is a constexpr of the signature)
        return declared[:1] in ("i", "u") or (declared == "constexpr" and value == 1)
    if type(value) is float:
        return declared[:2] in ("fp", "bf")
    return value is None and declared == "constexpr"


def _matches(result: Plan, arguments: Sequence[Any], params: list[Any], signature: dict[Any, str]) -> bool:
    """Whether the compiled kernel's signature lists exactly the prepared arguments, in order, each of a type
    its value can be (a pointer for a tensor, fp32 for a float, ...; constexpr for a constexpr)."""
    names = tuple(params[k].name if isinstance(k, int) else k for k in signature)  # (3.0-3.2 may key by index)
    if names != result.names:
        return False
    values = [*arguments, *result.tail]
    return all(_declared(value, str(declared), k < len(arguments))
               for k, (value, declared) in enumerate(zip(values, signature.values())))


def _refuse(key: tuple[Any, ...]) -> None:
    if len(_refused) >= _LIMIT:
        _refused.clear()
    _refused.add(key)


def _normal(kernel: Any, grid: tuple[int, ...], arguments: Sequence[Any], options: dict[str, Any]) -> Any:
    _counts["normal"] += 1
    return kernel[grid](*arguments, **options)


def _key(state: dict[str, Any], kernel: Any, arguments: Sequence[Any], options: dict[str, Any]
         ) -> Optional[tuple[Any, ...]]:
    """The prepared launch's key (see the module's docstring), or None when a hook is set."""
    settings = _knobs(state)
    if settings is None:
        return None
    types = tuple(map(type, arguments))  # (a float's kind is its type: no call for the per-step scalars)
    # (the options' types too: True == 1 and 1024 == 1024.0, which Triton's key, a string, tells apart)
    return (id(kernel), tuple(options.items()), tuple(map(type, options.values())), state["device"](), settings, types,
            *[None if t is float else (a.dtype, (a.data_ptr() & 15) == 0) if t is _Tensor else kind(a)
              for t, a in zip(types, arguments)])  # (a tensor's kind inline: kind()'s, without the call)


def launch(kernel: Any, grid: tuple[int, ...], arguments: Sequence[Any], options: dict[str, Any]) -> None:
    """``kernel[grid](*arguments, **options)``, through the prepared route when it applies (see the module's
    docstring); the same launch either way."""
    state = _ready if _decided else _decide()
    bound = _bound(state) if state is not None and "driver" in state else None
    if bound is None:  # (Triton makes its driver at its first launch: then prepare from the next one)
        compiled = _normal(kernel, grid, arguments, options)
        # (an interpreted kernel gives no compiled kernel: nothing to prepare, no driver to ask for)
        if compiled is not None and state is not None and _bound(state) is not None:
            _prepare(state, kernel, compiled, arguments, options)
        return
    try:
        key = _key(state, kernel, arguments, options)
        entry = _prepared.get(key) if key is not None else None
    except Exception:  # an argument of another kind (TypeError), an unhashable option: Triton decides
        key = entry = None
    if entry is not None and not entry.pre_hooks and grid.__class__ is tuple:  # (a callable grid: Triton's route)
        size = len(grid)
        try:
            entry.run(grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1, state["stream"](key[3]),
                      entry.function, entry.packed, None, None, None, *arguments, *entry.tail)
            _counts["prepared"] += 1
            return
        except Exception:  # the launcher refused its arguments (before launching): the normal route from now on
            _prepared.pop(key, None)
            _refuse(key)
            entry = None
    compiled = _normal(kernel, grid, arguments, options)
    if entry is None and key is not None and key not in _refused:
        _prepare(state, kernel, compiled, arguments, options, key)


def _prepare(state: dict[str, Any], kernel: Any, compiled: Any, arguments: Sequence[Any], options: dict[str, Any],
             key: Optional[tuple[Any, ...]] = None) -> None:
    """Keeps the prepared launch of ``key`` (computed here when None) from the kernel the normal route just
    launched (``compiled``, what ``kernel[grid](...)`` returned), if everything about it checks out; else marks
    the key for the normal route."""
    try:
        if key is None:
            key = _key(state, kernel, arguments, options)
            if key is None:
                return
        found = plan(kernel, arguments, options, state["form"], compiled.src.signature)
        pre_hooks = getattr(kernel, "pre_run_hooks", [])
        run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
        if found is None or pre_hooks or not callable(run) or function is None:
            _refuse(key)
            return
        if len(_prepared) >= _LIMIT:
            _prepared.clear()
        _prepared[key] = _Entry(kernel, compiled, run, function, packed, found.tail, pre_hooks)
    except Exception:  # a form this module does not know (no packed_metadata, say): the normal route
        if key is not None:
            _refuse(key)
