"""What a TensorFlow checkpoint may make the reader allocate and trust, checked before it is used.

A file is bounded by its bytes: the reader allocates nothing that bytes of the file do not justify.

* **No fan-out.** Two index entries may not share bytes of a shard (``tensor_bundle``), and two object-graph
  nodes may not name the same checkpoint key: otherwise 200 names of one 4 MiB tensor would make 800 MiB. Whatever
  the graph's references (one node in many optimizers' lists, children or slot references), the bundle hands out
  at most its data bytes in all (``TensorBundle``'s budget): an entry read again past them is refused.
* **No structure without content.** An object graph's nodes, children, attributes and slot references each cost
  the reader a few hundred bytes of Python objects; a graph must spend at least :data:`BYTES_PER_ELEMENT` bytes
  per element on average (real graphs spend 23-35), so a million empty nodes in 2 MiB are refused before a node
  is built, and the counts are capped (:data:`MAX_GRAPH_ELEMENTS`).
* **Values checked as ``load_state_dict`` checks them** (``engine.resume``): an iteration count is a finite
  integer in [0, 2**62], TF1's beta powers are in [0, 1), a learning rate finite and >= 0; a complex or NaN one
  is refused.

Every refusal is a :class:`~slotopt.io.tensor_bundle.TFCheckpointError` naming the file and the entry.

Example:
    >>> import torch
    >>> from slotopt.io.bounds import iterations_of
    >>> iterations_of(torch.tensor(5), "ckpt.index", "iter")
    5
    >>> iterations_of(torch.tensor(float("inf")), "ckpt.index", "iter")
    Traceback (most recent call last):
    ...
    slotopt.io.tensor_bundle.TFCheckpointError: ckpt.index: entry 'iter': the iteration count must be an integer in [0, 2**62]; it holds inf
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch

from ..engine.resume import COUNTERS, state_value_problem
from . import protowire as pw
from .tensor_bundle import TFCheckpointError

__all__ = ["BYTES_PER_ELEMENT", "MAX_GRAPH_ELEMENTS", "check_object_graph", "iterations_of",
           "check_optimizer_values"]

#: The fewest bytes an object graph may spend per node, child, attribute or slot reference, on average.
BYTES_PER_ELEMENT = 8
#: The most nodes + children + attributes + slot references an object graph may have.
MAX_GRAPH_ELEMENTS = 1 << 22
_NAN = torch.tensor(float("nan"))


def _shown(value: torch.Tensor) -> Any:
    return value.detach().reshape(-1)[0].item() if value.numel() else None


def iterations_of(value: torch.Tensor, path: str, key: str) -> Optional[int]:
    """The iteration count stored in ``value`` (None when it is not a scalar), refused unless a finite integer
    in [0, 2**62] of a real dtype."""
    if value.numel() != 1:
        return None
    problem = "an integer in [0, 2**62]" if value.is_complex() or value.dtype == torch.bool else \
        state_value_problem("iterations", value)
    if problem is not None:
        raise TFCheckpointError(f"{path}: entry {key!r}: the iteration count must be {problem}; it holds "
                                f"{_shown(value)!r}", path, key)
    return int(value.reshape(()).item())


def check_optimizer_values(variables: Iterable[Any], path: str) -> None:
    """Refuses an optimizer scalar (iterations, learning rate, TF1's beta powers...) that ``load_state_dict``
    would refuse: the first step would give inf or NaN. ``variables``: ``OptimizerVariable`` s (``name``,
    ``key``, ``owner``, ``slot``, ``value``)."""
    for var in variables:
        if var.owner is not None or var.value.numel() != 1:
            continue  # slots and non-scalars: their shape and dtype are checked against the optimizer's
        for short in {str(var.name).rsplit("/", 1)[-1], var.slot or ""} - {""}:
            value = var.value
            if value.is_complex() and state_value_problem(short, _NAN) is not None:  # a checked name
                problem: Optional[str] = "an integer in [0, 2**62]" if short in COUNTERS else "a real number"
            else:
                problem = state_value_problem(short, value)
            if problem is not None:
                raise TFCheckpointError(f"{path}: entry {var.key!r}: optimizer variable `{short}` must be {problem}; "
                                        f"it holds {_shown(value)!r}", path, var.key)


def check_object_graph(data: bytes, path: str, entry: str) -> None:
    """Walks a serialized ``TrackableObjectGraph`` without building it and refuses one whose structure its bytes
    do not justify, or in which two nodes name the same checkpoint key (see the module docstring)."""
    elements, keys, index = 0, set(), -1
    try:
        for number, wire, node in pw.iter_fields(data):
            if number != 1:
                continue
            if wire != pw.LENGTH_DELIMITED:
                raise pw.WireFormatError(f"field 1 has wire type {wire}")
            elements += 1
            index += 1
            slots: set[tuple[int, bytes]] = set()
            for field, field_wire, value in pw.iter_fields(node):  # type: ignore[arg-type]
                if field not in (1, 2, 3) or field_wire != pw.LENGTH_DELIMITED:
                    continue
                elements += 1
                if field == 3:  # a slot reference: one per (variable, slot name), or the last would win unseen
                    ref = pw.decode(bytes(value))  # type: ignore[arg-type]
                    slot = (pw.get_int(ref, 1), pw.get_bytes(ref, 2))
                    if slot in slots:
                        raise TFCheckpointError(
                            f"{path}: entry {entry!r}: object graph node {index} holds slot "
                            f"{slot[1].decode('utf-8', 'replace')!r} of node {slot[0]} twice: refused (which one "
                            "is the optimizer's?)", path, entry)
                    slots.add(slot)
                if field == 2:  # an attribute: its checkpoint key (field 3) is one tensor of the file
                    key = None
                    for attr_field, attr_wire, attr_value in pw.iter_fields(value):  # type: ignore[arg-type]
                        if attr_field == 3 and attr_wire == pw.LENGTH_DELIMITED:
                            key = bytes(attr_value)  # type: ignore[arg-type]
                    if key is not None:
                        if key in keys:
                            raise TFCheckpointError(
                                f"{path}: entry {entry!r}: two object graph nodes name checkpoint key "
                                f"{key.decode('utf-8', 'replace')!r}; a key is one variable's (refused: the reader "
                                "would allocate its tensor once per name)", path, entry)
                        keys.add(key)
            if elements * BYTES_PER_ELEMENT > len(data) + 64:  # refused as soon as the bytes run out
                _too_many(elements, len(data), path, entry)
            if elements > MAX_GRAPH_ELEMENTS:
                raise TFCheckpointError(f"{path}: entry {entry!r}: the object graph has over {MAX_GRAPH_ELEMENTS} "
                                        "nodes, children, attributes and slot references: refused", path, entry)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{path}: entry {entry!r} is not a TrackableObjectGraph: {err}", path, entry) from None
    if elements * BYTES_PER_ELEMENT > len(data) + 64:
        _too_many(elements, len(data), path, entry)


def _too_many(elements: int, size: int, path: str, entry: str) -> None:
    raise TFCheckpointError(
        f"{path}: entry {entry!r}: the object graph declares over {elements - 1} nodes, children, attributes and "
        f"slot references in {size} bytes (real graphs spend over {BYTES_PER_ELEMENT} bytes on each): refused, it "
        "would make the reader allocate far more than the file holds", path, entry)
