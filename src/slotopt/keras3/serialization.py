"""``get`` / ``serialize`` / ``deserialize`` for Keras 3 optimizers (spec §1.12).

Built-in optimizers are found by name, case-insensitively, in the engine's registry, where each class registers
itself (``@registry.register("keras3")``), so a new optimizer is picked up without touching this module. As in
Keras, ``Lamb`` is exported but not registered by name: ``get("lamb")`` fails, and a config names it with its
module (``serialize`` writes ``"keras.optimizers"``), or through ``custom_objects``. A class Keras does not have
serializes under ``"slotopt.keras3"`` (slotopt's own module, which only slotopt resolves and Keras never claims).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

from ..engine import registry
from ..engine.limits import check_depth

__all__ = ["get", "serialize", "deserialize"]

#: The Keras module written into serialized built-in optimizers.
_MODULE = "keras.optimizers"
#: The module written for an optimizer of slotopt's own (Keras has no such class: it could not load it).
_OWN_MODULE = "slotopt.keras3"

def _builtins() -> dict[str, type]:
    """``{lowercase name: class}`` for the Keras 3 optimizers ``get``/``deserialize`` know by name."""
    return {name.lower(): cls for name, cls in registry.registered_classes("keras3").items()}


def register() -> None:
    """Says which module paths mean Keras 3 (``slotopt.keras3`` calls it; its classes register themselves)."""
    from .optimizer import Optimizer

    registry.register_generation(
        "keras3", base=Optimizer, public_module=_MODULE, own_module=_OWN_MODULE,
        # Keras 3's public and source paths, tf.keras 2.11+'s new optimizers, slotopt's paths (old ones too).
        modules=("keras.optimizers", "keras.optimizers.experimental", "tf_keras.optimizers",
                 "tf.keras.optimizers", "slotopt", "slotopt.optimizer", "slotopt.multi_optimizer",
                 "slotopt.serialization"),
        prefixes=("keras.src.optimizers", "slotopt.keras3", "slotopt.optimizers",
                  "tf_keras.src.optimizers.optimizer_experimental",
                  "keras.optimizers.optimizer_experimental", "keras.src.optimizers.optimizer_experimental"),
    )


def resolve_optimizer_class(class_name: Any, module: Any = None,
                            custom_objects: Optional[Mapping[str, Any]] = None,
                            registered_name: Any = None) -> type:
    """The optimizer class a serialized optimizer names, found without importing anything it names.

    ``custom_objects`` (name → class) first, by ``registered_name`` then ``class_name``; then the registry of
    the generation ``module`` names (``keras.optimizers`` → Keras 3, ``keras.optimizers.legacy`` or
    ``slotopt.legacy...`` → tf.keras legacy, ``slotopt.v1...`` → TF1, ``slotopt.tfrs`` → TFRS; no module →
    Keras 3); names are case-insensitive. See ``slotopt.engine.registry``.

    Example:
        >>> from slotopt.keras3.serialization import resolve_optimizer_class
        >>> resolve_optimizer_class("adam").__module__, resolve_optimizer_class("Adam", "slotopt.legacy.adam").__module__
        ('slotopt.keras3.adam', 'slotopt.legacy.adam')
    """
    return registry.resolve_class(class_name, module, custom_objects, registered_name)


def serialize(optimizer: Any) -> dict[str, Any]:
    """The Keras 3 serialized form of ``optimizer``: ``{"module", "class_name", "config", "registered_name"}``.

    Built-in optimizers get their generation's module and ``registered_name=None`` (``"keras.optimizers"`` for
    Keras 3, ``"keras.optimizers.legacy"`` for tf.keras legacy, ``"slotopt.v1"``, ``"slotopt.tfrs"``), so
    ``deserialize`` returns the same class; any other class gets its Python module and its class name as
    ``registered_name`` (deserialize it with ``custom_objects``).

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
    return registry.serialized(optimizer)


def deserialize(config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Any]] = None) -> Any:
    """Rebuilds an optimizer from ``serialize`` output or a ``{"class_name": ..., "config": {...}}`` dict.

    ``custom_objects`` (name → class) is searched first, by ``registered_name`` and then by ``class_name``;
    then the registry of the generation ``module`` names (Keras 3 when there is none); built-in names are
    case-insensitive (``"adam"``, ``"RMSprop"``, ``"sgd"``). Nothing a config names is imported or called.

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
    check_depth(config, "Argument `config`")  # before anything recurses into it
    class_name = config.get("class_name")
    if not isinstance(class_name, str):
        raise ValueError(f"Argument `config` needs a string `class_name`. Received: config={dict(config)!r}")
    inner = config.get("config") or {}
    if not isinstance(inner, Mapping):
        raise ValueError(f"`config['config']` must be a dict. Received: config={dict(config)!r}")
    custom = dict(custom_objects or {})
    cls = resolve_optimizer_class(class_name, config.get("module"), custom, config.get("registered_name"))
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
