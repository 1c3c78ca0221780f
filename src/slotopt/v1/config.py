"""``get_config`` / ``from_config`` for the TF1 optimizers: their constructor arguments, as data.

TF1's ``train.Optimizer`` has no Keras config; slotopt gives its built-in TF1 optimizers one so that a
``CompositeOptimizer`` holding them, or ``slotopt.serialize``, round-trips to the same class. The config is the
constructor's arguments, read back from the optimizer (hyperparameters as given, names, flags); a value that is not
plain data (a tensor, a callable, AdagradDA's ``global_step`` variable) cannot be written and is named in the
error.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["constructor_config", "from_constructor_config"]


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, str)):
        return True
    return isinstance(value, (int, float)) and (not isinstance(value, float) or math.isfinite(value))


def _parameters(cls: type) -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def constructor_config(opt: Any) -> dict[str, Any]:
    """``{argument: value}`` for every constructor argument of ``opt``'s class, read back from ``opt``."""
    hyper = opt.__dict__.get("_hyper", {})
    config: dict[str, Any] = {}
    for parameter in _parameters(type(opt)):
        name = parameter.name
        if name in hyper:
            value = hyper[name]
        elif f"_{name}" in opt.__dict__:
            value = opt.__dict__[f"_{name}"]
        elif parameter.default is not inspect.Parameter.empty:
            value = parameter.default
        else:
            raise NotImplementedError(f"{type(opt).__name__}.get_config: argument `{name}` cannot be read back.")
        if not _plain(value):
            raise NotImplementedError(
                f"{type(opt).__name__} cannot be serialized: its `{name}` is {value!r}, not a number, string or bool "
                "(a tensor, a callable or a variable is not data)."
            )
        config[name] = value
    if opt.maximize:  # (torch's, given to any optimizer's constructor: a slotopt extension, as this config is)
        config["maximize"] = True
    return config


def from_constructor_config(cls: type, config: Mapping[str, Any]) -> Any:
    """``cls(**config)`` after checking that every key is a constructor argument and every value plain data."""
    if not isinstance(config, Mapping):
        raise ValueError(f"A {cls.__name__} config must be a dict. Received: config={config!r}")
    known = {p.name for p in _parameters(cls)} | {"maximize"}
    unknown = sorted(str(k) for k in config if k not in known)
    if unknown:
        raise ValueError(f"Unknown arguments in the {cls.__name__} config: {unknown}. Valid: {sorted(known)}")
    bad = {k: v for k, v in config.items() if not _plain(v)}
    if bad:
        raise ValueError(f"A {cls.__name__} config holds numbers, strings and bools only. Received: {bad!r}")
    return cls(**dict(config))
