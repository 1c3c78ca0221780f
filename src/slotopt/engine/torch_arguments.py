"""torch's spellings of constructor arguments, for every generation: taken where torch's name means exactly what
the generation's does, refused with the difference where it does not.

A PyTorch user's first line is ``AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99))``. ``lr`` is the
learning rate in both libraries and ``betas`` the two moment decay rates, so they become ``learning_rate`` and
``beta_1``/``beta_2`` (TF1: ``beta1``/``beta2``) before the constructor runs. ``weight_decay`` is already the
Keras 3 name. ``eps`` is not the same number: torch adds it to the bias-corrected root of the second moment,
Keras adds its ``epsilon`` where its own formula puts it (for Adam, to the root before the bias correction), so
taking it silently would train differently; it is refused with a message naming ``epsilon``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
import torch

__all__ = ["TorchSpellingError", "accepted_arguments", "translate", "translate_with_flags", "torch_spellings",
           "check_capturable", "TORCH_FLAGS", "implementation_flags"]


class TorchSpellingError(TypeError, ValueError):
    """A torch spelling that cannot be taken (``eps``, or a value given under both names). Both a ``TypeError``
    (what torch raises for an unknown argument) and a ``ValueError`` (what Keras raises)."""


def accepted_arguments(cls: type) -> tuple[list[str], set[str]]:
    """The positional parameter names of ``cls``'s constructor (after ``self``) and every name any constructor of
    its chain declares (a subclass passes the rest on through ``**kwargs``)."""
    positional: list[str] = []
    names: set[str] = set()
    for index, klass in enumerate(k for k in cls.__mro__ if "__init__" in k.__dict__):
        try:
            params = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]
        except (TypeError, ValueError):
            continue
        names.update(p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
        if index == 0:
            positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional, names


def _betas_pair(names: set[str]) -> Optional[tuple[str, str]]:
    return next((p for p in (("beta_1", "beta_2"), ("beta1", "beta2")) if set(p) <= names), None)


def torch_spellings(cls: type, names: set[str]) -> list[inspect.Parameter]:
    """The torch spellings ``cls``'s constructor takes besides ``names`` (its signature's own), as keyword-only
    parameters of its signature (``engine/construction.py``): ``lr`` and ``betas`` where they stand for its own
    arguments; their default ``None`` means "not given" (the class's own argument's default applies)."""
    native = getattr(cls, "_native_torch_spellings", frozenset())
    out = []
    if "lr" not in names and "lr" not in native and "learning_rate" in names:
        out.append(inspect.Parameter("lr", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[float]))
    if "betas" not in names and _betas_pair(names) is not None:
        out.append(inspect.Parameter("betas", inspect.Parameter.KEYWORD_ONLY, default=None,
                                     annotation=Optional[tuple[float, float]]))
    out += [inspect.Parameter(flag, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[bool])
            for flag in TORCH_FLAGS if flag not in names]
    return out


def _both(cls: type, torch_name: str, keras_names: str, value: Any) -> TorchSpellingError:
    return TorchSpellingError(
        f"{cls.__name__}() got `{torch_name}` (torch's name) and {keras_names} (its own) together: pass one. "
        f"Received: {torch_name}={value!r}")


#: torch's implementation flags (``fused``, ``foreach``, ``capturable``, ``differentiable``): what each means
#: here. slotopt's kernels are one pass over each tensor already (the compiled one-pass rule, or the foreach rule
#: where it is not built), with the same bits either way, so ``fused`` and ``foreach`` choose nothing (Keras 3
#: optimizers take ``foreach`` themselves: off, one group per variable).
TORCH_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def implementation_flags(optimizer: Any) -> dict[str, Any]:
    """What torch's flags are for ``optimizer`` (shown in its ``defaults`` and ``param_groups``, so in its
    ``repr``): ``fused`` True (one pass over each tensor per rule, whatever was asked), ``foreach`` whether whole
    (device, dtype) groups go through each kernel call, ``capturable`` as given (it changes nothing on the CPU),
    ``differentiable`` False."""
    given = optimizer.__dict__.get("_torch_flags", {})
    return {"fused": True, "foreach": bool(getattr(optimizer, "foreach", True)),
            "capturable": bool(given.get("capturable")), "differentiable": False}


def _flag(cls: type, name: str, value: Any) -> Optional[bool]:
    if value is not None and not isinstance(value, bool):
        raise TorchSpellingError(f"{cls.__name__}(): torch's `{name}` must be True, False or None. "
                                 f"Received: {name}={value!r}")
    return value


def _take_flags(cls: type, out: dict[str, Any], names: set[str]) -> dict[str, Optional[bool]]:
    flags = {name: _flag(cls, name, out.pop(name)) for name in TORCH_FLAGS if name in out and name not in names}
    if flags.get("differentiable"):
        raise TorchSpellingError(
            f"{cls.__name__}() does not take torch's `differentiable=True`: slotopt's step writes the parameters "
            "and slots in place outside autograd (its kernels reproduce TensorFlow's bits; no graph is recorded "
            "through them), so no gradient can flow through an update. Use torch.optim's optimizer with "
            "`differentiable=True` for a step you differentiate through (meta-learning).")
    return flags


def check_capturable(optimizer: Any, flags: Mapping[str, Optional[bool]], tensors: Any) -> None:
    """torch's ``capturable=True``: a step whose scalars stay on the device so that a CUDA graph can capture it
    (``engine/capture.py``). On the CPU torch ignores it, and so does slotopt; on CUDA an optimizer whose steps
    cannot be captured is refused here, naming why (rather than left to fail inside a graph capture).
    ``tensors``: the parameters the optimizer is built on (None: not known yet)."""
    if not flags.get("capturable") or tensors is None:
        return
    devices = {t.device.type for t in tensors if hasattr(t, "device")}
    if devices - {"cpu", "meta"}:
        from . import capture

        reason = capture.refusal(optimizer)
        if reason is not None:
            raise TorchSpellingError(
                f"{type(optimizer).__name__}(capturable=True) on {sorted(devices - {'cpu', 'meta'})}: its steps "
                f"cannot be captured in a CUDA graph ({reason}): construct it without `capturable` and step it "
                "outside the graph. On the CPU `capturable` changes nothing, as in torch.")


def _pair(cls: type, pair: tuple[str, str], betas: Any) -> tuple[Any, Any]:
    """Any sequence of two real numbers (a tuple, a list, OmegaConf's ``ListConfig`` from Hydra, a numpy array
    or tensor of two elements), as torch takes ``betas``: its two numbers as Python numbers."""
    problem = TorchSpellingError(
        f"Argument `betas` must be a pair ({pair[0]}, {pair[1]}) of numbers, as in torch. Received: betas={betas!r}")
    if isinstance(betas, (str, bytes, Mapping)) or not hasattr(betas, "__len__") or not hasattr(betas, "__iter__"):
        raise problem
    try:
        if len(betas) != 2:
            raise problem
        items = list(betas)
    except TypeError:
        raise problem from None
    out = []
    for item in items:
        if (isinstance(item, (np.generic, np.ndarray)) and item.size == 1) or (
                isinstance(item, torch.Tensor) and item.numel() == 1):
            item = item.item()  # a numpy scalar, or one element of an array or tensor
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise problem
        out.append(item)
    return out[0], out[1]


def _declared_defaults(cls: type) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass.__module__.split(".")[0] == "torch":
            continue
        try:
            for p in inspect.signature(init).parameters.values():
                defaults.setdefault(p.name, p.default)
        except (TypeError, ValueError):
            continue
    return defaults


def _given(cls: type, name: str, out: Mapping[str, Any], positional_given: set[str]) -> bool:
    """Whether ``name`` (the class's own spelling) was given a value of its own: by position, or by keyword with
    a value other than its declared default. Tools that build a call from the signature (jsonargparse, so
    LightningCLI) pass every argument with its default, and a torch spelling besides: the default is not a
    second value."""
    if name in positional_given:
        return True
    if name not in out:
        return False
    default = _declared_defaults(cls).get(name, inspect.Parameter.empty)
    value = out[name]
    try:
        return not (value is default or (type(value) is type(default) and bool(value == default)))
    except (TypeError, ValueError, RuntimeError):
        return True


def translate(cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with torch's ``lr`` and ``betas`` under ``cls``'s own names, and torch's implementation flags
    taken (``TORCH_FLAGS``: kept, as the optimizer's ``_torch_flags``, by the metaclass); raises
    ``TorchSpellingError`` for ``eps``, ``differentiable=True`` and a value given under both names. Names ``cls``
    takes itself (tf.keras's ``lr``, Keras 3's ``foreach``) stay. A torch spelling given as None is not given."""
    flags, out = translate_with_flags(cls, args, kwargs)
    return out


def translate_with_flags(cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                         ) -> tuple[dict[str, Optional[bool]], dict[str, Any]]:
    """:func:`translate`, and the torch flags it took."""
    if not any(k in kwargs for k in ("lr", "betas", "eps") + TORCH_FLAGS):
        return {}, dict(kwargs)
    positional, names = accepted_arguments(cls)
    by_position = set(positional[:len(args)])
    out = dict(kwargs)
    flags = _take_flags(cls, out, names)
    native = getattr(cls, "_native_torch_spellings", frozenset())
    for torch_name in ("lr", "betas"):
        if torch_name in out and out[torch_name] is None and torch_name not in names and torch_name not in native:
            del out[torch_name]  # torch's spelling left at its signature default: not given
    if "lr" in out and "lr" not in names and "lr" not in native and "learning_rate" in names:
        if _given(cls, "learning_rate", out, by_position):
            raise _both(cls, "lr", "`learning_rate`", out["lr"])
        out["learning_rate"] = out.pop("lr")
    if "betas" in out and "betas" not in names:
        pair = _betas_pair(names)
        if pair is not None:
            if any(_given(cls, name, out, by_position) for name in pair):
                raise _both(cls, "betas", f"`{pair[0]}`/`{pair[1]}`", out["betas"])
            out[pair[0]], out[pair[1]] = _pair(cls, pair, out.pop("betas"))
    if "eps" in out and "eps" not in names:
        if "epsilon" not in names:
            raise TorchSpellingError(f"{cls.__name__}() has no epsilon: torch's `eps` has nothing to stand for. "
                                     f"Received: eps={out['eps']!r}")
        raise TorchSpellingError(
            f"{cls.__name__}() does not take torch's `eps`: pass Keras's `epsilon=`, which is added in another "
            "place (torch adds eps to the bias-corrected root of the second moment, Keras adds epsilon where its "
            "own formula does: for Adam, to the root before the bias correction, so torch's eps matches a Keras "
            f"epsilon of eps * sqrt(1 - beta_2**t), which changes every step). Received: eps={out['eps']!r}")
    return flags, out
