"""Import Keras training state: ``.keras`` (Keras 3) and ``.h5`` (tf.keras) checkpoints, optimizer state included.

``load_keras_checkpoint(path)`` reads the model's trainable variables, the compiled optimizer's class and config
and its saved state (iteration count, learning rate, slots) without TensorFlow or Keras: a ``.keras`` file is a zip
holding ``config.json`` and ``model.weights.h5``, a tf.keras ``.h5`` file is HDF5; both are read with ``zipfile``
and ``h5py`` (the optional extra ``slotopt[keras]``). The result builds the saved optimizer as a slotopt optimizer of
the matching generation (Keras 3 → ``slotopt.<Class>``, tf.keras legacy → ``slotopt.legacy.<Class>``) on your
tensors, or loads weights and state into an ``nn.Module`` with the layout conversions torch needs.

Every check (optimizer class, config, the number and shapes of the state entries, the parameters or module you
pass) runs before anything is written, so a refused call changes nothing.
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch

from ..engine.naming import snake_case

__all__ = ["KerasCheckpoint", "load_keras_checkpoint", "SUPPORTED_LAYERS", "KERAS3_OPTIMIZERS", "LEGACY_OPTIMIZERS"]

#: Keras layer class → (its trainable variables in creation order, the layout kind of each).
#: ``use_bias=False`` drops ``bias``. A layout kind names the permutation from Keras to torch (below).
SUPPORTED_LAYERS: dict[str, tuple[tuple[str, str], ...]] = {
    "Dense": (("kernel", "dense_kernel"), ("bias", "as_is")),
    "Conv1D": (("kernel", "conv1d_kernel"), ("bias", "as_is")),
    "Conv2D": (("kernel", "conv2d_kernel"), ("bias", "as_is")),
    "Embedding": (("embeddings", "as_is"),),
}

#: Keras layout → torch layout, as a ``permute`` of the Keras tensor:
#: Dense (in, out) → nn.Linear (out, in); Conv1D (k, in, out) → nn.Conv1d (out, in, k);
#: Conv2D (kh, kw, in, out) → nn.Conv2d (out, in, kh, kw).
_TO_TORCH: dict[str, Optional[tuple[int, ...]]] = {
    "as_is": None,
    "dense_kernel": (1, 0),
    "conv1d_kernel": (2, 1, 0),
    "conv2d_kernel": (3, 2, 0, 1),
}

#: Optimizer classes a checkpoint can name, per generation (looked up in ``slotopt`` / ``slotopt.legacy``).
KERAS3_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl", "Lion",
                     "Adafactor", "Lamb")
LEGACY_OPTIMIZERS = ("SGD", "Adam", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl")

#: Layers with weights the reader does not know, that still carry no trainable state of their own.
_CONTAINER_CLASSES = ("Sequential", "Functional", "Model")

# Optimizer variables built on placeholder names ``p0, p1, ...`` are named after them (Keras 3: ``p0_momentum``,
# tf.keras: ``p0/m``): this finds which model variable an optimizer variable belongs to.
_OWNER = re.compile(r"^p(\d+)(?:[_/]|$)")


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


def _texts(value: Any) -> list[str]:
    return [_text(v) for v in np.asarray(value).reshape(-1)]


def _to_torch(value: torch.Tensor, kind: str) -> torch.Tensor:
    perm = _TO_TORCH[kind]
    return value if perm is None else value.permute(*perm).contiguous()


def _torch_shape(shape: Sequence[int], kind: str) -> tuple[int, ...]:
    perm = _TO_TORCH[kind]
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def _tensor(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True))


def _dataset(group: Any, key: str, path: str) -> np.ndarray:
    """A stored variable as a numpy array (Keras 3 marks bfloat16 datasets, which numpy cannot hold)."""
    ds = group[key]
    if _text(ds.attrs.get("dtype", "")) == "bfloat16":
        raise ValueError(f"{path}: variable {ds.name} is bfloat16, which the Keras checkpoint reader does not support.")
    return np.array(ds[()])


@dataclass
class _Layer:
    class_name: str
    name: str
    trainable: bool
    config: dict


def _model_layers(model_config: Mapping[str, Any], path: str) -> list[_Layer]:
    class_name = model_config.get("class_name")
    if class_name not in _CONTAINER_CLASSES:
        raise ValueError(
            f"The model in {path} is a {class_name!r}; only Sequential and Functional models are supported."
        )
    layers = []
    for entry in model_config.get("config", {}).get("layers", []):
        config = entry.get("config", {})
        cls = entry.get("class_name")
        if cls in _CONTAINER_CLASSES:
            raise ValueError(
                f"The model in {path} nests a {cls} ({config.get('name')!r}); nested models are not supported."
            )
        layers.append(_Layer(cls, config.get("name", ""), bool(config.get("trainable", True)), config))
    return layers


def _layer_variables(layer: _Layer, count: int, path: str) -> list[tuple[str, str]]:
    """The ``(variable name, layout kind)`` of ``layer``, which has ``count`` variables in the file."""
    if layer.class_name not in SUPPORTED_LAYERS:
        if count == 0:
            return []
        raise ValueError(
            f"Layer {layer.name!r} of class {layer.class_name} in {path} has {count} variable(s); supported layers "
            f"with variables are {sorted(SUPPORTED_LAYERS)}."
        )
    names = [v for v in SUPPORTED_LAYERS[layer.class_name] if v[0] != "bias" or layer.config.get("use_bias", True)]
    if count != len(names):
        raise ValueError(
            f"Layer {layer.name!r} ({layer.class_name}) in {path} has {count} variable(s); expected {len(names)} "
            f"({[n for n, _ in names]})."
        )
    return names


def _optimizer_class(class_name: Any, kind: str, path: str) -> type:
    import slotopt

    names, namespace = (KERAS3_OPTIMIZERS, slotopt) if kind == "keras3" else (LEGACY_OPTIMIZERS, slotopt.legacy)
    found = {n.lower(): n for n in names}
    if not isinstance(class_name, str) or class_name.lower() not in found:
        generation = "Keras 3" if kind == "keras3" else "tf.keras legacy"
        raise ValueError(
            f"Unknown optimizer class in {path}: {class_name!r}. Supported {generation} optimizers: {list(names)}."
        )
    return getattr(namespace, found[class_name.lower()])


@dataclass
class KerasCheckpoint:
    """The training state read from a Keras checkpoint by :func:`load_keras_checkpoint`.

    Attributes:
        path: the file read.
        kind: ``"keras3"`` (a ``.keras`` file) or ``"legacy"`` (a tf.keras ``.h5`` file).
        keras_version: the Keras version that wrote the file.
        variable_names: the model's trainable variables, ``"<layer name>/<variable name>"``, in the model's order.
        weights: name → tensor, in Keras layout and the stored dtype (also the variables of frozen layers).
        layouts: name → layout kind (``"dense_kernel"``, ``"conv1d_kernel"``, ``"conv2d_kernel"``, ``"as_is"``).
        optimizer_config: ``{"class_name", "config"}`` of the saved optimizer (a schedule stays serialized).
        optimizer_class: the slotopt class it maps to (``slotopt.Adam`` or ``slotopt.legacy.Adam``, ...).
        optimizer_state: the saved optimizer variables, in the order of the optimizer's ``set_weights``.
        floatx: the stored dtype of the learning-rate variable (Keras 3's ``floatx``; ``None`` with a schedule
            and for tf.keras, whose hyperparameters are always float32).

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
    _owners: list[Optional[int]] = field(default_factory=list, repr=False)

    # ---------------------------------------------------------------------------------------------- helpers
    def _new_optimizer(self) -> Any:
        config = dict(self.optimizer_config["config"])
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
            raise ValueError(
                f"{where}: the file holds {len(self.optimizer_state)} optimizer variables, but a "
                f"{self.optimizer_class.__name__} built on the model's {len(self.variable_names)} trainable variables "
                f"has {len(variables)} ({[getattr(v, 'path', i) for i, v in enumerate(variables)]})."
            )
        for i, (var, value) in enumerate(zip(variables, self.optimizer_state)):
            if tuple(var.shape) != tuple(value.shape):
                raise ValueError(
                    f"{where}: optimizer variable {i} ({getattr(var, 'path', '')}) has shape {tuple(value.shape)} in the file; "
                    f"expected {tuple(var.shape)}."
                )

    def _probe(self) -> list[Optional[int]]:
        """Builds the optimizer on placeholders ``p0, p1, ...`` (Keras layout) to check the saved state and to
        learn which model variable each optimizer variable belongs to (``None``: the optimizer's own)."""
        opt = self._new_optimizer()
        opt.build([(f"p{j}", torch.zeros(self.weights[n].shape, dtype=self.weights[n].dtype))
                   for j, n in enumerate(self.variable_names)])
        self._check_state(opt, self.path)
        owners: list[Optional[int]] = []
        for var in self._state_variables(opt):
            match = _OWNER.match(str(getattr(var, "path", "")).split("/", 1)[-1])
            owners.append(int(match.group(1)) if match else None)
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
        opt.set_weights(self.optimizer_state)
        return opt

    def load_module(self, module: torch.nn.Module, mapping: Optional[Mapping[str, str]] = None) -> Any:
        """Loads the weights into ``module`` and returns the saved optimizer built on its parameters.

        ``mapping`` maps each Keras variable name (``variable_names``) to a parameter name of ``module``
        (``module.named_parameters()``); without it the module's parameters are taken in order. It may also map
        variables of frozen layers (in ``weights`` but not in ``variable_names``): they are copied, not trained. Kernels are
        converted to torch's layout (Dense ↔ ``nn.Linear``: transposed; Conv1D/Conv2D ↔ ``nn.Conv1d``/
        ``nn.Conv2d``: ``(..., in, out)`` → ``(out, in, ...)``; Embedding as is), and every optimizer slot of a
        variable the same way. Everything is checked before the module is written.
        """
        named = dict(module.named_parameters())
        if mapping is None:
            if len(named) != len(self.variable_names):
                raise ValueError(
                    f"Argument `mapping` is None, so the module's parameters are taken in order, but the module has "
                    f"{len(named)} parameters ({list(named)}) and the checkpoint {len(self.variable_names)} "
                    f"trainable variables ({self.variable_names}). Pass `mapping` (Keras name → parameter name)."
                )
            mapping = dict(zip(self.variable_names, named))
        if not isinstance(mapping, Mapping):
            raise TypeError(f"Argument `mapping` must be a dict Keras name → parameter name. Received: {mapping!r}")
        self._check_names("mapping", mapping)
        targets = []
        for name in mapping:
            pname = mapping[name]
            if pname not in named:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} to {pname!r}, which is not a parameter of the module. "
                    f"Parameters: {list(named)}."
                )
            param, kind = named[pname], self.layouts[name]
            shape = _torch_shape(self.weights[name].shape, kind)
            if tuple(param.shape) != shape or param.dtype != self.weights[name].dtype:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} ({kind}, Keras shape {tuple(self.weights[name].shape)}) to "
                    f"{pname!r} of shape {tuple(param.shape)} and dtype {param.dtype}; expected shape {shape} and "
                    f"dtype {self.weights[name].dtype}."
                )
            targets.append((name, pname, param))
        if len({id(p) for _, _, p in targets}) != len(targets):
            raise ValueError(f"Argument `mapping` maps two variables to the same parameter. Received: {dict(mapping)}")
        state = []
        for i, (value, owner) in enumerate(zip(self.optimizer_state, self._owners)):
            tensor = _tensor(value)
            if owner is not None:
                name = self.variable_names[owner]
                kind = self.layouts[name]
                if tuple(tensor.shape) == tuple(self.weights[name].shape):
                    tensor = _to_torch(tensor, kind)
                elif _TO_TORCH[kind] is not None:
                    raise ValueError(
                        f"Optimizer variable {i} of {name!r} has shape {tuple(tensor.shape)}, not the variable's "
                        f"shape: a {self.optimizer_class.__name__} state of a {kind} cannot be converted to torch's "
                        "layout. Use `optimizer(params)` with Keras-layout tensors instead."
                    )
            state.append(tensor)
        with torch.no_grad():
            for name, _, param in targets:
                param.copy_(_to_torch(self.weights[name], self.layouts[name]))
        by_name = {name: (pname, param) for name, pname, param in targets}
        opt = self._new_optimizer()
        opt.build([by_name[name] for name in self.variable_names])
        self._learning_rate_note(opt)
        opt.set_weights(state)
        return opt


# -------------------------------------------------------------------------------------------------- readers
def _read_keras3(path: str, h5py: Any) -> KerasCheckpoint:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise ValueError(f"Argument `path` is not a Keras 3 `.keras` file (not a zip archive). Received: {path!r}") from err
    with archive:
        names = set(archive.namelist())
        for needed in ("config.json", "model.weights.h5"):
            if needed not in names:
                raise ValueError(f"Argument `path` is not a Keras 3 `.keras` file: no {needed}. Received: {path!r}")
        config = json.loads(archive.read("config.json"))
        metadata = json.loads(archive.read("metadata.json")) if "metadata.json" in names else {}
        blob = archive.read("model.weights.h5")
    version = str(metadata.get("keras_version", ""))
    if version.startswith(("1.", "2.")):
        raise ValueError(
            f"{path} was written by Keras {version}: only `.keras` files of Keras 3 are supported (a tf.keras 2.x "
            "model with a legacy optimizer can be read from its `.h5` file)."
        )
    compile_config = config.get("compile_config") or {}
    opt_config = compile_config.get("optimizer")
    if isinstance(opt_config, str):  # an optimizer given by name, with its defaults
        opt_config = {"class_name": opt_config, "config": {}}
    if not isinstance(opt_config, Mapping):
        raise ValueError(
            f"{path} has no optimizer: the model was saved without being compiled (no `compile_config.optimizer`)."
        )
    cls = _optimizer_class(opt_config.get("class_name"), "keras3", path)
    layers = _model_layers(config, path)
    with h5py.File(io.BytesIO(blob), "r") as f:
        if "optimizer" not in f or "vars" not in f["optimizer"] or len(f["optimizer"]["vars"]) == 0:
            raise ValueError(f"{path} has no optimizer state (`optimizer/vars` is missing or empty).")
        groups = f["layers"] if "layers" in f else {}
        by_name = {}
        for key in groups:
            vars_group = groups[key].get("vars") if hasattr(groups[key], "get") else None
            if vars_group is not None and "name" in vars_group.attrs:
                by_name[_text(vars_group.attrs["name"])] = vars_group
        used: dict[str, int] = {}
        variable_names, weights, layouts = [], {}, {}
        for layer in layers:
            key = snake_case(layer.class_name)
            used[key] = used.get(key, -1) + 1
            key = key if used[key] == 0 else f"{key}_{used[key]}"
            group = by_name.get(layer.name)
            if group is None and key in groups and "vars" in groups[key]:
                group = groups[key]["vars"]
            count = len(group) if group is not None else 0
            for i, (var, kind) in enumerate(_layer_variables(layer, count, path)):
                name = f"{layer.name}/{var}"
                if layer.trainable:  # a frozen layer's variables are not the optimizer's
                    variable_names.append(name)
                weights[name] = _tensor(_dataset(group, str(i), path))
                layouts[name] = kind
        opt_vars = f["optimizer"]["vars"]
        state = [_dataset(opt_vars, str(i), path) for i in range(len(opt_vars))]
    floatx = None
    inner = opt_config.get("config") or {}
    if not isinstance(inner.get("learning_rate"), Mapping) and len(state) > 1:
        floatx = _tensor(state[1]).dtype  # Keras 3: iteration, then the learning rate in floatx
    ckpt = KerasCheckpoint(
        path=path, kind="keras3", keras_version=version, variable_names=variable_names,
        weights=weights, layouts=layouts,
        optimizer_config={"class_name": cls.__name__, "config": dict(inner)}, optimizer_class=cls,
        optimizer_state=state, floatx=floatx,
    )
    ckpt._owners = ckpt._probe()
    return ckpt


def _read_legacy(path: str, h5py: Any) -> KerasCheckpoint:
    with h5py.File(path, "r") as f:
        if "model_config" not in f.attrs:
            raise ValueError(
                "Argument `path` is not a tf.keras `.h5` model file (no `model_config` attribute; a Keras 3 "
                f"`.weights.h5` file holds no optimizer config: load the `.keras` file). Received: {path!r}"
            )
        model_config = json.loads(_text(f.attrs["model_config"]))
        keras_version = _text(f.attrs.get("keras_version", ""))
        if "training_config" not in f.attrs:
            raise ValueError(f"{path} has no optimizer: the model was saved without being compiled (no `training_config`).")
        training_config = json.loads(_text(f.attrs["training_config"]))
        opt_config = training_config.get("optimizer_config")
        if not isinstance(opt_config, Mapping):
            raise ValueError(f"{path} has no optimizer config in its `training_config`.")
        inner = dict(opt_config.get("config") or {})
        if inner.pop("is_legacy_optimizer", True) is False:
            raise ValueError(
                f"{path} holds a tf.keras 2.11+ optimizer ({opt_config.get('class_name')!r}, is_legacy_optimizer=False)"
                "; only the legacy optimizers (tf.keras.optimizers.legacy) are supported in `.h5` files. Save a "
                "Keras 3 model as `.keras` instead."
            )
        cls = _optimizer_class(opt_config.get("class_name"), "legacy", path)
        if "optimizer_weights" not in f or "weight_names" not in f["optimizer_weights"].attrs:
            raise ValueError(f"{path} has no optimizer state (`optimizer_weights` is missing).")
        opt_group = f["optimizer_weights"]
        opt_names = _texts(opt_group.attrs["weight_names"])
        if not opt_names:
            raise ValueError(f"{path} has no optimizer state (`optimizer_weights` is empty).")
        state = [np.array(opt_group[n][()]) for n in opt_names]
        model_weights = f["model_weights"]
        variable_names, weights, layouts = [], {}, {}
        for layer in _model_layers(model_config, path):
            group = model_weights[layer.name] if layer.name in model_weights else None
            stored = _texts(group.attrs["weight_names"]) if group is not None and "weight_names" in group.attrs else []
            by_var = {n.split("/")[-1].split(":")[0]: n for n in stored}
            for var, kind in _layer_variables(layer, len(stored), path):
                if var not in by_var:
                    raise ValueError(f"Layer {layer.name!r} in {path} has no {var!r} weight (found {stored}).")
                name = f"{layer.name}/{var}"
                if layer.trainable:
                    variable_names.append(name)
                weights[name] = _tensor(group[by_var[var]][()])
                layouts[name] = kind
    ckpt = KerasCheckpoint(
        path=path, kind="legacy", keras_version=keras_version,
        variable_names=variable_names, weights=weights, layouts=layouts,
        optimizer_config={"class_name": cls.__name__, "config": inner}, optimizer_class=cls, optimizer_state=state,
    )
    _order_legacy_state(ckpt, [n.split(":")[0] for n in opt_names])
    ckpt._owners = ckpt._probe()
    return ckpt


def _order_legacy_state(ckpt: KerasCheckpoint, file_names: list[str]) -> None:
    """tf.keras names every optimizer weight (``Adam/hidden/kernel/m:0``): when the names are slotopt's paths in
    another order, the state is put in slotopt's order; otherwise the file's order (that of ``get_weights``)."""
    opt = ckpt._new_optimizer()
    opt.build([(n, torch.zeros(ckpt.weights[n].shape, dtype=ckpt.weights[n].dtype)) for n in ckpt.variable_names])
    paths = [str(w.path) for w in opt.weights]
    if paths != file_names and sorted(paths) == sorted(file_names):
        index = {n: i for i, n in enumerate(file_names)}
        ckpt.optimizer_state = [ckpt.optimizer_state[index[p]] for p in paths]


def load_keras_checkpoint(path: Union[str, Path]) -> KerasCheckpoint:
    """Reads a Keras training checkpoint: a Keras 3 ``.keras`` file or a tf.keras ``.h5`` model file.

    No TensorFlow or Keras needed; h5py is (``pip install 'slotopt[keras]'``). The model must be a Sequential or
    Functional model whose layers with variables are Dense, Conv1D, Conv2D or Embedding, compiled with a built-in
    optimizer (Keras 3: ``slotopt.<Class>``; tf.keras legacy: ``slotopt.legacy.<Class>``) and saved with its state.

    Example:
        >>> import slotopt
        >>> ckpt = slotopt.load_keras_checkpoint("tests/data/keras_checkpoints/legacy_adam_float32.h5")
        >>> opt = ckpt.optimizer(params := ckpt.parameters())
        >>> type(opt).__module__, type(opt).__name__, int(opt.iterations)
        ('slotopt.legacy.adam', 'Adam', 5)
    """
    h5py = _h5py()
    path = str(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"Argument `path` is not a file. Received: path={path!r}")
    if zipfile.is_zipfile(path):
        return _read_keras3(path, h5py)
    if h5py.is_hdf5(path):
        return _read_legacy(path, h5py)
    raise ValueError(
        f"Argument `path` must be a Keras 3 `.keras` file (zip) or a tf.keras `.h5` file (HDF5). Received: {path!r}"
    )
