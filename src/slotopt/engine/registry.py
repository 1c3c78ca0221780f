"""The one resolver for names found in configs: optimizer classes by ``module`` + ``class_name``, nothing imported.

A serialized optimizer names its class (``class_name``) and where it lives (``module``). slotopt never imports
that module or looks the name up in it: each generation registers its classes here when its package is imported
(``slotopt.keras3``, ``slotopt.legacy``, ``slotopt.v1``, ``slotopt.tfrs``), together with the module paths
that mean it (Keras's public modules, tf-keras's, TensorFlow's, and slotopt's own paths, old ones included).
A name resolves through the caller's explicit ``custom_objects`` first, then through the registry of the
generation its ``module`` names; anything else is refused with an error that names it. Functions named in a
config (a ``MultiOptimizer``'s routing function) resolve only through ``custom_objects``.

The engine imports no face. A class registers itself once, where it is defined, with the :func:`register`
decorator; everything else derives from that one registration: its package's exports (``__all__``), the
generation's table of names, the readers' lists of classes they lay out, the API pages (built from ``__all__``)
and the tests parametrised over :func:`registered`. Each face's ``__init__`` says once, with
:func:`register_generation`, which module paths mean the generation. A class Keras does not have is registered
with ``keras=False``: ``serialize`` writes the generation's own slotopt module for it (``slotopt.keras3`` for
the Keras 3 face), never a Keras module that could not load it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional

__all__ = ["base_class", "import_face", "register", "registered", "exported_names", "exported_classes", "register_generation", "resolve_class", "resolve_function", "generation_of_module",
           "serialized_module", "serialized", "registered_classes", "known_modules", "UnknownNameError"]


class UnknownNameError(ValueError):
    """A config names something slotopt's registries and the caller's ``custom_objects`` do not have."""


class Registration:
    """One class's registration: its generation, the names it exports, and what the rest of slotopt derives."""

    def __init__(self, cls: type, generation: str, *, aliases: tuple[str, ...], old_names: tuple[str, ...],
                 by_name: bool, keras: bool, files: bool) -> None:
        self.cls = cls
        self.generation = generation
        self.aliases = aliases  # other names exported for it, and accepted in configs (``RMSProp``)
        self.old_names = old_names  # names only accepted in configs (``LossScaleOptimizerV1``)
        self.by_name = by_name  # ``get("lamb")`` finds it (Keras 3's Lamb: no, only with its module)
        self.keras = keras  # Keras (or TensorFlow) has this class: serialized under the generation's public module
        self.files = files  # the Keras/TF file readers lay out its saved state

    def __repr__(self) -> str:
        return f"Registration({self.cls.__qualname__}, {self.generation!r})"


#: Every registered class, in registration order (the order of definition, so of the face's imports).
_REGISTRATIONS: dict[str, dict[str, Registration]] = {}


def register(generation: str, *, aliases: Iterable[str] = (), old_names: Iterable[str] = (), by_name: bool = True,
             keras: bool = True, files: bool = True) -> Callable[[type], type]:
    """Class decorator: the one place a class is registered (see the module's docstring).

    ``aliases``: other exported names of the same class (old spellings, also accepted in configs); ``old_names``:
    names accepted in configs only; ``by_name``:
    False for a class its generation exports but does not find by bare name (Keras 3's ``Lamb``);
    ``keras``: False for a class of slotopt's own, which serializes under the generation's own module;
    ``files``: False when the Keras/TF file readers cannot lay out its saved state.
    """
    aliases, old_names = tuple(aliases), tuple(old_names)

    def decorate(cls: type) -> type:
        table = _REGISTRATIONS.setdefault(generation, {})
        if cls.__name__ in table and table[cls.__name__].cls is not cls:
            raise TypeError(f"{generation!r} already registers a class named {cls.__name__!r}: "
                            f"{table[cls.__name__].cls!r}; a second one would shadow it")
        table[cls.__name__] = Registration(cls, generation, aliases=aliases, old_names=old_names,
                                           by_name=by_name, keras=keras, files=files)
        return cls

    return decorate


def import_face(package: str, path: Iterable[str]) -> None:
    """Imports every module of a face package (``slotopt.keras3``...), so that each class's :func:`register`
    runs: a new module is found, not listed. Only the package's own files are imported, never a name read from
    data."""
    for info in pkgutil.iter_modules(list(path)):
        importlib.import_module(f"{package}.{info.name}")


def registered(generation: Optional[str] = None) -> list[Registration]:
    """Every registration (of ``generation``), in registration order: what tests parametrise over."""
    tables = [_REGISTRATIONS.get(generation, {})] if generation else list(_REGISTRATIONS.values())
    return [entry for table in tables for entry in table.values()]


def exported_names(generation: str) -> list[str]:
    """The names a generation's package exports for its registered classes, aliases after their class."""
    return [name for entry in registered(generation) for name in (entry.cls.__name__, *entry.aliases)]


def exported_classes(generation: str) -> dict[str, type]:
    """``{exported name: class}`` of a generation's registered classes, aliases included."""
    return {name: entry.cls for entry in registered(generation)
            for name in (entry.cls.__name__, *entry.aliases)}


class _Generation:
    def __init__(self, name: str, public_module: str, own_module: str, modules: tuple[str, ...],
                 prefixes: tuple[str, ...], classes: dict[str, type], aliases: dict[str, type],
                 exported: dict[str, type]) -> None:
        self.name = name
        self.public_module = public_module
        self.own_module = own_module  # what ``serialize`` writes for a class Keras does not have
        self.modules = modules
        self.prefixes = prefixes
        self.extra_classes = classes
        self.extra_aliases = aliases
        self.extra_exported = exported
        self.base: Optional[type] = None

    def _entries(self) -> list[Registration]:
        return registered(self.name)

    @property
    def classes(self) -> dict[str, type]:
        """The exported names, written by serialize."""
        found = {e.cls.__name__: e.cls for e in self._entries() if e.by_name}
        return {**found, **self.extra_classes}

    @property
    def aliases(self) -> dict[str, type]:
        """Other names the same classes were written under (old class names)."""
        found = {alias: e.cls for e in self._entries() if e.by_name for alias in (*e.aliases, *e.old_names)}
        return {**found, **self.extra_aliases}

    @property
    def exported(self) -> dict[str, type]:
        """In the public module but not known by bare name (Keras 3's Lamb)."""
        found = {e.cls.__name__: e.cls for e in self._entries() if not e.by_name}
        return {**found, **self.extra_exported}

    def module_of(self, cls: type) -> Optional[str]:
        entry = _REGISTRATIONS.get(self.name, {}).get(cls.__name__)
        if entry is not None and entry.cls is cls:
            return self.public_module if entry.keras else self.own_module
        if self.extra_classes.get(cls.__name__) is cls or self.extra_exported.get(cls.__name__) is cls:
            return self.public_module
        return None

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
                        own_module: Optional[str] = None, base: Optional[type] = None,
                        classes: Optional[Mapping[str, type]] = None,
                        aliases: Optional[Mapping[str, type]] = None,
                        exported: Optional[Mapping[str, type]] = None) -> None:
    """Says which module paths mean a generation; its classes come from :func:`register`.

    ``modules`` match exactly, ``prefixes`` match themselves and every dotted path below them
    (``"slotopt.legacy"`` covers ``"slotopt.legacy.adam"``). ``public_module`` is what ``serialize`` writes for
    a class Keras has, ``own_module`` (which a module or prefix must claim) for one of slotopt's own. ``base``:
    the generation's base class (what the readers check a caller's optimizer against, :func:`base_class`).
    ``classes``/``aliases``/``exported``: classes registered by hand in addition (tests' stand-ins); ``exported``
    are in the public module but not known by bare name.
    """
    own = public_module if own_module is None else own_module
    _GENERATIONS[name] = _Generation(name, public_module, own, tuple(modules), tuple(prefixes),
                                     dict(classes or {}), dict(aliases or {}), dict(exported or {}))
    _GENERATIONS[name].base = base
    if generation_of_module(own) != name:
        raise ValueError(f"Generation {name!r}: its own module {own!r} must resolve to it (add it to `modules` "
                         "or `prefixes`)")


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


def base_class(generation: str) -> type:
    """A generation's base class (``slotopt.v1.Optimizer``...), as its package registered it."""
    base = _GENERATIONS[generation].base
    if base is None:
        raise KeyError(f"Generation {generation!r} registered no base class")
    return base


def known_modules() -> list[str]:
    """Every exact module path and prefix some registry claims."""
    return sorted({m for g in _GENERATIONS.values() for m in (*g.modules, *g.prefixes)})


def serialized_module(cls: type) -> Optional[str]:
    """The ``module`` ``serialize`` writes for a registered class, or None for a class no registry holds."""
    for gen in _GENERATIONS.values():
        module = gen.module_of(cls)
        if module is not None:
            return module
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
    if cls is None and module in (_GENERATIONS[generation].public_module,  # as ``serialize`` writes it
                                  _GENERATIONS[generation].own_module):
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
