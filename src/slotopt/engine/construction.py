"""Constructing an optimizer: the metaclass that takes its parameters (by ``params=`` or positionally first, as torch
tools pass them), checks the constructor's arguments and builds on the parameters once the whole constructor chain
has run, with the checks of what may be parameters and of a ``gradient_aggregator``."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

import torch

from . import checks, limits, torch_arguments

__all__ = ["BuildsOnParams", "is_parameters", "check_gradient_aggregator", "check_maximize", "class_signature"]


class BuildsOnParams(type):
    """Takes the parameters of every optimizer (a module, tensors, named pairs or torch param-group dicts), by
    keyword ``params=`` or positionally first as torch tools pass them (``optimizer_class(params, **kwargs)``:
    ZeRO, Hugging Face's ``optimizer_cls_and_kwargs``), and builds on them once the whole constructor chain
    (subclass attributes included) has run. A first positional argument that is not parameters is the
    class's own (Keras's ``Adam(0.01)``, TF1's ``MomentumOptimizer(0.1, 0.9)``, a wrapper's inner optimizer)."""

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(name, bases, namespace, **kwargs)
        # Tools that read a class's arguments from its ``__new__`` or ``__init__`` (jsonargparse, so LightningCLI)
        # would see the constructor chain's own names only; a ``__new__`` of its own carries the class's true
        # signature for them. It creates the object as ``object.__new__`` does.
        cls.__new__ = staticmethod(_New(cls))  # type: ignore[assignment]

    @property
    def __signature__(cls) -> inspect.Signature:
        """The class's true signature (``inspect.signature(slotopt.AdamW)``): :func:`class_signature`."""
        return class_signature(cls)

    def __call__(cls, *args: Any, params: Any = None, gradient_aggregator: Any = None, maximize: Any = None,
                 **kwargs: Any) -> Any:
        if args and is_parameters(args[0]):
            if params is not None:
                raise TypeError(f"{cls.__name__}() got parameters both positionally and as `params=`. "
                                f"Received: {_short(args[0])} and params={_short(params)}")
            params, args = args[0], args[1:]
        if isinstance(params, Iterator):  # (read once: a composite routes them, then builds on them again)
            params = list(params)
        if gradient_aggregator is not None:
            check_gradient_aggregator(gradient_aggregator, cls)
        if maximize is not None:
            check_maximize(maximize, cls)
        if "name" in kwargs:
            checks.check_name(kwargs["name"])
        _check_nesting(cls, args, kwargs)
        # torch's ``lr``/``betas`` and implementation flags; ``eps`` and ``differentiable=True`` refused
        flags, kwargs = torch_arguments.translate_with_flags(cls, args, kwargs)
        for i, tensor in enumerate(_tensors(params) or ()):  # torch.optim's check, before anything is built
            if isinstance(tensor, torch.Tensor):
                checks.check_leaf(tensor, f"params entry {i}")
        checks.check_argument_types(cls.__init__, args, kwargs, cls._optional_arguments, cls._own_argument_checks)
        optimizer = super().__call__(*args, **kwargs)
        checks.check_name(optimizer.__dict__.get("name", optimizer.__dict__.get("_name")))  # given by position
        optimizer._check_configuration()  # every generation's hyperparameters, by name (engine/checks.py)
        if gradient_aggregator is not None:
            optimizer.gradient_aggregator = gradient_aggregator
        if maximize:
            optimizer.maximize = True
        if flags:
            optimizer.__dict__["_torch_flags"] = flags
            torch_arguments.check_capturable(optimizer, flags, _tensors(params))  # (before anything is built)
        if params is not None:
            optimizer.build(params)
            optimizer._hyperparameters_changed()  # a group's own values may need slots (its momentum)
        return optimizer


def _check_nesting(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Each argument that is a dict, list or tuple nests at most ``limits.MAX_CONFIG_DEPTH`` deep, refused by
    name: one nested 50,000 deep (a config from a file) ended in a bare ``RecursionError`` from the ``repr`` of
    a later message."""
    for i, value in enumerate(args):
        if isinstance(value, (Mapping, list, tuple)):
            limits.check_depth(value, f"Positional argument {i} of {cls.__name__}()")
    for key, value in kwargs.items():
        if isinstance(value, (Mapping, list, tuple)):
            limits.check_depth(value, f"Argument `{key}` of {cls.__name__}()")


def is_parameters(value: Any) -> bool:
    """True for what can only be parameters: a module, a generator of tensors (``model.parameters()``), or a
    non-empty list/tuple of tensors, ``(name, tensor)`` pairs or param-group dicts. A learning rate is a
    number, a tensor, a schedule or a callable, and never one of these."""
    if isinstance(value, torch.nn.Module):
        return True
    if isinstance(value, (list, tuple)):
        return bool(value) and all(
            isinstance(item, (torch.Tensor, Mapping))
            or (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], torch.Tensor))
            for item in value)
    return isinstance(value, Iterator) and not isinstance(value, (str, bytes, Mapping, torch.Tensor))


def _tensors(params: Any) -> Any:
    """The tensors among ``params`` (a module, tensors, named pairs or group dicts), for the device checks."""
    if params is None:
        return None
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    out = []
    for item in params if isinstance(params, (list, tuple)) else [params]:
        if isinstance(item, Mapping):
            inner = item.get("params", [])
            out += _tensors(inner if isinstance(inner, (list, tuple)) else [inner]) or []
        elif isinstance(item, tuple) and len(item) == 2:
            out.append(item[1])
        else:
            out.append(item)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_maximize(value: Any, cls: type) -> None:
    """Raises unless ``value`` is a bool that optimizers of ``cls`` take (torch's ``maximize``)."""
    checks.check_flag("maximize", value)
    if value and not getattr(cls, "_maximizes", False):
        raise ValueError(f"`{cls.__name__}` steps through the optimizer(s) it wraps or composes: pass `maximize=True` "
                         f"to those. Received: maximize={value!r}")


def check_gradient_aggregator(value: Any, cls: type) -> None:
    """Raises unless ``value`` can aggregate gradients for optimizers of ``cls``."""
    if not cls._aggregates_gradients:
        raise ValueError(
            f"`{cls.__name__}` does not aggregate gradients itself: pass `gradient_aggregator` to the optimizer(s) "
            f"it wraps. Received: gradient_aggregator={value!r}"
        )
    if not callable(value):
        raise TypeError(
            "Argument `gradient_aggregator` must be a callable `fn(grads_and_vars) -> grads_and_vars` or None. "
            f"Received: gradient_aggregator={value!r}"
        )



class _New:
    """A class's ``__new__``: ``object.__new__``, with the class's signature (:func:`class_signature`, its first
    parameter the class) for the tools that read it there. Built on first use, as ``inspect`` asks for it."""

    def __init__(self, cls: type) -> None:
        self._cls = cls
        self.__name__ = "__new__"
        self.__qualname__ = f"{cls.__qualname__}.__new__"
        self.__doc__ = cls.__doc__

    def __call__(self, klass: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(klass)

    @property
    def __signature__(self) -> inspect.Signature:
        signature = class_signature(self._cls)
        first = inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return signature.replace(parameters=[first, *signature.parameters.values()])


def _resolved(init: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(init)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve is kept as written
        return {}


def class_signature(cls: type) -> inspect.Signature:
    """``cls``'s constructor as a user calls it: its own arguments (the first ``__init__`` of its chain, with its
    defaults), the arguments of the constructors it passes ``**kwargs`` on to and the face's own keywords
    (``_keyword_arguments``), then keyword-only ``params`` (the parameters to build on; also accepted as the
    first positional argument), ``gradient_aggregator`` where the class aggregates gradients, ``maximize``, and the torch
    spellings it takes (``lr``, ``betas``: ``engine/torch_arguments.py``). Built once per class from what the
    classes declare: nothing lists arguments twice."""
    cached = cls.__dict__.get("_slotopt_signature")
    if cached is not None:
        return cached
    own: list[inspect.Parameter] = []
    keyword: dict[str, inspect.Parameter] = {}
    first = True
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass.__module__.split(".")[0] == "torch" or klass is object:
            break
        try:
            parameters = list(inspect.signature(init).parameters.values())[1:]
        except (TypeError, ValueError):
            break
        hints = _resolved(init)
        for p in parameters:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in keyword or any(q.name == p.name for q in own):
                continue
            p = p.replace(annotation=hints.get(p.name, p.annotation))
            if first and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                own.append(p)
            elif p.default is not p.empty or first:
                keyword[p.name] = p.replace(kind=p.KEYWORD_ONLY)
        first = False
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    for name, default in getattr(cls, "_keyword_arguments", {}).items():
        keyword.setdefault(name, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    names = {p.name for p in own} | set(keyword)
    extra = [inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)]
    if getattr(cls, "_aggregates_gradients", False) and "gradient_aggregator" not in names:
        extra.append(inspect.Parameter("gradient_aggregator", inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation=Optional[Callable[..., Any]]))
    if "maximize" not in names:  # (torch's: every class takes it, engine/pipeline.negate_gradients)
        extra.append(inspect.Parameter("maximize", inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation=Optional[bool]))
    extra += [p for p in torch_arguments.torch_spellings(cls, names) if p.name not in names]
    signature = inspect.Signature(own + list(keyword.values()) + extra)
    type.__setattr__(cls, "_slotopt_signature", signature)
    return signature
