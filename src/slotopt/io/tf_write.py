"""The way back for TensorFlow checkpoints: :meth:`TFCheckpoint.save` writes the training state continued in
PyTorch as a checkpoint of the same format and layout as the one read, which TensorFlow restores and continues.

* a ``tf.train.Checkpoint`` prefix → a new prefix (``ckpt-<n+1>`` in a folder: ``CheckpointManager``'s
  numbering continued) and the folder's ``checkpoint`` state file pointing at it;
* a TF1 ``Saver`` checkpoint → ``<stem>-<global_step>.{index,data,meta}`` (the ``.meta`` graph copied as it is)
  and the ``checkpoint`` state file;
* a SavedModel folder → a SavedModel folder: ``saved_model.pb``, ``fingerprint.pb``, ``keras_metadata.pb`` and
  ``assets/`` copied as they are, new ``variables/variables.{index,data-00000-of-00001}``.

Every entry of the file read is written back under its own key, dtype and shape: the trainable variables from the
parameters (or the module, through ``load_module``'s mapping and layouts), the optimizer's variables from the
optimizer (found by the plan its build recorded: which of its variables took which entry, in which layout), the
other variables as the checkpoint holds them (``weights``), and whatever is not training state (the object graph,
``save_counter``, an iterator's ``ITERATOR_STATE``, strings, another optimizer's leftovers) copied byte for byte
from the file read. Every check that could refuse runs before a byte is written; the files are staged under
temporary names in the target folder (``staging.py``), read back and checked (every CRC-32C), then renamed into
place, the state file last.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from .bundle_writer import Source, verify_bundle, write_bundle
from .keras_layers import keras_view
from .staging import Staging
from .tensor_bundle import DTYPES, TensorBundle
from .tf_files import OBJECT_GRAPH_KEY, _unescape

__all__ = ["BuiltState", "remember", "save"]

_DATA = ".data-00000-of-00001"
_SAVED_MODEL_COPIED = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "keras_metadata.pb")


@dataclass
class BuiltState:
    """What an optimizer built by a checkpoint took from it, for writing it back: for each row, the position of
    the optimizer's variable (its index in the optimizer's list; TF1: its name), the index of the file's
    optimizer variable it took, and the layout it is kept in (``"as_is"``, or a Keras layout kind when
    ``load_module`` converted it to torch's)."""

    optimizer_type: type
    count: int
    rows: list[tuple[Union[int, str], int, str]]
    mapping: Optional[dict[str, str]] = None


def _variables(kind: str, opt: Any) -> Union[list[Any], dict[str, Any]]:
    """The optimizer's variables as the plan of its build lists them (``_load_state``'s order)."""
    if kind in ("keras3", "tfkeras_new"):
        return list(opt.variables)
    if kind == "legacy":
        return list(opt.weights)
    return {v.name: v for v in opt.variables()}


def remember(ck: Any, opt: Any, plan: Sequence[tuple[str, Optional[str], Any, Any]], layout: bool,
             mapping: Optional[Mapping[str, str]] = None) -> None:
    """Records on ``ck`` which of ``opt``'s variables took which of the file's (called by the builds)."""
    where = {id(v.value): j for j, v in enumerate(ck.optimizer_variables)}
    rows: list[tuple[Union[int, str], int, str]] = []
    for i, (name, owner, value, _) in enumerate(plan):
        j = where.get(id(value)) if value is not None else None
        if j is None:
            continue  # not saved (a tf-keras learning rate kept apart): the file's entry is copied as it is
        kind = "as_is"
        if layout and owner is not None and tuple(value.shape) == tuple(ck.weights[owner].shape):
            kind = ck.layouts.get(owner, "as_is")
        rows.append((name if ck.kind == "v1" else i, j, kind))
    ck._built_state = BuiltState(type(opt), len(_variables(ck.kind, opt)), rows,
                                 dict(mapping) if mapping is not None else None)


# ------------------------------------------------------------------------------------------------ checks
def _fit(value: torch.Tensor, entry: Any, what: str, where: str) -> torch.Tensor:
    """``value`` as the entry's dtype and shape (a one-element count or rate of another dtype is cast, as the
    file's dtype is TensorFlow's); anything else that differs refuses."""
    dtype = DTYPES[entry.dtype_code][2] if entry.dtype_code in DTYPES else None
    if dtype is None:
        raise ValueError(f"{where}: entry {entry.key!r} ({what}) is a {entry.dtype} tensor, not a variable slotopt "
                         "writes")
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(value, dtype=dtype)
    if value.numel() == 1 and math.prod(entry.shape) == 1 and (value.dtype != dtype or value.dim() != len(entry.shape)):
        value = value.detach().reshape(tuple(entry.shape)).to(dtype)  # a count in the file's dtype (int64, int32)
    if tuple(value.shape) != tuple(entry.shape) or value.dtype != dtype:
        raise ValueError(
            f"{where}: {what} (entry {entry.key!r}) has shape {tuple(value.shape)} and dtype {value.dtype}; the file "
            f"read holds shape {tuple(entry.shape)} and dtype {dtype}: nothing was written. A parameter or an "
            "optimizer variable must keep the shape and dtype it was read with.")
    if value.is_meta:
        raise ValueError(f"{where}: {what} is a meta tensor (no values): nothing was written")
    return value


def _keras(value: torch.Tensor, kind: str, shape: Sequence[int], what: str, where: str) -> torch.Tensor:
    if kind == "as_is":
        return value.detach()
    view = keras_view(value.detach(), kind, tuple(shape))
    if view is None:
        raise ValueError(f"{where}: {what} is kept in torch's layout ({kind}) of shape {tuple(value.shape)}, which has "
                         f"no Keras view of shape {tuple(shape)}: nothing was written")
    return view


def _weights(ck: Any, params: Any, bundle: TensorBundle, where: str,
             extra: Optional[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Key → value of every model variable of the checkpoint, checked."""
    if isinstance(params, torch.nn.Module):
        state = getattr(ck, "_built_state", None)
        if state is None or state.mapping is None:
            raise ValueError(f"{where}: `ck.save(path, module, optimizer)` writes the module through the mapping of "
                             "`ck.load_module(module, ...)`, which was not called on this checkpoint: call it first, "
                             "or pass the parameters (`params`, in `variable_names` order or by name).")
        named = dict(params.named_parameters())
        trained = {}
        for name, pname in state.mapping.items():
            if pname not in named:
                raise ValueError(f"{where}: the module has no parameter {pname!r} (mapped from {name!r} by "
                                 "load_module): nothing was written")
            trained[name] = _keras(named[pname], ck.layouts.get(name, "as_is"), ck.weights[name].shape,
                                   f"parameter {pname!r} ({name!r})", where)
    else:
        ordered = ck._params_in_order(params)
        trained = {n: p.detach() for n, p in zip(ck.variable_names, ordered)}
    extra = dict(extra or {})
    unknown = [n for n in extra if n not in ck.weights]
    if unknown:
        raise ValueError(f"Argument `weights` names {unknown}, which are not variables of {ck.path} (its variables: "
                         f"{sorted(ck.weights)[:12]}...): nothing was written")
    out = {}
    for name, key in ck.keys.items():
        value = extra[name] if name in extra else trained.get(name, ck.weights[name])
        if key not in bundle.entries:
            raise ValueError(f"{where}: {bundle.index_path} no longer holds entry {key!r} ({name!r}): the file read "
                             "was changed since; read it again")
        out[key] = _fit(value, bundle.entries[key], f"variable {name!r}", where)
    return out


def _optimizer_values(ck: Any, optimizer: Any, bundle: TensorBundle, where: str) -> dict[str, torch.Tensor]:
    """Key → value of every optimizer variable the optimizer holds for the file, checked."""
    if ck.kind == "none":
        if optimizer is not None:
            raise ValueError(f"{where}: {ck.path} holds no optimizer state; pass optimizer=None")
        return {}
    if ck.kind == "composite" or (ck.parts and hasattr(optimizer, "optimizers")):
        parts = getattr(optimizer, "optimizers", None)
        if not isinstance(parts, list) or len(parts) != len(ck.parts):
            raise TypeError(f"{where}: {ck.path} holds {len(ck.parts)} optimizers ({[p.optimizer_name for p in ck.parts]}"
                            "): pass the slotopt.CompositeOptimizer `ck.optimizer(...)` built. Received: "
                            f"optimizer={optimizer!r}")
        out: dict[str, torch.Tensor] = {}
        for k, (part, opt) in enumerate(zip(ck.parts, parts)):
            out.update(_optimizer_values(part, opt, bundle, f"{where} (part {k}, {part.optimizer_name!r})"))
        return out
    state: Optional[BuiltState] = getattr(ck, "_built_state", None)
    if state is None:
        raise ValueError(f"{where}: no optimizer was built by this checkpoint (`ck.optimizer(params, ...)` or "
                         "`ck.load_module(...)`): the optimizer written back is the one built on its state")
    if type(optimizer) is not state.optimizer_type:
        raise TypeError(f"{where}: the optimizer must be a {state.optimizer_type.__module__}."
                        f"{state.optimizer_type.__name__}, the class built on this checkpoint's state (its slot "
                        f"layout is the file's). Received: optimizer={optimizer!r}")
    own = _variables(ck.kind, optimizer)
    if len(own) != state.count:
        raise ValueError(f"{where}: the optimizer holds {len(own)} variables; the one built on this checkpoint held "
                         f"{state.count}: its slot layout changed since (a parameter added?): nothing was written")
    out = {}
    for position, j, kind in state.rows:
        saved = ck.optimizer_variables[j]
        if isinstance(own, dict) and position not in own:
            raise ValueError(f"{where}: the optimizer no longer holds variable {position!r}: nothing was written")
        var = own[position]  # type: ignore[index]
        entry = bundle.entries.get(saved.key)
        if entry is None:
            raise ValueError(f"{where}: {bundle.index_path} no longer holds entry {saved.key!r} ({saved.name!r}): the "
                             "file read was changed since; read it again")
        value = _keras(var, kind, entry.shape, f"optimizer variable {saved.name!r}", where) \
            if tuple(var.shape) != tuple(entry.shape) else var.detach()
        out[saved.key] = _fit(value, entry, f"optimizer variable {saved.name!r}", where)
    return out


# ------------------------------------------------------------------------------------------------ files
def _source_kind(ck: Any, bundle: TensorBundle) -> str:
    folder = os.path.dirname(os.path.dirname(ck.path))
    if os.path.basename(ck.path) == "variables" and os.path.basename(os.path.dirname(ck.path)) == "variables" and \
            any(os.path.isfile(os.path.join(folder, n)) for n in ("saved_model.pb", "saved_model.pbtxt")):
        return "saved_model"
    return "tf2" if OBJECT_GRAPH_KEY in bundle.entries else "tf1"


def _numbered(base: str) -> tuple[str, Optional[int]]:
    match = re.fullmatch(r"(.*)-(\d+)", base)
    return (match.group(1), int(match.group(2))) if match else (base, None)


def _target_prefix(ck: Any, path: str, source: str, step: Optional[int]) -> str:
    """The prefix to write: ``path`` itself, or in the folder ``path`` the name TensorFlow would give the next
    checkpoint. A name chosen here never replaces a checkpoint: ``ckpt-<n>`` takes the number after the file read's
    and after every ``<stem>-<k>`` already in the folder; a TF1 ``<stem>-<global_step>`` that exists is refused."""
    path = os.fspath(path)
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if not (os.path.isdir(path) or path.endswith(os.sep)):
        return os.path.abspath(path)
    folder = os.path.abspath(path)
    stem, number = _numbered(os.path.basename(ck.path))
    if source == "tf1" and step is not None:
        name = f"{stem}-{step}"  # as Saver.save(sess, prefix, global_step=...) names it
        if os.path.exists(os.path.join(folder, name + ".index")):
            raise ValueError(
                f"save({path!r}): {name} already exists in {folder} (a TF1 checkpoint is named after its global step, "
                f"{step}): pass `global_step=` the step you carry, or a prefix to replace it on purpose; nothing was "
                "written")
        return os.path.join(folder, name)
    if number is None:
        return os.path.join(folder, stem)
    taken = [number]
    if os.path.isdir(folder):
        for entry in os.listdir(folder):
            found = re.fullmatch(re.escape(stem) + r"-(\d+)\.index", entry)
            if found:
                taken.append(int(found.group(1)))
    return os.path.join(folder, f"{stem}-{max(taken) + 1}")  # CheckpointManager's numbering, continued


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _state_file(folder: str, name: str) -> str:
    """The ``checkpoint`` state file (a text ``CheckpointState``) naming ``name`` the latest: the checkpoints it
    listed before that still exist are kept, in order, with their timestamps."""
    paths: list[str] = []
    stamps: list[float] = []
    preserved: Optional[float] = None
    existing = os.path.join(folder, "checkpoint")
    if os.path.isfile(existing) and not os.path.islink(existing):
        with open(existing, "rb") as f:
            text = f.read(1 << 20).decode("utf-8", "replace")
        paths = [_unescape(p) for p in re.findall(
            r'^\s*all_model_checkpoint_paths\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', text, flags=re.MULTILINE)]
        stamps = [float(t) for t in re.findall(r"^\s*all_model_checkpoint_timestamps\s*:\s*([-+0-9.eE]+)\s*$", text,
                                               flags=re.MULTILINE)]
        found = re.findall(r"^\s*last_preserved_timestamp\s*:\s*([-+0-9.eE]+)\s*$", text, flags=re.MULTILINE)
        preserved = float(found[-1]) if found else None
    now = time.time()
    if len(stamps) != len(paths):
        stamps = [now] * len(paths)
    kept = [(p, t) for p, t in zip(paths, stamps) if p != name and os.path.basename(p) != name
            and os.path.isfile((p if os.path.isabs(p) else os.path.join(folder, p)) + ".index")]
    kept.append((name, now))
    lines = [f'model_checkpoint_path: "{_escape(name)}"']
    lines += [f'all_model_checkpoint_paths: "{_escape(p)}"' for p, _ in kept]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for _, t in kept]
    lines.append(f"last_preserved_timestamp: {(preserved if preserved is not None else now)!r}")
    return "\n".join(lines) + "\n"


def _copy_file(source: str, target: str, stage: Staging) -> None:
    if os.path.islink(source):
        raise ValueError(f"{source} is a symbolic link: a file written back is copied from the folder read, never "
                         "through a link out of it")
    with open(source, "rb") as f, open(stage.path(target), "wb") as out:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            out.write(chunk)


def _saved_model_files(folder: str) -> list[str]:
    """The files of a SavedModel folder written back as they are (relative paths): its graph, fingerprint,
    tf-keras metadata and assets; not ``variables/`` (written anew)."""
    out = [n for n in _SAVED_MODEL_COPIED if os.path.isfile(os.path.join(folder, n))]
    for sub in ("assets", "assets.extra"):
        top = os.path.join(folder, sub)
        if os.path.islink(top):
            raise ValueError(f"{top} is a symbolic link: not followed")
        for root, dirs, files in os.walk(top):
            for name in sorted(files):
                out.append(os.path.relpath(os.path.join(root, name), folder))
            dirs.sort()
    return out


# ------------------------------------------------------------------------------------------------ save
def save(ck: Any, path: Union[str, os.PathLike], params: Any, optimizer: Any, *,
         global_step: Optional[Union[int, torch.Tensor]] = None,
         weights: Optional[Mapping[str, torch.Tensor]] = None) -> str:
    """See :meth:`TFCheckpoint.save`. Returns the prefix written (a SavedModel: its folder)."""
    ck._refuse_unread("save it")
    where = f"save({os.fspath(path)!r})"
    bundle = TensorBundle(ck.path)  # the file read: what is not training state is copied from it
    if bundle.big_endian:
        raise ValueError(f"{where}: {ck.path} is a big-endian bundle; slotopt writes little-endian ones only")
    updates = _weights(ck, params, bundle, where, weights)
    updates.update(_optimizer_values(ck, optimizer, bundle, where))
    source = _source_kind(ck, bundle)
    step = None
    if global_step is not None:
        if "global_step" not in ck.keys:
            raise ValueError(f"{where}: `global_step` is given but {ck.path} holds no `global_step` variable")
        key = ck.keys["global_step"]
        updates[key] = _fit(global_step if isinstance(global_step, torch.Tensor) else torch.tensor(int(global_step)),
                            bundle.entries[key], "global_step", where)
    if source == "tf1" and "global_step" in ck.keys and not updates[ck.keys["global_step"]].is_floating_point():
        step = int(updates[ck.keys["global_step"]])
        if step < 0:
            raise ValueError(f"{where}: global_step is {step}; a step count is not negative")
    entries: list[tuple[str, Source]] = []
    for key, entry in bundle.entries.items():
        if entry.slices or key.startswith("\x00"):
            whole = next((k for k, e in bundle.entries.items() if e.slices and key.startswith("\x00")
                          and k.encode("utf-8", "surrogateescape") in key.encode("utf-8", "surrogateescape")), None)
            raise ValueError(f"{where}: {ck.path} holds the partitioned variable {whole or key!r} (saved as "
                             "several slices): slotopt reads it but does not write partitioned variables yet; "
                             "save it from TensorFlow, or keep that checkpoint read-only")
        entries.append((key, updates.pop(key) if key in updates else (bundle, entry)))
    if updates:  # (every key came from the file's index: a guard, not a path)
        raise ValueError(f"{where}: entries {sorted(updates)[:4]} are not in {bundle.index_path}")
    if source == "saved_model":
        folder = os.path.abspath(os.fspath(path))
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ValueError(f"{where}: a SavedModel is written as a folder; {folder} is a file")
        source_folder = os.path.dirname(os.path.dirname(ck.path))
        copied = _saved_model_files(source_folder)
        prefix = os.path.join(folder, "variables", "variables")
    else:
        prefix = _target_prefix(ck, os.fspath(path), source, step)
        copied = [ck.path + ".meta"] if source == "tf1" and os.path.isfile(ck.path + ".meta") else []
    # Every check has run: from here on the files are written (under temporary names until all are verified).
    with Staging() as stage:
        index_tmp, data_tmp = stage.path(prefix + ".index"), stage.path(prefix + _DATA)
        with open(data_tmp, "wb") as data, open(index_tmp, "wb") as index:
            written = write_bundle(index, data, entries)
        stage.verify(lambda: verify_bundle(index_tmp, data_tmp, written))
        if source == "saved_model":
            for name in copied:
                _copy_file(os.path.join(source_folder, name), os.path.join(folder, name), stage)
            return_value = folder
        else:
            for name in copied:
                _copy_file(name, prefix + ".meta", stage)
            folder = os.path.dirname(prefix)
            with open(stage.path(os.path.join(folder, "checkpoint")), "w", encoding="utf-8") as f:
                f.write(_state_file(folder, os.path.basename(prefix)))
            return_value = prefix
    return return_value

