"""CUDA graph capture of a step: capturable steps (their scalars on the device), and what is refused, by name.

A slotopt step computes its learning rate, iteration count and per-step scalars (bias corrections) on the host, as
Python numbers with TensorFlow's float32 rounding, and hands them to the kernels as launch arguments. A CUDA graph
records a launch with its arguments: replayed, it would apply the captured step's scalars at every step.

A **capturable** step (torch's ``capturable=True``, and the default while a graph is being captured) keeps them
on the device instead: each (rule, group) has its scalar vector, its step count (int64) and its learning rate in
device memory (:class:`_Group`); one launch (``kernels/triton/step_scalars.py``) adds one to the count and writes
this step's entries (the learning rate; Adam's ``alpha``, with glibc's ``powf`` on the device), and the rule's
Triton kernel reads the vector (``BY_VALUE=False``). The arguments of both launches are the same at every step,
so a replay gives the bits of a step run anew. Everything the host knows is checked against what the device will
use before the first launch: the learning rate, the betas and the step count the host computes this step are
the ones the device holds (an uncaptured step writes the device's copy where one changed, a captured step
refuses), and Adam's ``alpha`` from them is the host's (``_capturable_alpha``), so a capturable step never gives
other bits than the host path. The tensors are made on the first capturable step, outside any capture (torch's
warm-up steps): a capture with none made yet is refused.

Capturable here: Keras 3 ``Adam``, ``AdamW``, ``SGD`` (with or without momentum), ``RMSprop`` and ``Adagrad``,
float32 variables on a CUDA device (CPU tensors under ``TRITON_INTERPRET=1``: how the tests prove it), a learning
rate that is a number (its variable), with ``weight_decay``. Anything else is refused by name
(:func:`refusal`): another class, a schedule or callable, clipping, ``use_ema``, ``loss_scale_factor``,
gradient accumulation, ``maximize``, an overridden ``update_step``, another dtype. On the CPU (without the
interpreter) ``capturable`` changes nothing, as in torch. ``iterations`` counts the steps the host ran; after
replays the device's count is ahead (:func:`device_step`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any, Optional

import torch

from ..kernels import native
from ..numerics.device import NotCapturable

__all__ = ["CaptureRefused", "refusal", "check", "capturing", "refused", "step", "device_step", "CAPTURABLE"]


class CaptureRefused(RuntimeError):
    """A step that cannot be captured in a CUDA graph (the message names the optimizer and the reason)."""


#: The optimizers whose steps can be captured, by public name.
CAPTURABLE = ("slotopt.Adam", "slotopt.AdamW", "slotopt.SGD", "slotopt.RMSprop", "slotopt.Adagrad")

#: Per rule, the entries of its scalar vector written on the device at each step: ``lr`` (the learning rate)
#: and ``alpha`` (Adam's bias-corrected rate); every other entry is a constant of the configuration.
_PER_STEP = {"adam": {"alpha": "alpha", "weight_decay_lr": "lr"},
             "keras_momentum": {"lr": "lr", "weight_decay_lr": "lr"},
             "sgd": {"lr": "lr", "weight_decay_lr": "lr"},
             "rmsprop": {"lr": "lr"},
             "adagrad": {"lr": "lr"},
             "decoupled_weight_decay": {"lr": "lr"}}

#: The options that make a step uncapturable, with why.
_OPTIONS = (("clipnorm", "clipping computes a norm on the host's terms"),
            ("global_clipnorm", "clipping computes a norm on the host's terms"),
            ("clipvalue", "clipping is not capturable yet"),
            ("use_ema", "the moving average's schedule is decided on the host"),
            ("loss_scale_factor", "unscaling is not capturable yet"),
            ("gradient_accumulation_steps", "accumulation decides on the host which steps update"),
            ("maximize", "the negated gradients are not capturable yet"))


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
    at, a loop over them; each group's launch checks its own)."""
    name = _name(opt)
    if name not in CAPTURABLE or isinstance(opt, type):
        return (f"{name}: its step computes the learning rate, the iteration count and the per-step scalars on "
                "the host, as Python numbers a CUDA graph would replay frozen (capturable steps: "
                f"{', '.join(CAPTURABLE)})")
    from ..kernels import triton

    if not triton.available():
        return f"{name}: capturable steps run the Triton kernels, and Triton cannot be imported here"
    if opt._has_custom_update():
        return f"{name}: an overridden `update_step` runs Python per variable"
    lr = opt.__dict__.get("_learning_rate")
    if opt._lr_is_driven() or not isinstance(lr, torch.Tensor):
        return (f"{name}: `learning_rate={type(lr).__name__}` is evaluated on the host at each step (a number's "
                "steps can be captured)")
    if opt.__dict__.get("_callable_hyperparameters"):
        return f"{name}: the callable hyperparameters {sorted(opt._callable_hyperparameters)} run on the host"
    for option, why in _OPTIONS:
        value = getattr(opt, option, None)
        if value and not (option.endswith("clipnorm") and value <= 0):
            return f"{name}: `{option}={value!r}`: {why}"
    for v in getattr(opt, "_trainable_variables", ()) if dtypes else ():
        if v.dtype != torch.float32:
            return f"{name}: a {v.dtype} variable ({getattr(v, 'path', '?')}): capturable steps are float32"
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
        raise CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: no capturable step ran "
                             "before the capture (its device scalars are made by the first one: construct it with "
                             "`capturable=True` and run warm-up steps first, as torch asks). Run the step outside "
                             "`torch.cuda.graph`.")
    return _OnDevice(_Launcher(opt))


def device_step(opt: Any) -> dict[str, torch.Tensor]:
    """Each capturable group's step count on the device (one-element int64 tensors, by rule and first address):
    the count of its last step, ahead of ``iterations`` after graph replays."""
    return {f"{rule}@{address:#x}": group.inputs.count
            for (rule, address, _), group in opt.__dict__.get("_capturable_groups", {}).items()}


def _bits(x: float) -> bytes:
    return struct.pack("<f", x)


class _Group:
    """One (rule, group)'s device scalars: the rule's vector, its step count and learning rate (``Inputs``)."""

    def __init__(self, device: torch.device, values: Sequence[float], t: int, lr: float,
                 betas: tuple[float, float]) -> None:
        from ..kernels.triton import step_scalars

        self.vector = torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)
        self.inputs = step_scalars.Inputs(device, t - 1, lr, betas)
        self.constants, self.t, self.lr, self.betas = [float(v) for v in values], t, lr, betas


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
        return False  # outside a capture the host path takes it, with the same bits

    def _launch(self, rule: str, lists: Sequence[Any], values: Sequence[float],
                read_only: Sequence[int]) -> Optional[str]:
        from ..kernels import triton
        from ..kernels.native.scalars import DESCRIPTIONS
        from ..kernels.triton import step_scalars

        per_step = _PER_STEP.get(rule)
        description = DESCRIPTIONS.get(rule)
        if per_step is None or description is None or rule not in triton.RULES:
            return f"its rule {rule!r} has no capturable form"
        if lists[0][0].dtype != torch.float32:
            return f"a {lists[0][0].dtype} group (capturable steps are float32)"
        if "alpha" in per_step.values() and not step_scalars.available():
            return "Adam's bias correction needs the C library's powf on the device (glibc's tables not found)"
        at = {e.name: k for k, e in enumerate(description.entries) if e.kind == "scalar"}
        flags = {e.name: k for k, e in enumerate(description.entries) if e.kind == "flag"}
        if flags.get("decay") is not None and not (flags["decay"] < len(values) and values[flags["decay"]]):
            per_step = {k: v for k, v in per_step.items() if k != "weight_decay_lr"}
        opt = self.opt
        t = opt._step_count()
        lr = opt._lr_for(opt.learning_rate, torch.float32)
        betas = (0.0, 0.0)
        for entry, source in per_step.items():
            if source == "lr" and _bits(values[at[entry]]) != _bits(lr):
                return f"the learning rate of this group ({values[at[entry]]}) is not the optimizer's ({lr})"
        if "alpha" in per_step.values():
            betas = opt._capturable_betas(torch.float32)
            host = opt._capturable_alpha(lr, betas[0], betas[1], t, torch.float32)
            if _bits(host) != _bits(values[at["alpha"]]):
                return "Adam's alpha of this group is not the optimizer's"
        key = (rule, first_address(lists), len(lists[0]))
        group = self.groups.get(key)
        written = {at[entry] for entry in per_step}
        constants = [0.0 if k in written else float(v) for k, v in enumerate(values)]
        constants += [0.0] * (len(description.entries) - len(values))  # (missing trailing entries read as 0)
        inside = capturing()
        if group is None:
            if inside:
                return "no step of this group ran before the capture (run warm-up steps first, as torch asks)"
            group = self.groups[key] = _Group(lists[0][0].device, constants, t, lr, betas)
        else:
            changed = [what for what, same in (
                ("its constant hyperparameters", [_bits(c) for c in constants] == [_bits(c) for c in group.constants]),
                ("the step count", t == group.t + 1), ("the learning rate", _bits(lr) == _bits(group.lr)),
                ("the betas", betas == group.betas)) if not same]
            if changed and inside:
                return f"{' and '.join(changed)} changed on the host since the last step"
            if changed:  # written to the device before the launch (an uncaptured step: copies allowed)
                group.vector.copy_(torch.tensor(constants, dtype=torch.float32))
                group.inputs.count.fill_(t - 1)
                group.inputs.inputs.copy_(torch.tensor([lr, *betas], dtype=torch.float32))
                group.constants, group.lr, group.betas = constants, lr, betas
            group.t = t
        launch = step_scalars.advance(group.inputs, group.vector,
                                      **{f"{source}_at": at[entry] for entry, source in per_step.items()
                                         if source == "alpha" or entry == "lr"},
                                      lr2_at=at["weight_decay_lr"] if "weight_decay_lr" in per_step else -1)
        triton.note_launch(*launch)
        if not triton.apply(rule, lists, values, read_only, vector=group.vector):
            # (nothing of the update written: the count taken back, the host path runs the step; the entries
            # written are written again at the next step)
            group.inputs.count.sub_(1)
            group.t -= 1
            return f"the Triton kernel of {rule!r} does not take this group"
        return None


def first_address(lists: Sequence[Any]) -> int:
    return int(lists[0][0].data_ptr())
