"""A TF1 ``.meta`` file (a serialized ``MetaGraphDef``) read for the two things slotopt needs, field by field.

The graph can be large and is data from outside: it is walked with :func:`~slotopt.io.protowire.iter_fields`,
one node at a time, keeping only the scalar float ``Const`` nodes (an optimizer's hyperparameters) and the
``trainable_variables`` collection, so what the reader holds is bounded by what it keeps, not by how many
fields the file declares (a decoded 8 MiB graph of 2-byte fields took 285 MiB).

Example:
    >>> from slotopt.io.tf_meta import read_meta_graph
    >>> consts, trainable = read_meta_graph("tests/data/migration/m_tf1_saver_adam/model.ckpt-5.meta")
    >>> consts["Adam/learning_rate"], trainable[:2]
    (0.009999999776482582, ['layer1/w', 'layer1/b'])
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from . import protowire as pw
from .tensor_bundle import TFCheckpointError

__all__ = ["read_meta_graph"]

_LD = pw.LENGTH_DELIMITED


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


def _const_value(node: Any) -> Optional[float]:
    """A scalar float32/float64 ``Const`` node's value (None for any other node)."""
    if _text(_last(node, 2)) != "Const":
        return None
    value = None
    for attr in _fields(node, 5):  # map<string, AttrValue>
        if _text(_last(attr, 1)) != "value":
            continue
        attr_value = _last(attr, 2)
        tensor = _last(attr_value, 8) if attr_value is not None else None
        if tensor is None:
            continue
        fields = pw.decode(bytes(tensor))  # one TensorProto: a scalar's is a few bytes
        dtype = pw.get_int(fields, 1)
        if dtype not in (1, 2) or pw.get_messages(pw.get_message(fields, 2), 2):  # scalar float32/64 only
            continue
        values = pw.get_floats(fields, 5 if dtype == 1 else 6, double=dtype == 2)
        content = pw.get_bytes(fields, 4)
        if not values and len(content) == (4 if dtype == 1 else 8):
            values = [struct.unpack("<f" if dtype == 1 else "<d", content)[0]]
        if values:
            value = values[-1]
    return value


def read_meta_graph(path: str) -> tuple[dict[str, float], list[str]]:
    """From the ``.meta`` MetaGraphDef at ``path``, read as data: the scalar float ``Const`` nodes (name →
    value) and the ``trainable_variables`` collection (variable names, in creation order)."""
    with open(path, "rb") as f:
        data = f.read()
    consts: dict[str, float] = {}
    trainable: list[str] = []
    try:
        for number, wire, value in pw.iter_fields(data):
            if wire != _LD:
                continue
            if number == 2:  # graph_def
                for node in _fields(value, 1):
                    found = _const_value(node)
                    if found is not None:
                        consts[_text(_last(node, 1))] = found
            elif number == 4:  # collection_def: map<string, CollectionDef>
                if _text(_last(value, 1)) != "trainable_variables":
                    continue
                collection = _last(value, 2)
                bytes_list = _last(collection, 2) if collection is not None else None
                for variable_def in _fields(bytes_list, 1) if bytes_list is not None else ():
                    trainable.append(_text(_last(variable_def, 1)).split(":")[0])
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{path}: not a MetaGraphDef: {err}", path) from None
    return consts, trainable
