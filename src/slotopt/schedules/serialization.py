"""(De)serialization of schedules: Keras 3's serialized form (built-in schedules under
``keras.optimizers.schedules``, others under their own module), and ``get``."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Type, Union

from ..engine.limits import check_depth
from .base import LearningRateSchedule
from .cosine import CosineDecay, CosineDecayRestarts
from .decays import ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay, PolynomialDecay

_MODULE = "keras.optimizers.schedules"

_BUILTINS: Dict[str, Type[LearningRateSchedule]] = {
    cls.__name__: cls
    for cls in (
        ExponentialDecay,
        PiecewiseConstantDecay,
        PolynomialDecay,
        InverseTimeDecay,
        CosineDecay,
        CosineDecayRestarts,
    )
}


def serialize(schedule: LearningRateSchedule) -> Dict[str, Any]:
    """Returns the Keras 3 serialized form of ``schedule``.

    Built-in schedules give ``{"module": "keras.optimizers.schedules", "class_name": ..., "config": ...,
    "registered_name": None}``. Any other class gives its Python module and its class name as
    ``registered_name``, as Keras does for custom objects.

    >>> serialize(ExponentialDecay(0.5, 2, 0.25))["class_name"]
    'ExponentialDecay'
    """
    cls = type(schedule)
    config = schedule.get_config()
    if _BUILTINS.get(cls.__name__) is cls:
        return {"module": _MODULE, "class_name": cls.__name__, "config": config, "registered_name": None}
    return {
        "module": cls.__module__,
        "class_name": cls.__name__,
        "config": config,
        "registered_name": cls.__name__,
    }


def deserialize(
    config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Callable[..., Any]]] = None
) -> LearningRateSchedule:
    """Rebuilds a schedule from :func:`serialize` output (or a ``{"class_name", "config"}`` dict).

    ``custom_objects`` maps names to extra classes; it is searched first, by ``registered_name`` and then by
    ``class_name``, before the six built-in schedules.

    >>> s = deserialize({"class_name": "InverseTimeDecay",
    ...                  "config": {"initial_learning_rate": 1.0, "decay_steps": 1, "decay_rate": 1.0}})
    >>> float(s(1))
    0.5
    """
    if not isinstance(config, Mapping):
        raise TypeError(
            f"A serialized learning rate schedule must be a dict with `class_name` and `config`. "
            f"Received: config={config!r}"
        )
    check_depth(config, "A serialized learning rate schedule")  # before anything recurses into it
    if "class_name" not in config:
        raise ValueError(
            f"A serialized learning rate schedule needs a `class_name` key. Received: config={config}"
        )
    class_name = config["class_name"]
    inner = config.get("config") or {}
    if not isinstance(inner, Mapping):
        raise TypeError(f"The `config` of a serialized learning rate schedule must be a dict of arguments. "
                        f"Received: config={inner!r} (class_name={class_name!r})")
    custom = dict(custom_objects or {})
    cls: Optional[Any] = None
    registered_name = config.get("registered_name")
    if registered_name is not None and registered_name in custom:
        cls = custom[registered_name]
    elif class_name in custom:
        cls = custom[class_name]
    elif class_name in _BUILTINS:
        cls = _BUILTINS[class_name]
    if cls is None:
        valid: List[str] = sorted(_BUILTINS) + sorted(k for k in custom if k not in _BUILTINS)
        raise ValueError(
            f"Unknown learning rate schedule (decay): '{class_name}'. Valid names are {valid}; pass other "
            "classes through `custom_objects`."
        )
    if hasattr(cls, "from_config"):
        return cls.from_config(dict(inner))
    return cls(**inner)


def get(identifier: Union[LearningRateSchedule, Mapping[str, Any], None]) -> Optional[LearningRateSchedule]:
    """Returns a schedule from an instance (returned as is), a serialized dict, or ``None`` (returns ``None``).

    >>> get(None) is None
    True
    >>> type(get({"class_name": "CosineDecay", "config": {"initial_learning_rate": 1.0, "decay_steps": 5}})).__name__
    'CosineDecay'
    """
    if identifier is None or isinstance(identifier, LearningRateSchedule):
        return identifier
    if isinstance(identifier, Mapping):
        return deserialize(identifier)
    raise ValueError(f"Could not interpret learning rate schedule identifier: {identifier!r}")
