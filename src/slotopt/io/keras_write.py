"""The way back for Keras files: :meth:`KerasCheckpoint.save` writes the training state slotopt continued into a
file of the format and layout it was read from (``.keras`` → ``.keras``, ``.weights.h5`` → ``.weights.h5``,
legacy ``.h5`` → ``.h5``), which Keras restores and continues as if it had run the steps itself.

What the file held and slotopt does not train is written back as read: the zip's ``config.json`` and
``metadata.json`` byte for byte, every HDF5 group with its attributes (``model_config``, ``training_config``,
``layer_names``, ``weight_names``, ``name``...), non-trainable statistics nobody touched, compiled metrics'
totals. The model's variables and every optimizer variable go back to the dataset they were read from, in the
file's dtype (the iteration count int64, or int32 where the file has it so), in Keras's layout (a module's
weights and slots converted back: transposes, GRU gates), a LossScaleOptimizer's inner copy included.

Everything that could refuse runs before a byte is written (:func:`plan`): the optimizer's class and slot
layout, the count, shape and dtype of every tensor, naming the entry. Then the file is written under a temporary
name in the target's folder (:class:`~slotopt.io.staging.Staging`), tensors streamed in chunks from their own
memory (no second copy of the model), verified (the zip's CRC-32 re-read, the HDF5 structure, the reader's own
metadata pass), and renamed into place: a failure at any point leaves the old file and no temporary one.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from ..engine.resume import saved_scalar_problem as _scalar_problem
from .errors import CheckpointFormatError
from .keras_layers import keras_view, torch_shape
from .keras_zip import StoredZip
from .region import Region
from .staging import Staging

__all__ = ["FileLayout", "capture", "save"]

_CHUNK = 1 << 24
_WHOLE = 1 << 26  # a converted tensor up to this size is copied whole (one at a time), past it a slab at a time
_INNER = "optimizer/inner_optimizer/vars/"
# Options that change which variables an optimizer builds: a different value is another slot layout.
_LAYOUT_OPTIONS = ("amsgrad", "use_ema", "gradient_accumulation_steps", "centered", "momentum")


@dataclass
class FileLayout:
    """What a Keras file held besides the training state, kept from the read to write it back: every HDF5 group
    and dataset in the order the reader walked them, their attributes as read, the datasets' shapes and dtypes,
    the values of those that are not training state, and a ``.keras`` zip's other members byte for byte."""

    kind: str  # "keras" | "weights.h5" | "h5"
    order: list[str] = field(default_factory=list)
    groups: set[str] = field(default_factory=set)
    attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: dict[str, np.dtype] = field(default_factory=dict)
    kept: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, int] = field(default_factory=dict)
    members: list[tuple[str, Optional[bytes], tuple[int, ...]]] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)  # zip members over 64 MiB: not carried, so not written
    #: The reader that made this layout (``io/keras.py``'s ``load_keras_checkpoint``, handed down with it: the
    #: reader is above the writer), which verifies a staged file before it is renamed into place.
    reread: Optional[Callable[..., Any]] = None


def capture(snap: Any, ckpt: Any, kind: str, reread: Callable[..., Any]) -> FileLayout:
    """The layout of the file ``snap`` was read from, for ``ckpt`` (its ``entries`` and ``optimizer_entries``
    name the datasets of the training state; their values are not kept here, so nothing is held twice);
    ``reread``: the reader that read it (``FileLayout.reread``)."""
    layout = FileLayout(kind=kind, reread=reread)
    state = set(ckpt.entries.values()) | set(ckpt.optimizer_entries)
    inner = sorted((e for e in ckpt.skipped if e.startswith(_INNER)), key=lambda e: int(e[len(_INNER):]))
    for i, entry in enumerate(inner):
        layout.aliases[entry] = len(ckpt.optimizer_state) - len(inner) + i
    layout.attrs[""] = dict(snap.attrs.get("", {}))
    for entry, attrs in snap.attrs.items():
        if entry == "":
            continue
        layout.order.append(entry)
        layout.attrs[entry] = dict(attrs)
        if entry in snap.groups:
            layout.groups.add(entry)
            continue
        value = snap.datasets[entry]
        layout.shapes[entry] = tuple(int(d) for d in value.shape)
        layout.dtypes[entry] = np.dtype(value.dtype).newbyteorder("=")
        if entry not in state and entry not in layout.aliases:
            layout.kept[entry] = np.array(value, copy=True)
    return layout


# -------------------------------------------------------------------------------------------------- sources
@dataclass
class _Source:
    """A dataset's new value: a tensor in Keras layout (a view where the layout allows), or made when written
    (``make``: a converted copy, one at a time), or an array kept from the read."""

    what: str
    value: Any = None
    make: Optional[Callable[[], torch.Tensor]] = None
    shape: tuple[int, ...] = ()
    dtype: Any = None

    def get(self) -> Any:
        return self.make() if self.make is not None else self.value


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _gru_back(t: torch.Tensor, axis: int) -> torch.Tensor:
    r, z, n = torch.chunk(t, 3, dim=axis)  # torch's r, z, n → Keras's z, r, h
    return torch.cat([z, r, n], dim=axis)


def to_keras(value: torch.Tensor, kind: str, shape: Sequence[int]) -> Optional[torch.Tensor]:
    """``value`` (torch's layout) in Keras layout ``kind`` of ``shape``: a view where there is one, else a copy;
    ``None`` where the layout has no inverse."""
    shape = tuple(shape)
    view = keras_view(value, kind, shape)
    if view is not None:
        return view
    if kind == "gru_kernel" and value.dim() == 2:
        return _gru_back(value, 0).T
    if kind == "gru_bias":
        return _gru_back(value, value.dim() - 1)
    if not value.is_contiguous():
        return keras_view(value.contiguous(), kind, shape)
    return None


def _lazy_keras(value: torch.Tensor, kind: str, shape: tuple[int, ...], what: str) -> _Source:
    view = keras_view(value, kind, shape)
    if view is not None:
        return _Source(what, view, shape=tuple(view.shape), dtype=view.dtype)
    probe = to_keras(torch.empty(tuple(value.shape), dtype=value.dtype, device="meta"), kind, shape) \
        if kind in ("gru_kernel", "gru_bias") else None
    if probe is None and (value.is_contiguous() or torch_shape(shape, kind) != tuple(value.shape)):
        raise ValueError(f"{what} ({kind}, torch shape {tuple(value.shape)}) has no Keras layout of shape {shape}.")

    def make() -> torch.Tensor:
        out = to_keras(value.detach(), kind, shape)
        assert out is not None
        return out

    return _Source(what, make=make, shape=tuple(probe.shape) if probe is not None else shape, dtype=value.dtype)


def _weights(ckpt: Any, source: Any) -> tuple[dict[str, _Source], bool]:
    """The model's variables by Keras name (Keras layout), and whether they came from a module."""
    if isinstance(source, torch.nn.Module):
        mapping = getattr(ckpt, "_module_mapping", None) or ckpt.mapping_for(source)
        named = dict(source.named_parameters())
        named.update(dict(source.named_buffers()))
        out: dict[str, _Source] = {}
        for name in ckpt.variable_names + ckpt.non_trainable_names:
            pname = mapping.get(name)
            shape = tuple(ckpt.weights[name].shape)
            if pname is None:
                if name in ckpt.variable_names:
                    raise ValueError(f"Argument `params_or_module`: the trainable {name!r} is mapped to no "
                                     "parameter of the module.")
                out[name] = _Source(f"weight {name!r}", ckpt.weights[name], shape=shape,
                                    dtype=ckpt.weights[name].dtype)  # not in the module: written as read
                continue
            if pname not in named:
                raise ValueError(f"Argument `params_or_module`: the module has no parameter or buffer {pname!r} "
                                 f"(mapped from {name!r}).")
            out[name] = _lazy_keras(named[pname].detach(), ckpt.layouts[name], shape, f"module's {pname!r} ({name!r})")
        return out, True
    ordered = ckpt._params_in_order(source)
    out = {n: _Source(f"params entry {n!r}", p.detach(), shape=tuple(p.shape), dtype=p.dtype)
           for n, p in zip(ckpt.variable_names, ordered)}
    for n in ckpt.non_trainable_names:
        out[n] = _Source(f"weight {n!r}", ckpt.weights[n], shape=tuple(ckpt.weights[n].shape),
                         dtype=ckpt.weights[n].dtype)
    return out, False


def _inner(optimizer: Any) -> Any:
    return getattr(optimizer, "inner_optimizer", None) or optimizer


def _check_optimizer(ckpt: Any, optimizer: Any, tracked: Optional[list[torch.Tensor]]) -> None:
    cls = ckpt.optimizer_class
    if type(optimizer) is not cls:
        raise ValueError(f"Argument `optimizer` is a {type(optimizer).__module__}.{type(optimizer).__name__}; the "
                         f"file was saved with a {cls.__name__} ({cls.__module__}), which Keras restores: give the "
                         "optimizer built by `ckpt.optimizer(params)` / `ckpt.load_module(module)`.")
    config = ckpt.optimizer_config.get("config") or {}
    if cls.__name__ == "LossScaleOptimizer":
        wanted = ((config.get("inner_optimizer") or {}).get("class_name") or "").removeprefix("Custom>")
        have = type(optimizer.inner_optimizer).__name__
        if wanted and have != wanted:
            raise ValueError(f"Argument `optimizer` wraps a {have}; the file's LossScaleOptimizer wraps a {wanted}.")
        config = (config.get("inner_optimizer") or {}).get("config") or {}
    inner = _inner(optimizer)
    for key in _LAYOUT_OPTIONS:
        if key in config and hasattr(inner, key):
            saved, now = config[key], getattr(inner, key)
            if key == "momentum":  # SGD builds its slot only with a momentum: other values are the same layout
                saved, now = bool(saved), bool(now) if isinstance(now, (int, float)) else now
            if isinstance(now, (bool, int, float, type(None))) and saved != now:
                raise ValueError(f"Argument `optimizer` has {key}={getattr(inner, key)!r}; the file's optimizer "
                                 f"{config[key]!r}: another slot layout, which Keras would not restore.")
    own = getattr(inner, "_trainable_variables", None)
    if tracked is not None and own is not None and len(own) == len(tracked):
        for name, mine, theirs in zip(ckpt.variable_names, own, tracked):
            if mine is not theirs:
                raise ValueError(f"Argument `optimizer` was not built on the given {name!r}: give the optimizer "
                                 "`ckpt.optimizer(params)` / `ckpt.load_module(module)` returned for these tensors.")


def _state(ckpt: Any, optimizer: Any, from_module: bool) -> list[_Source]:
    variables = ckpt._state_variables(optimizer)
    if len(variables) != len(ckpt.optimizer_state):
        raise ValueError(f"Argument `optimizer` holds {len(variables)} variables; the file's "
                         f"{ckpt.optimizer_class.__name__} holds {len(ckpt.optimizer_state)} "
                         f"({ckpt.optimizer_entries}): another slot layout, which Keras would not restore.")
    out = []
    for i, (var, owner) in enumerate(zip(variables, ckpt._owners)):
        what = f"optimizer variable {i} ({ckpt.optimizer_variable_names[i] if i < len(ckpt.optimizer_variable_names) else ''})"
        tensor = var.detach() if isinstance(var, torch.Tensor) else torch.as_tensor(var)
        shape = tuple(np.shape(ckpt.optimizer_state[i]))
        if from_module and owner is not None:
            name = ckpt.variable_names[owner]
            if shape == tuple(ckpt.weights[name].shape):  # converted with its variable at load_module
                out.append(_lazy_keras(tensor, ckpt.layouts[name], shape, what))
                continue
        out.append(_Source(what, tensor, shape=tuple(tensor.shape), dtype=tensor.dtype))
    return out


# -------------------------------------------------------------------------------------------------- plan
def _fits(where: str, entry: str, src: _Source, shape: tuple[int, ...], dtype: np.dtype) -> _Source:
    if tuple(src.shape) != shape:
        raise CheckpointFormatError(where, entry, f"{src.what} has shape {tuple(src.shape)}; the file's dataset "
                                    f"{shape}: refused before anything is written.")
    wanted = _torch_dtype(dtype)
    if src.dtype == wanted:
        return src
    if math.prod(shape) == 1 and src.make is None:  # a scalar (iterations, learning rate): its exact value
        value = torch.as_tensor(src.value).detach().cpu()
        cast = value.to(wanted)
        if not bool(cast.to(value.dtype) == value):
            raise CheckpointFormatError(where, entry, f"{src.what} holds {value.item()!r}, which the file's {dtype} "
                                        "cannot hold exactly: refused before anything is written.")
        return _Source(src.what, cast, shape=shape, dtype=wanted)
    raise CheckpointFormatError(where, entry, f"{src.what} is {src.dtype}; the file's dataset is {dtype}: refused "
                                "before anything is written.")


def plan(ckpt: Any, source: Any, optimizer: Any) -> dict[str, _Source]:
    """Every dataset of the file → its new value, all checked (nothing is written)."""
    layout: Optional[FileLayout] = getattr(ckpt, "_layout", None)
    if layout is None:
        raise ValueError(f"{ckpt.path}: this checkpoint holds no file layout to write back (read it with "
                         "`load_keras_checkpoint`).")
    ckpt._refuse_unread("save it")
    if layout.oversized:
        raise CheckpointFormatError(ckpt.path, layout.oversized[0], "is a zip member over 64 MiB, which the reader "
                                    "did not keep: the file cannot be written back.")
    weights, from_module = _weights(ckpt, source)
    tracked = None
    if from_module:
        mapping = getattr(ckpt, "_module_mapping", None) or ckpt.mapping_for(source)
        named = dict(source.named_parameters())
        tracked = [named[mapping[n]] for n in ckpt.variable_names if mapping.get(n) in named]
    elif isinstance(source, Mapping):
        tracked = [source[n] for n in ckpt.variable_names]
    else:
        tracked = list(source)
    _check_optimizer(ckpt, optimizer, tracked)
    state = _state(ckpt, optimizer, from_module)
    out: dict[str, _Source] = {}
    for name, entry in ckpt.entries.items():
        out[entry] = weights[name]
    for i, entry in enumerate(ckpt.optimizer_entries):
        if entry in layout.shapes:
            out[entry] = state[i]
        else:  # tf-keras 2.11+: the learning rate is the config's, not saved among the weights
            saved = torch.as_tensor(np.asarray(ckpt.optimizer_state[i]))
            now = torch.as_tensor(state[i].value).detach().cpu().to(saved.dtype)
            if not bool(now == saved):
                raise CheckpointFormatError(
                    ckpt.path, entry, f"the learning rate is {now.item()!r}; the file keeps {saved.item()!r} in its "
                    "config (tf-keras 2.11+ saves no learning-rate variable), which is written back verbatim: set "
                    "it back or save another way.")
    for entry, i in layout.aliases.items():
        out[entry] = state[i]
    for entry, value in layout.kept.items():
        out[entry] = _Source(f"{entry} (as read)", value, shape=tuple(value.shape), dtype=_torch_dtype(value.dtype))
    for entry in layout.shapes:
        if entry not in out:
            raise CheckpointFormatError(ckpt.path, entry, "has no value to write back: refused.")
        out[entry] = _fits(ckpt.path, entry, out[entry], layout.shapes[entry], layout.dtypes[entry])
    variables = ckpt._state_variables(optimizer)
    for i, entry in enumerate(ckpt.optimizer_entries):  # what slotopt's reader would refuse is not written
        value = state[i].value
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_meta:
            name = str(getattr(variables[i], "path", "") or getattr(variables[i], "name", ""))
            problem = _scalar_problem(name, value.detach().cpu().numpy())
            if problem is not None:
                raise CheckpointFormatError(ckpt.path, entry, f"{state[i].what} must be {problem}; it holds "
                                            f"{value.item()!r}: refused before anything is written.")
    for src in out.values():
        if isinstance(src.value, torch.Tensor) and src.value.is_meta:
            raise ValueError(f"{src.what} is a meta tensor: no values to save.")
    return out


# -------------------------------------------------------------------------------------------------- writing
def _attr(value: Any) -> Any:
    import h5py

    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            return np.array(value, dtype=h5py.string_dtype())
        return np.array(value)  # numbers; an empty list as h5py reads it (float64, shape (0,))
    return value


def _chunks(src: _Source) -> Any:
    """The bytes of a dataset's new value in C order, a chunk at a time: a contiguous tensor's own memory, a view
    (a transposed kernel, a GRU's reordered gates) or device memory one slab of rows at a time."""
    value = src.get()
    if isinstance(value, np.ndarray):
        view = memoryview(np.ascontiguousarray(value).reshape(-1).view(np.uint8))
        for start in range(0, len(view), _CHUNK):
            yield view[start:start + _CHUNK]
        return
    tensor = value.detach()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
        for start in range(0, len(view), _CHUNK):
            yield view[start:start + _CHUNK]
        return
    if tensor.dim() == 0:
        yield memoryview(tensor.cpu().reshape(1).view(torch.uint8).numpy())
        return
    if tensor.numel() * tensor.element_size() <= _WHOLE:  # whole: torch's blocked transpose, twice a slab's speed
        whole = torch.empty(tensor.shape, dtype=tensor.dtype)
        whole.copy_(tensor)
        view = memoryview(whole.reshape(-1).view(torch.uint8).numpy())
        for start in range(0, len(view), _CHUNK):
            yield view[start:start + _CHUNK]
        return
    row = max(1, math.prod(tensor.shape[1:]) * tensor.element_size())
    step = max(1, _CHUNK // row)
    # One slab buffer, reused: each slab is copied into memory already mapped (no fresh pages per slab).
    scratch = torch.empty((min(step, tensor.shape[0]), *tensor.shape[1:]), dtype=tensor.dtype)
    for start in range(0, tensor.shape[0], step):
        part = tensor[start:start + step]
        slab = scratch[:part.shape[0]]
        slab.copy_(part)
        yield memoryview(slab.reshape(-1).view(torch.uint8).numpy())


def _write_h5(window: Region, layout: FileLayout, values: dict[str, _Source], crc: bool = False) -> Optional[int]:
    """The HDF5 file into ``window``: h5py lays out the groups, attributes and datasets (allocated at creation,
    never filled), then each dataset's bytes are written once, in file order, straight from its tensor. With
    ``crc``, the CRC-32 of the whole file is computed on the same pass (the datasets' bytes from memory as they
    are written, HDF5's metadata between them read back): no second pass over the model."""
    import h5py

    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # an offset now, and no fill written over it
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    dcpl.set_obj_track_times(False)  # as h5py (and so Keras) creates datasets
    spans: list[tuple[int, int, str]] = []
    with h5py.File(window, "w") as f:
        for key, value in layout.attrs.get("", {}).items():
            f.attrs[key] = _attr(value)
        for entry in layout.order:
            parent, _, name = entry.rpartition("/")
            group = f[parent] if parent else f
            if entry in layout.groups:
                obj = group.create_group(name)
            else:
                shape, dtype = layout.shapes[entry], layout.dtypes[entry]
                space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
                dataset = h5py.h5d.create(group.id, name.encode(), h5py.h5t.py_create(dtype), space, dcpl=dcpl)
                size = math.prod(shape) * dtype.itemsize
                if size:
                    spans.append((int(dataset.get_offset()), size, entry))
                obj = group[name]
            for key, value in layout.attrs.get(entry, {}).items():
                obj.attrs[key] = _attr(value)
    spans.sort()
    checksum, done = 0, 0
    scratch = bytearray(min(_CHUNK, max(window.size, 1)))
    for offset, size, entry in spans + [(window.size, 0, "")]:
        if offset < done or offset + size > window.size:
            raise CheckpointFormatError(str(window), entry, "HDF5 placed it outside the file: not written.")
        if crc:  # HDF5's own bytes before this dataset
            window.seek(done)
            while done < offset:
                got = window.readinto(memoryview(scratch)[:min(len(scratch), offset - done)])
                if not got:
                    raise CheckpointFormatError(str(window), entry, "the HDF5 file is shorter than it says.")
                checksum = zlib.crc32(memoryview(scratch)[:got], checksum)
                done += got
        if not size:
            continue
        window.seek(offset)
        written = 0
        for chunk in _chunks(values[entry]):
            window.write(chunk)
            if crc:
                checksum = zlib.crc32(chunk, checksum)
            written += len(chunk)
        if written != size:
            raise CheckpointFormatError(str(window), entry, f"{written} bytes made for {size}: not written.")
        done = offset + size
    window.flush()
    return checksum if crc else None


def _check_h5(where: str, file: Any, layout: FileLayout) -> None:
    """The written HDF5 structure is the layout's: every group and dataset, shapes and dtypes, nothing else."""
    import h5py

    found: dict[str, Any] = {}

    def seen(name: str, obj: Any) -> None:  # (visititems stops at the first callback returning a value)
        found[name] = None if isinstance(obj, h5py.Group) else (tuple(obj.shape), obj.dtype.newbyteorder("=").str)

    with h5py.File(file, "r") as f:
        f.visititems(seen)
    expected = {e: None if e in layout.groups else (layout.shapes[e], layout.dtypes[e].str) for e in layout.order}
    if found != expected:
        wrong = sorted(e for e in set(found) | set(expected) if found.get(e, 0) != expected.get(e, 0))
        raise CheckpointFormatError(where, wrong[0] if wrong else None,
                                    "the written file does not hold what was planned: not renamed into place.")


def _check_zip(where: str, staged: str, layout: FileLayout) -> None:
    """The staged zip read back as a reader reads it: its members as planned, each member's bytes on disk against
    the CRC-32 of its central directory (one sequential pass, large reads), the JSON members byte for byte, the
    weights member's HDF5 structure."""
    import struct
    import zipfile


    with zipfile.ZipFile(staged) as archive:
        infos = archive.infolist()
    names = [i.filename for i in infos]
    if names != [m[0] for m in layout.members]:
        raise CheckpointFormatError(where, None, f"the written zip holds {names}: not renamed into place.")
    data = {name: blob for name, blob, _ in layout.members}
    scratch = bytearray(_CHUNK)
    with open(staged, "rb", buffering=0) as raw:
        for info in infos:
            raw.seek(info.header_offset)
            header = raw.read(30)
            if len(header) != 30 or header[:4] != b"PK\x03\x04" or info.compress_type != zipfile.ZIP_STORED:
                raise CheckpointFormatError(where, info.filename, "has no stored local header: not renamed.")
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            base = info.header_offset + 30 + name_length + extra_length
            raw.seek(base)
            crc, done = 0, 0
            while done < info.file_size:
                got = raw.readinto(memoryview(scratch)[:min(_CHUNK, info.file_size - done)])
                if not got:
                    raise CheckpointFormatError(where, info.filename, "is truncated: not renamed into place.")
                crc = zlib.crc32(memoryview(scratch)[:got], crc)
                done += got
            if crc != info.CRC:
                raise CheckpointFormatError(where, info.filename, "fails its CRC-32 check: not renamed into place.")
            blob = data[info.filename]
            if blob is not None:
                raw.seek(base)
                if raw.read(info.file_size) != blob:
                    raise CheckpointFormatError(where, info.filename, "differs from the member read: not renamed.")
            else:
                _check_h5(where, Region(raw, base, info.file_size), layout)


def _verifier(where: str, check: Callable[[], Any]) -> Callable[[], None]:
    """``check`` run on the staged file, whatever it raises (a zip or HDF5 library's own error on a damaged
    file) refused as a :class:`CheckpointFormatError` naming the target: nothing is renamed into place."""

    def run() -> None:
        try:
            check()
        except CheckpointFormatError:
            raise
        except Exception as err:  # (zipfile.BadZipFile, OSError, h5py's errors...)
            raise CheckpointFormatError(where, None, f"the written file fails its check ({type(err).__name__}: "
                                        f"{err}): not renamed into place.") from err

    return run


def save(ckpt: Any, path: Union[str, os.PathLike], source: Any, optimizer: Any) -> str:
    """Writes ``ckpt``'s file format at ``path`` with the weights of ``source`` (``params`` or a module) and the
    state of ``optimizer``; returns the path written. See :meth:`KerasCheckpoint.save`."""
    target = os.path.abspath(os.fspath(path))
    values = plan(ckpt, source, optimizer)
    layout: FileLayout = ckpt._layout
    with Staging() as stage:
        staged = stage.path(target)
        if layout.kind == "keras":
            with open(staged, "w+b") as raw:
                archive = StoredZip(raw)
                expected = sum(math.prod(s) * layout.dtypes[e].itemsize for e, s in layout.shapes.items())
                for name, data, date_time in layout.members:
                    if data is not None:
                        archive.add(name, data, date_time)
                        continue
                    with archive.member(name, date_time, expected) as window:
                        window.crc = _write_h5(window, layout, values, crc=True)
                archive.finish()
            stage.verify(_verifier(target, lambda: _check_zip(target, staged, layout)))
        else:  # (through a Python file as the zip's member is: the same write path, and every write call seen)
            with open(staged, "w+b") as raw:
                _write_h5(Region(raw, 0, writable=True), layout, values)
            stage.verify(_verifier(target, lambda: _check_h5(target, staged, layout)))
        if layout.kind != "weights.h5":  # the reader's own pass over the new file (metadata: no second copy)
            stage.verify(_verifier(target, lambda: layout.reread(staged, metadata_only=True)))
    return target
