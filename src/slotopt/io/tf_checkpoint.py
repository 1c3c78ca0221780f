"""Import TensorFlow training checkpoints (``tf.train.Checkpoint`` / ``CheckpointManager`` and TF1 ``Saver``),
optimizer state included, without TensorFlow.

``load_tf_checkpoint(prefix_or_directory)`` reads the TensorBundle (``tensor_bundle.py``) and works out what each
tensor is:

* a ``tf.train.Checkpoint`` holds its object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``), which names every variable
  (``full_name``) and says which optimizer owns which slot. A **Keras 3** optimizer (children ``_iterations``,
  ``_variables``, ``_trainable_variables``) keeps its iteration count, learning rate and slots; its class and
  hyperparameters are not in the file, so the caller passes the optimizer: ``ck.optimizer(params,
  optimizer=slotopt.Adam(0.01))``. A **tf.keras legacy** optimizer (children ``iter`` and its hyperparameter
  variables, slots in ``slot_variables``) → ``slotopt.legacy.<Class>``, also passed by the caller. tf-keras
  2.11+'s optimizer (``_iterations`` and ``_variables`` without ``_trainable_variables``; slots
  ``<optimizer>/<slot>/<variable>``) is continued by the Keras 3 class, deduplicating sparse rows as tf-keras does. Several optimizers (a TFRS
  ``CompositeOptimizer``) give one part each, continued together as a ``slotopt.CompositeOptimizer``.
* a TF1 ``Saver`` checkpoint names each tensor after its variable: slots are ``<variable>/<optimizer name>`` (made
  unique with ``_1``, ``_2``), non-slot state ``beta1_power``... → ``slotopt.v1.<Class>Optimizer``. The class and
  hyperparameters come from the ``.meta`` graph when it is there (the optimizer's scalar ``Const`` nodes), or
  from the caller; a graph with several optimizers gives one part each.

What is not training state (an iterator's position, strings, the save counter) is listed in ``skipped`` and left;
only a value the continuation needs that cannot be read refuses the file.

Whatever the generation, the optimizer is checked against the file first (every optimizer variable's name,
shape and dtype, built on placeholders), and only then built on your tensors and filled, so a refused call
changes nothing. A malformed file raises :class:`~slotopt.io.tensor_bundle.TFCheckpointError`, naming the file
and the entry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import torch

from .bounds import check_object_graph, check_optimizer_values, iterations_of
from .tensor_bundle import DTYPES, MetadataBundle, TensorBundle, TFCheckpointError, inside_directory
from .tf1_optimizers import v1_class as _v1_class
from .tf_files import (
    _SLOT_OP,
    _V1_NON_SLOT,
    _VALUE_SUFFIX,
    OBJECT_GRAPH_KEY,
    OptimizerVariable,
    _Node,
    _object_graph,
    _op_base,
    _resolve,
    latest_checkpoint,
)
from .tf_meta import MetaGraph
from .tf_meta import read_meta as _read_meta  # issue 40: walked field by field, bounded
from .tf_result import TFCheckpoint
from .tf_slices import read_partitioned

__all__ = ["TFCheckpoint", "TFCheckpointError", "OptimizerVariable", "load_tf_checkpoint", "latest_checkpoint"]


def _guess_layout(name: str, shape: Sequence[int]) -> str:
    """Keras names a Dense/Conv kernel ``.../kernel`` (Keras layout ``(..., in, out)``); other names are taken as
    they are. The object graph holds no layer classes, so this is a guess ``layouts`` lets you correct."""
    if name.rsplit("/", 1)[-1] in ("kernel", "_kernel"):
        return {2: "dense_kernel", 3: "conv1d_kernel", 4: "conv2d_kernel"}.get(len(shape), "as_is")
    return "as_is"


# ------------------------------------------------------------------------------------------------ readers
def _from_object_graph(bundle: TensorBundle, nodes: list[_Node], skipped: dict[str, str]) -> TFCheckpoint:
    where = bundle.index_path

    def variable(node_id: int) -> tuple[str, str]:
        found = nodes[node_id].value_key()
        if found is None:
            raise TFCheckpointError(f"{where}: object graph node {node_id} should be a variable but holds no value")
        full_name, key = found
        if key not in bundle.entries:
            raise TFCheckpointError(f"{where}: the object graph names key {key!r}, which the index does not hold")
        if key in skipped:  # training state in a form slotopt does not read: refused, never dropped
            raise TFCheckpointError(f"{where}: entry {key!r} is training state ({full_name or key!r}) but "
                                    f"{skipped[key]}")
        return full_name or key, key

    def numbered(node_id: Optional[int]) -> list[int]:
        if node_id is None:
            return []
        children = nodes[node_id].children
        if not all(name.isascii() and name.isdigit() and len(name) < 20 for _, name in children):
            raise TFCheckpointError(f"{where}: object graph list node {node_id} has non-numeric children "
                                    f"{[n for _, n in children][:8]}")
        return [c for c, _ in sorted(children, key=lambda item: int(item[1]))]

    def kind_of(node: _Node) -> Optional[str]:
        if node.child("_iterations") is not None and node.child("_variables") is not None:
            # Keras 3 tracks the variables it optimizes; tf-keras 2.11+'s Optimizer does not (its slots are
            # named ``<optimizer>/<slot>/<variable>``).
            return "keras3" if node.child("_trainable_variables") is not None else "tfkeras_new"
        if node.child("iter") is not None and (node.slots or node.child("learning_rate") is not None):
            return "legacy"
        return None

    found = [(i, k) for i, k in ((i, kind_of(n)) for i, n in enumerate(nodes)) if k is not None]
    ids = {i for i, _ in found}
    kinds = dict(found)
    wrapped: dict[int, int] = {}  # a Keras 3 LossScaleOptimizer → the optimizer it wraps: one optimizer, not two
    for i, _ in found:
        for child, name in nodes[i].children:
            if child in ids and name == "inner_optimizer" and kinds[i] == kinds[child] == "keras3":
                wrapped[i] = child
            elif child in ids:
                raise TFCheckpointError(f"{where}: an optimizer in the checkpoint holds another as {name!r}, which "
                                        "slotopt does not read")
    found = [(i, k) for i, k in found if i not in wrapped.values()]
    model_names = [v[0] for v in (n.value_key() for n in nodes) if v is not None]
    parts = [_optimizer_part(nodes[i], kind, variable, numbered, model_names, bundle,
                             nodes[wrapped[i]] if i in wrapped else None) for i, kind in found]
    optimizer_ids = {i for part in parts for i in part["ids"]}
    weights: dict[str, torch.Tensor] = {}
    keys: dict[str, str] = {}
    for i, node in enumerate(nodes):
        value = node.value_key()
        if value is None or i in optimizer_ids:
            continue
        if value[1] == "save_counter" + _VALUE_SUFFIX:
            skipped[value[1]] = "the tf.train.Checkpoint's own save count (not training state)"
            continue
        if value[1] in skipped:  # a string or variant of the model: listed, left
            continue
        full_name, key = variable(i)
        if full_name in weights:
            continue
        weights[full_name], keys[full_name] = bundle.read(key), key
    results = []
    for part in parts:
        for name in part["variable_names"]:
            if name not in weights:
                raise TFCheckpointError(f"{where}: trainable variable {name!r} has no value in the checkpoint")
        results.append(TFCheckpoint(
            path=bundle.prefix, kind=part["kind"], variable_names=part["variable_names"], weights=weights,
            layouts={n: _guess_layout(n, w.shape) for n, w in weights.items()}, keys=keys,
            optimizer_variables=part["variables"], optimizer_name=part["name"], iterations=part["iterations"]))
    if len(results) == 1:
        return results[0]
    if not results:
        return TFCheckpoint(path=bundle.prefix, kind="none", variable_names=[], weights=weights,
                            layouts={n: _guess_layout(n, w.shape) for n, w in weights.items()}, keys=keys,
                            optimizer_variables=[])
    # Several optimizers (TFRS ``CompositeOptimizer``: ``Optimizer0``, ``Optimizer1``... in its order): each part
    # keeps its own variables, slots and step count; together they are one composite.
    names = [n for r in results for n in r.variable_names]
    if len(set(names)) != len(names):
        raise TFCheckpointError(f"{where}: a variable has slots in two of the checkpoint's {len(results)} "
                                "optimizers; each variable must belong to one")
    return TFCheckpoint(
        path=bundle.prefix, kind="composite", variable_names=names, weights=weights,
        layouts=results[0].layouts, keys=keys,
        optimizer_variables=[v for r in results for v in r.optimizer_variables],
        optimizer_name=None, iterations=None, parts=results)


def _optimizer_part(node: _Node, kind: str, variable: Any, numbered: Any, model_names: list[str],
                    bundle: TensorBundle, inner: Optional[_Node] = None) -> dict[str, Any]:
    """One optimizer of the object graph: its variables (with the model variable each slot belongs to), the
    variables it optimizes in its own order, its name and its step count. ``inner``: the optimizer a Keras 3
    LossScaleOptimizer wraps, whose variables follow the wrapper's (as its ``variables`` list them)."""
    ids: set[int] = set()
    out: list[OptimizerVariable] = []
    variable_names: list[str] = []
    iterations: Optional[int] = None
    name: Optional[str] = None

    def add(node_id: int, owner: Optional[str], slot: Optional[str]) -> torch.Tensor:
        full_name, key = variable(node_id)
        if node_id in ids:  # (one node under many references would be read, and allocated, once per reference)
            raise TFCheckpointError(
                f"{bundle.index_path}: object graph node {node_id} ({full_name!r}) is referenced twice as a variable "
                "of one optimizer (its list, its children or its slot references): each optimizer variable is one "
                "node; refused", bundle.index_path, key)
        ids.add(node_id)
        value = bundle.read(key)
        out.append(OptimizerVariable(full_name, key, owner, slot, value))
        return value

    if kind == "keras3":
        variable_names = [variable(i)[0] for i in numbered(node.child("_trainable_variables"))]
        flat = {n.replace("/", "_"): n for n in variable_names}
        listed = numbered(node.child("_variables")) + (numbered(inner.child("_variables")) if inner else [])
        for node_id in listed:
            full_name, _ = variable(node_id)
            name, _, local = full_name.rpartition("/")
            owner = slot = None
            # Keras 3 names a slot ``<optimizer>/<variable path with _>_<slot>``: the longest variable that fits. A
            # plain tf.Variable (a tf.Module's) is known by its name ``w:0``: ``w_0_<slot>`` (issue 49); a variable
            # really named ``w_0`` is taken first.
            prefixes = sorted([(f + "_", f, 1) for f in flat] + [(f + "_0_", f, 0) for f in flat],
                              key=lambda p: (len(p[0]), p[2]), reverse=True)
            for prefix, flat_name, _ in prefixes:
                if local.startswith(prefix) and len(local) > len(prefix):
                    owner, slot = flat[flat_name], local[len(prefix):]
                    break
            value = add(node_id, owner, slot if owner else local)
            if node_id == node.child("_iterations"):
                iterations = iterations_of(value, bundle.index_path, out[-1].key)
    elif kind == "tfkeras_new":
        # ``_variables`` is [iterations, slots...]; a slot is named ``<optimizer>/<slot>/<variable name>``.
        models = sorted(set(model_names), key=len, reverse=True)
        for node_id in numbered(node.child("_variables")):
            full_name, _ = variable(node_id)
            if node_id == node.child("_iterations"):
                value = add(node_id, None, "iteration")
                iterations = iterations_of(value, bundle.index_path, out[-1].key)
                continue
            # ``<optimizer>/<slot>/<variable>``, or ``<slot>/<variable>`` where the optimizer had no name scope.
            owner = next((m for m in models if full_name.endswith("/" + m) and len(full_name) > len(m) + 1), None)
            if owner is None:
                add(node_id, None, full_name.rpartition("/")[2])
                continue
            name, _, slot = full_name[: -len(owner) - 1].rpartition("/")
            name = name or None
            if owner not in variable_names:
                variable_names.append(owner)
            add(node_id, owner, slot)
        for own in ("_iterations", "_learning_rate"):  # tracked apart when not in ``_variables``
            child = node.child(own)
            if child is not None and child not in ids and _holds_value(node, own, variable):
                value = add(child, None, "iteration" if own == "_iterations" else "learning_rate")
                if own == "_iterations":
                    iterations = iterations_of(value, bundle.index_path, out[-1].key)
    else:  # legacy OptimizerV2: hyperparameters and ``iter`` as children, slots in ``slot_variables``
        for child, local_name in node.children:
            if _holds_value(node, local_name, variable):
                value = add(child, None, local_name)
                if local_name == "iter":
                    iterations = iterations_of(value, bundle.index_path, out[-1].key)
        for original, slot_name, slot_node in node.slots:
            owner, _ = variable(original)
            if owner not in variable_names:
                variable_names.append(owner)
            add(slot_node, owner, slot_name)
        name = next((v.name.split("/")[0] for v in out if v.slot == "iter"), None)
    return {"kind": kind, "ids": ids, "variables": out, "variable_names": variable_names, "name": name,
            "iterations": iterations}


def _holds_value(node: _Node, child_name: str, variable: Any) -> bool:
    """Whether ``node``'s child ``child_name`` is a variable (holds a value)."""
    child = node.child(child_name)
    if child is None:
        return False
    try:
        variable(child)
    except TFCheckpointError as err:
        if "holds no value" in str(err):
            return False
        raise
    return True


#: TF1 ``tf.train.ExponentialMovingAverage`` names its shadow of ``v`` ``v/ExponentialMovingAverage`` (or
#: ``v/<its name>``): shaped like ``v`` as a slot is, but model state, not an optimizer's.
_EMA_SUFFIXES = ("ExponentialMovingAverage", "MovingAverage")


def _from_tf1_names(bundle: TensorBundle, numeric: list[str], partitioned: frozenset = frozenset()) -> TFCheckpoint:
    """A TF1 ``Saver`` checkpoint: keys are variable names, slots ``<variable>/<op name>[_<n>]``. ``partitioned``:
    the keys saved in slices (read whole)."""
    meta_path = bundle.prefix + ".meta"
    meta = MetaGraph()
    notes: list[str] = []
    if os.path.isfile(meta_path):
        inside_directory(meta_path, bundle.prefix)  # issue 40: no symbolic link out of the checkpoint's directory
        meta = _read_meta(meta_path)
    # A partitioned variable's parts (``emb/part_0``...) are one variable of the checkpoint (``emb``).
    order = list(dict.fromkeys(meta.partitions.get(n, n) for n in meta.trainable))

    def read(key: str) -> torch.Tensor:
        return read_partitioned(bundle, bundle.entries[key]) if key in partitioned else bundle.read(key)

    names = set(numeric)
    slot_of: dict[str, tuple[str, str]] = {}
    shadows: list[str] = []
    for key in numeric:
        owner, _, op = key.rpartition("/")
        # TF1's built-in slots have their variable's shape and dtype: that keeps a variable named like a child
        # of another (``layer`` and ``layer/w``) from being taken for a slot.
        if owner in names and _SLOT_OP.match(op) and key not in order and (
                bundle.entries[key].shape, bundle.entries[key].dtype) == (
                bundle.entries[owner].shape, bundle.entries[owner].dtype):
            if (_op_base(op) or "").endswith(_EMA_SUFFIXES):  # issue 49: an EMA's shadow is a weight
                shadows.append(key)
                continue
            slot_of[key] = (owner, op)
    if shadows:
        notes.append(f"{len(shadows)} ExponentialMovingAverage shadow variables ({shadows[:3]}...) are carried in "
                     "`weights`, not continued by the optimizer: keep averaging them yourself if the run did (e.g. "
                     "torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn(decay))")
    non_slot = [k for k in numeric if k.rpartition("/")[2] in _V1_NON_SLOT and k not in order]
    ops = sorted({_op_base(op) for _, op in slot_of.values()})  # type: ignore[type-var]
    trainable = [n for n in order if n in names] or sorted({owner for owner, _ in slot_of.values()})
    optimizer_name = ops[0] if len(ops) == 1 else None
    if len(ops) > 1:
        notes.append(f"slots of several TF1 optimizers: {ops}; pass the one to continue as `optimizer=`")
    optimizer_variables = [OptimizerVariable(k, k, None, None, read(k)) for k in non_slot]
    optimizer_variables += [OptimizerVariable(k, k, owner, op, read(k)) for k, (owner, op) in slot_of.items()]
    used = set(slot_of) | set(non_slot)
    weights = {k: read(k) for k in numeric if k not in used}
    # Variables the optimizer holds state for, in the graph's order when the .meta says it.
    trainable = [n for n in trainable if n in weights]
    optimizer_class, optimizer_config, unsupported = _v1_class(optimizer_name, meta, slot_of, notes)
    global_step = weights.get("global_step")
    iterations = iterations_of(global_step, bundle.index_path, "global_step") if global_step is not None \
        and not global_step.is_floating_point() else None
    kind = "v1" if slot_of or non_slot else "none"
    layouts = {n: _guess_layout(n, w.shape) for n, w in weights.items()}
    parts = []
    if len(ops) > 1:  # several optimizers in one graph (wide & deep): one part each, the variables it has slots for
        power_parts = [op for op in ops if op == "Adam"]  # ``beta1_power``/``beta2_power`` are Adam's
        owners_of: dict[str, list[str]] = {}
        for op in ops:
            mine = {k for k, (_, o) in slot_of.items() if _op_base(o) == op}
            owners = {slot_of[k][0] for k in mine}
            for owner in owners:
                owners_of.setdefault(owner, []).append(op)  # type: ignore[arg-type]
            part_class, part_config, part_unsupported = _v1_class(op, meta, slot_of, [])
            part_vars = [v for v in optimizer_variables if v.key in mine
                         or (v.owner is None and len(power_parts) == 1 and op == "Adam")]
            parts.append(TFCheckpoint(
                path=bundle.prefix, kind="v1", variable_names=[n for n in trainable if n in owners],
                weights=weights, layouts=layouts, keys={n: n for n in weights}, optimizer_variables=part_vars,
                optimizer_name=op, optimizer_class=part_class, optimizer_config=part_config, iterations=iterations,
                unsupported=part_unsupported))
        notes[-1] = (f"slots of several TF1 optimizers: {ops}; `parts` holds each with its variables: "
                     "`optimizer(params)` builds a slotopt.CompositeOptimizer of them (or pass `optimizer=[...]`, one "
                     "per part; one optimizer continues only its own slots)")
        shared = {n: o for n, o in owners_of.items() if len(o) > 1}
        if shared:  # issue 49: two optimizers updating one variable ran in no fixed order in the Session
            name, both = next(iter(shared.items()))
            unsupported = (
                f"variable {name!r} is trained by {len(both)} TF1 optimizers ({', '.join(both)}; "
                f"{len(shared)} such variables), whose updates TensorFlow's Session ran in no fixed order: a "
                "slotopt.CompositeOptimizer gives each variable one optimizer. Continue one of them: "
                f"`ck.parts[i].optimizer(params)` (parts: {ops}) or `optimizer=slotopt.v1.<Class>Optimizer(...)`, "
                "which continues only its own slots")
    return TFCheckpoint(
        path=bundle.prefix, kind=kind, variable_names=trainable if kind == "v1" else [], weights=weights,
        layouts=layouts, keys={n: n for n in weights},
        optimizer_variables=optimizer_variables, optimizer_name=optimizer_name,
        optimizer_class=optimizer_class, optimizer_config=optimizer_config, iterations=iterations, notes=notes,
        parts=parts, unsupported=unsupported)


def load_tf_checkpoint(prefix_or_directory: Union[str, Path], *, metadata_only: bool = False) -> TFCheckpoint:
    """Reads a TensorFlow checkpoint, ``tf.train.Checkpoint`` (``CheckpointManager``) or TF1 ``Saver``, without
    TensorFlow.

    ``prefix_or_directory``: the checkpoint prefix (``.../ckpt-3``, as ``CheckpointManager.save`` returns it; the
    ``.index`` file's name is accepted too) or a directory, whose latest checkpoint is read as
    ``tf.train.latest_checkpoint`` finds it (its ``checkpoint`` state file), or a SavedModel directory (its
    ``variables/variables``). Every dtype TF stores variables in is read (float16/32/64, bfloat16,
    int8/16/32/64, uint8/16/32/64, bool, complex64/128); string and variant tensors (an iterator's position) are
    skipped (listed in ``skipped``), partitioned variables refused. A malformed checkpoint raises
    :class:`TFCheckpointError` (a ``ValueError``). ``metadata_only=True`` reads the index, the object graph and
    the scalars only (every check still runs): the other tensors are ``meta`` tensors of their shape and dtype,
    for listing what the file holds (``slotopt inspect``), not for loading.

    Example:
        >>> import slotopt, torch
        >>> ck = slotopt.load_tf_checkpoint("tests/data/migration/k_tf_ckpt_keras3_mlp_bn_adam")
        >>> ck.kind, ck.variable_names[:2], ck.iterations
        ('keras3', ['mlp/hidden/kernel', 'mlp/hidden/bias'], 5)
        >>> opt = ck.optimizer(ck.parameters(), optimizer=slotopt.Adam(0.01))
        >>> int(opt.iterations), opt.variables[2].path.split("/")[1]
        (5, 'mlp_hidden_kernel_momentum')
    """
    prefix = _resolve(prefix_or_directory)
    # metadata_only (issue 40, for `slotopt inspect`): tensors past one element stay unread, on the meta device.
    bundle = MetadataBundle(prefix) if metadata_only else TensorBundle(prefix)
    numeric, notes = [], []
    skipped: dict[str, str] = {}
    partitioned = frozenset(k for k, e in bundle.entries.items() if e.slices)
    for key, entry in bundle.entries.items():
        if key == OBJECT_GRAPH_KEY:
            continue
        if entry.slices and OBJECT_GRAPH_KEY in bundle.entries:
            raise TFCheckpointError(
                f"{bundle.index_path}: entry {key!r} is a partitioned variable ({len(entry.slices)} slices) of a "
                "tf.train.Checkpoint; slotopt reads the partitioned variables of TF1 Saver checkpoints only: restore "
                "it in TensorFlow and save it unpartitioned (or as a TF1 Saver checkpoint)")
        if key.startswith("\x00"):
            continue  # the data of a slice, keyed by TensorFlow's binary slice name
        if entry.dtype == "string":
            skipped[key] = "is a string tensor (not training state an optimizer continues)"
            notes.append(f"string tensor {key!r} skipped")
            continue
        if entry.dtype == "variant":
            # A tf.data iterator's position (``.../ITERATOR_STATE``): listed in ``skipped`` and left; refused
            # only if the optimizer or a trainable variable needs it.
            skipped[key] = "is a variant tensor (a tf.data iterator's position): not training state a torch " \
                           "optimizer continues; not restored"
            continue
        if entry.dtype_code not in DTYPES:
            raise TFCheckpointError(f"{bundle.index_path}: entry {key!r} has dtype {entry.dtype}, which is not a "
                                    "variable dtype slotopt reads")
        numeric.append(key)
    if OBJECT_GRAPH_KEY in bundle.entries:
        strings = bundle.read_strings(OBJECT_GRAPH_KEY)
        if len(strings) != 1:
            raise TFCheckpointError(f"{bundle.index_path}: entry {OBJECT_GRAPH_KEY!r} must be one string")
        check_object_graph(strings[0], bundle.index_path, OBJECT_GRAPH_KEY)  # issue 40: bounded before it is built
        checkpoint = _from_object_graph(bundle, _object_graph(strings[0], bundle.index_path), skipped)
    else:
        checkpoint = _from_tf1_names(bundle, numeric, partitioned)
    checkpoint.notes = notes + checkpoint.notes
    # issue 40: optimizer scalars checked as load_state_dict checks them, in every part (a composite's too)
    for part in [checkpoint, *checkpoint.parts]:
        check_optimizer_values(part.optimizer_variables, bundle.index_path)
    checkpoint.skipped = skipped
    for part in checkpoint.parts:
        part.skipped = skipped
    return checkpoint
