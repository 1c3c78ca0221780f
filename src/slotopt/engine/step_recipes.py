"""A capturable step's per-step scalars as data: each entry a small tree of operations over the step count.

A face says how each per-step entry of a rule's scalar vector (``kernels/native/scalars.py``) follows from the
step count (:func:`step`) and constants it rounded itself (:func:`const`): Keras 3 Adam's ``alpha`` is
``(lr * sqrt(1 - b2 ** t)) / (1 - b1 ** t)``, written with the same operators on :class:`Expr` as its host form
on 0-d tensors. Every operation is rounded once in its dtype (float32 or float64, as ``engine.constants.evaluate``
rounds them), subnormal results flushed to zero (a step runs flushed, as TensorFlow's kernels do); ``pow`` is the
C library's (``powf``/``pow``, :func:`slotopt.numerics.scalar_pow`).

A tree is evaluated two ways: here on the host (:func:`evaluate`, numpy scalars of the dtype, the C library's pow
through ``numerics``), and on the device by the kernel ``kernels/triton/step_scalars.py`` generates from its
:func:`program`. Before a capturable step's first launch the host's evaluation at this step is compared, bit for
bit, with the value the face's host path computed for the same entry (``engine/capture.py``): a tree that is not
the face's arithmetic, or constants that are not its, are found before anything runs; the tests prove the
device's evaluation of every program against this one.

A tree whose value does not depend on the step is a constant of the configuration: written once into the vector
(and again outside a capture when it changes); only the others are computed on the device at each step.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch

from .. import numerics

__all__ = ["Expr", "step", "const", "loaded", "state", "sqrt", "pow", "cos", "floor", "cast", "minimum", "ceil", "equal", "where", "less_equal", "greater", "evaluate",
           "program", "Program",
           "depends_on_step", "scalars_of", "adam_alpha"]

Number = Union[int, float]
_NP = {torch.float32: np.float32, torch.float64: np.float64}
_NAMES = {torch.float32: "float32", torch.float64: "float64"}
_DTYPES = {name: dtype for dtype, name in _NAMES.items()}
_INTERNED: dict[Any, Any] = {}
_PROGRAMS: dict[Any, Any] = {}
_INTERNED_MAX = 8192


class Expr:
    """One operation (``op``) of ``args`` rounded in ``dtype``; leaves: ``step`` (``args``: the offset added to
    the step count), ``const`` (``args``: the value, already a number of ``dtype``), ``load`` and ``state``.
    (A plain class with slots: a step builds a few dozen of them.)"""

    __slots__ = ("op", "dtype", "args", "__weakref__")

    def __new__(cls, op: str, dtype: torch.dtype, args: tuple[Any, ...]) -> Expr:
        # Interned: the same operation of the same operands is the same object, so that a face's recipe built
        # again at the next step is the tree of the last one, and its program is found, not lowered again
        # (leaves with a step's own value, ``load`` and ``state``, are new each step)
        key = (op, dtype, tuple(id(a) if isinstance(a, (Expr, torch.Tensor)) else
                                (a, math.copysign(1.0, a)) if isinstance(a, float) else a for a in args))  # (-0.0)
        known = _INTERNED.get(key)
        if known is not None:
            return known
        x = object.__new__(cls)
        x.op, x.dtype, x.args = op, dtype, args
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()  # (bounded: a rate changed at every step makes new trees)
            _PROGRAMS.clear()
        _INTERNED[key] = x  # (kept alive here: the ids in the keys stay theirs)
        return x

    def __repr__(self) -> str:
        return f"Expr({self.op!r}, {_NAMES.get(self.dtype, self.dtype)}, {self.args!r})"

    def _other(self, x: Union[Expr, Number]) -> Expr:
        if isinstance(x, Expr):
            if x.dtype != self.dtype:
                raise TypeError(f"an operation of {_NAMES[self.dtype]} and {_NAMES[x.dtype]} terms: cast one")
            return x
        return const(x, self.dtype)  # (a Python number beside a tensor: rounded to its dtype, as torch does)

    def __add__(self, x: Union[Expr, Number]) -> Expr:
        return Expr("add", self.dtype, (self, self._other(x)))

    def __radd__(self, x: Number) -> Expr:
        return Expr("add", self.dtype, (self._other(x), self))

    def __sub__(self, x: Union[Expr, Number]) -> Expr:
        return Expr("sub", self.dtype, (self, self._other(x)))

    def __rsub__(self, x: Number) -> Expr:
        return Expr("sub", self.dtype, (self._other(x), self))

    def __mul__(self, x: Union[Expr, Number]) -> Expr:
        return Expr("mul", self.dtype, (self, self._other(x)))

    def __rmul__(self, x: Number) -> Expr:
        return Expr("mul", self.dtype, (self._other(x), self))

    def __truediv__(self, x: Union[Expr, Number]) -> Expr:
        return Expr("div", self.dtype, (self, self._other(x)))

    def __rtruediv__(self, x: Number) -> Expr:
        return Expr("div", self.dtype, (self._other(x), self))

    def __neg__(self) -> Expr:
        return Expr("neg", self.dtype, (self,))


def _dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in _NP:
        raise TypeError(f"per-step scalars are float32 or float64, not {dtype}")
    return dtype


def step(dtype: torch.dtype, offset: int = 0) -> Expr:
    """The step count (the device's, after this step's increment) plus ``offset``, as a number of ``dtype``."""
    return Expr("step", _dtype(dtype), (int(offset),))


def const(value: Number, dtype: torch.dtype) -> Expr:
    """A constant, rounded once to ``dtype`` (pass numbers the face has rounded itself, e.g. ``K.cast``)."""
    dtype = _dtype(dtype)
    return Expr("const", dtype, (float(_NP[dtype](value)),))


def loaded(tensor: torch.Tensor, value: Number, dtype: torch.dtype) -> Expr:
    """The value of a one-element device ``tensor`` (a face's state: Nadam's ``u_product``), read on the device
    when the program runs; ``value``: what the host knows it holds then (its evaluation here). One such tensor
    per program."""
    dtype = _dtype(dtype)
    return Expr("load", dtype, (float(_NP[dtype](value)), tensor))


def state(k: int, value: Number, dtype: torch.dtype) -> Expr:
    """Slot ``k`` of the group's own device state (a running product the face keeps on the host, TF1's
    ``beta1_power``), a number of ``dtype``; ``value``: what the host holds this step. A program's ``updates``
    write each slot's next value after its entries are computed."""
    dtype = _dtype(dtype)
    return Expr("state", dtype, (float(_NP[dtype](value)), int(k)))


def sqrt(x: Expr) -> Expr:
    """The correctly rounded square root."""
    return Expr("sqrt", x.dtype, (x,))


def pow(base: Union[Expr, Number], exponent: Expr) -> Expr:  # noqa: A001 (the C library's name)
    """The C library's ``powf``/``pow`` (TensorFlow's ``Pow`` of a scalar)."""
    base = exponent._other(base)
    return Expr("pow", exponent.dtype, (base, exponent._other(exponent)))


def cos(x: Expr) -> Expr:
    """The C library's ``cosf``/``cos`` (``numerics.cos``)."""
    return Expr("cos", x.dtype, (x,))


def floor(x: Expr) -> Expr:
    """``floor`` (exact)."""
    return Expr("floor", x.dtype, (x,))


def ceil(x: Expr) -> Expr:
    """``ceil`` (exact)."""
    return Expr("ceil", x.dtype, (x,))


def equal(x: Expr, y: Union[Expr, Number], dtype: torch.dtype) -> Expr:
    """``x == y`` as 1 or 0 of ``dtype`` (exact)."""
    return Expr("eq", _dtype(dtype), (x, x._other(y)))


def where(condition: Expr, x: Expr, y: Union[Expr, Number]) -> Expr:
    """``x`` where ``condition`` (a 1 or 0) is not 0, else ``y``: a selection, no arithmetic."""
    return Expr("where", x.dtype, (condition, x, x._other(y)))


def minimum(x: Expr, y: Union[Expr, Number]) -> Expr:
    """The smaller of two numbers (neither NaN here: the schedules' operands)."""
    return Expr("min", x.dtype, (x, x._other(y)))


def less_equal(x: Expr, y: Union[Expr, Number], dtype: torch.dtype) -> Expr:
    """``x <= y`` as 1 or 0 of ``dtype`` (exact)."""
    return Expr("le", _dtype(dtype), (x, x._other(y)))


def greater(x: Expr, y: Union[Expr, Number], dtype: torch.dtype) -> Expr:
    """``x > y`` as 1 or 0 of ``dtype`` (exact)."""
    return Expr("gt", _dtype(dtype), (x, x._other(y)))


def cast(x: Expr, dtype: torch.dtype) -> Expr:
    """``x`` rounded to ``dtype`` (a float32 value in float64: exact)."""
    dtype = _dtype(dtype)
    return x if dtype == x.dtype else Expr("cast", dtype, (x,))


def depends_on_step(x: Expr) -> bool:
    """Whether ``x`` changes with the step count (else it is a constant of the configuration)."""
    return x.op in ("step", "load", "state") or (x.op != "const" and any(
        depends_on_step(a) for a in x.args if isinstance(a, Expr)))


_TINY = {dtype: kind(np.finfo(kind).tiny) for dtype, kind in _NP.items()}
_ZERO = {dtype: kind(0.0) for dtype, kind in _NP.items()}


def _flushed(value: Any, dtype: torch.dtype) -> Any:
    return value * _ZERO[dtype] if value != 0 and abs(value) < _TINY[dtype] else value


def evaluate(x: Expr, t: int) -> float:
    """``x`` at step count ``t`` on the host, each operation rounded once in its dtype, subnormals flushed."""
    memo: dict[int, Any] = {}
    with np.errstate(all="ignore"):
        return float(_evaluate(x, t, memo))


#: Each operation on numpy scalars of its dtype (``kind``), rounded once (numpy's float32 arithmetic is IEEE's).
_APPLY: dict[str, Any] = {
    "add": lambda a, kind: a[0] + a[1], "sub": lambda a, kind: a[0] - a[1], "mul": lambda a, kind: a[0] * a[1],
    "div": lambda a, kind: a[0] / a[1], "neg": lambda a, kind: -a[0], "sqrt": lambda a, kind: np.sqrt(a[0]),
    "floor": lambda a, kind: np.floor(a[0]), "min": lambda a, kind: np.minimum(a[0], a[1]),
    "ceil": lambda a, kind: np.ceil(a[0]), "eq": lambda a, kind: kind(a[0] == a[1]),
    "where": lambda a, kind: a[1] if a[0] != 0 else a[2],
    "cast": lambda a, kind: kind(a[0]), "le": lambda a, kind: kind(a[0] <= a[1]),
    "gt": lambda a, kind: kind(a[0] > a[1]),
    "pow": lambda a, kind: kind(numerics.scalar_pow(float(a[0]), float(a[1]), single=kind is np.float32)),
    "cos": lambda a, kind: kind(float(numerics.cos(torch.tensor(float(a[0]), dtype=torch.float32
                                                                if kind is np.float32 else torch.float64)))),
}


#: The common operations on Python floats (doubles; rounded to the dtype after: ``_ROUND``).
_FAST: dict[str, Any] = {
    "add": lambda a: a[0] + a[1], "sub": lambda a: a[0] - a[1], "mul": lambda a: a[0] * a[1],
    "div": lambda a: a[0] / a[1], "neg": lambda a: -a[0], "cast": lambda a: a[0],
    "sqrt": lambda a: math.sqrt(a[0]) if a[0] >= 0.0 or a[0] != a[0] else float("nan"),
}
_ROUND = {"float32": lambda x: ctypes.c_float(x).value, "float64": float}
_TINY_FLOAT = {"float32": float(np.finfo(np.float32).tiny), "float64": float(np.finfo(np.float64).tiny)}


def _evaluate(x: Expr, t: int, memo: dict[int, Any]) -> Any:
    known = memo.get(id(x))
    if known is not None:
        return known
    kind = _NP[x.dtype]
    if x.op in ("const", "load", "state"):
        value = kind(x.args[0])
    elif x.op == "step":
        value = kind(t + x.args[0])
    else:
        value = _flushed(kind(_APPLY[x.op]([_evaluate(arg, t, memo) for arg in x.args], kind)), x.dtype)
    memo[id(x)] = value
    return value


@dataclass(frozen=True)
class Program:
    """A set of per-step entries lowered for the device: ``code`` (instructions ``(op, dtype name, operands)``,
    operands the indices of earlier instructions, an input's index or a step offset), ``outputs`` ((vector
    position, instruction)) and ``inputs`` (the constants' values, in the order the code reads them). ``code``
    and ``outputs`` are the kernel's structure (its cache key); ``inputs`` are data."""

    code: tuple[tuple[str, str, tuple[int, ...]], ...]
    outputs: tuple[tuple[int, int], ...]
    inputs: tuple[float, ...]
    #: The tensor its ``load`` reads (None: none).
    extra: Optional[torch.Tensor] = None
    #: (state slot, instruction): each slot's next value, written after the outputs.
    updates: tuple[tuple[int, int], ...] = ()
    #: What the host knows the load reads and each state slot holds this step (its evaluation, :meth:`host`).
    loaded: float = 0.0
    held: tuple[float, ...] = ()

    def host(self, t: int) -> tuple[dict[int, float], dict[int, float]]:
        """The program evaluated on the host at step count ``t``, instruction by instruction as the device runs
        it: each output by vector position, each update by slot. (Python floats, each result rounded to its
        dtype: for ``+ - * /`` and the root a double's result rounded once more to float32 is the float32
        result, 53 >= 2 * 24 + 2 bits; what raises in Python, a division by zero, takes numpy's.)"""
        values: list[float] = []
        for op, name, operands in self.code:
            if op == "input":
                value = self.inputs[operands[0]]
            elif op == "step":
                value = float(t + operands[0])
            elif op == "load":
                value = self.loaded
            elif op == "state":
                value = self.held[operands[0]] if operands[0] < len(self.held) else 0.0
            else:
                a = [values[k] for k in operands]
                fast = _FAST.get(op)
                try:
                    value = fast(a) if fast is not None else None
                except (ArithmeticError, ValueError):
                    value = None
                if op == "pow":  # (the C library's, of the dtype)
                    value = numerics.scalar_pow(a[0], a[1], single=name == "float32")
                if value is None:
                    kind = _NP[_DTYPES[name]]
                    with np.errstate(all="ignore"):
                        value = float(_APPLY[op]([kind(x) for x in a], kind))
            value = _ROUND[name](value)
            if value != 0.0 and abs(value) < _TINY_FLOAT[name]:
                value = math.copysign(0.0, value)  # (flushed, as every operation's result)
            values.append(value)
        return ({position: values[k] for position, k in self.outputs},
                {slot: values[k] for slot, k in self.updates})

    @property
    def key(self) -> tuple[Any, ...]:
        return self.code, self.outputs, self.updates

    def needs(self) -> set[tuple[str, str]]:
        """The (operation, dtype) pairs the device must have exactly (``pow``, ``cos``: the C library's)."""
        return {(op, dtype) for op, dtype, _ in self.code if op in ("pow", "cos")}


def program(entries: Mapping[int, Expr], updates: Optional[Mapping[int, Expr]] = None) -> Program:
    """The device program writing ``entries`` (vector position -> tree) and then ``updates`` (state slot -> its
    next value), common terms computed once (the same trees: the same program, kept)."""
    key = (tuple((k, id(x)) for k, x in sorted(entries.items())),
           tuple((k, id(x)) for k, x in sorted((updates or {}).items())))
    known = _PROGRAMS.get(key)
    if known is None:
        if len(_PROGRAMS) >= _INTERNED_MAX:
            _PROGRAMS.clear()
        # (the trees kept with it: the ids in its key stay theirs while it is kept)
        known = _PROGRAMS[key] = (_lowered(entries, updates), (dict(entries), dict(updates or {})))
    return known[0]


def _lowered(entries: Mapping[int, Expr], updates: Optional[Mapping[int, Expr]]) -> Program:
    code: list[tuple[str, str, tuple[int, ...]]] = []
    inputs: list[float] = []
    seen: dict[Any, int] = {}
    extra: list[torch.Tensor] = []
    loaded: list[float] = [0.0]
    held: dict[int, float] = {}

    def lower(x: Expr) -> int:
        if x.op == "load":
            if extra and extra[0] is not x.args[1]:
                raise ValueError("a program reads one state tensor")
            extra[:] = [x.args[1]]
            loaded[0] = x.args[0]
            key: Any = ("load", x.dtype)
            if key not in seen:
                code.append(("load", _NAMES[x.dtype], ()))
                seen[key] = len(code) - 1
            return seen[key]
        if x.op == "const":
            key = ("const", x.dtype, x.args[0] if not math.isnan(x.args[0]) else "nan")
            if key not in seen:
                inputs.append(x.args[0])
                code.append(("input", _NAMES[x.dtype], (len(inputs) - 1,)))
                seen[key] = len(code) - 1
            return seen[key]
        if x.op == "state":
            key = ("state", x.dtype, x.args[1])
            held[x.args[1]] = x.args[0]
            if key not in seen:
                code.append(("state", _NAMES[x.dtype], (x.args[1],)))
                seen[key] = len(code) - 1
            return seen[key]
        if x.op == "step":
            key = ("step", x.dtype, x.args[0])
            if key not in seen:
                code.append(("step", _NAMES[x.dtype], (x.args[0],)))
                seen[key] = len(code) - 1
            return seen[key]
        operands = tuple(lower(a) for a in x.args)
        key = (x.op, x.dtype, operands)
        if key not in seen:
            code.append((x.op, _NAMES[x.dtype], operands))
            seen[key] = len(code) - 1
        return seen[key]

    outputs = tuple((position, lower(x)) for position, x in sorted(entries.items()))
    writes = tuple((k, lower(x)) for k, x in sorted((updates or {}).items()))
    slots = tuple(held.get(k, 0.0) for k in range(max([*held, *(k for k, _ in writes)], default=-1) + 1))
    return Program(tuple(code), outputs, tuple(inputs), extra[0] if extra else None, writes, loaded[0], slots)


#: The entries that hold the step's learning rate as it is, by name, in every rule that has them (``flag``: read
#: only under that flag: ``weight_decay_lr`` where the decay is on).
_RATE_ENTRIES = (("lr", None), ("weight_decay_lr", "decay"))


def scalars_of(opt: Any, rule: str, dtype: torch.dtype,
               flags: Mapping[str, bool]) -> Optional[tuple[Optional[int], dict[str, Expr], dict[int, Expr]]]:
    """A capturable face's per-step scalars of ``rule`` (``_capture_scalars``, the one form every generation
    takes; what differs is each face's parameters): the host's step count this step (``_capture_count()``, None
    where the face's scalars do not read it) and each entry's tree: the learning rate (``_capture_rate(dtype)``)
    in the rule's rate entries, and the face's own terms (``_capture_terms(rule, dtype, t, lr)``: Adam's alpha,
    say; None: the rule is not the face's); and the next value of each slot of the group's device state its
    terms read (``_capture_updates(rule, dtype)``: TF1's beta powers; none by default)."""
    from ..kernels.native.scalars import DESCRIPTIONS

    description = DESCRIPTIONS.get(rule)
    if description is None:
        return None
    names = {entry.name for entry in description.entries}
    lr = opt._capture_rate(dtype)
    terms = opt._capture_terms(rule, dtype, step(dtype), lr)
    if terms is None:
        return None
    entries = {name: lr for name, flag in _RATE_ENTRIES if name in names and (flag is None or flags.get(flag))}
    entries.update(terms)
    updates = getattr(opt, "_capture_updates", None)
    return opt._capture_count(), entries, (updates(rule, dtype) if updates is not None else {})


def adam_alpha(lr: Expr, beta_1: float, beta_2: float, t: Expr) -> Expr:
    """Adam's bias-corrected rate ``(lr * sqrt(1 - b2 ** t)) / (1 - b1 ** t)`` (Keras 3's ``adam_alpha``,
    tf.keras's dense ``lr_t * sqrt(1 - b2p) / (1 - b1p)``), the betas rounded by the face (its ``cast``)."""
    b1, b2 = const(beta_1, t.dtype), const(beta_2, t.dtype)
    return (lr * sqrt(1 - pow(b2, t))) / (1 - pow(b1, t))
