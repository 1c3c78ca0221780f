"""The step plan: what an optimizer derives from the variables of a step, kept for the next step.

A training loop steps the same variables in the same order every time. Each stage of the pipeline derives
something from the variables alone: their positions in the registry, that none is unknown or repeated, their
(device, dtype) groups, which ones are decayed, which state is packed, where their memory is. Computed per pair
and per stage, that bookkeeping costs far more than the update itself on many small tensors (2000 tensors of
1024 elements: about 3 ms of Python against 0.5 ms of arithmetic).

So a step that passed every check leaves a ``StepPlan``. A plan is a cache of work, never of trust: the next
step is *ordinary* when its variables are the plan's, in the plan's order, each still of the dtype, sizes and
device it had, where it was in memory, contiguous, inside its storage, of a kind read directly (no wrapper
subclass) and writable now, and every gradient is a dense tensor of its variable's dtype, shape and device, inside
its storage: one pass over the variables and gradients re-proves all of it on every step
(``StepPlan.fits``), and the stages then take what they need from the plan (``StepPairs.plan``) instead of
deriving it again. Anything else (a sparse or missing gradient, another variable list, a variable moved in
memory, a registry that changed since) takes the full path, which checks everything as before. The numbers are
the same either way: the plan changes what is looked up, never what is computed.

The checks of an ordinary step read a handful of properties of every tensor on every step; where the C++
tensor table was built for this torch (``kernels/native/tensor_table.py``) it reads them all in one pass per
list, else they are read here in Python (one C-level ``map`` per property). Both give the same verdicts.
"""

from __future__ import annotations

import gc
import operator
import sys
from collections.abc import Mapping, Sequence
from itertools import count, repeat
from typing import Any, Callable, Optional, Protocol

import numpy as np
import torch

from ..kernels import native
from ..kernels.native import tensor_table
from ..kernels.native.operands import (
    Kinds,
    direct,
    direct_type,
    in_storage,
    inside,
    inside_ends,
    is_python_dispatch,
    plain,
    plain_reads,
    within_storage,
    writable_now,
)

__all__ = ["StepPlan", "StepPairs", "Ordinary", "pairs_of", "plan_of", "Planner", "GradientsByPosition", "split", "direct", "in_storage", "within_storage",
           "is_python_dispatch", "proof_mark", "collections", "quiet_now"]

Pair = tuple[Any, torch.Tensor]


class Planner(Protocol):
    """What a plan reads of the optimizer it serves (``engine/core.py``'s ``OptimizerCore``; the core depends on
    the plan, never the reverse)."""

    foreach: bool
    _var_index: dict[int, int]
    _vars: list[Any]

    def _groups(self, positions: Sequence[int]) -> Any: ...

_is = operator.is_
_first, _second = operator.itemgetter(0), operator.itemgetter(1)
_dtype, _shape, _device, _on_cpu, _layout, _nested = (
    operator.attrgetter(name) for name in ("dtype", "shape", "device", "is_cpu", "layout", "is_nested"))
_contiguous = torch.Tensor.is_contiguous

_strided = torch.strided
_address = torch.Tensor.data_ptr


class StepPairs(list):  # type: ignore[type-arg]
    """A step's ``(gradient, variable)`` pairs as its stages hand them on, with what the step proved of them: the
    one type every stage receives (``pipeline.run_step`` makes each stage's result one), planned or not. A stage
    asks the pairs, never their type: ``pairs.plan`` is the ``StepPlan`` they were proven against in this step
    (an ordinary step, an ``Ordinary``: its gradients and their addresses are ``grads`` and ``grad_addresses``),
    or None (any other step: the stage takes the per-pair path and reads the pairs themselves)."""

    plan: Optional[StepPlan] = None
    grads: Optional[list[torch.Tensor]] = None
    grad_addresses: Optional[Sequence[int]] = None  # None when a gradient is not contiguous
    #: Whether a variable of the step has a ``constraint`` (``engine/writing/undo.py``), read in the C++ checks' pass over
    #: the variables; None when not read (the step then looks itself).
    constrained: Optional[bool] = None
    #: When ``fits`` proved it: a number from ``proof_mark``'s sequence (-1: made by others of a step it proved).
    proof: int = -1
    #: Set by the step that proved it (``plan_cache._ordinary``) where no code but slotopt's own can run until its
    #: first write (``quiet_now``): the cyclic collector's count of collections then, else None. ``proven_again``
    #: then need not prove it again (engine/proof/unchanged.py).
    quiet: Optional[int] = None
    #: Whether its slots were proven by the Python record (``unchanged.slots_hold``) in this step: 0 no, 1 yes, 2 yes
    #: with their contiguity and kind (``Held.whole``).
    held: int = 0


def pairs_of(pairs: Sequence[Pair]) -> StepPairs:
    """``pairs`` as a stage receives them: a ``StepPairs`` as it is, any other sequence as an unplanned ``StepPairs``."""
    return pairs if isinstance(pairs, StepPairs) else StepPairs(pairs)


def plan_of(pairs: Any) -> Optional[StepPlan]:
    """The plan ``pairs`` were proven against in this step, else None: what an entry point (``apply_gradients``,
    a face's ``_prepare_pairs``, a composite's dispatch) asks of what it was handed, which may be a caller's list
    as well as the ``StepPairs`` of a step that checked them (a composite's groups)."""
    return pairs.plan if isinstance(pairs, StepPairs) else None


class Ordinary(StepPairs):
    """The pairs of an ordinary step (``StepPairs`` with a ``plan``), with its gradients and their addresses (read
    once, in ``fits``). Made only by ``of``; what a stage reads of it is ``StepPairs``' (``pairs.plan``)."""

    plan: StepPlan
    grads: list[torch.Tensor]

    @classmethod
    def of(cls, pairs: Sequence[Pair], plan: StepPlan, grads: list[torch.Tensor],
           grad_addresses: Optional[Sequence[int]], constrained: Optional[bool] = None) -> Ordinary:
        """``pairs`` as an ordinary step of ``plan``, with their gradients and those gradients' addresses (None
        when one is not contiguous), as whoever checked them in this step read them."""
        ordinary = cls(pairs)
        ordinary.plan, ordinary.grads, ordinary.grad_addresses = plan, grads, grad_addresses
        ordinary.constrained = constrained
        ordinary.proof = -1  # (made of a step proven elsewhere: ``fits`` stamps its own)
        return ordinary

    def gradients(self, positions: Sequence[int]) -> native.Matched:
        """The gradients of ``positions`` for a compiled call, with their addresses when all are contiguous."""
        order = self.plan.order(positions)
        grads = native.Matched(self.grads if order is None else [self.grads[i] for i in order])
        if self.grad_addresses is not None:
            addresses = np.asarray(self.grad_addresses, dtype=np.uint64)
            grads.addresses = addresses if order is None else addresses[order]
        gm = self.__dict__.get("gradient_map")  # (a map the update rules apply as they load: compiled_maps.py)
        if gm is not None:
            grads.gradient_map = gm.select(order)
        return grads


class GradientsByPosition(Mapping[int, torch.Tensor]):
    """An ordinary step's gradients keyed by variable position, looked up through its plan: no dict of every
    gradient is built per step (the compiled path reads them from the step itself)."""

    def __init__(self, step: Ordinary) -> None:
        self._grads, self._index = step.grads, step.plan.index_of
        # A step whose gradients are still to be mapped (engine/compiled_maps.py): mapped when one is read here.
        self._pending = step if step.__dict__.get("gradient_map") is not None else None

    def __getitem__(self, position: int) -> torch.Tensor:
        if self._pending is not None:
            step, self._pending = self._pending, None
            gm = step.__dict__.get("gradient_map")
            if gm is not None:
                gm.flush(step)
            self._grads = step.grads
        return self._grads[self._index[position]]

    def __iter__(self) -> Any:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class StepPlan:
    """What the stages derive from one list of variables (see the module docstring)."""

    def __init__(self, opt: Planner, pairs: Sequence[Pair]) -> None:
        variables = [v for _, v in pairs]
        self.variables = variables
        self.key = _registry_key(opt)
        self.positions = [opt._var_index[id(v)] for v in variables]
        self.index_of = {p: i for i, p in enumerate(self.positions)}  # position -> pair index
        self.dtypes = [v.dtype for v in variables]
        self.shapes = [v.shape for v in variables]
        self.devices = [v.device for v in variables]
        self.on_cpu = all(d.type == "cpu" for d in self.devices)
        self.addresses = [v.data_ptr() for v in variables]
        # What the Python checks compare each step with (``fits``): each variable's class, and the end of its bytes
        # (0 when empty), for its storage bounds.
        self.types = list(map(type, variables))
        self.type_set = list(dict.fromkeys(self.types))
        self.extents = [v.numel() * v.element_size() for v in variables]
        self.ends = [a + e if e else 0 for a, e in zip(self.addresses, self.extents)]
        self.empty = 0 in self.extents
        # (the same as uint64 arrays, for the vector comparisons of ``operands.inside_ends``)
        self.ends_array = np.array(self.ends, dtype=np.uint64)
        self.extents_array = np.array(self.extents, dtype=np.uint64)
        self.groups = opt._groups(self.positions)  # the (device, dtype) groups of the positions
        self.kinds = list(dict.fromkeys(zip(self.devices, self.dtypes)))  # the (device, dtype) pairs, in order
        self.table = tensor_table.make_plan(variables)  # the C++ checks' record of the variables, or None
        #: The Python checks' records of the variables' and of the gradients' kinds (``operands.Kinds``), made when
        #: ``fits`` proved them property by property; None before (or where this torch has no guard).
        self.guards: Optional[tuple[Optional[Kinds], Optional[Kinds]]] = None

        #: Values a stage derived from the variables, by the stage's key (e.g. the decayed positions for one
        #: exclusion list); dropped with the plan.
        self.memo: dict[Any, Any] = {}
        #: How many steps reached their first write as an ordinary step of this plan (``unchanged.proven_again``):
        #: what a test reads to tell that an option's step kept the plan.
        self.uses = 0

    def order(self, positions: Sequence[int]) -> Optional[list[int]]:
        """The pair indices of ``positions`` (a sequence the caller keeps and never changes: one of ``groups``, or
        a packed state's positions), or None when they are the pairs' own order; worked out once per sequence
        object (no hash of thousands of positions per step)."""
        key = ("order", id(positions))
        kept = self.memo.get(key)
        if kept is None or kept[0] is not positions:
            order = [self.index_of[p] for p in positions]
            kept = (positions, None if order == list(range(len(self.positions))) else order)
            self.memo[key] = kept
        return kept[1]

    def verified(self, positions: tuple[int, ...], params: list[torch.Tensor]) -> native.Verified:
        """``params`` (the variables of ``positions``) for a compiled call: their element counts and addresses
        computed once; ``fits`` re-reads the addresses at every step, so they hold while the plan is used."""
        return native.Verified(params, [self.addresses[self.index_of[p]] for p in positions])

    def group_params(self, group: list[int], variables: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The variables of ``group`` (one of ``groups``) for a compiled call: ``Verified`` when the compiled
        path takes them (``fits`` re-reads their addresses at every step), computed once per plan."""
        key = ("params", id(group))
        kept = self.memo.get(key)
        if kept is None or kept[0] is not group:  # (by identity: the id of a list let go may be reused)
            params = [variables[p] for p in group]
            if native.routes(params[0]) is not None:  # (the compiled rules, or Triton's on a device)
                params = self.verified(tuple(group), params)
            kept = self.memo[key] = (group, params)
        return kept[1]

    def taker(self, group: list[int]) -> Callable[[Mapping[int, Any]], Sequence[Any]]:
        """A function taking the entries of ``group`` (one of ``groups``) from a mapping keyed by position, in
        order, in one C-level call (``operator.itemgetter``); computed once per plan."""
        key = ("taker", id(group))
        take = self.memo.get(key)
        if take is None:
            if len(group) == 1:
                take = _one(group[0])
            else:
                take = operator.itemgetter(*group)
            self.memo[key] = take
        return take

    def entries(self, table: Mapping[int, Any], group: list[int]) -> Sequence[Any]:
        """The entries of ``group`` (one of ``groups``) in ``table`` (a slot table keyed by position), in order.
        Where the table's keys are the group's positions in the group's order (a slot table made for these
        variables: checked once per table object), its values are that, read in one linear pass instead of a
        lookup per position; the table only ever grows (slots are replaced in place, never removed), so the same
        table object of the same length still has those keys."""
        key = ("entries", id(table), id(group))
        kept = self.memo.get(key)
        if kept is None or kept[0] is not table or kept[1] is not group:
            kept = (table, group, type(table) is dict and list(table) == group)
            self.memo[key] = kept
        if kept[2] and len(table) == len(group):
            return tuple(table.values())
        return self.taker(group)(table)

    def state_operands(self, name: str, group: list[int], tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``tensors`` (slot ``name`` of ``group``, one of ``groups``) for a compiled call: once they were seen as
        contiguous tensors of their variables' dtype, device and sizes on a path that takes them by address (the
        compiled CPU rules, or Triton's, ``native.routes``), a ``Matched`` list with their addresses
        whenever they are still the same tensors at the same addresses and contiguous (one C-level pass per
        property), else as they are (the compiled call then checks them in full). (A tensor object keeps its
        dtype; one whose storage was swapped or grown has another address; one shrunk in place by ``resize_``
        still owns the bytes the rule touches.)"""
        key = ("state", name, id(group))
        memo = self.memo.get(key)
        if memo is not None and memo[0] is group:
            matched, record = memo[4], memo[5]
            if record is not None and tensor_table.active() and type(tensors) in (list, tuple):
                # Identity, address, dtype, device, sizes, contiguity, storage bounds and kind, proven again in one
                # pass; the rule writes them next: their version counters move in the same pass (``bumped``).
                if tensor_table.same_tensors(record, tensors, bump=True):
                    matched.bumped, matched.held = True, False
                    return matched
            elif self._same_state(tensors, memo):
                # (the same proof in bulk: identity, address, class, kind; and contiguity, views, sizes, dtype,
                # writability and bounds, unless this quiet step's slots were held unchanged in it: by a record of
                # their kinds too, or not)
                matched.bumped = False
                # Their storages are held by that record (``Held``) through the kernel call: what ``pins.pin`` would
                # hold (memory the call's addresses lie in, proven in this step).
                matched.held = self._held()
                return matched
        shapes = [self.shapes[self.index_of[p]] for p in group]
        dtype = self.dtypes[self.index_of[group[0]]]
        device = self.devices[self.index_of[group[0]]]
        # (the compiled rules take CPU tensors; Triton's, the variables' device: both by these addresses)
        route = native.routes(tensors[0]) if len(tensors) else None
        if not (route is not None and all([t.dtype is dtype and t.device == device and t.is_contiguous()
                                           for t in tensors]) and list(map(_shape, tensors)) == shapes
                and all(map(direct, tensors))):
            self.memo.pop(key, None)
            return list(tensors)
        matched = native.Matched(tensors)
        addresses = list(map(_address, tensors))
        matched.addresses = np.array(addresses, dtype=np.uint64)
        record = tensor_table.make_plan(list(tensors))  # (None when the C++ checks are off)
        types = list(map(type, tensors))
        extents = [t.numel() * t.element_size() for t in tensors]
        ends = [a + e if e else 0 for a, e in zip(addresses, extents)]
        self.memo[key] = (group, list(tensors), addresses, shapes, matched, record, dtype, types,
                          list(dict.fromkeys(types)), ends, extents, None if device.type == "cpu" else device)
        return matched

    def _same_state(self, tensors: Sequence[torch.Tensor], memo: tuple[Any, ...]) -> bool:
        """Whether ``tensors`` are still the state operands ``memo`` recorded (the Python checks of
        ``state_operands``), each property read from the tensors themselves."""
        with plain_reads():
            return (all(map(_is, tensors, memo[1])) and list(map(_address, tensors)) == memo[2]
                    and list(map(type, tensors)) == memo[7] and all(map(direct_type, memo[8])) and (
                        self._held(whole=True) or (all(map(_contiguous, tensors)) and plain(tensors) and (
                            self._held() or (list(map(_shape, tensors)) == memo[3]
                                             and all(map(_is, map(_dtype, tensors), repeat(memo[6])))
                                             and (memo[11] is None or all(map(operator.eq, map(_device, tensors),
                                                                                 repeat(memo[11]))))
                                             and writable_now(tensors) and inside(tensors, memo[9], memo[10]))))))

    def _held(self, whole: bool = False) -> bool:
        """Whether this step is quiet and its slots were proven by the Python record (``Held.holds``: each the same
        object at the same address, dtype and sizes, in the same storage, writable; with ``whole``, contiguous and
        of a kind read directly as well), with no collection since (``unchanged.proven_again`` marks it, the next
        ``fits`` drops it). The slot tables are not changed by a quiet step's own code: a tensor of the memo found
        in them now was among those the record proved."""
        held = self.memo.get("held")
        return held is not None and held[0] == collections() and held[1] >= (2 if whole else 1)

    @staticmethod
    def possible(opt: Planner, pairs: Sequence[Pair]) -> bool:
        """Whether a checked step of ``pairs`` can leave a plan, i.e. is an ordinary step of its own plan (what
        ``fits`` checks): every variable known, strided-contiguous and listed once, every gradient a dense tensor
        of its variable's dtype, shape and device. A step that is not builds no plan (which would be dropped)."""
        if len(pairs) < 2:  # nothing to save
            return False
        tensor, strided, index = torch.Tensor, torch.strided, opt._var_index
        for g, v in pairs:
            if type(g) is not tensor or g.layout is not strided or v.layout is not strided or id(v) not in index \
                    or g.is_nested or v.is_nested or g.dtype is not v.dtype or g.shape != v.shape \
                    or g.device != v.device or not v.is_contiguous() \
                    or getattr(v, "overwrite_with_gradient", False) is True \
                    or not direct(v):  # Keras 3: such steps run in full; kinds read by address only
                return False
        return len({id(v) for _, v in pairs}) == len(pairs)

    def valid_for(self, opt: Planner) -> bool:
        index, count, trainable, foreach, flat = self.key
        return (opt._var_index is index and len(opt._vars) == count
                and opt.__dict__.get("_trainable_index") is trainable and opt.foreach == foreach
                and opt.__dict__.get("_flat_state") is flat)

    def fits_params(self, params: list[torch.Tensor]) -> Optional[Ordinary]:
        """The ``(p.grad, p)`` pairs of a torch ``step()`` over ``params`` as an ``Ordinary`` step of this plan,
        read and checked in one C++ pass; None when they are not one or the C++ checks are off (the caller then
        builds the pairs and checks them as any step's)."""
        if self.table is None or not tensor_table.active():
            return None
        checked = tensor_table.fits_params(self.table, params)
        if checked is None:
            return None
        grads, addresses, constrained, pairs = checked
        return Ordinary.of(pairs, self, grads, _from_table(addresses), constrained)

    def fits(self, pairs: Sequence[Pair]) -> Optional[Ordinary]:
        """``pairs`` as an ``Ordinary`` step of this plan, or None (see the module docstring)."""
        self.memo.pop("held", None)  # (a quiet step's mark for its slots, engine/proof/unchanged.py: that step is over)
        if self.table is not None and tensor_table.active():
            checked = tensor_table.fits(self.table, pairs)
            if checked is None:
                return None
            grads, addresses, constrained = checked
            return _proven(Ordinary.of(pairs, self, grads, _from_table(addresses), constrained))
        n = len(self.variables)
        # (a face's own pairs are 2-tuples; anything else is checked in full: every pair a tuple, of two elements
        # in all, none with fewer than two, which ``_second`` would raise on)
        if len(pairs) != n or not all(map(_is, map(type, pairs), repeat(tuple))) or sum(map(len, pairs)) != 2 * n:
            return None
        try:
            variables = list(map(_second, pairs))
        except IndexError:
            return None
        if not all(map(_is, variables, self.variables)):
            return None
        with plain_reads():  # (each property read from the tensor itself, as the C++ checks read it)
            return self._fits_python(pairs, list(map(_first, pairs)), variables)

    def _fits_python(self, pairs: Sequence[Pair], grads: list[torch.Tensor],
                     variables: list[torch.Tensor]) -> Optional[Ordinary]:
        # Everything the kernels rely on, proven again (a plan caches work, never trust): each variable's class,
        # address, dtype, device, sizes, contiguity, kind, writability and storage bounds. ``p.data = ...`` can give
        # a tensor of another size at the same address; ``resize_``, ``set_`` and dtype views change sizes or dtype
        # in place. One C-level pass per property, each property read once per step (``operands``' bulk checks:
        # a Python call per tensor costs more than the reads). (Each variable's storage is read again, not held
        # by the plan: a storage the user let go, as FSDP and weight-swapping code do with ``p.data = ...``
        # between steps, must be freed then, not at the next step.)
        kinds = self.guards
        if kinds is not None and kinds[0] is not None and all(map(direct_type, self.type_set)) \
                and kinds[0].same(variables):
            # (class, dtype, device, sizes, strides and dispatch keys in one C++ pass, against a record of these
            # variables made when they were proven below: contiguity, views, writability and the rest with them)
            if not (list(map(_address, variables)) == self.addresses and inside_ends(variables, self.ends_array)):
                return None
        elif list(map(type, variables)) != self.types or not all(map(direct_type, self.type_set)) \
                or list(map(_address, variables)) != self.addresses or list(map(_dtype, variables)) != self.dtypes \
                or list(map(_shape, variables)) != self.shapes \
                or not (all(map(_on_cpu, variables)) if self.on_cpu else list(map(_device, variables)) == self.devices) \
                or not all(map(_contiguous, variables)) or not plain(variables) or not writable_now(variables) \
                or not inside_ends(variables, self.ends_array):
            return None  # changed since: checked in full again (the full path refuses a changed variable)
        else:
            kinds = self.guards = (Kinds.of(variables), None)  # (proven now: recorded for the next steps)
        # One C-level pass per property (no Python loop per gradient): the type, layout, dtype, device, shape and
        # kind of each gradient against its variable's, as the plan recorded them. A sparse COO gradient has a
        # dtype, a shape, a device and even a contiguity (False) like a dense one, and only the full path checks its
        # rows (an index past the table must never reach a kernel). Anything unusual (sparse, mkldnn, nested, meta,
        # another device, a lazily negated view a kernel would read unnegated) takes the full path, which checks it
        # or refuses it. Gradients of the kinds of a record made of earlier gradients proven here (exact
        # torch.Tensor, strided, contiguous, of their variables' dtypes, sizes and devices, no view) are that again:
        # one C++ pass, whose dispatch keys and device index tell layouts and devices apart. Before it, what it must
        # not be given: another class (whose properties may be Python code), a nested tensor (whose strides the
        # guard's read aborts the process on), a tensor without a storage (sparse, mkldnn: the address read raises).
        if not (all(map(_is, map(type, grads), repeat(torch.Tensor))) and not any(map(_nested, grads))):
            return None
        try:  # (read into an array: what the compiled calls take, ``Ordinary.gradients``)
            addresses = np.fromiter(map(_address, grads), dtype=np.uint64, count=len(grads))
        except (RuntimeError, NotImplementedError):
            return None
        known = kinds is not None and kinds[1] is not None and kinds[1].same(grads)
        if not known and not (
                all(map(_is, map(_layout, grads), repeat(_strided)))
                and (all(map(_on_cpu, grads)) if self.on_cpu else list(map(_device, grads)) == self.devices)
                and list(map(_dtype, grads)) == self.dtypes and list(map(_shape, grads)) == self.shapes
                and plain(grads)):
            return None
        # (strided, not nested: contiguity is defined; a gradient read by address must lie inside its storage)
        ends = addresses + self.extents_array
        if self.empty:
            ends[self.extents_array == 0] = 0
        contiguous = (known or all(map(_contiguous, grads))) and inside_ends(grads, ends)
        if contiguous and not known and kinds is not None:
            self.guards = (kinds[0], Kinds.of(grads))
        return _proven(Ordinary.of(pairs, self, grads, addresses if contiguous else None))


def split(step: Ordinary, key: Any, route: Callable[[], dict[int, list[Pair]]],
          plans: Sequence[Optional[StepPlan]]) -> dict[int, list[Pair]]:
    """The pairs of ``step`` grouped by owner, each group handed on as checked where it can be: a composite's shares
    for its optimizers.

    ``route()`` is the full routing (it may raise for a variable no optimizer owns); its groups are ``step``'s own
    pair tuples. The grouping depends only on ``step``'s variables (its plan) and on ``key``, what ownership depends
    on (an object replaced, never edited, when ownership changes): it is worked out once and kept with ``step``'s
    plan, with the pair indices of each group, so a later step is split with one C-level take per group and no pair
    compared again. ``step``'s plan checked every pair in this step, and ``plans[owner]`` (that optimizer's plan, if
    any) would check the same things of the same pairs: where it records exactly the group's variables in order, the
    group is an ``Ordinary`` step of it, with the gradients and their addresses taken from ``step``; else a list."""
    memo = step.plan.memo
    kept = memo.get(("split", id(key)))
    if kept is None or kept[0] is not key or len(kept[1]) != len(plans) or not all(map(_is, kept[1], plans)):
        groups = route()
        where = {id(pair): i for i, pair in enumerate(step)}
        parts = []
        for owner, group in groups.items():
            indices = [where.get(id(pair), -1) for pair in group]
            if -1 in indices or not indices:  # (not the step's own tuples: nothing to keep)
                return groups
            plan = plans[owner]
            # The owner's plan vouches for the group only where it records the group's variables as ``step``'s plan
            # proved them in this step: the same objects, where they are now, of the same dtypes and sizes (a
            # variable moved since that plan was made, ``p.data = p.data.clone()``, would be written where it was).
            if plan is not None and not (len(indices) == len(plan.variables) and all(
                    map(_is, [step.plan.variables[i] for i in indices], plan.variables))
                    and [step.plan.addresses[i] for i in indices] == plan.addresses
                    and [step.plan.shapes[i] for i in indices] == plan.shapes
                    and [step.plan.dtypes[i] for i in indices] == plan.dtypes):
                plan = None
            take = operator.itemgetter(*indices) if len(indices) > 1 else _one(indices[0])
            parts.append((owner, take, np.asarray(indices, dtype=np.int64), plan))
        kept = (key, list(plans), parts)
        memo[("split", id(key))] = kept
    addresses = step.grad_addresses
    shares: dict[int, list[Pair]] = {}
    for owner, take, indices, plan in kept[2]:
        group = list(take(step))
        shares[owner] = group if plan is None else Ordinary.of(
            group, plan, list(take(step.grads)), None if addresses is None else np.asarray(addresses)[indices])
    return shares


def _from_table(addresses: Optional[bytes]) -> Optional[np.ndarray]:
    """The gradients' addresses as the C++ checks return them (bytes of uint64, or None) as an array."""
    return None if addresses is None else np.frombuffer(addresses, dtype=np.uint64)


def _one(position: int) -> Callable[[Mapping[int, Any]], tuple[Any]]:
    """``itemgetter`` of one key returns the entry itself, not a 1-tuple: this one returns the 1-tuple."""
    return lambda mapping: (mapping[position],)


def _registry_key(opt: Planner) -> tuple[Any, ...]:
    """What a plan depends on besides its variables: the registry (replaced or grown when variables are added,
    removed or copied), the built variable list, and whether groups are taken whole (``foreach``)."""
    return (opt._var_index, len(opt._vars), opt.__dict__.get("_trainable_index"), opt.foreach,
            opt.__dict__.get("_flat_state"))


_proofs = count()


def _proven(step: Ordinary) -> Ordinary:
    step.proof = next(_proofs)
    return step


def proof_mark() -> tuple[int, int]:
    """``(number, collections)``: an ``Ordinary`` with a greater ``proof`` was proven after this call, and
    ``collections()`` is still the second number while the cyclic collector has not run since."""
    return next(_proofs), collections()


def collections() -> int:
    """How many times the cyclic garbage collector has run in this process (its finalizers and weakref callbacks
    are Python code that may move a variable; a step holds it off, engine/writing/atomic.py, but another thread's step that
    ends switches it back on)."""
    return sum([generation["collections"] for generation in gc.get_stats()])


_monitoring = getattr(sys, "monitoring", None)  # (Python 3.12 on: tools whose callbacks run at any instruction)
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)


def quiet_now(plan: StepPlan) -> bool:
    """Whether no Python code can run now but slotopt's own and torch's (the caller adds the optimizer's own
    ``atomic.may_run_user_code``): no trace or profile function, no monitoring tool, no torch function or dispatch
    mode (Python code run by torch's ops), and every variable of ``plan`` of a class of torch or slotopt (another
    class's ``__torch_function__`` or properties are Python code)."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return False
    if _monitoring is not None and any(_monitoring.get_tool(tool) is not None for tool in range(6)):
        return False
    if _function_mode is None or _function_mode() or _dispatch_modes is None or _dispatch_modes():
        return False
    return all([cls.__module__.partition(".")[0] in ("torch", "slotopt") for cls in plan.type_set])
