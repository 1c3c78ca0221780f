"""Import Keras training state: ``.keras`` and ``.h5`` checkpoints (Keras 3 and tf.keras), optimizer state included.

``load_keras_checkpoint(path)`` reads the model's variables, the compiled optimizer's class and config and its
saved state (iteration count, learning rate, slots, a LossScaleOptimizer's scale) without TensorFlow or Keras: a
``.keras`` file is a zip holding ``config.json`` and ``model.weights.h5``; an ``.h5`` model file (tf.keras, or
Keras 3's ``model.save("x.h5")``) is HDF5; a Keras 3 ``.weights.h5`` file is read with its config (JSON) given
apart. Files are read as untrusted data with ``zipfile`` and ``h5py`` (the optional extra ``slotopt[keras]``): the
model is walked structurally (sub-layers, RNN cells, wrappers, nested models; a subclassed model through its file,
``keras_subclassed.py``; a layer of unknown class in the file's layout) so every variable of the file is placed
or the file is refused; HDF5 links, external storage and virtual datasets are refused; sizes are bounded;
anything malformed raises :class:`~slotopt.io.CheckpointFormatError` naming the file and the entry.

The result builds the saved optimizer as a slotopt optimizer of the matching generation on your tensors, or loads
weights, BatchNorm statistics and optimizer state into an ``nn.Module`` with the layout conversions torch needs
(``keras_layers.py``). Every check runs before anything is written, so a refused call changes nothing.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch

from . import _h5safe, keras_write
from .keras_layers import CONTAINER_CLASSES, SUPPORTED_LAYERS, TORCH_COUNTERPARTS
from .keras_result import CUSTOM_OBJECTS, KerasCheckpoint
from .keras_subclassed import find_blocks, order_blocks
from .keras_walk import (
    CheckpointFormatError,
    _check_unique,
    _guard,
    _h5_names,
    _h5py,
    _json,
    _Keras3Walk,
    _layer_entries,
    _legacy_layer,
    _mapping,
    _Model,
    _note_layer,
    _optimizer_class,
    _strings,
    _Where,
    readable_optimizers,
)

__all__ = ["KerasCheckpoint", "load_keras_checkpoint", "SUPPORTED_LAYERS", "TORCH_COUNTERPARTS",
           "readable_optimizers"]


def __getattr__(name: str) -> Any:
    # KERAS3_OPTIMIZERS / LEGACY_OPTIMIZERS: derived from the registry when read (keras_walk.readable_optimizers).
    if name in ("KERAS3_OPTIMIZERS", "LEGACY_OPTIMIZERS"):
        return readable_optimizers("keras3" if name.startswith("KERAS3") else "legacy")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# -------------------------------------------------------------------------------------------------- readers
def _optimizer_config(where: _Where, opt_config: Any) -> dict:
    if isinstance(opt_config, str):  # an optimizer given by name, with its defaults
        opt_config = {"class_name": opt_config, "config": {}}
    if not isinstance(opt_config, Mapping):
        raise where.fail("has no optimizer: the model was saved without being compiled (no `compile_config."
                         "optimizer`).")
    return dict(opt_config)


def _tensor(snap: _h5safe.H5Snapshot, entry: str) -> torch.Tensor:
    """A dataset as a torch tensor: the array read for it (fresh: no copy), or, where it was left unread
    (``metadata_only``), an empty tensor of its shape and dtype on the ``meta`` device."""
    value = snap.datasets[entry]
    if entry in snap.unread:
        return torch.empty(value.shape, dtype=_torch_dtype(value), device="meta")
    return torch.from_numpy(np.require(value, requirements=['C', 'W']))


def _torch_dtype(value: np.ndarray) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=np.asarray(value).dtype.newbyteorder("="))).dtype


def _finish(ckpt: KerasCheckpoint, model: _Model, where: _Where, snap: _h5safe.H5Snapshot) -> KerasCheckpoint:
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
    if snap.unread:  # metadata_only: an unread value is a meta tensor once checked, so no use can take its zeros
        ckpt.optimizer_state = [_tensor(snap, e) if e in snap.unread else value
                                for e, value in zip(ckpt.optimizer_entries, ckpt.optimizer_state)]
    return ckpt


def _read_keras3_weights(where: _Where, snap: _h5safe.H5Snapshot, config: dict, version: str) -> KerasCheckpoint:
    """A Keras 3 weights file (``model.weights.h5``, or a ``.weights.h5``) with the model's ``config``."""
    datasets = snap.datasets
    h5names = _h5_names(snap)
    where.entry = "config.json"
    class_name = config.get("class_name")
    if not isinstance(class_name, str):
        raise where.fail(f"the model's `class_name` must be a string; found {class_name!r}.")
    inner = _mapping(where, config.get("config") or {}, "config.json")
    compile_config = config.get("compile_config") or {}
    opt_config = _optimizer_config(where, _mapping(where, compile_config, "compile_config").get("optimizer"))
    opt_config, tfkeras_new = _tfkeras_new(where, opt_config)
    cls = _optimizer_class(where, opt_config.get("class_name"), "keras3")
    wrapped = cls.__name__ != "LossScaleOptimizer" and "optimizer/inner_optimizer/vars/0" in datasets
    if wrapped:
        # ``compile`` under a mixed_float16 policy wraps the optimizer in a LossScaleOptimizer (its defaults) but
        # saves the optimizer the user gave: the file's variables are the wrapper's, the inner ones apart.
        opt_config = {"class_name": "LossScaleOptimizer", "config": {"name": "loss_scale_optimizer",
                                                                     "inner_optimizer": opt_config}}
        cls = _optimizer_class(where, "LossScaleOptimizer", "keras3")
    model = _Model()
    _note_layer(model, class_name, str(inner.get("name", "")), inner)
    walk = _Keras3Walk(where, datasets, model)
    if class_name in CONTAINER_CLASSES:
        walk.container("layers", class_name, inner, "",
                       f"{inner.get('name', '')}/" if class_name == "Sequential" else "",
                       bool(inner.get("trainable", True)), h5names)
    where.entry = "optimizer/vars"
    count = walk.own_count("optimizer") if "optimizer/vars/0" in datasets else 0
    if count == 0:
        raise where.fail("has no optimizer state (`optimizer/vars` is missing or empty).")
    state_entries = [f"optimizer/vars/{i}" for i in range(count)]
    state = [datasets[e] for e in state_entries]
    claimed = set(state_entries)
    skipped: dict[str, str] = {}
    for e in datasets:  # compiled metrics' running totals (tf-keras): not training state
        if e.startswith("metrics/"):
            claimed.add(e)
            skipped[e] = "a compiled metric's running total (not training state an optimizer continues)"
    if tfkeras_new:
        state, state_entries = _with_learning_rate(where, opt_config, state, state_entries)
    if cls.__name__ == "LossScaleOptimizer":  # Keras also saves the wrapped optimizer's own list apart
        n_inner = walk.own_count("optimizer/inner_optimizer") if "optimizer/inner_optimizer/vars/0" in datasets else 0
        for i in range(n_inner):
            e = f"optimizer/inner_optimizer/vars/{i}"
            value = datasets[e]
            tail = state[len(state) - n_inner + i] if n_inner <= len(state) else None
            unread = e in snap.unread or state_entries[len(state) - n_inner + i] in snap.unread
            if tail is None or tail.shape != value.shape or \
                    not (unread or np.array_equal(tail, value, equal_nan=True)):
                raise where.fail("differs from the LossScaleOptimizer's copy of its inner optimizer's variables.", e)
            claimed.add(e)
            skipped[e] = f"the inner optimizer's copy of optimizer/vars/{len(state) - n_inner + i} (equal)"
    if wrapped:
        model.notes.append("the optimizer was wrapped in a LossScaleOptimizer by `compile` (mixed precision): "
                           "continued as one, with Keras's defaults (dynamic_growth_steps=2000).")
    if class_name not in CONTAINER_CLASSES:  # a subclassed model: its layers found in the file (keras_subclassed)
        blocks = find_blocks(where, walk, h5names, str(inner.get("name", "")))
        shapes = {v.entry: tuple(datasets[v.entry].shape) for b in blocks for v in b.variables}
        opt_copy = _mapping(where, opt_config.get("config") or {}, "compile_config.optimizer.config")
        ordered = order_blocks(where, blocks, state, shapes, lambda: cls.from_config(json.loads(json.dumps(opt_copy))))
        model.variables = [v for b in ordered for v in b.variables]
        model.notes.append(f"{class_name} is a subclassed model: its variables were found in the file and ordered "
                           "by the saved optimizer state; a layer of unknown class comes in the file's layout "
                           "(`<layer>/vars/<i>`, `as_is`): map it yourself.")
    _check_unique(where, model)
    claimed.update(v.entry for v in model.variables)
    unplaced = sorted(e for e in datasets if e not in claimed)
    if unplaced:
        raise where.fail("cannot be placed: no layer of the model's config stores a variable there, so the file "
                         "is refused rather than the value dropped.", unplaced[0])
    weights = {}
    for v in model.variables:
        if str(snap.attrs.get(v.entry, {}).get("dtype", "")) == "bfloat16":
            raise where.fail("is bfloat16, which the Keras checkpoint reader does not support.", v.entry)
        _check_trainable_dtype(where, v, datasets[v.entry])
        weights[v.name] = _tensor(snap, v.entry)
    floatx = None
    opt_inner = _mapping(where, opt_config.get("config") or {}, "compile_config.optimizer.config")
    if cls.__name__ != "LossScaleOptimizer" and not isinstance(opt_inner.get("learning_rate"), Mapping) \
            and len(state) > 1:
        floatx = _torch_dtype(state[1])  # Keras 3: iteration, then the learning rate in floatx
    ckpt = KerasCheckpoint(
        path=where.path, kind="keras3", keras_version=version,
        variable_names=[v.name for v in model.variables if v.trainable],
        non_trainable_names=[v.name for v in model.variables if not v.trainable],
        weights=weights, layouts={v.name: v.kind for v in model.variables},
        entries={v.name: v.entry for v in model.variables},
        optimizer_config={"class_name": cls.__name__, "config": opt_inner}, optimizer_class=cls,
        optimizer_state=state, floatx=floatx, _keras_paths={v.name: v.keras_path for v in model.variables},
        optimizer_entries=state_entries, skipped=skipped,
    )
    ckpt._layout = keras_write.capture(snap, ckpt, "weights.h5", load_keras_checkpoint)  # the way back
    return _finish(ckpt, model, where, snap)


def _read_keras3(path: str, max_bytes: int, isolate: Optional[bool], metadata_only: bool) -> KerasCheckpoint:
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
            opt = ((config.get("compile_config") or {}) if isinstance(config.get("compile_config"), Mapping) else {}
                   ).get("optimizer")
            tfkeras_new = isinstance(opt, Mapping) and isinstance(opt.get("config"), Mapping) and \
                opt["config"].get("is_legacy_optimizer") is False
            if version.startswith(("1.", "2.")) and not tfkeras_new:
                raise where.fail(
                    f"was written by Keras {version} with a legacy optimizer: only `.keras` files of Keras 3 or with "
                    "tf-keras 2.11+'s optimizer are supported (a tf.keras 2.x model with a legacy optimizer can be "
                    "read from its `.h5` file).", "metadata.json")
            where.entry = "model.weights.h5"
            snap = _h5safe.snapshot_member(path, archive, "model.weights.h5", max_bytes, isolate,  # issue 40: in place
                                           metadata_only=metadata_only)
            members = [(i.filename, None if i.filename == "model.weights.h5" else archive.read(i.filename)
                        if i.file_size <= 64 * 2 ** 20 else b"", i.date_time) for i in archive.infolist()]
            oversized = [i.filename for i in archive.infolist() if i.filename != "model.weights.h5"
                         and i.file_size > 64 * 2 ** 20]
        ckpt = _read_keras3_weights(where, snap, config, version)
        ckpt._layout.kind, ckpt._layout.members, ckpt._layout.oversized = "keras", members, oversized
        return ckpt


def _read_h5(path: str, config_path: Optional[str], max_bytes: int, isolate: Optional[bool],
             metadata_only: bool) -> KerasCheckpoint:
    where = _Where(path)
    with _guard(where):
        snap = _h5safe.snapshot(path, path, max_bytes, isolate, metadata_only=metadata_only)
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
        opt_config, tfkeras_new = _tfkeras_new(where, opt_config)
        inner = _mapping(where, opt_config.get("config") or {}, "training_config.optimizer_config")
        inner.pop("is_legacy_optimizer", None)
        if tfkeras_new:
            kind = "keras3"  # its state is Keras 3's, continued by the Keras 3 class
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
        weights = {v.name: _tensor(snap, v.entry) for v in model.variables}
        ckpt = KerasCheckpoint(
            path=path, kind=kind, keras_version=keras_version,
            variable_names=[v.name for v in model.variables if v.trainable],
            non_trainable_names=[v.name for v in model.variables if not v.trainable],
            weights=weights, layouts={v.name: v.kind for v in model.variables},
            entries={v.name: v.entry for v in model.variables},
            optimizer_config={"class_name": cls.__name__, "config": inner}, optimizer_class=cls,
            optimizer_state=state, _keras_paths={v.name: v.keras_path for v in model.variables},
            optimizer_entries=[f"optimizer_weights/{n}" for n in opt_names],
        )
        if tfkeras_new:
            ckpt.optimizer_state, ckpt.optimizer_entries = _with_learning_rate(where, opt_config, state,
                                                                              ckpt.optimizer_entries)
            model.notes.append(_TFKERAS_NOTE)
            opt_names = [opt_names[0], "learning_rate (config)"] + opt_names[1:]
        if kind == "keras3" and not isinstance(inner.get("learning_rate"), Mapping) and len(state) > 1:
            ckpt.floatx = _torch_dtype(ckpt.optimizer_state[1])
        _order_state_by_name(ckpt, where, [n.split(":")[0] for n in opt_names])
        ckpt._layout = keras_write.capture(snap, ckpt, "h5", load_keras_checkpoint)  # the way back
        return _finish(ckpt, model, where, snap)


def _read_sharded(path: str, config_path: Optional[str], max_bytes: int, isolate: Optional[bool],
                  metadata_only: bool) -> KerasCheckpoint:
    """A Keras 3 sharded weights file (``save_weights("x.weights.json", max_shard_size=...)``, issue 49): the JSON
    manifest's ``weight_map`` names the shards (HDF5 files next to it) holding each group; the shards are read as
    one file (a dataset in two shards is refused), with the model's config given as ``config``."""
    where = _Where(path)
    with _guard(where):
        if Path(path).stat().st_size > 64 * 2 ** 20:
            raise where.fail("is over 64 MiB of JSON: refused.", None)
        manifest = _mapping(where, _json(where, Path(path).read_bytes(), path), path)
        weight_map = manifest.get("weight_map")
        where.entry = "weight_map"
        if not isinstance(weight_map, Mapping) or not weight_map:
            raise where.fail("has no `weight_map`: not a Keras sharded weights manifest.")
        folder = os.path.dirname(os.path.realpath(path))
        shards: list[str] = []
        for group, names in weight_map.items():
            for name in names if isinstance(names, list) else [names]:
                if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
                    raise where.fail(f"names shard {name!r} for {group!r}: a shard is a file next to the manifest.")
                shard = os.path.join(folder, name)
                if os.path.dirname(os.path.realpath(shard)) != folder:
                    raise where.fail(f"shard {name!r} leads outside {folder}: it is not followed.")
                if not os.path.isfile(shard):
                    raise where.fail(f"names shard {name!r}, which is not a file next to the manifest.")
                if shard not in shards:
                    shards.append(shard)
        if config_path is None:
            raise where.fail("is a sharded weights manifest, which holds no config: pass `config=` (the model's "
                             "`config.json`, with its `compile_config`).")
        total = sum(os.path.getsize(s) for s in shards)
        if total > max_bytes:
            raise where.fail(f"shards hold {total} bytes, over max_bytes={max_bytes}: refused.")
        merged = _h5safe.H5Snapshot()
        for shard in shards:
            snap = _h5safe.snapshot(shard, shard, max_bytes, isolate, metadata_only=metadata_only)
            for entry, value in snap.datasets.items():
                if entry in merged.datasets:
                    raise CheckpointFormatError(shard, entry, "is stored in two shards: refused rather than one "
                                                "dropped.")
                merged.datasets[entry] = value
            for entry, attrs in snap.attrs.items():
                known = merged.attrs.setdefault(entry, {})
                clash = [k for k in attrs if k in known and known[k] != attrs[k]]
                if clash:
                    raise CheckpointFormatError(shard, entry, f"attribute {clash[0]!r} differs between shards.")
                known.update(attrs)
            merged.groups |= snap.groups
            merged.unread |= snap.unread
        cwhere = _Where(config_path)
        with _guard(cwhere):
            if Path(config_path).stat().st_size > 64 * 2 ** 20:
                raise cwhere.fail("is over 64 MiB of JSON: refused.", None)
            config = _mapping(cwhere, _json(cwhere, Path(config_path).read_bytes(), config_path), config_path)
        return _read_keras3_weights(where, merged, config, "")


def _check_trainable_dtype(where: _Where, variable: Any, value: np.ndarray) -> None:
    """issue 40: a trainable weight stored as integers is refused here, naming it (``parameters()`` failed later)."""
    if variable.trainable and value.dtype.kind != "f":
        raise where.fail(f"holds {value.dtype} values; a trainable variable is floating point.", variable.entry)


_TFKERAS_NOTE = ("the optimizer is tf-keras 2.11+'s (is_legacy_optimizer=False): continued by the Keras 3 class with "
                 "tf-keras's summing of a sparse gradient's repeated rows (where the rest of the arithmetic differs, "
                 "refused: docs/tf_checkpoints.md); its learning rate comes from the config.")


def _tfkeras_new(where: _Where, opt_config: dict) -> tuple[dict, bool]:
    """tf-keras 2.11+'s Optimizer (``is_legacy_optimizer: False``; ``.h5`` files name it ``Custom>Adam``) → the
    Keras 3 class's config (its tf-keras-only keys dropped), and whether it was one."""
    inner = opt_config.get("config")
    if not isinstance(inner, Mapping) or inner.get("is_legacy_optimizer") is not False:
        return opt_config, False
    inner = {k: v for k, v in inner.items() if k not in ("is_legacy_optimizer", "jit_compile")}
    name = opt_config.get("class_name")
    name = name.removeprefix("Custom>") if isinstance(name, str) else name
    return {"class_name": name, "config": inner}, True


def _with_learning_rate(where: _Where, opt_config: dict, state: list, entries: list[str]) -> tuple[list, list[str]]:
    """tf-keras 2.11+ saves ``[iterations, slots...]``; the Keras 3 class holds ``[iteration, learning_rate,
    slots...]``: the learning rate (not saved) is the config's, in float32 (a schedule has no variable)."""
    lr = (opt_config.get("config") or {}).get("learning_rate")
    if isinstance(lr, Mapping) or not state:
        return state, entries
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):  # its value is checked with the state's
        raise where.fail(f"must be a number or a schedule; found {lr!r}.",
                         "compile_config.optimizer.config.learning_rate")
    return [state[0], np.array(lr, dtype=np.float32)] + list(state[1:]), [entries[0], "learning_rate (config)"] + list(entries[1:])


def _order_state_by_name(ckpt: KerasCheckpoint, where: _Where, file_names: list[str]) -> None:
    """An ``.h5`` file names every optimizer weight (tf.keras ``Adam/hidden/kernel/m``, Keras 3
    ``adam/hidden_kernel_momentum``): the state is put in slotopt's order by those names when they are slotopt's
    paths in another order; otherwise the file's order (that of ``get_weights``) is kept."""
    where.entry = "optimizer_weights"
    opt = ckpt._new_optimizer()
    names = [ckpt._keras_paths.get(n, n) for n in ckpt.variable_names]
    opt.build([(k, torch.empty(ckpt.weights[n].shape, dtype=ckpt.weights[n].dtype, device="meta"))
               for k, n in zip(names, ckpt.variable_names)])  # meta (issue 40): names only, no memory
    paths = [str(w.path) for w in ckpt._state_variables(opt)]
    if paths != file_names and sorted(paths) == sorted(file_names):
        index = {n: i for i, n in enumerate(file_names)}
        ckpt.optimizer_state = [ckpt.optimizer_state[index[p]] for p in paths]
        ckpt.optimizer_entries = [ckpt.optimizer_entries[index[p]] for p in paths]


def load_keras_checkpoint(path: Union[str, Path], *, config: Union[str, Path, None] = None,
                          max_bytes: int = _h5safe.MAX_BYTES, isolate: Optional[bool] = None,
                          metadata_only: bool = False,
                          custom_objects: Optional[Mapping[str, Any]] = None) -> KerasCheckpoint:
    """Reads a Keras training checkpoint: a Keras 3 ``.keras`` file, an ``.h5`` model file (tf.keras, or Keras 3's
    ``model.save("x.h5")``), or a Keras 3 ``.weights.h5`` file with its model config given as ``config`` (a JSON
    file holding what a ``.keras`` file's ``config.json`` holds, ``compile_config`` included).

    No TensorFlow or Keras needed; h5py is (``pip install 'slotopt[keras]'``). The model is a Sequential or
    Functional model (nested ones too), or a subclassed ``keras.Model`` (its layers found in the file and ordered
    by the saved optimizer state; refused, naming the layers, where that order is ambiguous). The layers in
    :data:`SUPPORTED_LAYERS` keep their names and layouts; any other layer's variables come in the file's layout
    (``<layer>/vars/<i>``, or their names in an ``.h5`` file). The model is compiled with a built-in optimizer
    (Keras 3: ``slotopt.<Class>``, ``LossScaleOptimizer`` included, also where ``compile`` wrapped it; tf-keras
    2.11+'s optimizer, continued by the Keras 3 class; tf.keras legacy: ``slotopt.legacy.<Class>``) and saved with
    its state. Every variable of the file is placed
    or the file is refused. ``max_bytes`` bounds what the file may make the reader allocate. ``isolate`` (default:
    where the platform can ``fork``) runs the HDF5 library in a child process with a memory and time limit, so a
    corrupted or hostile file that would crash or hang it is refused instead. ``metadata_only=True`` (for
    ``slotopt inspect``) reads the config and the datasets' shapes, dtypes and places, and the values of those
    of one element (iterations, learning rate, loss scale), all checked as always; the weights and the
    optimizer's other state are empty tensors of their shapes and dtypes on the ``meta`` device (so the result
    lists, it cannot build or load), and the zip CRC-32 of the weights, which needs all their bytes, is not
    computed. Otherwise a ``.keras`` file's stored weights member has its CRC-32 checked as it is read.

    ``custom_objects`` (issue 49): the learning-rate schedules the file names by a class slotopt does not have (a
    schedule registered with ``keras.saving.register_keras_serializable``), name (``registered_name`` such as
    ``"my_package>Warmup"``, or ``class_name``) → what computes it: a ``slotopt.schedules.LearningRateSchedule``
    subclass (built from the file's arguments), a factory called with them, or a schedule instance used as it
    is. Nothing the file names is imported.

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
    if custom_objects is not None and (not isinstance(custom_objects, Mapping) or not all(
            isinstance(k, str) and callable(v) for k, v in custom_objects.items())):
        raise TypeError("Argument `custom_objects` must be a dict name → schedule class, factory or instance. "
                        f"Received: custom_objects={custom_objects!r}")
    token = CUSTOM_OBJECTS.set(dict(custom_objects or {}))
    try:
        return _dispatch(path, config, max_bytes, isolate, metadata_only)
    finally:
        CUSTOM_OBJECTS.reset(token)


def _dispatch(path: str, config: Union[str, Path, None], max_bytes: int, isolate: Optional[bool],
              metadata_only: bool) -> KerasCheckpoint:
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(b"PK"):
        return _read_keras3(path, max_bytes, isolate, metadata_only)
    if head == b"\x89HDF\r\n\x1a\n":
        return _read_h5(path, None if config is None else str(config), max_bytes, isolate, metadata_only)
    if head.lstrip()[:1] == b"{" and path.endswith(".json"):  # issue 49: a sharded `.weights.json` manifest
        return _read_sharded(path, None if config is None else str(config), max_bytes, isolate, metadata_only)
    raise CheckpointFormatError(path, None, "is neither a Keras 3 `.keras` file (zip), an `.h5` file (HDF5) nor a "
                                "sharded `.weights.json` manifest.")
