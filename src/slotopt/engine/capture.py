"""CUDA graph capture of a step: capturable steps (their scalars on the device), and what is refused, by name.

A slotopt step computes its learning rate, iteration count and per-step scalars (bias corrections) on the host, as
Python numbers with TensorFlow's float32 rounding, and hands them to the kernels as launch arguments. A CUDA graph
records a launch with its arguments: replayed, it would apply the captured step's scalars at every step.

A **capturable** step (torch's ``capturable=True``, and the default while a graph is being captured) keeps them
on the device instead: each (rule, group) has its scalar vector, its step count (int64) and its program's inputs
in device memory (:class:`_Group`); one launch (``kernels/triton/step_scalars.py``) adds one to the count and
writes this step's entries, and the rule's Triton kernel reads the vector (``BY_VALUE=False``). The arguments of
both launches are the same at every step, so a replay gives the bits of a step run anew.

What each entry is comes from the face, as data: ``_capture_scalars`` (``engine/step_recipes.scalars_of``, one
form for every generation) gives, per rule, each entry that holds the learning rate or follows from the step
count as a recipe (a tree of operations, each rounded once, ``engine/step_recipes.py``), from the face's
parameters: its step count (``_capture_count``), its rate (``_capture_rate``: a number, tf.keras's ``decay``, a
Keras 3 schedule with a device form) and its own terms (``_capture_terms``: Adam's alpha, Adamax's
``1 - beta_1**t``). Entries that do not depend on the step are constants of the configuration, written into the
vector once (again outside a capture when they change; a capture refuses a change). Everything is checked before
the first launch: each recipe evaluated on the host at this step is the value the face's host path computed for
its entry, bit for bit (a recipe that is not the face's arithmetic is found then), the step count is the one the
device holds, the constants are the ones it holds, and the device has what the program needs (float64 ``pow``).
So a capturable step never gives other bits than the host path. The tensors are made on the first capturable
step, outside any capture (torch's warm-up steps): a capture with none made yet is refused.

Capturable here (:func:`capturable_classes`, derived from the registry: the classes that name their rules,
``_capture_rules``): Keras 3 ``Adam``, ``AdamW``, ``Adamax``, ``Nadam`` (its ``u_product`` set on the device by
a program of its own, :func:`device_state`, and read there), ``SGD`` (with or without momentum), ``RMSprop``,
``Adagrad``, ``Adadelta``, ``Lion``; tf.keras ``slotopt.legacy`` ``Adam``, ``Adamax``, ``SGD``, ``RMSprop``,
``Adagrad``, ``Adadelta`` (with ``decay``); TF1 ``slotopt.v1`` ``GradientDescentOptimizer``,
``MomentumOptimizer``, ``RMSPropOptimizer``, ``AdagradOptimizer``, ``AdadeltaOptimizer``,
``ProximalGradientDescentOptimizer``, ``ProximalAdagradOptimizer`` and ``AdamOptimizer`` (its beta powers, host
variables, copied into the group's device state, ``step_recipes.state``, and advanced there as ``_finish``
advances them). float32 and float64 variables on a CUDA device (CPU tensors under ``TRITON_INTERPRET=1``: how
the tests prove it), a learning rate that is a number or (Keras 3 and tf.keras) ``ExponentialDecay``,
``InverseTimeDecay``, ``PiecewiseConstantDecay``, ``PolynomialDecay`` (staircase or not, ``cycle`` or not) or
``CosineDecay`` (with its warm-up; float32: glibc's ``cosf`` from ``kernels/triton/libm.py``, refused by name
where that is not there; float64 ``cos`` has no device form),
with ``weight_decay`` and ``maximize`` (the gradients negated by a device kernel, :func:`negated`).

Anything else is refused by name (:func:`refusal`): another class (Ftrl, Lamb, Adafactor, Muon, tf.keras Nadam
and Ftrl, TF1 Ftrl and AdagradDA, ...), a subclass of a capturable class or of a schedule, another schedule
(``CosineDecayRestarts``: not given a device form yet) or a callable, clipping, ``use_ema``,
``loss_scale_factor``, gradient accumulation, an overridden ``update_step``, another dtype. A float64 group
whose scalars need ``pow`` (float64 Adam, Adamax, a float64 schedule's decay) takes glibc's double ``pow`` from
``kernels/triton/libm.py`` (checked against the C library on the device first); where that is not there it
takes the host path outside a capture and refuses one, naming it. On the CPU (without the interpreter)
``capturable`` changes nothing, as in torch. ``iterations`` counts the steps the host ran; after replays the
device's count is ahead (:func:`device_step`), and the next uncaptured step writes the host's counts and state
to the device again.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any, Optional

import torch

from ..kernels import native
from ..numerics.device import NotCapturable
from . import step_recipes

__all__ = ["CaptureRefused", "refusal", "check", "capturing", "refused", "step", "device_step",
           "capturable_classes", "device_state", "active", "negated"]


class CaptureRefused(RuntimeError):
    """A step that cannot be captured in a CUDA graph (the message names the optimizer and the reason)."""


def capturable_classes() -> dict[str, type]:
    """The registered classes whose steps can be captured, by public name: those that name the rules their steps
    launch (``_capture_rules``) and whose face says how each per-step scalar follows from the step count
    (``_capture_scalars``, ``engine/step_recipes.py``); derived from the registry, never listed by hand."""
    from . import registry

    registrations = registry.registered()
    if _classes[0] != len(registrations):  # (derived again when a face registers more: asked at every step)
        found = {}
        for registration in registrations:
            cls = registration.cls
            if getattr(cls, "_capture_rules", ()) and not getattr(cls, "_capture_refusal", None):
                found[_name(cls)] = cls
        _classes[:] = [len(registrations), found]
    return dict(_classes[1])


_classes: list[Any] = [-1, {}]


def __getattr__(name: str) -> Any:
    if name == "CAPTURABLE":  # (derived when asked: the faces register their classes as they are imported)
        return tuple(capturable_classes())
    raise AttributeError(name)


#: The options that make a step uncapturable, with why.
_OPTIONS = (("clipnorm", "clipping computes a norm on the host's terms"),
            ("global_clipnorm", "clipping computes a norm on the host's terms"),
            ("clipvalue", "clipping is not capturable yet"),
            ("use_ema", "the moving average's schedule is decided on the host"),
            ("loss_scale_factor", "unscaling is not capturable yet"),
            ("gradient_accumulation_steps", "accumulation decides on the host which steps update"))
#: The variables' dtypes whose per-step scalars the device computes (``engine/step_recipes.py``).
_DTYPES = (torch.float32, torch.float64)


def _name(opt: Any) -> str:
    """The optimizer's public name: ``slotopt.Adam`` (Keras 3), ``slotopt.legacy.SGD``, ``slotopt.v1....``."""
    cls = opt if isinstance(opt, type) else type(opt)
    parts = cls.__module__.split(".")
    if parts[0] != "slotopt" or len(parts) < 2:
        return cls.__qualname__
    return f"slotopt.{cls.__qualname__}" if parts[1] == "keras3" else f"slotopt.{parts[1]}.{cls.__qualname__}"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _on_device(t: torch.Tensor) -> bool:
    """Whether ``t`` is where capturable steps run: a CUDA device, or the CPU standing in for one under Triton's
    interpreter."""
    return t.device.type == "cuda" or (t.device.type == "cpu" and _interpreting())


def refusal(opt: Any, dtypes: bool = True) -> Optional[str]:
    """Why the steps of ``opt`` cannot be captured in a CUDA graph, or None where they can. The message names
    the optimizer and the class, option or dtype in the way (``dtypes=False``: the variables' dtypes not looked
    at, a loop over them; each group's launch checks its own, and what its per-step scalars need on the device:
    float64 ``pow``, say)."""
    name = _name(opt)
    classes = capturable_classes()
    if isinstance(opt, type) or classes.get(name) is not type(opt):
        why = getattr(type(opt), "_capture_refusal", None) or (
            "its step computes the learning rate, the iteration count and the per-step scalars on the host, as "
            "Python numbers a CUDA graph would replay frozen")
        return f"{name}: {why} (capturable steps: {', '.join(classes)})"
    from ..kernels import triton

    if not triton.available():
        return f"{name}: capturable steps run the Triton kernels, and Triton cannot be imported here"
    if getattr(opt, "_has_custom_update", lambda: False)():
        return f"{name}: an overridden `update_step` runs Python per variable"
    problem = opt._capture_learning_rate_refusal()
    if problem is not None:
        return f"{name}: {problem}"
    if opt.__dict__.get("_callable_hyperparameters"):
        return f"{name}: the callable hyperparameters {sorted(opt._callable_hyperparameters)} run on the host"
    for option, why in _OPTIONS:
        value = getattr(opt, option, None)
        if value and not (option.endswith("clipnorm") and value <= 0):
            return f"{name}: `{option}={value!r}`: {why}"
    for v in getattr(opt, "_trainable_variables", ()) if dtypes else ():
        if v.dtype not in _DTYPES:
            return (f"{name}: a {v.dtype} variable ({getattr(v, 'path', '?')}): capturable steps are float32 or "
                    "float64")
    return None


def capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (never without CUDA initialised)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def check(opt: Any) -> None:
    """Raises :class:`CaptureRefused` while a CUDA graph is being captured and ``opt`` cannot be."""
    if capturing():
        reason = refusal(opt)
        if reason is not None:
            raise CaptureRefused(f"A step of {reason}. Run the step outside `torch.cuda.graph`.")


def refused(opt: Any, error: NotCapturable) -> CaptureRefused:
    """``numerics``' refusal (a value with no device kernel) with the optimizer's name."""
    return CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: {error}")


def _capturable(opt: Any) -> bool:
    flags = opt.__dict__.get("_torch_flags") or {}
    return bool(flags.get("capturable")) or (capturing() and flags.get("capturable") is not False)


class _OnDevice:
    """A capturable step's frame: its rules' launches made by ``launcher`` (``native.capturable_launcher``)."""

    def __init__(self, launcher: _Launcher) -> None:
        self.launcher, self.previous = launcher, None

    def __enter__(self) -> None:
        self.previous = native.capturable_launcher(self.launcher)

    def __exit__(self, *exc: object) -> None:
        native.capturable_launcher(self.previous)


def step(opt: Any) -> Optional[_OnDevice]:
    """The frame of one step: a capture refused before anything is written (:func:`check`), and, for a
    capturable optimizer, a context manager in which its rules' launches are made with their scalars on the
    device (None for any other step: nothing to enter)."""
    if not capturing() and not (opt.__dict__.get("_torch_flags") or {}).get("capturable"):
        return None  # the common step: one look
    check(opt)
    if not _capturable(opt) or refusal(opt, dtypes=False) is not None:  # (no Python per variable per step)
        if capturing():  # (refusal(opt) is None here: check passed)
            raise CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: it was constructed "
                                 "with `capturable=False` (its scalars are launch arguments a graph would replay "
                                 "frozen). Run the step outside `torch.cuda.graph`.")
        return None
    if capturing() and not opt.__dict__.get("_capturable_groups"):
        problem = opt.__dict__.get("_capture_problem")
        why = (f"its last step ran on the host: {problem}" if problem else
               "no capturable step ran before the capture (its device scalars are made by the first one: construct "
               "it with `capturable=True` and run warm-up steps first, as torch asks)")
        raise CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: {why}. Run the step "
                             "outside `torch.cuda.graph`.")
    return _OnDevice(_Launcher(opt))


def device_step(opt: Any) -> dict[str, torch.Tensor]:
    """Each capturable group's step count on the device (one-element int64 tensors, by rule and first address):
    the count of its last step, ahead of ``iterations`` after graph replays."""
    return {f"{rule}@{address:#x}": group.scalars.count
            for (rule, address, _), group in opt.__dict__.get("_capturable_groups", {}).items()}


def _bits(x: float, dtype: torch.dtype = torch.float32) -> bytes:
    return struct.pack("<f" if dtype == torch.float32 else "<d", x)


class _Group:
    """One (rule, group)'s device scalars: the rule's vector (its constants written from the host, its per-step
    entries by the group's program on the device) and the program's inputs and step count (``Scalars``)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, constants: Sequence[float], program: Any,
                 t: int, state: Sequence[float] = ()) -> None:
        from ..kernels.triton import step_scalars

        self.dtype = dtype
        self.vector = torch.tensor(list(constants), dtype=dtype, device=device)
        self.scalars = step_scalars.Scalars(device, t - 1, program.inputs, program, state)
        self.constants, self.program, self.t, self.state = list(constants), program, t, list(state)

    def changes(self, constants: Sequence[float], program: Any, t: int, state: Sequence[float] = ()) -> list[str]:
        """What the host changed since the group's last step (empty: nothing)."""
        return [what for what, same in (
            ("its constant hyperparameters",
             [_bits(c, self.dtype) for c in constants] == [_bits(c, self.dtype) for c in self.constants]),
            ("the form of its per-step scalars", program.key == self.program.key),
            ("the state tensor its per-step scalars read", _address(program.extra) == _address(self.program.extra)),
            ("the constants of its per-step scalars",
             [_bits(c, torch.float64) for c in program.inputs] == [_bits(c, torch.float64)
                                                                  for c in self.program.inputs]),
            ("the step count", t == self.t + 1),
            ("its state (kept by the host)", [_bits(c, torch.float64) for c in state] == [
                _bits(c, torch.float64) for c in self.state])) if not same]

    def write(self, constants: Sequence[float], program: Any, t: int, state: Sequence[float] = ()) -> None:
        """The host's changes written to the device (an uncaptured step: copies allowed)."""
        from ..kernels.triton import step_scalars

        self.vector.copy_(torch.tensor(list(constants), dtype=self.dtype))
        if program.key != self.program.key or len(program.inputs) != len(self.program.inputs) \
                or len(state) != len(self.state):
            self.scalars = step_scalars.Scalars(self.vector.device, t - 1, program.inputs, program, state)
        else:
            self.scalars.inputs.copy_(torch.tensor([float(v) for v in program.inputs] or [0.0],
                                                   dtype=torch.float64))
            self.scalars.count.fill_(t - 1)
            if state:
                self.scalars.state.copy_(torch.tensor([float(v) for v in state], dtype=torch.float64))
        self.constants, self.program, self.state = list(constants), program, list(state)


class _Launcher:
    """Runs a rule of a capturable step with its scalars on the device (``native.capturable_launcher``)."""

    def __init__(self, opt: Any) -> None:
        self.opt = opt
        self.groups = opt.__dict__.setdefault("_capturable_groups", {})

    def __call__(self, rule: str, lists: Sequence[Any], values: Sequence[float], read_only: Sequence[int]) -> bool:
        first = lists[0][0]
        if not _on_device(first):
            return False  # the CPU: capturable changes nothing (torch's meaning)
        problem = self._launch(rule, lists, values, read_only)
        if problem is None:
            return True
        if capturing():
            raise CaptureRefused(f"A step of {_name(self.opt)} cannot be captured in a CUDA graph: {problem}. "
                                 "Run the step outside `torch.cuda.graph`.")
        self.opt.__dict__["_capture_problem"] = problem  # (named if a capture follows with no group made)
        return False  # outside a capture the host path takes it, with the same bits

    def _launch(self, rule: str, lists: Sequence[Any], values: Sequence[float],
                read_only: Sequence[int]) -> Optional[str]:
        from ..kernels import triton
        from ..kernels.native.scalars import DESCRIPTIONS
        from ..kernels.triton import step_scalars

        description = DESCRIPTIONS.get(rule)
        if description is None or rule not in triton.RULES:
            return f"its rule {rule!r} has no Triton kernel"
        dtype = lists[0][0].dtype
        if dtype not in _DTYPES:
            return f"a {dtype} group (capturable steps are float32 or float64)"
        entries = description.entries
        padded = [float(v) for v in values] + [0.0] * (len(entries) - len(values))  # (missing: read as 0)
        flags = {e.name: bool(padded[k]) for k, e in enumerate(entries) if e.kind == "flag"}
        recipe = self.opt._capture_scalars(rule, dtype, flags)
        if recipe is None:
            return f"its rule {rule!r} has no capturable form in {_name(self.opt)}"
        t, named, updates = recipe
        key = (rule, first_address(lists), len(lists[0]))
        group = self.groups.get(key)
        if t is None:  # (a face whose scalars never read the step count: the group's own count)
            t = 1 if group is None else group.t + 1
        at = {e.name: k for k, e in enumerate(entries)}
        unknown = [entry for entry in named if entry not in at]
        if unknown:
            return f"its per-step scalar {unknown[0]!r} is not an entry of {rule!r}"
        per_step = {at[e]: x for e, x in named.items() if step_recipes.depends_on_step(x)}
        program = step_recipes.program(per_step, updates)
        outputs, following = program.host(t)  # (the program as the device runs it, on the host)
        # Checked before anything runs: each entry the device will hold, evaluated here at this step, is the
        # host path's value (a recipe that is not the face's arithmetic, or constants not its, found now)
        for entry, expr in named.items():
            k = at[entry]
            host = outputs[k] if k in outputs else step_recipes.evaluate(expr, t)
            if _bits(host, dtype) != _bits(padded[k], dtype):
                return (f"the device's {entry!r} of {rule!r} ({host!r} at step {t}) is not the host path's "
                        f"({padded[k]!r})")
        state = list(program.held)  # (the host's, this step)
        problem = step_scalars.missing(program, None if capturing() else lists[0][0].device)
        if problem is not None:
            return f"a {dtype} group: {problem}"
        constants = [0.0 if k in per_step else v for k, v in enumerate(padded)]
        inside = capturing()
        if group is None:
            if inside:
                return "no step of this group ran before the capture (run warm-up steps first, as torch asks)"
            group = self.groups[key] = _Group(lists[0][0].device, dtype, constants, program, t, state)
        else:
            changed = group.changes(constants, program, t, state)
            if changed and inside:
                return f"{' and '.join(changed)} changed on the host since the last step"
            if changed:
                group.write(constants, program, t, state)
            group.t = t
        triton.note_launch(*step_scalars.run(group.program, group.scalars, group.vector))
        if not triton.apply(rule, lists, values, read_only, vector=group.vector):
            # (nothing of the update written: the count taken back, the host path runs the step; the entries
            # written are written again at the next step, the state from the host's then)
            group.scalars.count.sub_(1)
            group.t -= 1
            return f"the Triton kernel of {rule!r} does not take this group"
        # (the device's state now: each slot's next value, as the host's copy will be after the face's step)
        group.state = [following.get(k, v) for k, v in enumerate(state)]
        return None


def _address(tensor: Optional[torch.Tensor]) -> Optional[int]:
    return None if tensor is None else int(tensor.data_ptr())


def active(opt: Any) -> bool:
    """Whether a capturable step of ``opt`` is running on this thread (its rules' launches on the device)."""
    launcher = native.capturable_launcher(None)
    native.capturable_launcher(launcher)
    return isinstance(launcher, _Launcher) and launcher.opt is opt


def device_state(opt: Any, tensor: torch.Tensor, t: int, value: float, recipe: step_recipes.Expr) -> bool:
    """In a capturable step of ``opt`` on the device: ``tensor`` (a one-element state of the face, Nadam's
    ``u_product``) set to ``recipe`` on the device, by a program of its own launched now (before the rules'
    launches, which may read it: ``step_recipes.loaded``); True when done so (the face then does not write it
    itself). Checked first as the rules' scalars are: ``recipe`` here at step ``t`` is ``value``, the host's; the
    step count, the program's constants and form are the device's."""
    launcher = native.capturable_launcher(None)
    native.capturable_launcher(launcher)
    if not isinstance(launcher, _Launcher) or launcher.opt is not opt or not _on_device(tensor) \
            or tensor.numel() != 1 or tensor.dtype not in _DTYPES or not tensor.is_contiguous():
        return False
    from ..kernels import triton
    from ..kernels.triton import step_scalars

    program = step_recipes.program({0: recipe})
    problem = step_scalars.missing(program, None if capturing() else tensor.device)
    host = program.host(t)[0][0]
    if problem is None and _bits(host, tensor.dtype) != _bits(value, tensor.dtype):
        problem = f"the device's value ({host!r} at step {t}) is not the host path's ({value!r})"
    key = ("state", _address(tensor), 1)
    group = launcher.groups.get(key)
    if problem is None:
        if group is None:
            if capturing():
                problem = "no step wrote its state on the device before the capture (run warm-up steps first)"
            else:
                group = launcher.groups[key] = _Group(tensor.device, tensor.dtype, [0.0], program, t)
        else:
            changed = group.changes([0.0], program, t)
            if changed and capturing():
                problem = f"{' and '.join(changed)} changed on the host since the last step"
            elif changed:
                group.write([0.0], program, t)
            group.t = t
    if problem is not None:
        if capturing():
            raise CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: its state: "
                                 f"{problem}. Run the step outside `torch.cuda.graph`.")
        return False
    triton.note_launch(*step_scalars.run(group.program, group.scalars, tensor))
    return True


def negated(opt: Any, grads: Sequence[Any]) -> Optional[list[Any]]:
    """``maximize=True`` in a capturable step on the device: the negated gradients by a device kernel whose
    launches are recorded with the step's (exact: the bits of torch's ``_foreach_neg``); None elsewhere."""
    if not active(opt) or not grads or not all(isinstance(g, torch.Tensor) and _on_device(g) for g in grads):
        return None
    from ..kernels import triton
    from ..kernels.triton import step_scalars

    done = step_scalars.negated(grads)
    if done is None:
        return None
    out, launches = done
    for launch in launches:
        triton.note_launch(*launch)
    return out


def first_address(lists: Sequence[Any]) -> int:
    return int(lists[0][0].data_ptr())
