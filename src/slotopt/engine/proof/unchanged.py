"""What a step proves unchanged before it writes anything, beyond its variables' own kind (engine/core.py): that no
variable is one a kernel may not write, and that every slot is still of the kind it was made.

A plan (engine/plan.py) caches work, never trust: these checks run on every step, the slots in one C++ pass over
them all where the tensor table is built (``kernels/native/tensor_table.py``), in Python elsewhere, with the same
verdicts. A step that fails them is refused before its first write, with a message naming the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any, Optional

import numpy as np
import torch

from ...kernels.native import tensor_table
from ...kernels.native.operands import Held
from ..plan import Ordinary, Pair, StepPairs, collections, is_python_dispatch, within_storage
from ..writing.undo import plain_tensor_type
from .aliasing import unaliased

__all__ = ["slots_hold", "check_slots", "check_writable", "check_variables_unchanged", "proven_again"]


def _all_slots(opt: Any) -> list[Any]:
    return list(chain.from_iterable(map(dict.values, opt._slots.values())))


def slots_hold(opt: Any, step: Optional[Ordinary] = None) -> bool:
    """Whether every slot of ``opt`` is still the tensor last checked, unchanged (address, dtype, device, sizes,
    storage bounds, kind), in one C++ pass over them all; else, or without the C++ checks, whether each still has
    the dtype and sizes it was made with and lies inside its storage (read in Python, then recorded again).

    ``step``: the ordinary step this proves the slots of; marked ``held`` when the Python record proved every slot
    the same object at the same address, of the same dtype and sizes, in the same storage and writable
    (``Held.holds``), which ``StepPlan.state_operands`` need not read again in a quiet step: 2 when it proved each
    one contiguous and of a kind read directly too (``Held.whole``), 1 when not."""
    kinds = opt.__dict__.get("_slot_kinds")
    if not kinds:
        return True
    slots = _all_slots(opt)
    record = opt.__dict__.get("_slot_record")
    if record is not None and len(slots) == record[0]:
        if type(record[1]) is Held:
            if not tensor_table.active() and record[1].holds(slots):
                if step is not None:
                    step.held = 2 if record[1].whole else 1
                return True
        elif tensor_table.active() and tensor_table.same_tensors(record[1], slots):
            return True
    expected = [kinds.get(key) for key in chain.from_iterable(
        ((name, pos) for pos in table) for name, table in opt._slots.items())]
    if not all(kind is None or not isinstance(slot, torch.Tensor) or (
            slot.dtype == kind[0] and slot.shape == kind[1] and within_storage(slot))
            for slot, kind in zip(slots, expected)):
        opt.__dict__.pop("_slot_record", None)
        return False
    if tensor_table.active():
        record = tensor_table.make_plan(slots) if slots else None  # (None: a slot not read directly)
    else:
        record = Held.of(slots)
    opt.__dict__["_slot_record"] = None if record is None else (len(slots), record)
    return True


def check_slots(opt: Any) -> None:
    """A slot resized or re-typed in place since it was made (``resize_``, ``set_``, ``.data =`` a tensor of
    another dtype or shape) is refused before anything is written: its rule would read it as the kind it was made
    (its ``state_dict`` would no longer load, an int32 slot would get float bits). Values assigned in place
    (``copy_``), or a new storage of the same kind, are fine."""
    if slots_hold(opt):
        return
    kinds = opt.__dict__["_slot_kinds"]
    for name, table in opt._slots.items():
        for pos, slot in table.items():
            kind = kinds.get((name, pos))
            if kind is None or not isinstance(slot, torch.Tensor):
                continue
            if slot.dtype != kind[0] or slot.shape != kind[1] or not within_storage(slot):
                where = opt._var_names[pos] if pos < len(opt._var_names) else pos
                raise ValueError(
                    f"State {name!r} of variable {where} is now {slot.dtype} of shape {tuple(slot.shape)}; the "
                    f"optimizer made it {kind[0]} of shape {tuple(kind[1])}. Assign a slot's values in place "
                    "(slot.copy_(...)) rather than resizing or re-typing it.")


def check_writable(opt: Any, pairs: Sequence[Pair]) -> None:
    """Refused before any variable of the step is written (torch's own error would come from the first kernel that
    writes it, after the variables before it): an inference tensor outside inference mode, and a variable whose
    storage no longer holds its elements (``untyped_storage().resize_(0)``, as FSDP frees a parameter)."""
    variables = [pair[1] for pair in pairs if pair[0] is not None]
    if tensor_table.readable(variables, True):
        return  # (one C++ pass: every variable plain, contiguous, inside its storage and writable)
    inference_ok = torch.is_inference_mode_enabled()
    for var in variables:
        if not isinstance(var, torch.Tensor) or is_python_dispatch(var):
            continue  # (checked as a variable elsewhere; a wrapper subclass is torch's to check)
        if var.is_inference() and not inference_ok:
            raise RuntimeError(
                f"Variable {opt._name_of(var)} is an inference tensor (made under torch.inference_mode()): it cannot "
                "be updated in place outside inference mode. Train a clone made outside it (torch.optim raises too).")
        if not within_storage(var):
            raise RuntimeError(
                f"Variable {opt._name_of(var)} of shape {tuple(var.shape)} lies outside its storage of "
                f"{var.untyped_storage().nbytes()} bytes (the storage was resized under it, e.g. freed by "
                "untyped_storage().resize_(0)): restore its storage before stepping.")


def check_variables_unchanged(self, pairs: Sequence[Pair]) -> None:
    """A variable whose dtype, device or shape changed since its state was made (``model.double()`` after
    the build) would be updated with state of the old kind: refused, as ``torch.optim`` refuses it. So is a
    variable no kernel may write, and a slot changed in kind (engine/proof/unchanged.py)."""
    check_writable(self, pairs)
    check_slots(self)
    kinds = self.__dict__.get("_var_kinds")
    if not kinds:
        return
    index = self._var_index
    for _, var in pairs:
        pos = index.get(id(var))
        if pos is None or pos not in kinds or pos >= len(self._vars) or self._vars[pos] is not var:
            continue
        dtype, device, shape = kinds[pos]
        same = tensor_table.same_kind(var, dtype, device, shape)  # (one C++ call; None: compared here)
        if same is False or (same is None and (var.dtype != dtype or var.device != device or var.shape != shape)):
            raise ValueError(
                f"Variable {self._var_names[pos]} is now {var.dtype} of shape {tuple(var.shape)} on {var.device}"
                f"; the optimizer built its state for {dtype} of shape {tuple(shape)} on {device}. Create the "
                "optimizer after converting or moving the model (torch.optim refuses this too).")


def proven_again(opt: Any, pairs: Sequence[Pair]) -> Sequence[Pair]:
    """``pairs`` proven again just before the step's first write, after the code the step itself calls before it
    (a learning-rate callable or schedule, a gradient transformer or aggregator, a subclass's hook), which may have
    moved a variable or a gradient the step checked at its start (``p.data = ...``): a kernel must never take an
    address read before such code ran. An ordinary step is proven again in one pass (its plan's ``fits``: the
    gradients' addresses are read anew), any other step has its variables' kinds, its dense gradients' shapes and
    its variables' storage checked again. Raises, with nothing written, when something changed. A gradient that is
    its variable's own memory is copied then, one that overlaps it otherwise refused (engine/proof/aliasing.py). An
    ordinary step marked ``quiet`` (``plan_cache._ordinary``: proven in this step, where no code but slotopt's own
    could run since) is not proven a second time, as long as no collection ran since.

    Nothing else can run in between (engine/writing/atomic.py: no finalizer, no signal handler in a step)."""
    if pairs.plan is not None:
        pairs.plan.uses += 1
        quiet, pairs.quiet = pairs.quiet, None  # (once: an ``Ordinary`` kept past its step proves nothing)
        if quiet is not None and quiet == collections():
            # Proven in this step where nothing but slotopt's own code has run since (plan_cache._ordinary): no
            # callable, transformer, hook or mode, and no collection (no finalizer) since before the proof. Its
            # slots too, when the Python record held them (``slots_hold``): ``state_operands`` reads only what that
            # record does not prove, until the plan's next proof (``fits`` drops the mark).
            pairs.plan.memo["held"] = (quiet, pairs.held) if pairs.held else None
            return unaliased(opt, pairs)
        if _still(pairs):  # (C++: the same pairs, gradients and addresses, every tensor proven again in one pass)
            return unaliased(opt, pairs)
        again = pairs.plan.fits(pairs)
        if again is None:
            raise RuntimeError(_moved(opt, pairs) + " Nothing was written; step again.")
        pairs.grads, pairs.grad_addresses = again.grads, again.grad_addresses
        return unaliased(opt, pairs)  # (a gradient that is its variable's memory: read as it was, engine/proof/aliasing.py)
    if "_var_kinds" not in opt.__dict__:  # (a wrapper: the optimizer it wraps proves its own step)
        return pairs
    check_variables_unchanged(opt, pairs)
    plain = None
    for i, (grad, var) in enumerate(pairs):
        if type(grad) is torch.Tensor:
            if isinstance(var, torch.Tensor) and grad.shape != var.shape:
                raise RuntimeError(f"The gradient of variable {opt._name_of(var)} changed while the step ran, before "
                                   f"its first write: it is now of shape {tuple(grad.shape)}, the variable "
                                   f"{tuple(var.shape)}. Nothing was written.")
        elif isinstance(grad, torch.Tensor) and not plain_tensor_type(type(grad)) and not is_python_dispatch(grad):
            # A gradient whose class has a ``__torch_function__`` of its own would run it inside the update, between
            # two writes (where it may raise): its values are read as a plain tensor of the same memory instead.
            with torch._C.DisableTorchFunctionSubclass():
                grad = grad.as_subclass(torch.Tensor)
            plain = StepPairs(pairs) if plain is None else plain
            plain[i] = (grad, var)
    return unaliased(opt, pairs if plain is None else plain)


def _still(step: Ordinary) -> bool:
    """Whether the C++ checks prove ``step`` unchanged since its ``fits`` (``tensor_table.still``); False where they
    are off or the step's gradients or addresses are not in the form they read."""
    table, addresses = step.plan.table, step.grad_addresses
    if table is None or type(step.grads) is not list or (addresses is not None and not (
            type(addresses) is np.ndarray and addresses.dtype == np.uint64 and addresses.flags.c_contiguous
            and len(addresses) == len(step))):
        return False
    return tensor_table.still(table, step, step.grads, addresses)


def _moved(opt: Any, step: Ordinary) -> str:
    """What changed in an ordinary step since its start: the first variable or gradient no longer as proven."""
    plan = step.plan
    for i, (grad, var) in enumerate(step):
        if var is not plan.variables[i] or var.data_ptr() != plan.addresses[i] or var.shape != plan.shapes[i] \
                or var.dtype != plan.dtypes[i] or not var.is_contiguous() or not within_storage(var):
            return (f"Variable {opt._name_of(var)} changed while the step ran, before its first write (now "
                    f"{var.dtype} of shape {tuple(var.shape)}; e.g. `p.data = ...` in a learning-rate callable or a "
                    "gradient transformer).")
        if not isinstance(grad, torch.Tensor) or grad.shape != var.shape or grad.dtype != var.dtype:
            return f"The gradient of variable {opt._name_of(var)} changed while the step ran, before its first write."
    return "A variable or gradient of this step changed while the step ran, before its first write."
