"""Import Keras training state: ``.keras`` and ``.h5`` checkpoints (Keras 3 and tf.keras), optimizer state included.

``load_keras_checkpoint(path)`` reads the model's variables, the compiled optimizer's class and config and its
saved state (iteration count, learning rate, slots, a LossScaleOptimizer's scale) without TensorFlow or Keras: a
``.keras`` file is a zip holding ``config.json`` and ``model.weights.h5``; an ``.h5`` model file (tf.keras, or
Keras 3's ``model.save("x.h5")``) is HDF5; a Keras 3 ``.weights.h5`` file is read with its config (JSON) given
apart. Files are read as untrusted data with ``zipfile`` and ``h5py`` (the optional extra ``slotopt[keras]``): the
model is walked structurally (sub-layers, RNN cells, wrappers, nested models) so every variable of the file is
placed or the file is refused; HDF5 links, external storage and virtual datasets are refused; sizes are bounded;
anything malformed raises :class:`~slotopt.io.CheckpointFormatError` naming the file and the entry.

The result builds the saved optimizer as a slotopt optimizer of the matching generation on your tensors, or loads
weights, BatchNorm statistics and optimizer state into an ``nn.Module`` with the layout conversions torch needs
(``keras_layers.py``). Every check runs before anything is written, so a refused call changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch

from ..engine.limits import check_json_depth
from ..engine.naming import snake_case
from ..engine.resume import state_value_problem
from . import _h5safe
from .errors import CheckpointFormatError
from .keras_layers import (
    CONTAINER_CLASSES,
    SUPPORTED_LAYERS,
    TORCH_COUNTERPARTS,
    layer_spec,
    to_torch,
    torch_shape,
)

__all__ = ["KerasCheckpoint", "load_keras_checkpoint", "SUPPORTED_LAYERS", "TORCH_COUNTERPARTS",
           "KERAS3_OPTIMIZERS", "LEGACY_OPTIMIZERS"]

#: Optimizer classes a checkpoint can name, per generation (looked up in ``slotopt`` / ``slotopt.legacy``).
KERAS3_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl", "Lion",
                     "Adafactor", "Lamb", "LossScaleOptimizer")
LEGACY_OPTIMIZERS = ("SGD", "Adam", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl")

# Optimizer variables built on placeholder names ``p0, p1, ...`` are named after them (Keras 3: ``p0_momentum``,
# tf.keras: ``p0/m``): this finds which model variable an optimizer variable belongs to.
_OWNER = re.compile(r"^p(\d+)(?:[_/]|$)")
# Torch names of a Keras variable's counterpart, to propose a mapping by name.
_TORCH_NAMES = {"kernel": ("weight", "weight_ih"), "bias": ("bias", "bias_ih"), "gamma": ("weight",),
                "beta": ("bias",), "moving_mean": ("running_mean",), "moving_variance": ("running_var",),
                "embeddings": ("weight",), "alpha": ("weight",), "recurrent_kernel": ("weight_hh",),
                "depthwise_kernel": ("weight",), "pointwise_kernel": ("weight",)}
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
        check_json_depth(data, "the JSON")  # issue 40: refused before json.loads can recurse 50,000 deep
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
    import slotopt

    from ..engine import registry

    names = KERAS3_OPTIMIZERS if kind == "keras3" else LEGACY_OPTIMIZERS
    # Lamb is exported but not registered by name (as in Keras); a saved Lamb is still read.
    unregistered = {"Lamb": slotopt.Lamb} if kind == "keras3" else None
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
        if name in seen:
            raise where.fail(f"two layers are named {name!r}: their variables cannot be told apart, so the file "
                             "is refused rather than one layer's weights dropped.")
        seen.add(name)
        out.append((cls, name, config))
    return out


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
        if not spec.known:
            under = sorted(self.groups.get(group, []))
            if under:
                raise self.where.fail(f"layer {full!r} of class {cls} holds variables, and the reader does not know "
                                      f"its layout. Supported layers: {sorted(SUPPORTED_LAYERS)}.", under[0])
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
                raise where.fail(f"layer {name!r} of class {c_cls} holds variables {stored}, and the reader does "
                                 f"not know its layout. Supported layers: {sorted(SUPPORTED_LAYERS)}.", group_entry)
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


# -------------------------------------------------------------------------------------------------- checkpoint
class _NamedWeights:
    """The argument checks of a checkpoint read into memory (Keras files here, TensorFlow checkpoints in
    ``tf_checkpoint.py``): parameters given by the caller against its trainable ``variable_names`` and
    ``weights``, the only attributes they read."""

    variable_names: list[str]
    weights: dict[str, torch.Tensor]

    def _check_names(self, argument: str, given: Mapping[str, Any]) -> None:
        """``given`` (keyed by Keras name) names every trainable variable of the checkpoint and nothing else."""
        missing = [n for n in self.variable_names if n not in given]
        unknown = [n for n in given if n not in self.weights]
        if missing or unknown:
            raise ValueError(
                f"Argument `{argument}` must name every trainable variable of the checkpoint: missing {missing}, "
                f"unknown {unknown}. Expected names: {self.variable_names}."
            )

    def _params_in_order(self, params: Any) -> list[torch.Tensor]:
        if isinstance(params, Mapping):
            self._check_names("params", params)
            ordered = [params[n] for n in self.variable_names]
        elif isinstance(params, (list, tuple)):
            if len(params) != len(self.variable_names):
                raise ValueError(
                    f"Argument `params` must hold {len(self.variable_names)} tensors, one per name in "
                    f"`variable_names` ({self.variable_names}). Received {len(params)} tensors."
                )
            ordered = list(params)
        else:
            raise TypeError(
                "Argument `params` must be a list of tensors in `variable_names` order or a dict name → tensor. "
                f"Received: params={params!r}"
            )
        for name, p in zip(self.variable_names, ordered):
            expected = self.weights[name]
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"Argument `params` entry {name!r} must be a tensor. Received: {p!r}")
            if tuple(p.shape) != tuple(expected.shape) or p.dtype != expected.dtype:
                raise ValueError(
                    f"Argument `params` entry {name!r} has shape {tuple(p.shape)} and dtype {p.dtype}; the checkpoint "
                    f"has shape {tuple(expected.shape)} and dtype {expected.dtype} (Keras layout)."
                )
        return ordered


@dataclass
class KerasCheckpoint(_NamedWeights):
    """The training state read from a Keras checkpoint by :func:`load_keras_checkpoint`.

    Attributes:
        path: the file read.
        kind: ``"keras3"`` (Keras 3: ``.keras``, ``.weights.h5``, or ``.h5`` written by Keras 3) or ``"legacy"``
            (a tf.keras ``.h5`` file).
        keras_version: the Keras version that wrote the file.
        variable_names: the model's trainable variables, ``"<layer>/<sub-layer>/.../<variable>"`` (the Keras
            variable path without a Sequential model's name), in ``model.trainable_variables`` order.
        non_trainable_names: the model's other variables (BatchNormalization ``moving_mean``/``moving_variance``,
            frozen layers' variables), in model order.
        weights: name → tensor, in Keras layout and the stored dtype (trainable and non-trainable).
        layouts: name → layout kind (``"dense_kernel"``, ``"conv2d_kernel"``, ``"einsum_kernel:1"``, ``"as_is"``...:
            :data:`TORCH_COUNTERPARTS` says how each maps onto torch).
        entries: name → where the value is in the file (an HDF5 dataset path).
        optimizer_config: ``{"class_name", "config"}`` of the saved optimizer (a schedule stays serialized).
        optimizer_class: the slotopt class it maps to (``slotopt.Adam``, ``slotopt.LossScaleOptimizer``,
            ``slotopt.legacy.Adam``, ...).
        optimizer_state: the saved optimizer variables, in the order of the optimizer's ``set_weights``.
        optimizer_variable_names: the Keras name of each (``adam/convnet_conv_kernel_momentum``).
        floatx: the stored dtype of the learning-rate variable (Keras 3's ``floatx``; ``None`` with a schedule
            and for tf.keras, whose hyperparameters are always float32).
        dtype_policy: the Keras dtype policy the model computed in (``"float32"``, ``"mixed_float16"``,
            ``"mixed_bfloat16"``...): variables are stored in float32 under a mixed policy; run the torch side
            under ``torch.autocast`` with the policy's compute dtype to continue the same computation.
        loss_scale: a ``LossScaleOptimizer``'s saved dynamic scale (``None`` without one).
        regularizers: variable name → ``{"l1": ..., "l2": ...}`` (the layers' weight regularizers, which add to
            the loss: :meth:`regularization_loss`).
        constraints: ``"<layer>/<kernel|bias|...>"`` → the saved constraint config (not applied by slotopt).
        torch_options: layer name → the torch arguments that reproduce its options (BatchNormalization
            ``momentum`` ``1-m`` and ``eps``; LayerNormalization ``eps``).
        notes: everything in the file that changes the loss or the update and is not part of the optimizer
            (regularizers, constraints, BatchNorm conversions, the dtype policy): read them.

    Example:
        >>> import slotopt
        >>> ckpt = slotopt.load_keras_checkpoint("tests/data/keras_checkpoints/keras3_adam_float32.keras")
        >>> ckpt.variable_names
        ['hidden/kernel', 'hidden/bias', 'out/kernel', 'out/bias']
        >>> opt = ckpt.optimizer(ckpt.parameters())
        >>> type(opt).__name__, int(opt.iterations)
        ('Adam', 5)
    """

    path: str
    kind: str
    keras_version: str
    variable_names: list[str]
    weights: dict[str, torch.Tensor]
    layouts: dict[str, str]
    optimizer_config: dict[str, Any]
    optimizer_class: type
    optimizer_state: list[np.ndarray]
    floatx: Optional[torch.dtype] = None
    non_trainable_names: list[str] = field(default_factory=list)
    entries: dict[str, str] = field(default_factory=dict)
    optimizer_variable_names: list[str] = field(default_factory=list)
    dtype_policy: str = "float32"
    loss_scale: Optional[float] = None
    regularizers: dict[str, dict[str, float]] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    torch_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _owners: list[Optional[int]] = field(default_factory=list, repr=False)
    _keras_paths: dict[str, str] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------------------------------------- helpers
    def _new_optimizer(self) -> Any:
        config = json.loads(json.dumps(self.optimizer_config["config"]))  # a deep copy: from_config may pop
        if self.kind == "keras3" and self.floatx == torch.float64:  # the learning-rate variable in floatx
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                return self.optimizer_class.from_config(config)
            finally:
                torch.set_default_dtype(previous)
        return self.optimizer_class.from_config(config)

    def _state_variables(self, opt: Any) -> list[torch.Tensor]:
        """What ``opt.set_weights`` assigns, in order: Keras 3 ``variables``, tf.keras ``weights``."""
        return list(opt.variables if self.kind == "keras3" else opt.weights)

    def _check_state(self, opt: Any, where: str) -> None:
        """Count and shapes of the saved state against the variables of ``opt`` (built in Keras layout)."""
        variables = self._state_variables(opt)
        if len(variables) != len(self.optimizer_state):
            raise CheckpointFormatError(
                where, "optimizer",
                f"the file holds {len(self.optimizer_state)} optimizer variables, but a "
                f"{self.optimizer_class.__name__} built on the model's {len(self.variable_names)} trainable variables "
                f"has {len(variables)} ({[getattr(v, 'path', i) for i, v in enumerate(variables)]}).",
            )
        for i, (var, value) in enumerate(zip(variables, self.optimizer_state)):
            if tuple(var.shape) != tuple(value.shape):
                raise CheckpointFormatError(
                    where, f"optimizer variable {i} ({getattr(var, 'path', '')})",
                    f"has shape {tuple(value.shape)} in the file; expected {tuple(var.shape)}.",
                )
            # issue 40: iterations, learning rate, loss scale checked at read as load_state_dict checks them
            problem = _scalar_problem(str(getattr(var, "path", "") or getattr(var, "name", "")), value)
            if problem is not None:
                raise CheckpointFormatError(where, f"optimizer variable {i} ({getattr(var, 'path', '')})",
                                            f"must be {problem}; the file holds {np.asarray(value).reshape(-1)[0]!r}.")

    def _probe(self) -> list[Optional[int]]:
        """Builds the optimizer on placeholders ``p0, p1, ...`` (Keras layout) to check the saved state, to learn
        which model variable each optimizer variable belongs to (``None``: the optimizer's own) and its Keras
        name (``adam/<variable path with _>_momentum``)."""
        opt = self._new_optimizer()
        opt.build([(f"p{j}", torch.empty(self.weights[n].shape, dtype=self.weights[n].dtype, device="meta"))
                   for j, n in enumerate(self.variable_names)])  # meta (issue 40): names and shapes, no memory
        self._check_state(opt, self.path)
        owners: list[Optional[int]] = []
        names = []
        for var in self._state_variables(opt):
            path = str(getattr(var, "path", ""))
            scope, _, rest = path.partition("/")
            match = _OWNER.match(rest)
            owners.append(int(match.group(1)) if match else None)
            if match:  # the placeholder ``p<j>`` back to the variable's Keras path
                keras = self._keras_paths.get(self.variable_names[owners[-1]], self.variable_names[owners[-1]])
                keras = keras.replace("/", "_") if self.kind == "keras3" else keras
                rest = keras + rest[len(f"p{owners[-1]}"):]
            names.append(f"{scope}/{rest}" if rest else path)
        self.optimizer_variable_names = names
        return owners

    def _learning_rate_note(self, opt: Any) -> None:
        """Warns when the stored learning rate does not fit the optimizer's learning-rate variable's dtype."""
        if self.kind != "keras3" or self.floatx is None:
            return
        lr = opt.learning_rate
        if not isinstance(lr, torch.Tensor):
            return
        for var, value in zip(self._state_variables(opt), self.optimizer_state):
            if var is lr and var.dtype != self.floatx:
                stored = torch.as_tensor(value)
                if not torch.equal(stored.to(var.dtype).to(stored.dtype), stored):
                    warnings.warn(
                        f"{self.path} was saved with floatx {self.floatx}: its learning rate {float(stored)!r} is "
                        f"rounded to the optimizer's {var.dtype} learning-rate variable.",
                        stacklevel=3,
                    )

    def _torch_shape(self, name: str) -> Optional[tuple[int, ...]]:
        return torch_shape(tuple(self.weights[name].shape), self.layouts[name])

    # ---------------------------------------------------------------------------------------------- public
    def parameters(self, device: Any = None) -> list[torch.Tensor]:
        """Fresh leaf tensors (``requires_grad=True``) holding the saved weights, in ``variable_names`` order."""
        return [self.weights[n].detach().clone().to(device).requires_grad_(True) for n in self.variable_names]

    def optimizer(self, params: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]]) -> Any:
        """The saved optimizer, configured from the file and built on ``params`` (tensors in Keras layout: a list
        in ``variable_names`` order or a dict name → tensor), with its saved state and iteration count loaded.

        The values of ``params`` are not touched: start them from ``weights`` (or use :meth:`parameters`).
        """
        ordered = self._params_in_order(params)
        opt = self._new_optimizer()
        opt.build(list(zip(self.variable_names, ordered)))
        self._check_state(opt, f"optimizer({self.path})")
        self._learning_rate_note(opt)
        opt.set_weights(list(self.optimizer_state))  # set_weights copies (issue 40: no third copy here)
        return opt

    def regularization_loss(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The loss the saved layers' L1/L2 weight regularizers add (Keras: ``l1·Σ|w| + l2·Σw²`` per variable),
        for ``tensors`` keyed by variable name (any layout: the sums do not depend on it). Zero without any."""
        total = torch.zeros(())
        for name, factors in self.regularizers.items():
            if name not in tensors:
                raise ValueError(f"Argument `tensors` has no {name!r}, which has a regularizer {factors}. "
                                 f"Regularized variables: {sorted(self.regularizers)}.")
            t = tensors[name]
            total = total + factors.get("l1", 0.0) * t.abs().sum() + factors.get("l2", 0.0) * t.square().sum()
        return total

    def mapping_for(self, module: torch.nn.Module) -> dict[str, str]:
        """Proposes ``load_module``'s mapping (Keras variable name → parameter or buffer name of ``module``)
        from names and shapes: a variable goes to the one parameter of its torch shape and dtype, or, when
        several fit, to the one whose name holds the layer's name and the torch name of the variable
        (``kernel`` → ``weight``, ``moving_mean`` → ``running_mean``...). Refuses an ambiguous or missing match,
        listing the candidates. BatchNorm statistics are proposed only when a buffer fits. Edit and pass back."""
        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())
        proposal: dict[str, str] = {}
        taken: dict[str, str] = {}
        for name in self.variable_names + self.non_trainable_names:
            trainable = name in self.variable_names
            pool = params if trainable or name not in self._buffer_names() else buffers
            shape = self._torch_shape(name)
            dtype = self.weights[name].dtype
            fits = [p for p, t in pool.items() if shape is not None and tuple(t.shape) == shape and t.dtype == dtype]
            chosen = self._by_name(name, fits)
            if not trainable and (chosen is None or chosen in taken):
                continue  # a statistic or a frozen variable is only proposed where it fits unambiguously
            if chosen is None:
                if not fits:
                    raise ValueError(f"No parameter of the module fits {name!r} (torch shape {shape}, {dtype}). "
                                     f"Parameters: {[(p, tuple(t.shape)) for p, t in params.items()]}. Pass `mapping`.")
                raise ValueError(f"Ambiguous mapping for {name!r}: parameters {fits} all have its torch shape {shape} "
                                 "and none is told apart by name. Pass `mapping` (see `mapping_for`).")
            if chosen in taken:
                raise ValueError(f"Ambiguous mapping: {name!r} and {taken[chosen]!r} both fit only {chosen!r}. "
                                 "Pass `mapping`.")
            taken[chosen] = name
            proposal[name] = chosen
        return proposal

    def _buffer_names(self) -> set[str]:
        return {n for n in self.non_trainable_names if n.rsplit("/", 1)[-1] in ("moving_mean", "moving_variance")}

    def _by_name(self, name: str, fits: list[str]) -> Optional[str]:
        if len(fits) <= 1:
            return fits[0] if fits else None
        layer_parts = name.split("/")[:-1]
        var = name.rsplit("/", 1)[-1]
        suffixes = _TORCH_NAMES.get(var, (var,))

        def tokens(p: str) -> list[str]:
            return p.split(".")

        named = [p for p in fits if any(part in tokens(p) for part in layer_parts)
                 and tokens(p)[-1].split("_l")[0] in suffixes + tuple(s.split("_l")[0] for s in suffixes)]
        if len(named) == 1:
            return named[0]
        deepest = [p for p in named if layer_parts[-1] in tokens(p)]
        return deepest[0] if len(deepest) == 1 else None

    def load_module(self, module: torch.nn.Module, mapping: Optional[Mapping[str, str]] = None) -> Any:
        """Loads the weights into ``module`` and returns the saved optimizer built on its parameters.

        ``mapping`` maps each Keras variable name (``variable_names``) to a parameter name of ``module``
        (``module.named_parameters()``); without it, :meth:`mapping_for` proposes one from names and shapes (and
        refuses an ambiguous one). It may also map non-trainable variables (``non_trainable_names``) to buffers
        or parameters: BatchNorm ``moving_mean``/``moving_variance`` → ``running_mean``/``running_var``; they are
        copied, not trained. Tensors are converted to torch's layout (:data:`TORCH_COUNTERPARTS`: Dense ↔
        ``nn.Linear`` transposed, convolutions ``(..., in, out)`` → ``(out, in, ...)``, GRU gates reordered...),
        and every optimizer slot of a variable the same way. A trainable parameter of ``module`` that nothing
        maps to must have ``requires_grad=False`` (it would not be trained). Everything is checked before the
        module is written.
        """
        if mapping is None:
            mapping = self.mapping_for(module)
        if not isinstance(mapping, Mapping):
            raise TypeError(f"Argument `mapping` must be a dict Keras name → parameter name. Received: {mapping!r}")
        self._check_names("mapping", mapping)
        named = dict(module.named_parameters())
        named_buffers = dict(module.named_buffers())
        targets = []
        for name in mapping:
            pname = mapping[name]
            tensor = named.get(pname, named_buffers.get(pname)) if isinstance(pname, str) else None
            if tensor is None:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} to {pname!r}, which is not a parameter or buffer of the "
                    f"module. Parameters: {list(named)}."
                )
            if name in self.variable_names and pname not in named:
                raise ValueError(f"Argument `mapping` maps the trainable {name!r} to buffer {pname!r}; it needs a "
                                 "parameter.")
            kind = self.layouts[name]
            shape = self._torch_shape(name)
            if shape is None:
                raise ValueError(f"Argument `mapping` maps {name!r} ({kind}, Keras shape "
                                 f"{tuple(self.weights[name].shape)}), which has no torch layout: use "
                                 "`optimizer(params)` with Keras-layout tensors.")
            if tuple(tensor.shape) != shape or tensor.dtype != self.weights[name].dtype:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} ({kind}, Keras shape {tuple(self.weights[name].shape)}) to "
                    f"{pname!r} of shape {tuple(tensor.shape)} and dtype {tensor.dtype}; expected shape {shape} and "
                    f"dtype {self.weights[name].dtype}."
                )
            targets.append((name, pname, tensor))
        if len({id(p) for _, _, p in targets}) != len(targets):
            raise ValueError(f"Argument `mapping` maps two variables to the same parameter. Received: {dict(mapping)}")
        mapped = {id(p) for _, _, p in targets}
        left = [p for p, t in named.items() if t.requires_grad and id(t) not in mapped]
        if left:
            raise ValueError(f"Parameters {left} of the module are mapped to no Keras variable and would not be "
                             "trained: map them, or set `requires_grad_(False)` on them.")
        state = []
        for i, (value, owner) in enumerate(zip(self.optimizer_state, self._owners)):
            tensor = torch.as_tensor(np.asarray(value))  # a view: set_weights copies (issue 40)
            if owner is not None:
                name = self.variable_names[owner]
                kind = self.layouts[name]
                if tuple(tensor.shape) == tuple(self.weights[name].shape):
                    tensor = to_torch(tensor, kind)
                elif kind != "as_is":
                    raise ValueError(
                        f"Optimizer variable {i} of {name!r} has shape {tuple(tensor.shape)}, not the variable's "
                        f"shape: a {self.optimizer_class.__name__} state of a {kind} cannot be converted to torch's "
                        "layout. Use `optimizer(params)` with Keras-layout tensors instead."
                    )
            state.append(tensor)
        by_name = {name: (pname, tensor) for name, pname, tensor in targets}
        # issue 40, all or nothing: the state is set on an optimizer built on meta copies of the targets first,
        # so whatever set_weights refuses is refused before the module is written.
        probe = self._new_optimizer()
        probe.build([(by_name[n][0], torch.empty(by_name[n][1].shape, dtype=by_name[n][1].dtype, device="meta"))
                     for n in self.variable_names])
        probe.set_weights(state)
        del probe
        with torch.no_grad():
            for name, _, tensor in targets:
                tensor.copy_(to_torch(self.weights[name], self.layouts[name]))
        opt = self._new_optimizer()
        opt.build([by_name[name] for name in self.variable_names])
        self._learning_rate_note(opt)
        opt.set_weights(state)
        return opt


# -------------------------------------------------------------------------------------------------- readers
def _optimizer_config(where: _Where, opt_config: Any) -> dict:
    if isinstance(opt_config, str):  # an optimizer given by name, with its defaults
        opt_config = {"class_name": opt_config, "config": {}}
    if not isinstance(opt_config, Mapping):
        raise where.fail("has no optimizer: the model was saved without being compiled (no `compile_config."
                         "optimizer`).")
    return dict(opt_config)


def _finish(ckpt: KerasCheckpoint, model: _Model, where: _Where) -> KerasCheckpoint:
    ckpt.regularizers, ckpt.constraints = model.regularizers, model.constraints
    ckpt.torch_options, ckpt.notes = model.torch_options, list(model.notes)
    policies = [p for p in model.policies if p]
    ckpt.dtype_policy = max(set(policies), key=policies.count) if policies else "float32"
    if ckpt.dtype_policy.startswith("mixed_"):
        compute = ckpt.dtype_policy.removeprefix("mixed_")
        ckpt.notes.append(f"dtype policy {ckpt.dtype_policy}: variables float32, computation {compute}; run the "
                          f"forward pass under torch.autocast(device_type, dtype=torch.{compute}).")
    where.entry = "optimizer"
    ckpt._owners = ckpt._probe()
    if ckpt.optimizer_class.__name__ == "LossScaleOptimizer":
        ckpt.loss_scale = float(np.asarray(ckpt.optimizer_state[3]))
    return ckpt


def _scalar_problem(name: str, value: Any) -> Optional[str]:
    """What ``load_state_dict`` would say of a saved optimizer scalar (None: nothing, or not a checked one)."""
    array = np.asarray(value)
    if array.size != 1:
        return None
    if array.dtype.kind == "c" and state_value_problem(name, torch.tensor(float("nan"))) is not None:
        return "a real number"
    return state_value_problem(name, torch.from_numpy(np.array(array, copy=True)))


def _check_trainable_dtype(where: _Where, variable: Any, value: np.ndarray) -> None:
    """issue 40: a trainable weight stored as integers is refused here, naming it (``parameters()`` failed later)."""
    if variable.trainable and value.dtype.kind != "f":
        raise where.fail(f"holds {value.dtype} values; a trainable variable is floating point.", variable.entry)


def _read_keras3_weights(where: _Where, snap: _h5safe.H5Snapshot, config: dict, version: str) -> KerasCheckpoint:
    """A Keras 3 weights file (``model.weights.h5``, or a ``.weights.h5``) with the model's ``config``."""
    datasets = snap.datasets
    h5names = _h5_names(snap)
    where.entry = "config.json"
    class_name = config.get("class_name")
    if class_name not in CONTAINER_CLASSES:
        raise where.fail(f"the model is a {class_name!r}; only Sequential and Functional models are supported.")
    inner = _mapping(where, config.get("config") or {}, "config.json")
    compile_config = config.get("compile_config") or {}
    opt_config = _optimizer_config(where, _mapping(where, compile_config, "compile_config").get("optimizer"))
    cls = _optimizer_class(where, opt_config.get("class_name"), "keras3")
    model = _Model()
    _note_layer(model, class_name, str(inner.get("name", "")), inner)
    walk = _Keras3Walk(where, datasets, model)
    walk.container("layers", class_name, inner, "", f"{inner.get('name', '')}/" if class_name == "Sequential" else "",
                   bool(inner.get("trainable", True)), h5names)
    _check_unique(where, model)
    claimed = {v.entry for v in model.variables}
    where.entry = "optimizer/vars"
    count = walk.own_count("optimizer") if "optimizer/vars/0" in datasets else 0
    if count == 0:
        raise where.fail("has no optimizer state (`optimizer/vars` is missing or empty).")
    state_entries = [f"optimizer/vars/{i}" for i in range(count)]
    state = [datasets[e] for e in state_entries]
    claimed.update(state_entries)
    if cls.__name__ == "LossScaleOptimizer":  # Keras also saves the wrapped optimizer's own list apart
        n_inner = walk.own_count("optimizer/inner_optimizer") if "optimizer/inner_optimizer/vars/0" in datasets else 0
        for i in range(n_inner):
            e = f"optimizer/inner_optimizer/vars/{i}"
            value = datasets[e]
            tail = state[len(state) - n_inner + i] if n_inner <= len(state) else None
            if tail is None or tail.shape != value.shape or not np.array_equal(tail, value, equal_nan=True):
                raise where.fail("differs from the LossScaleOptimizer's copy of its inner optimizer's variables.", e)
            claimed.add(e)
    unplaced = sorted(e for e in datasets if e not in claimed)
    if unplaced:
        raise where.fail("cannot be placed: no layer of the model's config stores a variable there, so the file "
                         "is refused rather than the value dropped.", unplaced[0])
    weights = {}
    for v in model.variables:
        if str(snap.attrs.get(v.entry, {}).get("dtype", "")) == "bfloat16":
            raise where.fail("is bfloat16, which the Keras checkpoint reader does not support.", v.entry)
        _check_trainable_dtype(where, v, datasets[v.entry])
        weights[v.name] = torch.from_numpy(np.require(datasets[v.entry], requirements=['C', 'W']))  # fresh: no copy
    floatx = None
    opt_inner = _mapping(where, opt_config.get("config") or {}, "compile_config.optimizer.config")
    if cls.__name__ != "LossScaleOptimizer" and not isinstance(opt_inner.get("learning_rate"), Mapping) \
            and len(state) > 1:
        floatx = torch.from_numpy(state[1]).dtype  # Keras 3: iteration, then the learning rate in floatx
    ckpt = KerasCheckpoint(
        path=where.path, kind="keras3", keras_version=version,
        variable_names=[v.name for v in model.variables if v.trainable],
        non_trainable_names=[v.name for v in model.variables if not v.trainable],
        weights=weights, layouts={v.name: v.kind for v in model.variables},
        entries={v.name: v.entry for v in model.variables},
        optimizer_config={"class_name": cls.__name__, "config": opt_inner}, optimizer_class=cls,
        optimizer_state=state, floatx=floatx, _keras_paths={v.name: v.keras_path for v in model.variables},
    )
    return _finish(ckpt, model, where)


def _read_keras3(path: str, max_bytes: int, isolate: Optional[bool]) -> KerasCheckpoint:
    where = _Where(path)
    with _guard(where):
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            for needed in ("config.json", "model.weights.h5"):
                if needed not in names:
                    raise where.fail("is missing: not a Keras 3 `.keras` file.", needed)
            for small in ("config.json", "metadata.json"):
                if small in names and archive.getinfo(small).file_size > 64 * 2 ** 20:
                    raise where.fail("declares more than 64 MiB of JSON: refused.", small)
            where.entry = "config.json"
            config = _mapping(where, _json(where, archive.read("config.json"), "config.json"), "config.json")
            metadata = (_mapping(where, _json(where, archive.read("metadata.json"), "metadata.json"), "metadata.json")
                        if "metadata.json" in names else {})
            version = str(metadata.get("keras_version", ""))
            if version.startswith(("1.", "2.")):
                raise where.fail(
                    f"was written by Keras {version}: only `.keras` files of Keras 3 are supported (a tf.keras 2.x "
                    "model with a legacy optimizer can be read from its `.h5` file).", "metadata.json")
            where.entry = "model.weights.h5"
            snap = _h5safe.snapshot_member(path, archive, "model.weights.h5", max_bytes, isolate)  # issue 40: in place
        return _read_keras3_weights(where, snap, config, version)


def _read_h5(path: str, config_path: Optional[str], max_bytes: int, isolate: Optional[bool]) -> KerasCheckpoint:
    where = _Where(path)
    with _guard(where):
        snap = _h5safe.snapshot(path, path, max_bytes, isolate)
        datasets, root = snap.datasets, snap.attrs.get("", {})
        if "model_config" not in root:
            if config_path is None:
                raise where.fail(
                    "is not an `.h5` model file (no `model_config` attribute); a Keras 3 `.weights.h5` file holds "
                    "no config: pass `config=` (the `config.json` of the model, with its `compile_config`).")
            cwhere = _Where(config_path)
            with _guard(cwhere):
                if Path(config_path).stat().st_size > 64 * 2 ** 20:
                    raise cwhere.fail("is over 64 MiB of JSON: refused.", None)
                config = _mapping(cwhere, _json(cwhere, Path(config_path).read_bytes(), config_path), config_path)
            return _read_keras3_weights(where, snap, config, "")
        where.entry = "model_config"
        model_config = _mapping(where, _json(where, str(root["model_config"]).encode(), "model_config"),
                                "model_config")
        keras_version = str(root.get("keras_version", ""))
        kind = "keras3" if keras_version.startswith("3.") else "legacy"
        if "training_config" not in root:
            raise where.fail("has no optimizer: the model was saved without being compiled (no `training_config`).")
        training = _mapping(where, _json(where, str(root["training_config"]).encode(), "training_config"),
                            "training_config")
        opt_config = _optimizer_config(where, training.get("optimizer_config"))
        inner = _mapping(where, opt_config.get("config") or {}, "training_config.optimizer_config")
        if kind == "legacy" and inner.pop("is_legacy_optimizer", True) is False:
            raise where.fail(
                f"holds a tf.keras 2.11+ optimizer ({opt_config.get('class_name')!r}, is_legacy_optimizer=False)"
                "; only the legacy optimizers (tf.keras.optimizers.legacy) are supported in `.h5` files. Save a "
                "Keras 3 model as `.keras` instead.")
        cls = _optimizer_class(where, opt_config.get("class_name"), kind)
        where.entry = "optimizer_weights"
        if "weight_names" not in snap.attrs.get("optimizer_weights", {}):
            raise where.fail("has no optimizer state (`optimizer_weights` is missing).")
        opt_names = _strings(snap.attrs["optimizer_weights"]["weight_names"])
        if not opt_names:
            raise where.fail("has no optimizer state (`optimizer_weights` is empty).")
        state = []
        for n in opt_names:
            entry = f"optimizer_weights/{n}"
            if entry not in datasets:
                raise where.fail("is listed in `weight_names` but not stored.", entry)
            state.append(datasets[entry])
        where.entry = "model_weights"
        model = _Model()
        claimed: set[str] = set()
        class_name = model_config.get("class_name")
        if class_name not in CONTAINER_CLASSES:
            raise where.fail(f"the model is a {class_name!r}; only Sequential and Functional models are supported.")
        model_inner = _mapping(where, model_config.get("config") or {}, "model_config")
        for cls_name, name, layer_config in _layer_entries(where, model_inner):
            group = snap.attrs.get(f"model_weights/{name}") if f"model_weights/{name}" in snap.groups else None
            where.entry = f"model_weights/{name}"
            local: set[str] = set()
            _legacy_layer(where, model, cls_name, name, layer_config, group, f"model_weights/{name}",
                          bool(model_inner.get("trainable", True)), local)
            claimed.update(f"model_weights/{name}/{n}" for n in local)
        _check_unique(where, model)
        claimed.update(f"optimizer_weights/{n}" for n in opt_names)
        unplaced = sorted(e for e in datasets if e not in claimed)
        if unplaced:
            raise where.fail("cannot be placed in the model: refused rather than dropped.", unplaced[0])
        for v in model.variables:
            _check_trainable_dtype(where, v, datasets[v.entry])
        weights = {v.name: torch.from_numpy(np.require(datasets[v.entry], requirements=['C', 'W']))  # fresh: no copy
                   for v in model.variables}
        ckpt = KerasCheckpoint(
            path=path, kind=kind, keras_version=keras_version,
            variable_names=[v.name for v in model.variables if v.trainable],
            non_trainable_names=[v.name for v in model.variables if not v.trainable],
            weights=weights, layouts={v.name: v.kind for v in model.variables},
            entries={v.name: v.entry for v in model.variables},
            optimizer_config={"class_name": cls.__name__, "config": inner}, optimizer_class=cls,
            optimizer_state=state, _keras_paths={v.name: v.keras_path for v in model.variables},
        )
        if kind == "keras3" and not isinstance(inner.get("learning_rate"), Mapping) and len(state) > 1:
            ckpt.floatx = torch.from_numpy(state[1]).dtype
        _order_state_by_name(ckpt, where, [n.split(":")[0] for n in opt_names])
        return _finish(ckpt, model, where)


def _order_state_by_name(ckpt: KerasCheckpoint, where: _Where, file_names: list[str]) -> None:
    """An ``.h5`` file names every optimizer weight (tf.keras ``Adam/hidden/kernel/m``, Keras 3
    ``adam/hidden_kernel_momentum``): the state is put in slotopt's order by those names when they are slotopt's
    paths in another order; otherwise the file's order (that of ``get_weights``) is kept."""
    where.entry = "optimizer_weights"
    opt = ckpt._new_optimizer()
    names = [ckpt._keras_paths.get(n, n) for n in ckpt.variable_names]
    opt.build([(k, torch.zeros(ckpt.weights[n].shape, dtype=ckpt.weights[n].dtype))
               for k, n in zip(names, ckpt.variable_names)])
    paths = [str(w.path) for w in ckpt._state_variables(opt)]
    if paths != file_names and sorted(paths) == sorted(file_names):
        index = {n: i for i, n in enumerate(file_names)}
        ckpt.optimizer_state = [ckpt.optimizer_state[index[p]] for p in paths]


def load_keras_checkpoint(path: Union[str, Path], *, config: Union[str, Path, None] = None,
                          max_bytes: int = _h5safe.MAX_BYTES, isolate: Optional[bool] = None) -> KerasCheckpoint:
    """Reads a Keras training checkpoint: a Keras 3 ``.keras`` file, an ``.h5`` model file (tf.keras, or Keras 3's
    ``model.save("x.h5")``), or a Keras 3 ``.weights.h5`` file with its model config given as ``config`` (a JSON
    file holding what a ``.keras`` file's ``config.json`` holds, ``compile_config`` included).

    No TensorFlow or Keras needed; h5py is (``pip install 'slotopt[keras]'``). The model must be a Sequential or
    Functional model (nested ones too) of the layers in :data:`SUPPORTED_LAYERS` (layers without variables of any
    class), compiled with a built-in optimizer (Keras 3: ``slotopt.<Class>``, ``LossScaleOptimizer`` included;
    tf.keras legacy: ``slotopt.legacy.<Class>``) and saved with its state. Every variable of the file is placed
    or the file is refused. ``max_bytes`` bounds what the file may make the reader allocate. ``isolate`` (default:
    where the platform can ``fork``) runs the HDF5 library in a child process with a memory and time limit, so a
    corrupted or hostile file that would crash or hang it is refused instead.

    Raises:
        FileNotFoundError: ``path`` (or ``config``) is not a file.
        CheckpointFormatError: (a ``ValueError``) the file is malformed, truncated, inconsistent, unsupported or
            reaches outside itself; the message names the file and the entry.

    Example:
        >>> import slotopt
        >>> ckpt = slotopt.load_keras_checkpoint("tests/data/keras_checkpoints/legacy_adam_float32.h5")
        >>> opt = ckpt.optimizer(params := ckpt.parameters())
        >>> type(opt).__module__, type(opt).__name__, int(opt.iterations)
        ('slotopt.legacy.adam', 'Adam', 5)
    """
    _h5py()
    path = str(path)
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        raise ValueError(f"Argument `max_bytes` must be a positive int. Received: max_bytes={max_bytes!r}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"Argument `path` is not a file. Received: path={path!r}")
    if config is not None and not Path(config).is_file():
        raise FileNotFoundError(f"Argument `config` is not a file. Received: config={str(config)!r}")
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(b"PK"):
        return _read_keras3(path, max_bytes, isolate)
    if head == b"\x89HDF\r\n\x1a\n":
        return _read_h5(path, None if config is None else str(config), max_bytes, isolate)
    raise CheckpointFormatError(path, None, "is neither a Keras 3 `.keras` file (zip) nor an `.h5` file (HDF5).")
