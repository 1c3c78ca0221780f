"""Constructing an optimizer: the metaclass that takes its parameters (by ``params=`` or positionally first, as torch
tools pass them), checks the constructor's arguments and builds on the parameters once the whole constructor chain
has run, with the checks of what may be parameters and of a ``gradient_aggregator``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from . import checks, torch_arguments

__all__ = ["BuildsOnParams", "is_parameters", "check_gradient_aggregator", "check_maximize"]


class BuildsOnParams(type):
    """Takes the parameters of every optimizer (a module, tensors, named pairs or torch param-group dicts), by
    keyword ``params=`` or positionally first as torch tools pass them (``optimizer_class(params, **kwargs)``:
    ZeRO, Hugging Face's ``optimizer_cls_and_kwargs``), and builds on them once the whole constructor chain
    (subclass attributes included) has run. A first positional argument that is not parameters is the
    class's own (Keras's ``Adam(0.01)``, TF1's ``MomentumOptimizer(0.1, 0.9)``, a wrapper's inner optimizer)."""

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
        kwargs = torch_arguments.translate(cls, args, kwargs)  # torch's ``lr``/``betas``; ``eps`` refused
        checks.check_argument_types(cls.__init__, args, kwargs, cls._optional_arguments, cls._own_argument_checks)
        optimizer = super().__call__(*args, **kwargs)
        checks.check_name(optimizer.__dict__.get("name", optimizer.__dict__.get("_name")))  # given by position
        optimizer._check_configuration()  # every generation's hyperparameters, by name (engine/checks.py)
        if gradient_aggregator is not None:
            optimizer.gradient_aggregator = gradient_aggregator
        if maximize:
            optimizer.maximize = True
        if params is not None:
            optimizer.build(params)
            optimizer._hyperparameters_changed()  # a group's own values may need slots (its momentum)
        return optimizer


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

