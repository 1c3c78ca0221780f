"""``get`` / ``serialize`` / ``deserialize`` for Keras 3 optimizers (spec §1.12).

Built-in optimizers are found by name, case-insensitively, in the ``slotopt`` namespace at call time, so an
optimizer class exported there later is picked up without touching this module. As in Keras, ``Lamb`` is exported
but not registered: ``get("lamb")`` fails, and a serialized Lamb needs ``custom_objects``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["get", "serialize", "deserialize"]

#: The Keras module written into serialized built-in optimizers.
_MODULE = "keras.optimizers"

#: Class names Keras registers under ``keras.optimizers`` that slotopt implements (looked up lazily).
_REGISTERED = (
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "Adamax",
    "AdamW",
    "Ftrl",
    "Lion",
    "LossScaleOptimizer",
    "Muon",
    "MultiOptimizer",
    "Nadam",
    "OptimizerMap",
    "RMSprop",
    "ScheduleFreeAdamW",
    "SGD",
)


def _builtins() -> dict[str, type]:
    """``{lowercase name: class}`` for the registered optimizers that exist right now."""
    import slotopt

    found = {}
    for name in _REGISTERED:
        cls = getattr(slotopt, name, None)
        if isinstance(cls, type):
            found[name.lower()] = cls
    return found


def serialize(optimizer: Any) -> dict[str, Any]:
    """The Keras 3 serialized form of ``optimizer``: ``{"module", "class_name", "config", "registered_name"}``.

    Built-in optimizers get ``module="keras.optimizers"`` and ``registered_name=None``; any other class gets its
    Python module and its class name as ``registered_name`` (deserialize it with ``custom_objects``).

    Example:
        >>> import slotopt
        >>> config = slotopt.serialize(slotopt.SGD(learning_rate=0.5, name="sgd"))
        >>> config["class_name"], config["config"]["learning_rate"]
        ('SGD', 0.5)
    """
    if not callable(getattr(optimizer, "get_config", None)):
        raise TypeError(
            "Argument `optimizer` must be an optimizer with a `get_config()` method. "
            f"Received: optimizer={optimizer!r}"
        )
    cls = type(optimizer)
    config = optimizer.get_config()
    if _builtins().get(cls.__name__.lower()) is cls:
        return {"module": _MODULE, "class_name": cls.__name__, "config": config, "registered_name": None}
    return {"module": cls.__module__, "class_name": cls.__name__, "config": config, "registered_name": cls.__name__}


def deserialize(config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Any]] = None) -> Any:
    """Rebuilds an optimizer from ``serialize`` output or a ``{"class_name": ..., "config": {...}}`` dict.

    ``custom_objects`` (name → class) is searched first, by ``registered_name`` and then by ``class_name``;
    built-in names are case-insensitive (``"adam"``, ``"RMSprop"``, ``"sgd"``).

    Example:
        >>> import slotopt
        >>> opt = slotopt.deserialize({"class_name": "adam", "config": {"learning_rate": 0.5}})
        >>> type(opt).__name__, float(opt.learning_rate)
        ('Adam', 0.5)
    """
    if not isinstance(config, Mapping):
        raise ValueError(
            "Argument `config` must be a dict with `class_name` and `config` keys. "
            f"Received: config={config!r}"
        )
    class_name = config.get("class_name")
    if not isinstance(class_name, str):
        raise ValueError(f"Argument `config` needs a string `class_name`. Received: config={dict(config)!r}")
    inner = config.get("config") or {}
    if not isinstance(inner, Mapping):
        raise ValueError(f"`config['config']` must be a dict. Received: config={dict(config)!r}")
    custom = dict(custom_objects or {})
    registered_name = config.get("registered_name")
    builtins = _builtins()
    if registered_name in custom:
        cls = custom[registered_name]
    elif class_name in custom:
        cls = custom[class_name]
    elif class_name.lower() in builtins:
        cls = builtins[class_name.lower()]
    else:
        valid = sorted(builtins) + sorted(k for k in custom if k.lower() not in builtins)
        raise ValueError(
            f"Unknown optimizer: '{class_name}'. Valid names are {valid}; pass other classes (such as `Lamb`) "
            "through `custom_objects`."
        )
    from_config = getattr(cls, "from_config", None)
    if from_config is None:
        return cls(**inner)
    if "custom_objects" in inspect.signature(from_config).parameters:
        return from_config(dict(inner), custom_objects=custom_objects)
    return from_config(dict(inner))


def get(identifier: Any) -> Any:
    """An optimizer from a name (``"adam"``), a serialized dict, or an optimizer instance (returned as is).

    ``None`` gives ``None``; a name builds the optimizer with its default arguments.

    Example:
        >>> import slotopt
        >>> type(slotopt.get("Sgd")).__name__
        'SGD'
        >>> slotopt.get(None) is None
        True
    """
    from .optimizer import Optimizer

    if identifier is None or isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, Mapping):
        obj = deserialize(identifier)
    elif isinstance(identifier, str):
        obj = deserialize({"class_name": identifier, "config": {}})
    else:
        obj = None
    if isinstance(obj, Optimizer):
        return obj
    raise ValueError(f"Could not interpret optimizer identifier: {identifier!r}")
