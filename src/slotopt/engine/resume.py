"""Saving and resuming, one contract for every generation: what a loaded value must be, and ``opt.state``.

Every way state comes in (``load_state_dict``, ``torch.distributed.checkpoint``, ``set_weights``, Keras files,
writes into ``opt.state``) is checked here before anything is written, so that a value which would make the next
step NaN (a NaN learning rate, an iteration count of -1 or 1e30, a zero loss scale, TF1's ``beta1_power = 1``) or
which does not fit its slot (a meta or sparse tensor, another shape, an integer for a float slot) is refused with
a message naming it, and nothing changes.

``opt.state`` behaves as ``torch.optim``'s for the idioms users write:

* ``opt.state[p][name] = t`` copies ``t`` into the live slot (same shape, real numbers, dense, any device but
  ``meta``); a shared scalar (``step``, TF1's ``beta1_power``...) is shared by every parameter, so
  writing it through one parameter sets it for all.
* ``del opt.state[p]`` (or ``opt.state.pop(p)``, ``opt.state[p].clear()``) resets ``p``'s slots to their initial
  values, as if ``p`` had never been stepped; the shared scalars stay (they belong to every parameter).
* ``opt.state = collections.defaultdict(dict)`` (or ``opt.state.clear()``) resets every slot and the shared
  scalars (``step`` to 0, loss scales and TF1's beta powers to their initial values): the optimizer continues as
  if it had never stepped. Assigning a non-empty mapping resets, then writes its entries.
* Removing a single entry (``del opt.state[p]["m"]``) is refused: the optimizer cannot run without it.
* An entry the optimizer does not keep (timm's Lookahead writes ``lookahead_slow_buff``, SAM its perturbation) is
  a torch client's: kept as given (the very object, as torch keeps it), shown in ``state[p]``, saved and loaded by
  ``state_dict``, copied with the optimizer, removable, and never read by a step.
* ``bool(opt.state)`` is True once the optimizer has parameters, even before a TF1 optimizer makes its slots at
  its first step: ``torch.distributed.checkpoint`` runs a zero-gradient step on an optimizer whose state is
  empty, which would move TF1's beta powers (and cannot set a schedule's learning rate to 0).

Example:
    >>> import torch, slotopt
    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = slotopt.SGD(learning_rate=0.1, momentum=0.9, params=[w])
    >>> w.grad = torch.ones(2); opt.step()
    >>> opt.state[w]["momentum"] = torch.full((2,), 3.0)
    >>> opt.state[w]["momentum"].tolist()
    [3.0, 3.0]
    >>> del opt.state[w]
    >>> opt.state[w]["momentum"].tolist(), int(opt.state[w]["step"])
    ([0.0, 0.0], 1)
    >>> opt.state[w]["step"] = -1
    Traceback (most recent call last):
    ...
    ValueError: Optimizer state 'step' must be an integer in [0, 2**62]. Received: -1
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import numpy as np
import torch

from . import checks

__all__ = ["check_state_value", "state_value_problem", "saved_scalar_problem", "check_fits", "StateTable", "ParamState",
           "HYPERPARAMETER_NAMES", "initial_fill", "COUNTERS"]

#: Iteration counters: integers, never negative, and small enough that an int64 does not wrap.
COUNTERS = frozenset({"iteration", "iterations", "iter", "step", "step_counter", "good_steps"})
_RATES = frozenset({"learning_rate", "lr"})
_LOSS_SCALES = frozenset({"dynamic_scale", "current_loss_scale", "loss_scale"})
_POWERS = frozenset({"beta1_power", "beta2_power"})
_COUNTER_LIMIT = 2 ** 62
_NUMPY_KINDS = (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64)

#: Group keys that are hyperparameters of some slotopt optimizer: a saved group carrying one that this optimizer
#: does not keep was saved by another class or configuration (other keys, such as a torch scheduler's
#: ``initial_lr``, are carried along as torch does).
HYPERPARAMETER_NAMES = frozenset(checks.RANGES) | checks.FLAGS


def _short(name: str) -> str:
    """``adam/iteration`` -> ``iteration``; ``w/m`` -> ``m`` (a slot, not checked by name)."""
    return name.rsplit("/", 1)[-1]


def state_value_problem(name: str, value: Any) -> Optional[str]:
    """What is wrong with ``value`` for the optimizer scalar ``name`` (None: nothing, or not a checked name)."""
    short = _short(str(name))
    if short not in COUNTERS | _RATES | _LOSS_SCALES | _POWERS:
        return None
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tensor.numel() != 1 or tensor.is_complex() or tensor.device.type == "meta":
        return None  # not a scalar: the shape check names it
    number = float(tensor.detach().reshape(()).cpu().double()) if tensor.dtype != torch.bool else math.nan
    if short in COUNTERS:
        if not math.isfinite(number) or number != int(number) or not 0 <= number <= _COUNTER_LIMIT:
            return "an integer in [0, 2**62]"
        # An int64 past 2**62 rounds to 2**62 as a double: the integer itself is compared.
        if not tensor.is_floating_point() and not 0 <= int(tensor.detach().reshape(()).cpu().item()) <= _COUNTER_LIMIT:
            return "an integer in [0, 2**62]"
    elif short in _RATES:
        if not math.isfinite(number) or number < 0:
            return "a finite number >= 0"
    elif short in _LOSS_SCALES:
        if not math.isfinite(number) or number <= 0:
            return "a finite number > 0"
    elif not math.isfinite(number) or not 0 <= number < 1:
        return "in [0, 1)"
    return None


def check_state_value(name: str, value: Any, where: str = "Optimizer state") -> None:
    """Raises ``ValueError`` when ``value`` is out of range for the optimizer scalar ``name``."""
    problem = state_value_problem(name, value)
    if problem is not None:
        shown = value.detach().reshape(-1)[0].item() if isinstance(value, torch.Tensor) else value
        raise ValueError(f"{where} `{name}` must be {problem}. Received: {shown!r}")


def check_fits(label: str, name: Optional[str], value: Any, target: torch.Tensor, *, exact_dtype: bool = False
               ) -> torch.Tensor:
    """``value`` as a dense tensor that can be copied into ``target``: same shape, not sparse, not on ``meta``,
    real numbers (integral ones for an integer target), in range for the scalar ``name``.
    Raises ``ValueError``/``TypeError`` naming ``label``; returns the value (not yet copied)."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{label} must be a tensor or an array of numbers. Received: {value!r}") from err
    if hasattr(value, "to_local"):  # a DTensor (torch.distributed.checkpoint): its local shard is checked
        local = value.to_local()
    else:
        local = value
    if local.layout != torch.strided:
        raise ValueError(f"{label} is a {local.layout} tensor; optimizer state is dense: pass `.to_dense()`.")
    if local.device.type == "meta":
        raise ValueError(f"{label} is on the meta device (it has no values): load real tensors.")
    if tuple(value.shape) != tuple(target.shape):
        raise ValueError(f"{label} has shape {tuple(value.shape)}; the optimizer's has {tuple(target.shape)}.")
    problem = state_value_problem(name, local) if name is not None else None
    if problem is not None:
        raise ValueError(f"{label} must be {problem}. Received: {local.detach().reshape(-1)[0].item()!r}")
    if value.dtype != target.dtype:
        wrong = exact_dtype or value.dtype == torch.bool or value.is_complex() or \
            (not target.is_floating_point() and value.is_floating_point() and
             not bool(torch.all(local == local.round())))
        if wrong:
            raise TypeError(f"{label} has dtype {value.dtype}; the optimizer keeps {target.dtype}.")
    return value


def initial_fill(tensor: torch.Tensor) -> Any:
    """What a reset writes back: the single value a new slot is filled with, else a copy of it."""
    if tensor.device.type == "meta":  # a probe's slot (the readers check a file on meta tensors): no values
        return None
    if tensor.numel() == 0:  # (numpy cannot view an empty tensor whose shape multiplies past its limit)
        return 0.0
    if tensor.device.type == "cpu" and tensor.dtype in _NUMPY_KINDS and tensor.layout == torch.strided:
        values = tensor.detach().numpy()  # a view: a build makes thousands of slots, numpy checks them fastest
        if values.size == 0:
            return 0.0
        first = values.flat[0]
        if (values == first).all():
            return first.item()
        return tensor.detach().clone()
    try:
        flat = tensor.detach().reshape(-1)
        if flat.numel() == 0 or bool((flat == flat[0]).all()):
            return flat[0].item() if flat.numel() else 0.0
    except (RuntimeError, NotImplementedError):
        return None
    return tensor.detach().clone()


class ParamState(dict):
    """``opt.state[p]``: the parameter's live tensors; writes go into them (see the module docstring)."""

    def __init__(self, owner: Any, param: torch.Tensor, entry: Mapping[str, Any]) -> None:
        super().__init__(entry)
        self._owner, self._param = owner, param

    def __setitem__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        values = dict(*args, **kwargs)
        if all(dict.get(self, k) is v for k, v in values.items()):
            return  # the live tensors themselves (e.g. a tool that "moves" state to the device it is on)
        self._owner._write_param_state(self._param, values)
        own = self._owner._param_state(self._param)
        live = {**self._owner._client_entries(self._param), **own}  # (the optimizer's own entries win a name)
        dict.update(self, {k: v for k, v in live.items() if k in values})

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name in self:
            return dict.__getitem__(self, name)
        self[name] = default
        return dict.__getitem__(self, name)

    def __delitem__(self, name: str) -> None:
        self._owner._remove_client_entry(self._param, name)  # a torch client's entry; the optimizer's: refused
        dict.__delitem__(self, name)

    def pop(self, name: str, *default: Any) -> Any:  # type: ignore[override]
        if name not in self and default:
            return default[0]
        value = dict.__getitem__(self, name) if name in self else None
        del self[name]
        return value

    def popitem(self) -> Any:
        raise KeyError("Optimizer state entries cannot be removed (see `del optimizer.state[param]`).")

    def clear(self) -> None:
        self._owner._reset_param_state(self._param)
        dict.clear(self)
        dict.update(self, self._owner._param_state(self._param))

    def __deepcopy__(self, memo: dict) -> dict:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __copy__(self) -> dict:
        return dict(self)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class StateTable(defaultdict):
    """``opt.state``: ``{param: ParamState}`` built from the live state; writes reach the optimizer."""

    def __init__(self, owner: Any, entries: Iterable[tuple[torch.Tensor, Mapping[str, Any]]] = ()) -> None:
        super().__init__(dict)
        self._owner = owner
        for param, entry in entries:
            dict.__setitem__(self, param, ParamState(owner, param, entry))

    def __bool__(self) -> bool:
        # True once the optimizer has parameters, even when their state is made at the first step (TF1): tools
        # that take an empty state for "never initialized" would otherwise run a step to create it
        # (``torch.distributed.checkpoint`` steps with zero gradients and lr=0, which moves TF1's beta powers).
        return dict.__len__(self) > 0 or any(g["params"] for g in self._owner.param_groups)

    def __missing__(self, param: Any) -> Any:
        entry = ParamState(self._owner, param, {})
        dict.__setitem__(self, param, entry)  # as a defaultdict does; writes into it are refused by the owner
        return entry

    def __setitem__(self, param: Any, entry: Any) -> None:
        if not isinstance(entry, Mapping):
            raise TypeError(f"Optimizer state of a parameter must be a dict of tensors. Received: {entry!r}")
        self._owner._replace_param_state(param, dict(entry))
        dict.__setitem__(self, param, ParamState(self._owner, param, self._owner._param_state(param)))

    def __delitem__(self, param: Any) -> None:
        self._owner._reset_param_state(param)
        dict.__setitem__(self, param, ParamState(self._owner, param, self._owner._param_state(param)))

    def pop(self, param: Any, *default: Any) -> Any:  # type: ignore[override]
        old = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in self.get(param, {}).items()}
        del self[param]
        return old

    def clear(self) -> None:
        self._owner._reset_all_state()

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for param, entry in dict(*args, **kwargs).items():
            self[param] = entry

    def __deepcopy__(self, memo: dict) -> defaultdict:
        return defaultdict(dict, {copy.deepcopy(p, memo): {k: copy.deepcopy(v, memo) for k, v in e.items()}
                                  for p, e in self.items()})

    def __copy__(self) -> defaultdict:
        return defaultdict(dict, {p: dict(e) for p, e in self.items()})

    def __reduce__(self) -> Any:
        return (defaultdict, (dict,), None, None, iter((p, dict(e)) for p, e in self.items()))


def saved_scalar_problem(name: str, value: Any) -> Optional[str]:
    """What ``load_state_dict`` would say of an optimizer scalar saved in a file (None: nothing, or not a checked
    one): the readers refuse such a file and the writers refuse to write such a value."""
    array = np.asarray(value)
    if array.size != 1:
        return None
    if array.dtype.kind == "c" and state_value_problem(name, torch.tensor(float("nan"))) is not None:
        return "a real number"
    return state_value_problem(name, torch.from_numpy(np.array(array, copy=True)))
