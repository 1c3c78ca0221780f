"""The one resolver for names found in configs: optimizer classes by ``module`` + ``class_name``, nothing imported.

A serialized optimizer names its class (``class_name``) and where it lives (``module``). slotopt never imports
that module or looks the name up in it: each generation registers its classes here when its package is imported
(``slotopt.keras3``, ``slotopt.legacy``, ``slotopt.v1``, ``slotopt.tfrs``), together with the module paths
that mean it (Keras's public modules, tf-keras's, TensorFlow's, and slotopt's own paths, old ones included).
A name resolves through the caller's explicit ``custom_objects`` first, then through the registry of the
generation its ``module`` names; anything else is refused with an error that names it. Functions named in a
config (a ``MultiOptimizer``'s routing function) resolve only through ``custom_objects``.

The engine imports no face: the faces call :func:`register_generation` (see each face's ``__init__``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional

__all__ = ["register_generation", "resolve_class", "resolve_function", "generation_of_module",
           "serialized_module", "serialized", "registered_classes", "known_modules", "UnknownNameError"]


class UnknownNameError(ValueError):
    """A config names something slotopt's registries and the caller's ``custom_objects`` do not have."""


class _Generation:
    def __init__(self, name: str, public_module: str, modules: tuple[str, ...], prefixes: tuple[str, ...],
                 classes: dict[str, type], aliases: dict[str, type], exported: dict[str, type]) -> None:
        self.name = name
        self.public_module = public_module
        self.modules = modules
        self.prefixes = prefixes
        self.classes = classes  # the exported names, written by serialize
        self.aliases = aliases  # other names the same classes were written under (old class names)
        self.exported = exported  # in the public module but not known by bare name (Keras 3's Lamb)

    def lookup(self, class_name: str) -> Optional[type]:
        found = self.classes.get(class_name) or self.aliases.get(class_name)
        if found is not None:
            return found
        lowered = class_name.lower()
        for table in (self.classes, self.aliases):
            for key, cls in table.items():
                if key.lower() == lowered:
                    return cls
        return None


_GENERATIONS: dict[str, _Generation] = {}


def register_generation(name: str, *, public_module: str, modules: Iterable[str], prefixes: Iterable[str] = (),
                        classes: Mapping[str, type], aliases: Optional[Mapping[str, type]] = None,
                        exported: Optional[Mapping[str, type]] = None) -> None:
    """Registers a generation's classes under the module paths that mean it.

    ``modules`` match exactly, ``prefixes`` match themselves and every dotted path below them
    (``"slotopt.legacy"`` covers ``"slotopt.legacy.adam"``). ``public_module`` is what ``serialize`` writes.
    ``exported``: classes of the public module that Keras does not know by bare name (``get("lamb")`` fails)
    but finds in a config that names the public module, as ``serialize`` writes it.
    """
    _GENERATIONS[name] = _Generation(name, public_module, tuple(modules), tuple(prefixes), dict(classes),
                                     dict(aliases or {}), dict(exported or {}))


def generation_of_module(module: Any) -> Optional[str]:
    """The generation a ``module`` string means, or None when no registry claims it."""
    if not isinstance(module, str):
        return None
    best: Optional[tuple[int, str]] = None
    for gen in _GENERATIONS.values():
        if module in gen.modules:
            return gen.name
        for prefix in gen.prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), gen.name)
    return None if best is None else best[1]


def registered_classes(generation: str) -> dict[str, type]:
    """``{class name: class}`` a generation exports (a copy)."""
    return dict(_GENERATIONS[generation].classes)


def known_modules() -> list[str]:
    """Every exact module path and prefix some registry claims."""
    return sorted({m for g in _GENERATIONS.values() for m in (*g.modules, *g.prefixes)})


def serialized_module(cls: type) -> Optional[str]:
    """The ``module`` ``serialize`` writes for a registered class, or None for a class no registry holds."""
    for gen in _GENERATIONS.values():
        if gen.classes.get(cls.__name__) is cls or gen.exported.get(cls.__name__) is cls:
            return gen.public_module
    return None


def serialized(obj: Any) -> dict[str, Any]:
    """``{"module", "class_name", "config", "registered_name"}`` for ``obj``: a registered class gets its
    generation's module (so it resolves back to the same class); any other gets its Python module and its class
    name as ``registered_name`` (it resolves only through ``custom_objects``)."""
    cls = type(obj)
    config = obj.get_config()
    module = serialized_module(cls)
    if module is not None:
        return {"module": module, "class_name": cls.__name__, "config": config, "registered_name": None}
    return {"module": cls.__module__, "class_name": cls.__name__, "config": config, "registered_name": cls.__name__}


def _custom(custom_objects: Optional[Mapping[str, Any]], *names: Any) -> Any:
    if custom_objects is None:
        return None
    if not isinstance(custom_objects, Mapping):
        raise ValueError(f"`custom_objects` must be a dict of name -> object. Received: {custom_objects!r}")
    for name in names:
        if isinstance(name, str) and name in custom_objects:
            return custom_objects[name]
    return None


def resolve_class(class_name: Any, module: Any = None, custom_objects: Optional[Mapping[str, Any]] = None,
                  registered_name: Any = None, *, default_generation: str = "keras3",
                  what: str = "optimizer") -> type:
    """The class a serialized object names, found without importing or calling anything the config names.

    ``custom_objects`` first (by ``registered_name``, then ``class_name``); then the registry of the generation
    ``module`` names (``default_generation`` when ``module`` is missing); names are case-insensitive. A module
    no registry claims, or a name its registry lacks, raises :class:`UnknownNameError`.
    """
    if not isinstance(class_name, str):
        raise ValueError(f"A serialized {what} needs a string `class_name`. Received: class_name={class_name!r}")
    if module is not None and not isinstance(module, str):
        raise ValueError(f"A serialized {what}'s `module` must be a string. Received: module={module!r}")
    found = _custom(custom_objects, registered_name, class_name)
    if found is not None:
        if not isinstance(found, type):
            raise ValueError(f"`custom_objects[{class_name!r}]` must be a class. Received: {found!r}")
        return found
    generation = default_generation if module is None else generation_of_module(module)
    custom_names = sorted(custom_objects or {})
    if generation is None or generation not in _GENERATIONS:
        raise UnknownNameError(
            f"Unknown {what}: '{class_name}' of module {module!r}. slotopt resolves names only through its own "
            f"registries (modules {known_modules()}) and the `custom_objects` you pass "
            f"(received {custom_names}); nothing a config names is imported or called."
        )
    cls = _GENERATIONS[generation].lookup(class_name)
    if cls is None and module == _GENERATIONS[generation].public_module:  # as ``serialize`` writes it
        cls = _GENERATIONS[generation].exported.get(class_name)
    if cls is None:
        valid = sorted(name.lower() for name in _GENERATIONS[generation].classes)
        where = module or _GENERATIONS[generation].public_module
        raise UnknownNameError(
            f"Unknown {what}: '{class_name}'. Valid names are {valid} (module {where!r}, case-insensitive); pass "
            f"other classes (such as `Lamb`) through `custom_objects` (received {custom_names}). Nothing a config "
            "names is imported or called."
        )
    return cls


def resolve_function(name: Any, module: Any = None, custom_objects: Optional[Mapping[str, Any]] = None,
                     *, what: str = "function") -> Callable[..., Any]:
    """A function a config names: only from ``custom_objects`` (slotopt registers no functions)."""
    found = _custom(custom_objects, name)
    if found is None or not callable(found):
        raise UnknownNameError(
            f"Cannot rebuild the {what} {name!r} of module {module!r}: functions named in a config are never "
            f"imported or called; pass it in `custom_objects` (received {sorted(custom_objects or {})})."
        )
    return found
