"""The variables of a model whose structure the config does not give: a subclassed ``keras.Model`` (its config
holds only its constructor's arguments), read from the Keras 3 weights file alone.

Keras 3 writes a subclassed model's layers where it first meets them: a layer held by an attribute under the
attribute's name (``block/vars/<i>``), the others under the model's ``layers`` list (``layers/<class key>``,
numbered per class in tracking order), each ``vars`` group named after its layer. The file does not record the
order of the model's layers, which is the order of ``model.trainable_variables`` and of the optimizer's slots: it
is recovered from the saved optimizer state, where each variable's slots have its shape. The ``layers`` list's
numbering (``dense`` before ``dense_1``) and nesting (a layer's own variables before its sub-layers') constrain
it; where more than one order still fits, the file is refused naming the layers whose order is ambiguous, never
resolved by a guess. A layer of a known class (by its ``layers`` key) keeps its variable names and layouts; any
other layer's variables come as ``<layer>/vars/<i>`` in the file's layout (``"as_is"``), trainable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..engine.naming import snake_case
from .keras_layers import SUPPORTED_LAYERS, layer_spec
from .keras_walk import _Keras3Walk, _Var, _Where

__all__ = ["find_blocks", "order_blocks"]

_CLASS_BY_KEY = {snake_case(c): c for c in SUPPORTED_LAYERS}
_OWNER = re.compile(r"^p(\d+)(?:[_/]|$)")
_SEARCH_LIMIT = 5_000_000  # candidates the order search weighs before the file is refused as ambiguous


@dataclass
class _Block:
    """One layer's own variables, as the file holds them."""

    group: str  # the HDF5 group holding ``vars`` ("" for the model's own)
    name: str
    variables: list[_Var]
    rank: Optional[tuple[str, str, int]]  # (``layers`` list, class key, number) for a layer of a ``layers`` list


def _known(group: str, count: int) -> Optional[tuple[str, list[tuple[str, str, bool]]]]:
    """The class and own variables of a layer stored under ``.../layers/<class key>[_<n>]`` with ``count``
    variables, when the key names a known class whose default (or bias-free) config has that many."""
    parent, _, key = group.rpartition("/")
    if parent.rpartition("/")[2] != "layers" and parent != "layers":
        return None
    cls = _CLASS_BY_KEY.get(re.sub(r"_\d+$", "", key)) or _CLASS_BY_KEY.get(key)
    if cls is None:
        return None
    for config in ({}, {"use_bias": False}):
        spec = layer_spec(cls, config)
        if spec.known and not spec.children and len(spec.own) == count:
            return cls, list(spec.own)
    return None


def find_blocks(where: _Where, walk: _Keras3Walk, h5names: Mapping[str, str], model_name: str) -> list[_Block]:
    """Every group of the weights file that holds variables (``<group>/vars/<i>``), outside the optimizer and the
    compiled metrics (listed as skipped by the reader), in the file's order (the model's own variables first)."""
    groups = sorted({e.rsplit("/vars/", 1)[0] if "/vars/" in e else "" for e in walk.datasets
                     if (e.startswith("vars/") or "/vars/" in e) and not e.startswith(("optimizer/", "metrics/"))})
    names = {g: h5names.get(f"{g}/vars" if g else "vars") or g or model_name for g in groups}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    blocks = []
    for group in groups:
        count = walk.own_count(group) if group else walk.own_count_root()
        if count == 0:
            continue
        display = names[group] if counts[names[group]] == 1 else group  # a name two layers share: the file path
        known = _known(group, count)
        parent, _, key = group.rpartition("/")
        number = re.search(r"_(\d+)$", key)
        rank = (parent, re.sub(r"_\d+$", "", key), int(number.group(1)) if number else 0) \
            if parent.rpartition("/")[2] == "layers" or parent == "layers" else None
        entry = f"{group}/vars" if group else "vars"
        if known is not None:
            cls, own = known
            variables = [_Var(f"{display}/{var}", f"{display}/{var}", kind, trainable, f"{entry}/{i}", cls)
                         for i, (var, kind, trainable) in enumerate(own)]
        else:
            variables = [_Var(f"{display}/vars/{i}", f"{display}/vars/{i}", "as_is", True, f"{entry}/{i}", "")
                         for i in range(count)]
        blocks.append(_Block(group, display, variables, rank))
    return blocks


def order_blocks(where: _Where, blocks: list[_Block], state: Sequence[np.ndarray], shapes: Mapping[str, tuple],
                 new_optimizer: Callable[[], Any]) -> list[_Block]:
    """The blocks in ``model.trainable_variables`` order: the one order whose optimizer slots have the saved
    shapes (``state``, in the optimizer's ``variables`` order), under the file's constraints."""
    trainable = [(b, v) for b in blocks for v in b.variables if v.trainable]
    probe = new_optimizer()
    probe.build([(f"p{j}", torch.empty(shapes[v.entry], dtype=torch.float32, device="meta"))  # meta: no memory
                 for j, (_, v) in enumerate(trainable)])
    template: list[tuple[Optional[int], str, tuple]] = []
    slot_shape: dict[tuple[int, str], tuple] = {}
    for var in probe.variables:
        rest = str(getattr(var, "path", "")).partition("/")[2]
        match = _OWNER.match(rest)
        if match is None:
            template.append((None, rest, tuple(var.shape)))
            continue
        j = int(match.group(1))
        slot = rest[len(f"p{j}"):]
        slot_shape[(j, slot)] = tuple(var.shape)
        template.append((j, slot, ()))
    if len(template) != len(state):
        raise where.fail(
            f"the optimizer state holds {len(state)} variables; a {type(probe).__name__} on the {len(trainable)} "
            f"variables the file's layers hold ({[b.name for b in blocks]}) would hold {len(template)}: a custom "
            "layer with non-trainable weights is not told apart in a subclassed model's file.", "optimizer/vars")
    if all(j is None for j, _, _ in template) or len(blocks) == 1:
        return list(blocks)  # no slot depends on the order (or there is one order)
    index = {id(v): j for j, (_, v) in enumerate(trainable)}
    by_position: dict[int, list[tuple[int, str]]] = {}
    for t, (j, slot, _) in enumerate(template):
        if j is not None:
            by_position.setdefault(j, []).append((t, slot))
    for t, (j, _, shape) in enumerate(template):
        if j is None and tuple(np.shape(state[t])) != shape:
            raise where.fail(f"has shape {np.shape(state[t])}; the optimizer's own variable there has {shape}.",
                             f"optimizer/vars/{t}")
    solutions: list[list[int]] = []
    visited = [0]

    def fits(block: _Block, start: int) -> bool:
        position = start
        for v in block.variables:
            if not v.trainable:
                continue
            for t, slot in by_position.get(position, []):
                if tuple(np.shape(state[t])) != slot_shape.get((index[id(v)], slot)):
                    return False
            position += 1
        return True

    # What must be placed before each block: its ancestors' own variables (a layer's come before its sub-layers'),
    # and the previous layer of its class in the same ``layers`` list (``dense`` before ``dense_1``).
    by_group = {b.group: k for k, b in enumerate(blocks)}
    runs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for k, b in enumerate(blocks):
        if b.rank:
            runs.setdefault(b.rank[:2], []).append((b.rank[2], k))
    before: list[list[int]] = []
    for k, b in enumerate(blocks):
        parts = b.group.split("/")
        needs = [by_group[g] for g in ("/".join(parts[:i]) for i in range(1, len(parts))) if g in by_group]
        if b.rank:
            run = sorted(runs[b.rank[:2]])
            at = run.index((b.rank[2], k))
            needs += [run[at - 1][1]] if at else []
        before.append(needs)

    # The blocks that can start at a slot position: those whose first trainable variable has slots of the saved
    # shapes there (indexed once per list of slot names), and those without trainable variables.
    groups_by_names: dict[tuple[str, ...], dict[Any, list[int]]] = {}

    def candidates(position: int) -> list[int]:
        names = tuple(slot for _, slot in by_position.get(position, []))
        if names not in groups_by_names:
            groups: dict[Any, list[int]] = {}
            for k, block in enumerate(blocks):
                first = next((v for v in block.variables if v.trainable), None)
                key = None if first is None else tuple(slot_shape.get((index[id(first)], n)) for n in names)
                groups.setdefault(key, []).append(k)
            groups_by_names[names] = groups
        groups = groups_by_names[names]
        want = tuple(tuple(np.shape(state[t])) for t, _ in by_position.get(position, []))
        return groups.get(want, []) + (groups.get(None, []) if want is not None else [])

    def search(order: list[int], placed: set[int], position: int) -> None:
        """Depth first, without recursion (a model may have thousands of layers): stops at a second order."""
        base = len(order)
        # per depth: the candidates, the next one to weigh, the slot position reached
        lists, starts, positions = [candidates(position)], [0], [position]
        while starts and len(solutions) < 2 and visited[0] <= _SEARCH_LIMIT:
            i = starts[-1]
            if len(order) == len(blocks) or i == len(lists[-1]):
                if len(order) == len(blocks):
                    solutions.append(list(order))
                lists.pop()
                starts.pop()
                positions.pop()
                if len(order) > base:
                    placed.discard(order.pop())
                continue
            starts[-1] = i + 1
            k = lists[-1][i]
            visited[0] += 1  # every candidate counts: the work is bounded whatever the file
            if k in placed or any(n not in placed for n in before[k]) or not fits(blocks[k], positions[-1]):
                continue
            order.append(k)
            placed.add(k)
            reached = positions[-1] + sum(v.trainable for v in blocks[k].variables)
            lists.append(candidates(reached) if len(order) < len(blocks) else [])
            starts.append(0)
            positions.append(reached)

    fixed = [k for k, b in enumerate(blocks) if b.group == ""]  # the model's own variables come first
    if fixed and not fits(blocks[fixed[0]], 0):
        solutions = []
    else:
        search(list(fixed), set(fixed), sum(v.trainable for v in blocks[fixed[0]].variables) if fixed else 0)
    if not solutions:
        raise where.fail(
            f"no order of the layers {[b.name for b in blocks]} gives optimizer slots of the saved shapes: the "
            "file's variables and its optimizer state do not fit together (a custom layer's non-trainable "
            "weights, or another optimizer).", "optimizer/vars")
    if len(solutions) > 1 or visited[0] > _SEARCH_LIMIT:
        first, second = solutions[0], solutions[-1] if len(solutions) > 1 else solutions[0]
        ambiguous = sorted({blocks[a].name for a, b in zip(first, second) if a != b}) or [b.name for b in blocks]
        raise where.fail(
            f"a subclassed model's file does not record the order of its layers, and layers {ambiguous} fit the "
            "saved optimizer state in more than one order (their variables have the same shapes), or no single "
            f"order was found within {_SEARCH_LIMIT} candidates: refused rather than guessed. Save the model as a "
            "Functional or Sequential model.", "optimizer/vars")
    return [blocks[k] for k in solutions[0]]
