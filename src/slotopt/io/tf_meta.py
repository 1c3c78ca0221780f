"""A TF1 ``.meta`` file (a serialized ``MetaGraphDef``) read for what slotopt needs, field by field.

The graph can be large and is data from outside: it is walked with :func:`~slotopt.io.protowire.iter_fields`,
one node at a time, keeping only what an optimizer's continuation depends on: the scalar float ``Const`` nodes
(its hyperparameters), the one value a slot initializer fills with (Adagrad's and Ftrl's initial accumulator),
the optimizer's update nodes (``ResourceApplyMomentum``...: their inputs and attributes, where
``use_nesterov`` lives) and the ``trainable_variables`` collection (with each partitioned variable's full name).
What the reader holds is bounded by what it keeps, not by how many fields the file declares (a decoded 8 MiB
graph of 2-byte fields took 285 MiB).

Example:
    >>> from slotopt.io.tf_meta import read_meta_graph
    >>> consts, trainable = read_meta_graph("tests/data/migration/m_tf1_saver_adam/model.ckpt-5.meta")
    >>> consts["Adam/learning_rate"], trainable[:2]
    (0.009999999776482582, ['layer1/w', 'layer1/b'])
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import protowire as pw
from .tensor_bundle import TFCheckpointError

__all__ = ["read_meta_graph", "read_meta", "MetaGraph", "ApplyNode"]

_LD = pw.LENGTH_DELIMITED
#: The optimizers' update kernels (``ResourceApplyMomentum``, ``SparseApplyAdagrad``...).
_APPLY_OP = re.compile(r"^(?:Resource)?(?:Sparse)?Apply[A-Za-z0-9]+$")
#: Attributes of an update node that say nothing about its arithmetic (dtypes, locking, placement).
_NEUTRAL_ATTRS = frozenset({"T", "Tindices", "use_locking", "_class", "_has_manual_control_dependencies",
                            "_output_shapes", "_XlaCompile", "_XlaScope", "_XlaSeparateCompiledGradients"})


@dataclass(frozen=True)
class ApplyNode:
    """One optimizer update node of the graph: ``name`` (``Momentum/update_w/ResourceApplyMomentum``), ``op``
    (``ResourceApplyMomentum``), ``inputs`` (the node names it reads, without ``:n`` and control inputs) and
    ``attrs`` (its attributes that are booleans, integers, floats or strings, the neutral ones left out)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Union[bool, int, float, str]]


@dataclass
class MetaGraph:
    """What :func:`read_meta` keeps of a ``.meta`` graph."""

    consts: dict[str, float] = field(default_factory=dict)  # scalar float Const: name → value
    fills: dict[str, float] = field(default_factory=dict)  # a Const filled with one float value (initializers)
    applies: list[ApplyNode] = field(default_factory=list)
    trainable: list[str] = field(default_factory=list)  # trainable_variables, in creation order
    partitions: dict[str, str] = field(default_factory=dict)  # ``emb/part_0`` → ``emb`` (its save_slice_info)


def _fields(data: Any, wanted: int) -> Any:
    """The length-delimited values of field ``wanted`` of one message, one at a time."""
    for number, wire, value in pw.iter_fields(data):
        if number == wanted:
            if wire != _LD:
                raise pw.WireFormatError(f"field {number} has wire type {wire}; expected {_LD}")
            yield value


def _last(data: Any, wanted: int) -> Optional[Any]:
    found = None
    for value in _fields(data, wanted):
        found = value
    return found


def _text(value: Optional[Any]) -> str:
    try:
        return "" if value is None else bytes(value).decode("utf-8")
    except UnicodeDecodeError as err:
        raise pw.WireFormatError("a name is not UTF-8 text") from err


def _const_tensor(node: Any) -> Optional[tuple[float, bool]]:
    """A float32/float64 ``Const`` node holding one value: (value, whether it is a scalar). A non-scalar Const
    holds one value when TensorFlow stored it as a fill (one ``float_val`` for every element)."""
    if _text(_last(node, 2)) != "Const":
        return None
    found = None
    for attr in _fields(node, 5):  # map<string, AttrValue>
        if _text(_last(attr, 1)) != "value":
            continue
        attr_value = _last(attr, 2)
        tensor = _last(attr_value, 8) if attr_value is not None else None
        if tensor is None:
            continue
        fields = pw.decode(bytes(tensor))  # one TensorProto: a scalar's or a fill's is a few bytes
        dtype = pw.get_int(fields, 1)
        if dtype not in (1, 2):
            continue
        scalar = not pw.get_messages(pw.get_message(fields, 2), 2)
        values = pw.get_floats(fields, 5 if dtype == 1 else 6, double=dtype == 2)
        content = pw.get_bytes(fields, 4)
        if not values and scalar and len(content) == (4 if dtype == 1 else 8):
            values = [struct.unpack("<f" if dtype == 1 else "<d", content)[0]]
        if len(values) == 1 and not content:
            found = (values[0], scalar)
    return found


def _attr_value(value: Any) -> Optional[Union[bool, int, float, str]]:
    """An AttrValue that is a bool (field 5), int (3), float (4) or string (2); None for others."""
    fields = pw.decode(bytes(value))
    for number, kind in ((5, "b"), (3, "i"), (4, "f"), (2, "s")):
        if number not in fields:
            continue
        if kind == "b":
            return pw.get_bool(fields, 5)
        if kind == "i":
            return pw.get_int(fields, 3)
        if kind == "f":
            return struct.unpack("<f", struct.pack("<I", pw.get_fixed32(fields, 4)))[0]
        return pw.get_str(fields, 2)
    return None


def _apply_node(node: Any, op: str) -> ApplyNode:
    inputs = tuple(name.split(":")[0] for name in (_text(v) for v in _fields(node, 3)) if not name.startswith("^"))
    attrs: dict[str, Union[bool, int, float, str]] = {}
    for attr in _fields(node, 5):
        key = _text(_last(attr, 1))
        if key in _NEUTRAL_ATTRS:
            continue
        value = _last(attr, 2)
        parsed = _attr_value(value) if value is not None else None
        if parsed is not None:
            attrs[key] = parsed
    return ApplyNode(_text(_last(node, 1)), op, inputs, attrs)


def read_meta(path: str) -> MetaGraph:
    """The parts of the ``.meta`` MetaGraphDef at ``path`` an optimizer's continuation depends on, read as data
    (:class:`MetaGraph`)."""
    with open(path, "rb") as f:
        data = f.read()
    graph = MetaGraph()
    try:
        for number, wire, value in pw.iter_fields(data):
            if wire != _LD:
                continue
            if number == 2:  # graph_def
                for node in _fields(value, 1):
                    op = _text(_last(node, 2))
                    if op == "Const":
                        found = _const_tensor(node)
                        if found is not None:
                            (graph.consts if found[1] else graph.fills)[_text(_last(node, 1))] = found[0]
                    elif _APPLY_OP.match(op):
                        graph.applies.append(_apply_node(node, op))
            elif number == 4:  # collection_def: map<string, CollectionDef>
                if _text(_last(value, 1)) != "trainable_variables":
                    continue
                collection = _last(value, 2)
                bytes_list = _last(collection, 2) if collection is not None else None
                for variable_def in _fields(bytes_list, 1) if bytes_list is not None else ():
                    name = _text(_last(variable_def, 1)).split(":")[0]
                    graph.trainable.append(name)
                    slice_info = _last(variable_def, 4)  # save_slice_info_def: a slice of a partitioned variable
                    if slice_info is not None:
                        full_name = _text(_last(slice_info, 1))
                        if full_name:
                            graph.partitions[name] = full_name
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{path}: not a MetaGraphDef: {err}", path) from None
    return graph


def read_meta_graph(path: str) -> tuple[dict[str, float], list[str]]:
    """From the ``.meta`` MetaGraphDef at ``path``, read as data: the scalar float ``Const`` nodes (name →
    value) and the ``trainable_variables`` collection (variable names, in creation order)."""
    graph = read_meta(path)
    return graph.consts, graph.trainable
