"""How a Keras file's model is found: the configs read as data (layers, dtype policies, regularizers,
constraints, the optimizer's class through the one registry), the structural walk of a Keras 3 weights file
(``layers/<class key>/vars/<i>``, sub-layers, RNN cells, wrappers, nested models; a subclassed model or an unknown
layer by the file's own tracking) and of a tf.keras ``.h5`` file (``weight_names``). ``keras.py`` assembles the
checkpoint from what it finds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ..engine import registry
from ..engine.limits import check_json_depth
from ..engine.naming import snake_case
from . import _h5safe
from .errors import CheckpointFormatError
from .keras_layers import CONTAINER_CLASSES, SUPPORTED_LAYERS, layer_spec


def readable_optimizers(kind: str) -> tuple[str, ...]:
    """The optimizer classes a checkpoint of generation ``kind`` (``"keras3"``, ``"legacy"``) can name: those
    registered with ``files=True`` (``engine/registry.py``), read at call time so none is listed here."""
    return tuple(entry.cls.__name__ for entry in registry.registered(kind) if entry.files)


def __getattr__(name: str) -> Any:
    # The old constants, derived from the registry when read (the faces register after io is imported).
    if name == "KERAS3_OPTIMIZERS":
        return readable_optimizers("keras3")
    if name == "LEGACY_OPTIMIZERS":
        return readable_optimizers("legacy")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_REGULARIZED = {"kernel_regularizer": "kernel", "bias_regularizer": "bias", "recurrent_regularizer":
                "recurrent_kernel", "embeddings_regularizer": "embeddings", "gamma_regularizer": "gamma",
                "beta_regularizer": "beta", "depthwise_regularizer": "depthwise_kernel",
                "pointwise_regularizer": "pointwise_kernel", "alpha_regularizer": "alpha"}


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as err:  # pragma: no cover - the test set-up installs the extra
        raise ImportError(
            "Reading Keras checkpoints needs h5py, the optional extra `keras`: pip install 'slotopt[keras]'"
        ) from err
    return h5py


def _text(value: Any) -> str:
    return value.decode("utf8") if isinstance(value, bytes) else str(value)


class _Where:
    """The entry being read, so an unexpected error names it."""

    def __init__(self, path: str) -> None:
        self.path, self.entry = path, None

    def fail(self, reason: str, entry: Optional[str] = "") -> CheckpointFormatError:
        return CheckpointFormatError(self.path, self.entry if entry == "" else entry, reason)


@contextlib.contextmanager
def _guard(where: _Where) -> Iterator[None]:
    """Turns whatever a malformed file makes the libraries raise into one documented error."""
    try:
        yield
    except CheckpointFormatError:
        raise
    except (OSError, KeyError, IndexError, ValueError, TypeError, AttributeError, RuntimeError, MemoryError,
            OverflowError, EOFError, UnicodeError, zipfile.BadZipFile, RecursionError, NotImplementedError) as err:
        raise where.fail(f"malformed ({type(err).__name__}: {err})") from err


def _json(where: _Where, data: bytes, entry: str) -> Any:
    where.entry = entry
    try:
        check_json_depth(data, "its JSON")  # issue 40: refused before json.loads can recurse 50,000 deep
    except ValueError as err:  # (valid JSON, too deep: the file and entry named, and the limit)
        raise where.fail(str(err)) from err
    try:
        return json.loads(data)
    except (ValueError, UnicodeError, RecursionError) as err:
        raise where.fail(f"is not valid JSON ({err}).") from err


def _mapping(where: _Where, value: Any, entry: str) -> dict:
    if not isinstance(value, Mapping):
        raise where.fail(f"must be a JSON object; found {type(value).__name__}.", entry)
    return dict(value)


@dataclass
class _Var:
    name: str
    keras_path: str
    kind: str
    trainable: bool
    entry: str
    layer_class: str


def _optimizer_class(where: _Where, class_name: Any, kind: str) -> type:
    """The class a saved optimizer names, through the one registry (``slotopt.engine.registry``), limited to the
    optimizers whose saved state this reader can lay out."""
    names = readable_optimizers(kind)
    # Lamb is exported but not registered by name (as in Keras); a saved Lamb is still read.
    unregistered = {entry.cls.__name__: entry.cls for entry in registry.registered(kind) if not entry.by_name}
    try:
        cls = registry.resolve_class(class_name, None, unregistered, default_generation=kind)
    except ValueError:
        cls = None
    if cls is None or cls.__name__ not in names:
        generation = "Keras 3" if kind == "keras3" else "tf.keras legacy"
        raise where.fail(f"Unknown optimizer class {class_name!r}. Supported {generation} optimizers: {list(names)}.")
    return cls


def _policy_name(config: Mapping[str, Any]) -> Optional[str]:
    dtype = config.get("dtype")
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, Mapping) and dtype.get("class_name") in ("DTypePolicy", "Policy", "FloatDTypePolicy"):
        inner = dtype.get("config") or {}
        return str(inner.get("name")) if isinstance(inner, Mapping) else None
    return None


# -------------------------------------------------------------------------------------------------- the walk
@dataclass
class _Model:
    """What the structural walk found."""

    variables: list[_Var] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    regularizers: dict[str, dict[str, float]] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    torch_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def _layer_entries(where: _Where, container: Mapping[str, Any]) -> list[tuple[str, str, dict]]:
    layers = container.get("layers", [])
    if not isinstance(layers, list):
        raise where.fail("the model's `layers` is not a list.")
    out, seen = [], set()
    for entry in layers:
        entry = _mapping(where, entry, where.entry)
        cls, config = entry.get("class_name"), _mapping(where, entry.get("config") or {}, where.entry)
        name = config.get("name", "")
        if not isinstance(cls, str) or not isinstance(name, str):
            raise where.fail(f"a layer has class {cls!r} and name {name!r}; both must be strings.")
        _check_layer_identity(where, entry, cls, name)
        if name in seen:
            raise where.fail(f"two layers are named {name!r}: their variables cannot be told apart, so the file "
                             "is refused rather than one layer's weights dropped.")
        seen.add(name)
        out.append((cls, name, config))
    return out


def _check_layer_identity(where: _Where, entry: Mapping[str, Any], cls: str, name: str) -> None:
    """Refuses a layer that gives a class the reader knows (``Dense``...) but names another by its ``module``
    or ``registered_name`` (``"my_pkg.layers"``, ``"my_pkg>Dense"``): Keras deserializes it as that other class
    (and fails without it), so reading it as Keras's would guess its variables' meaning. Keras writes
    ``module`` ``keras[.layers...]`` and no ``registered_name`` for its own classes."""
    if cls not in SUPPORTED_LAYERS and cls not in CONTAINER_CLASSES:
        return  # an unknown class: read as a custom layer (its variables as they are)
    module, registered = entry.get("module"), entry.get("registered_name")
    keras_module = module is None or (isinstance(module, str) and (
        module.split(".")[0] in ("keras", "tf_keras") or module.startswith("tensorflow.")))
    if keras_module and registered in (None, cls):
        return
    raise where.fail(f"layer {name!r} has class_name {cls!r} but module {module!r} and registered_name "
                     f"{registered!r}: it is another class than Keras's {cls} (Keras would need that class to load "
                     "it), so its variables are not read as a Keras layer's: refused.")


def _note_layer(model: _Model, cls: str, name: str, config: Mapping[str, Any]) -> None:
    policy = _policy_name(config)
    if policy:
        model.policies.append(policy)
    for key, value in config.items():
        if value in (None, {}, "") or not isinstance(key, str):
            continue
        if key.endswith("_regularizer"):
            inner = value.get("config", {}) if isinstance(value, Mapping) else {}
            factors = {k: float(v) for k, v in (inner or {}).items() if k in ("l1", "l2") and isinstance(v, (int, float))}
            if key == "activity_regularizer":
                model.notes.append(f"{name}: activity regularizer {value!r} adds a loss on the layer's output; add "
                                   "it to the torch loss yourself.")
            elif key in _REGULARIZED and factors:
                model.regularizers[f"{name}/{_REGULARIZED[key]}"] = factors
                model.notes.append(f"{name}/{_REGULARIZED[key]}: {key} {factors} adds to the loss "
                                   "(`regularization_loss`).")
            else:
                model.notes.append(f"{name}: {key} {value!r} is not applied by slotopt; add it to the loss.")
        elif key.endswith("_constraint"):
            model.constraints[f"{name}/{key.removesuffix('_constraint')}"] = value
            model.notes.append(f"{name}: {key} {value!r} projects the variable after each update; apply it "
                               "yourself (or pass a slotopt `constraint`).")
    if cls == "BatchNormalization":
        m, eps = config.get("momentum", 0.99), config.get("epsilon", 1e-3)
        if isinstance(m, (int, float)) and isinstance(eps, (int, float)):
            model.torch_options[name] = {"momentum": float(f"{1.0 - float(m):.12g}"), "eps": float(eps)}
            model.notes.append(f"{name}: BatchNormalization(momentum={m}, epsilon={eps}) → "
                               f"nn.BatchNorm(momentum={float(f'{1.0 - float(m):.12g}')!r}, eps={eps}); torch updates running_var "
                               "with the unbiased batch variance, Keras moving_variance with the biased one.")
    elif cls in ("LayerNormalization", "GroupNormalization"):
        eps = config.get("epsilon", 1e-3)
        if isinstance(eps, (int, float)):
            model.torch_options[name] = {"eps": float(eps)}


class _Keras3Walk:
    """Keras 3 weights file (``model.weights.h5``): ``layers/<class key>/vars/<i>`` with sub-layer groups."""

    def __init__(self, where: _Where, datasets: Mapping[str, Any], model: _Model) -> None:
        self.where, self.datasets, self.model = where, datasets, model
        self.groups: dict[str, list[str]] = {}
        for entry in datasets:
            parts = entry.split("/")
            for i in range(1, len(parts)):
                self.groups.setdefault("/".join(parts[:i]), []).append(entry)

    def own_count(self, group: str) -> int:
        prefix = f"{group}/vars/"
        keys = [e[len(prefix):] for e in self.datasets if e.startswith(prefix) and "/" not in e[len(prefix):]]
        if sorted(keys, key=lambda k: (len(k), k)) != [str(i) for i in range(len(keys))]:
            raise self.where.fail(f"variables must be named 0..{len(keys) - 1}; found {sorted(keys)}.",
                                  f"{group}/vars")
        return len(keys)

    def own_count_root(self) -> int:
        """The model's own variables (``vars/<i>`` at the top of the file)."""
        keys = [e[5:] for e in self.datasets if e.startswith("vars/") and "/" not in e[5:]]
        if sorted(keys, key=lambda k: (len(k), k)) != [str(i) for i in range(len(keys))]:
            raise self.where.fail(f"variables must be named 0..{len(keys) - 1}; found {sorted(keys)}.", "vars")
        return len(keys)

    def layer(self, group: str, cls: str, config: dict, name: str, name_prefix: str, path_prefix: str,
              trainable: bool, h5names: Mapping[str, str], sub_layer: bool = False) -> None:
        if sub_layer:  # a sub-layer's name is not in the config: Keras writes it in the file
            name = h5names.get(f"{group}/vars", name) or name
        full = f"{name_prefix}{name}"
        trainable = trainable and bool(config.get("trainable", True))
        _note_layer(self.model, cls, full, config)
        if cls in CONTAINER_CLASSES:
            self.container(f"{group}/layers", cls, config, f"{full}/",
                           f"{path_prefix}{name}/" if cls == "Sequential" else path_prefix, trainable, h5names)
            return
        spec = layer_spec(cls, config)
        if spec.from_table and self.own_count(group) != len(spec.own):
            spec = dataclasses.replace(spec, own=[], known=False)  # another config than the recorded default
        if not spec.known:
            under = sorted(self.groups.get(group, []))
            nested = [e for e in under if not e.startswith(f"{group}/vars/")]
            if nested:
                raise self.where.fail(
                    f"layer {full!r} of class {cls} (not one the reader knows: {sorted(SUPPORTED_LAYERS)}) holds "
                    "sub-layers with variables, whose order the file does not record: refused rather than "
                    "guessed (a limit of `.keras` files for layers no Keras ships, such as keras_hub's "
                    "TransformerEncoder). Way forward: save the model and optimizer with "
                    "`tf.train.Checkpoint(model=model, optimizer=optimizer)`, whose object graph names every "
                    "variable and slot, and read it with `slotopt.load_tf_checkpoint`.", nested[0])
            # A custom layer's own variables (``add_weight``): in creation order, in the file's layout, trainable
            # unless the layer is frozen (a custom non-trainable weight is not told apart: the optimizer state's
            # count and shapes are checked against the result).
            for i in range(self.own_count(group) if under else 0):
                # issue 49: integers (a count, a seed) are state, never trained
                floating = getattr(self.datasets.get(f"{group}/vars/{i}"), "dtype", None)
                floating = floating is None or floating.kind in "fc"
                self.model.variables.append(_Var(f"{full}/vars/{i}", f"{path_prefix}{name}/vars/{i}", "as_is",
                                                 trainable and floating, f"{group}/vars/{i}", cls))
            if under:
                self.model.notes.append(f"{full}: layer class {cls} is not one slotopt knows: its variables come "
                                        f"as '{full}/vars/<i>' in the file's layout; map them yourself.")
            return
        count = self.own_count(group)
        if count != len(spec.own):
            raise self.where.fail(f"layer {full!r} ({cls}) has {count} variable(s); its config gives "
                                  f"{len(spec.own)} ({[v for v, _, _ in spec.own]}).", f"{group}/vars")
        for i, (var, kind, var_trainable) in enumerate(spec.own):
            self.model.variables.append(_Var(f"{full}/{var}", f"{path_prefix}{name}/{var}", kind,
                                             trainable and var_trainable, f"{group}/vars/{i}", cls))
        for key, default, child_cls, child_config in spec.children:
            child_config = dict(child_config)
            child_config.setdefault("trainable", True)
            self.layer(f"{group}/{key}", child_cls, child_config, default, f"{full}/", f"{path_prefix}{name}/",
                       trainable, h5names, sub_layer=True)

    def container(self, group: str, container_cls: str, config: Mapping[str, Any], name_prefix: str,
                  path_prefix: str, trainable: bool, h5names: Mapping[str, str]) -> None:
        entries = _layer_entries(self.where, config)
        sequential = container_cls == "Sequential"  # Sequential.layers leaves the InputLayer out
        used: dict[str, int] = {}
        by_name = {}
        for key in {e.split("/")[len(group.split("/"))] for e in h5names if e.startswith(group + "/")}:
            name = h5names.get(f"{group}/{key}/vars")
            if name is not None:
                by_name.setdefault(name, []).append(key)
        for cls, name, layer_config in entries:
            if cls == "InputLayer" and sequential:
                continue
            base = snake_case(cls)
            used[base] = used.get(base, -1) + 1
            key = base if used[base] == 0 else f"{base}_{used[base]}"
            if len(by_name.get(name, [])) == 1:
                key = by_name[name][0]
            self.layer(f"{group}/{key}", cls, layer_config, name, name_prefix, path_prefix, trainable, h5names)


def _h5_names(snap: _h5safe.H5Snapshot) -> dict[str, str]:
    """The ``name`` attribute of every ``.../vars`` group (Keras 3 writes the layer's name there)."""
    return {entry: str(attrs["name"]) for entry, attrs in snap.attrs.items()
            if entry in snap.groups and (entry == "vars" or entry.endswith("/vars")) and "name" in attrs}


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _legacy_layer(where: _Where, model: _Model, cls: str, name: str, config: dict, group: Optional[dict],
                  group_entry: str, trainable: bool, claimed: set[str]) -> None:
    """A layer of an ``.h5`` model file: its weights are listed (by variable name) in ``weight_names``."""
    stored = _strings((group or {}).get("weight_names"))
    trainable = trainable and bool(config.get("trainable", True))
    _note_layer(model, cls, name, config)
    expected: list[tuple[str, str, bool, str]] = []

    def collect(c_cls: str, c_config: dict, rel: str, owner: str) -> None:
        if c_cls in CONTAINER_CLASSES:
            raise where.fail(f"layer {name!r} nests a {c_cls}; nested models are read from `.keras` files only.")
        spec = layer_spec(c_cls, c_config)
        if not spec.known:
            if stored and not expected and owner == name:
                # A custom layer: each stored weight by its name, in the file's layout, trainable (its order is
                # ``layer.weights``'; the optimizer state is checked against the result).
                for n in stored:
                    base = n.split(":")[0]
                    rel = base[len(name) + 1:] if base.startswith(f"{name}/") else base
                    expected.append((rel, "as_is", True, c_cls))
                model.notes.append(f"{name}: layer class {c_cls} is not one slotopt knows: its weights come by their "
                                   "names in the file's layout; map them yourself.")
            return
        for var, kind, var_trainable in spec.own:
            expected.append((f"{rel}{var}", kind, var_trainable, c_cls))
        for _, default, child_cls, child_config in spec.children:
            collect(child_cls, dict(child_config), f"{rel}{default}/", default)

    collect(cls, config, "", name)
    names = [n.split(":")[0] for n in stored]
    for rel, kind, var_trainable, owner_cls in expected:
        hits = [i for i, n in enumerate(names) if n == f"{name}/{rel}" or n.endswith(f"/{rel}") or n == rel]
        if len(hits) != 1:
            raise where.fail(f"layer {name!r} ({cls}) must store one weight named like '{name}/{rel}'; found "
                             f"{stored}.", group_entry)
        entry = f"{group_entry}/{stored[hits[0]]}"
        claimed.add(stored[hits[0]])
        model.variables.append(_Var(f"{name}/{rel}", names[hits[0]], kind, trainable and var_trainable, entry,
                                    owner_cls))
    extra = [n for n in stored if n not in claimed]
    if extra:
        raise where.fail(f"weight {extra[0]!r} of layer {name!r} ({cls}) cannot be placed in the model.",
                         f"{group_entry}/{extra[0]}")


def _check_unique(where: _Where, model: _Model) -> None:
    seen: dict[str, str] = {}
    for v in model.variables:
        if v.name in seen:
            raise where.fail(f"variable {v.name!r} is stored twice ({seen[v.name]!r} and {v.entry!r}): the layers "
                             "cannot be told apart, so the file is refused rather than one dropped.", v.entry)
        seen[v.name] = v.entry
