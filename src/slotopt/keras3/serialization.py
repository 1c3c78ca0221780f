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


def _namespace_registry(package: str) -> dict[str, type]:
    """``{name: class}`` for the optimizers a generation's package exports (``__all__``), base classes excluded."""
    import importlib

    module = importlib.import_module(package)  # slotopt's own package, never a name taken from a config
    base = module.Optimizer
    found = {}
    for name in module.__all__:
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, base) and cls is not base and name != "OptimizerV2":
            found[name] = cls
    return found


def resolve_optimizer_class(class_name: Any, module: Any = None,
                            custom_objects: Optional[Mapping[str, Any]] = None,
                            registered_name: Any = None) -> type:
    """The optimizer class a serialized optimizer names, found without importing anything it names.

    ``custom_objects`` (name → class) first, by ``registered_name`` then ``class_name``; then the registry of
    the generation ``module`` names: ``slotopt.legacy...`` → the tf.keras legacy optimizers, ``slotopt.v1...`` →
    the TF1 optimizers, anything else → the Keras 3 optimizers ``deserialize`` knows (names case-insensitive).

    Example:
        >>> from slotopt.keras3.serialization import resolve_optimizer_class
        >>> resolve_optimizer_class("adam").__module__, resolve_optimizer_class("Adam", "slotopt.legacy.adam").__module__
        ('slotopt.keras3.adam', 'slotopt.legacy.adam')
    """
    if not isinstance(class_name, str):
        raise ValueError(f"A serialized optimizer needs a string `class_name`. Received: class_name={class_name!r}")
    if module is not None and not isinstance(module, str):
        raise ValueError(f"A serialized optimizer's `module` must be a string. Received: module={module!r}")
    custom = dict(custom_objects or {})
    if isinstance(registered_name, str) and registered_name in custom:
        cls = custom[registered_name]
    elif class_name in custom:
        cls = custom[class_name]
    else:
        package = module or ""
        if package == "slotopt.legacy" or package.startswith("slotopt.legacy."):
            registry, generation = _namespace_registry("slotopt.legacy"), "slotopt.legacy"
            cls = registry.get(class_name)
        elif package == "slotopt.v1" or package.startswith("slotopt.v1."):
            registry, generation = _namespace_registry("slotopt.v1"), "slotopt.v1"
            cls = registry.get(class_name)
        else:
            registry, generation = _builtins(), "slotopt"
            cls = registry.get(class_name.lower())
        if cls is None:
            valid = sorted(registry) + sorted(k for k in custom if k.lower() not in registry)
            where = "" if generation == "slotopt" else f" (in {generation})"
            raise ValueError(
                f"Unknown optimizer: '{class_name}'. Valid names are {valid}{where}; pass other classes (such as "
                "`Lamb`) through `custom_objects`."
            )
    if not isinstance(cls, type):
        raise ValueError(f"`custom_objects[{class_name!r}]` must be an optimizer class. Received: {cls!r}")
    return cls


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
    cls = resolve_optimizer_class(class_name, None, custom, config.get("registered_name"))
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
