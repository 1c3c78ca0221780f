"""Routing gradients to sub-optimizers: the machinery shared by the composites.

``slotopt.CompositeOptimizer`` (TensorFlow Recommenders' API, any generation) and ``slotopt.MultiOptimizer``
(Keras 3.15's API) both own several optimizers and send each ``(gradient, variable)`` pair to the one that owns
the variable. They differ in how ownership is declared; grouping the pairs, calling each sub-optimizer with the
arguments its generation accepts, and splitting a flat weight list back into the sub-optimizers' lists are
written here once.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Sequence
from typing import Any, Callable, Optional

import torch

from .plan import plan_of
from .proof import weights
from .writing import atomic
from .writing.transaction import copy_values, put_values

__all__ = ["variable_path", "group_by_owner", "Routes", "dispatch", "accepted", "AGGREGATED", "aggregation_options",
           "optimizer_weights", "split_weights", "set_weights_all_or_nothing"]

Pair = tuple[Any, torch.Tensor]


def variable_path(var: torch.Tensor, fallback: str) -> str:
    """A model variable's Keras ``path``: ``Variable.path`` when it has one, else ``fallback`` (for a plain
    tensor or ``nn.Parameter``, the name it was registered under, e.g. ``"0.weight"`` from ``named_parameters``)."""
    path = getattr(var, "path", None)
    return path if isinstance(path, str) and path else fallback


def group_by_owner(pairs: Sequence[Pair], owner_of: Callable[[torch.Tensor], Optional[int]],
                   unowned: Callable[[torch.Tensor], str],
                   check: Optional[Callable[[Pair], None]] = None) -> dict[int, list[Pair]]:
    """``{owner index: pairs}`` in order of first appearance; raises ``ValueError(unowned(var))`` for a variable
    with no owner. ``check`` runs on each pair right after its owner is found. Changes nothing."""
    groups: dict[int, list[Pair]] = {}
    for pair in pairs:
        index = owner_of(pair[1])
        if index is None:
            raise ValueError(unowned(pair[1]))
        if check is not None:
            check(pair)
        groups.setdefault(index, []).append(pair)
    return groups


class Routes:
    """The last groupings of variable lists by owner, kept for the next calls with the same lists.

    A training loop routes the same variables in the same order on every step; found by their owners one pair at
    a time, that costs more than the update of a small tensor. ``lookup`` reuses a kept grouping, as index
    lists, while the variables are the same objects in the same order and ``key`` (what else ownership depends
    on, e.g. the variable lists the owners' callables returned this time) holds the same objects. Two groupings
    are kept (a step may route its pairs, then the same pairs in owner order). It only groups: checking the
    pairs stays with the caller.
    """

    __slots__ = ("kept",)
    KEPT = 2

    def __init__(self) -> None:
        #: ``(variables, key, [(owner, taker)])``, the most recent first.
        self.kept: list[tuple[list[torch.Tensor], list[list[Any]], list[tuple[int, Callable[..., list[Pair]]]]]] = []

    def lookup(self, pairs: Sequence[Pair], key: Sequence[Sequence[Any]] = ()) -> Optional[dict[int, list[Pair]]]:
        """The groups of ``pairs`` by a kept grouping, or None when none holds for them."""
        for variables, kept_key, takers in self.kept:
            if len(variables) == len(pairs) and all(map(operator.is_, map(_second, pairs), variables)) \
                    and _same(key, kept_key):
                return {owner: take(pairs) for owner, take in takers}
        return None

    def remember(self, pairs: Sequence[Pair], groups: dict[int, list[Pair]], key: Sequence[Sequence[Any]] = ()) -> None:
        """Keeps ``groups`` (the grouping of ``pairs``, found in full) for ``lookup``."""
        variables = list(map(_second, pairs))
        index = {id(v): i for i, v in enumerate(variables)}
        if len(index) != len(variables):  # a variable listed twice: not a list to keep
            return
        takers = [(owner, _taker([index[id(v)] for _, v in group])) for owner, group in groups.items()]
        self.kept = [(variables, [list(k) for k in key], takers), *self.kept][:self.KEPT]

    def group(self, pairs: Sequence[Pair], owner_of: Callable[[torch.Tensor], Optional[int]],
              unowned: Callable[[torch.Tensor], str], key: Sequence[Sequence[Any]] = ()) -> dict[int, list[Pair]]:
        """``group_by_owner(pairs, owner_of, unowned)``, from a kept grouping when one holds."""
        groups = self.lookup(pairs, key)
        if groups is None:
            groups = group_by_owner(pairs, owner_of, unowned)
            self.remember(pairs, groups, key)
        return groups

    def forget(self) -> None:
        self.kept = []


_second = operator.itemgetter(1)


def _same(key: Sequence[Sequence[Any]], last: Sequence[Sequence[Any]]) -> bool:
    return len(key) == len(last) and all(len(a) == len(b) and all(map(operator.is_, a, b)) for a, b in zip(key, last))


def _taker(indices: list[int]) -> Callable[[Sequence[Pair]], list[Pair]]:
    if len(indices) == 1:
        return lambda pairs, i=indices[0]: [pairs[i]]
    take = operator.itemgetter(*indices)
    return lambda pairs: list(take(pairs))


#: The options that tell ``apply_gradients`` of every generation that the gradients are aggregated already (each
#: generation takes the one it knows: ``accepted`` filters them).
AGGREGATED = {"skip_gradients_aggregation": True, "experimental_aggregate_gradients": False}


def aggregation_options(experimental_aggregate_gradients: bool = True,
                        skip_gradients_aggregation: Optional[bool] = None) -> dict[str, Any]:
    """The caller's choice, in both spellings (tf.keras: ``experimental_aggregate_gradients=False``; TF1 and
    Keras: ``skip_gradients_aggregation=True``), for sub-optimizers of any generation."""
    skip = bool(skip_gradients_aggregation) or not experimental_aggregate_gradients
    return dict(AGGREGATED) if skip else {}


def dispatch(optimizers: Sequence[Any], groups: dict[int, list[Pair]], options: Optional[dict[str, Any]] = None,
             *, validate_first: bool = False, all_present: bool = False) -> None:
    """Calls ``optimizers[i].apply_gradients(groups[i], ...)`` for each group, in ``groups`` order.

    A group whose gradients are all ``None`` is skipped (that optimizer does not step); ``all_present``: the
    caller knows every gradient is there (the groups of an ``Ordinary`` step). ``options`` are passed to the
    optimizers that accept them (generations differ). With ``validate_first``, every group is validated by its
    optimizer (``_prepare_pairs``: checks and build, no update) before any optimizer updates anything, so a bad
    pair for the second optimizer leaves the first one's variables unchanged.
    """
    live = [(optimizers[i], group) for i, group in groups.items()
            if all_present or plan_of(group) is not None or any(g is not None for g, _ in group)]
    # One step of the composite: no finalizer or SIGINT handler between its optimizers' steps (engine/writing/atomic.py),
    # and where a later optimizer's own code may raise after an earlier one wrote (a learning-rate callable), the
    # values to put back, with the optimizers' bookkeeping as it was before any of them built its state.
    held = atomic.hold()
    guard = None
    try:
        if len(live) > 1 and atomic.outer_step() is not atomic.GUARDED \
                and any(atomic.may_run_user_code(optimizer) for optimizer, _ in live[1:]):
            guard = atomic.KeptValues([t for optimizer, group in live
                                       for t in (*(v for _, v in group), *optimizer_weights(optimizer))],
                                      [optimizer for optimizer, _ in live])
        if validate_first:
            # An ordinary step comes back as checked (``Ordinary``): its optimizer then takes it without a second
            # pass.
            live = [(optimizer, checked if plan_of(checked := optimizer._prepare_pairs(group)) is not None else group)
                    for optimizer, group in live]
        for optimizer, group in live:
            optimizer.apply_gradients(group, **accepted(optimizer.apply_gradients, options or {}))
    except BaseException:
        if guard is not None:
            guard.restore()
        raise
    finally:
        if guard is not None:
            guard.release()
        atomic.release(held)


def accepted(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that ``fn`` accepts (generations differ in ``apply_gradients`` arguments)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return {k: v for k, v in options.items() if v is not None}
    return {k: v for k, v in options.items() if k in params and v is not None}


def optimizer_weights(optimizer: Any) -> list[torch.Tensor]:
    """The optimizer's weights in its own order, whatever its generation."""
    weights = getattr(optimizer, "weights", None)
    if weights is not None and not callable(weights):
        return list(weights)
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def split_weights(optimizers: Sequence[Any], weights: Sequence[Any], owner_name: str,
                  leading: int = 0) -> list[list[Any]]:
    """``weights`` cut into ``leading`` own weights followed by one list per optimizer (its current weight count);
    raises ``ValueError`` naming ``owner_name`` when the total length is wrong. Changes nothing."""
    counts = [len(optimizer_weights(optimizer)) for optimizer in optimizers]
    expected = leading + sum(counts)
    if len(weights) != expected:
        raise ValueError(
            f"You called `set_weights(weights)` on optimizer {owner_name} with a weight list of length "
            f"{len(weights)}, but the optimizer was expecting {expected} weights."
        )
    parts, start = [list(weights[:leading])], leading
    for count in counts:
        parts.append(list(weights[start:start + count]))
        start += count
    return parts


def set_weights_all_or_nothing(optimizers: Sequence[Any], parts: Sequence[Sequence[Any]],
                               own: Sequence[torch.Tensor] = (), own_part: Sequence[Any] = ()) -> None:
    """``optimizer.set_weights(part)`` for each sub-optimizer (each checks its part before changing anything),
    then the wrapper's ``own`` variables get ``own_part`` (checked first of all). When a sub-optimizer raises,
    the ones before it get their previous values back: a failed load changes nothing."""
    own_values = weights.checked_values(own, own_part)
    targets = [w for optimizer in optimizers for w in optimizer_weights(optimizer)]
    saved = copy_values(targets)
    try:
        for optimizer, part in zip(optimizers, parts):
            if callable(getattr(optimizer, "set_weights", None)):
                optimizer.set_weights(part)
            else:  # a TF1 optimizer has no set_weights: its variables() in order
                weights.assign_values(optimizer_weights(optimizer), weights.checked_values(
                    optimizer_weights(optimizer), part))
    except BaseException:
        put_values(targets, saved)
        for optimizer in optimizers:  # the groups show the learning rates put back
            optimizer._show_current_learning_rate()
        raise
    weights.assign_values(own, own_values)
