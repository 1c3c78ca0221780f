"""An optimizer built on a file's tensors (issue 40): the readers' slots become the optimizer's, without the
zero-filled allocation and the copy that ``set_weights`` makes.

A reader (``io/``) checks the saved state on a probe built on ``meta`` tensors first (:func:`check`: the checks
``set_weights`` applies, without its copies), then builds the caller's optimizer with the offer handed to it (:func:`offered`: set on that
optimizer, read by its own slot creation, never by another build): a face that is about to allocate a slot asks
:func:`take` whether its offer holds that slot (by the variable it belongs to and the slot's name), and gets the
file's tensor when its shape, dtype, device and layout are what the face would have allocated. Slots packed into a
shared buffer (Keras 3's small variables) cannot be the file's tensor: each is filled from it once
(:func:`fill_packed`) and the reader keeps the packed slot in the file tensor's place (``Offer.packed``), so one
copy stays. Whatever was not taken (scalars, a slot of another dtype or layout) is written by :func:`assign`,
once, into the optimizer's own tensor.

What a reader hands out without a copy (the weights as parameters, the saved slots as the optimizer's) keeps
being the reader's tensor too: :class:`Loans` remembers each one's version counter and the CRC-32 of its bytes, so
that a second use of it copies the file's values while they are still unwritten and refuses clearly once training
has written them (through ``.data`` too, which moves no version counter).

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine import adopt
    >>> w, saved = torch.zeros(1 << 16), torch.full((1 << 16,), 0.5)
    >>> placeholder = torch.empty(w.shape, device="meta")
    >>> probe = slotopt.SGD(0.1, momentum=0.9)
    >>> probe.build([placeholder])
    >>> offer = adopt.offer(probe, [placeholder], [w], {id(probe.variables[2]): saved})
    >>> opt = slotopt.SGD(0.1, momentum=0.9)
    >>> with adopt.offered((opt, offer)):
    ...     opt.build([w])
    >>> opt.variables[2].data_ptr() == saved.data_ptr()
    True
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch

from . import resume
from .proof import weights

__all__ = ["Loans", "fingerprint", "Offer", "slot_keys", "offer_by_keys", "offer", "offered", "take", "fill_packed",
           "taken_fill", "check", "assign", "same_memory"]


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory (a slot made of the file's tensor)."""
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.device == b.device
            and tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride())


_FINGERPRINT_CHUNK = 1 << 24


def _span(tensor: torch.Tensor) -> Optional[memoryview]:
    """The bytes of ``tensor``'s storage its elements lie in (a view's whole extent), as a memoryview; None for a
    tensor whose bytes this process cannot read in place (``meta``, another device, no elements)."""
    if tensor.device.type != "cpu" or tensor.numel() == 0 or tensor.layout != torch.strided:
        return None
    size = tensor.element_size()
    start = tensor.storage_offset() * size
    stop = start + (1 + sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride()))) * size
    storage = torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())
    return memoryview(storage.numpy()[start:stop])


def fingerprint(tensor: torch.Tensor) -> Optional[tuple[int, ...]]:
    """The CRC-32 of every 16 MiB of ``tensor``'s bytes (computed on threads: ``zlib`` releases the GIL), or
    None where its bytes cannot be read in place. What a write leaves of it tells whether the tensor was written,
    whatever route the write took (``.data`` writes do not move the version counter)."""
    view = _span(tensor)
    if view is None:
        return None
    chunks = [view[i:i + _FINGERPRINT_CHUNK] for i in range(0, len(view), _FINGERPRINT_CHUNK)]
    if len(chunks) == 1:
        return (zlib.crc32(chunks[0]),)
    with concurrent.futures.ThreadPoolExecutor(min(len(chunks), os.cpu_count() or 1)) as pool:
        return tuple(pool.map(zlib.crc32, chunks))


class Loans:
    """The tensors a reader handed out without a copy, with each one's version counter and fingerprint (the
    CRC-32 of its bytes, :func:`fingerprint`) at the hand-over.

    A tensor handed out is the caller's from then on: training writes it. Handing the same tensor out again would
    alias two models, so a second use copies it while it is unwritten, and is refused (``ValueError`` naming it)
    once written: the file's values are no longer in memory. Written means its version counter moved or its bytes
    changed: a write through ``.data`` (a new tensor on the same memory, with a counter of its own) moves no
    counter, so the version counter alone would take written values for the file's. The fingerprint costs one
    pass over the bytes at the hand-over (a CRC-32 at memory speed, on every core) and one at a second use."""

    def __init__(self) -> None:
        self._lent: dict[int, tuple[torch.Tensor, int, Optional[tuple[int, ...]]]] = {}

    def lent(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._lent and self._lent[id(tensor)][0] is tensor

    def lend(self, tensor: torch.Tensor) -> None:
        self._lent[id(tensor)] = (tensor, tensor._version, fingerprint(tensor))

    def written(self, tensor: torch.Tensor) -> bool:
        """Whether a lent ``tensor`` was written since it was handed out (by any route)."""
        _, version, mark = self._lent[id(tensor)]
        return tensor._version != version or fingerprint(tensor) != mark

    def check(self, tensor: Any, what: str, path: str) -> None:
        """Raises when ``tensor`` was handed out and has been written since."""
        if isinstance(tensor, torch.Tensor) and self.lent(tensor) and self.written(tensor):
            raise ValueError(
                f"{path}: {what} was handed over without a copy (to the parameters or the optimizer an earlier call "
                "returned) and has been written since: it no longer holds the file's values. Read the file again "
                "for a second model.")

    def take(self, tensor: torch.Tensor, what: str, path: str) -> torch.Tensor:
        """``tensor`` itself the first time (lent from then on); an unwritten copy later."""
        self.check(tensor, what, path)
        if self.lent(tensor):
            return tensor.detach().clone()
        self.lend(tensor)
        return tensor


class Offer:
    """File tensors offered as the slots of one build: ``(id(variable), slot name) -> tensor``. The variables are
    kept, so that an id stays theirs while the offer lives. ``packed``: the ``(file tensor, slot)`` pairs of slots
    packed into a shared buffer (Keras 3's small variables), which cannot be the file's tensor: each was filled
    from it, once, and the reader then keeps the slot in its place (:func:`handed_over`)."""

    def __init__(self, slots: dict[tuple[int, str], torch.Tensor], keep: Sequence[torch.Tensor],
                 loans: Optional[Loans]) -> None:
        self.slots = slots
        self.keep = list(keep)
        self.loans = loans
        self.fills: dict[tuple[int, tuple[int, ...]], Any] = {}  # (data_ptr, shape) of a taken slot -> its fill
        self.taken: list[torch.Tensor] = []
        self.packed: list[tuple[torch.Tensor, torch.Tensor]] = []


#: Where a build finds its offer: set on each optimizer being built (``offered``), read by its own slot creation.
_ADOPTION = "_adoption"


def _cores(opt: Any) -> list[Any]:
    """``opt`` and the optimizers it wraps (a loss-scale optimizer's inner one, a composite's parts)."""
    found, todo, seen = [], [opt], set()
    while todo:
        o = todo.pop(0)
        if id(o) in seen:
            continue
        seen.add(id(o))
        if "_slots" in o.__dict__:
            found.append(o)
        inner = o.__dict__.get("inner_optimizer", o.__dict__.get("_optimizer"))
        if inner is not None and hasattr(inner, "__dict__"):
            todo.append(inner)
        parts = getattr(o, "_torch_optimizers", None)
        if callable(parts):
            todo.extend(p for p in parts() if p is not o)
    return found


def slot_keys(probe: Any, placeholders: Sequence[torch.Tensor]) -> dict[int, tuple[int, str]]:
    """``id(slot) -> (index of its placeholder, slot name)`` for every slot of ``probe`` (and of the optimizers it
    wraps), built on ``placeholders``: what a probe tells a build on other tensors, read once."""
    where = {id(p): i for i, p in enumerate(placeholders)}
    owners: dict[int, tuple[int, str]] = {}
    for core in _cores(probe):
        originals = core.__dict__.get("_originals") or core.__dict__.get("_vars") or []
        for slot_name, table in core._slots.items():
            for pos, slot in table.items():
                i = where.get(id(originals[pos])) if pos < len(originals) else None
                if i is not None:
                    owners[id(slot)] = (i, slot_name)
    return owners


def offer_by_keys(keys: Sequence[Optional[tuple[int, str]]], params: Sequence[torch.Tensor], values: Sequence[Any],
                  loans: Optional[Loans] = None) -> Offer:
    """What a build on ``params`` may take from the file: ``values[k]`` is offered as slot ``keys[k][1]`` of
    ``params[keys[k][0]]`` (None: no slot). A tensor handed out before (``loans``), one offered twice, or one
    sharing memory with a parameter is not offered (it is copied)."""
    param_memory = {p.untyped_storage().data_ptr() for p in params if p.device.type != "meta"}
    slots: dict[tuple[int, str], torch.Tensor] = {}
    seen: set[int] = set()
    for key, value in zip(keys, values):
        if key is None or not isinstance(value, torch.Tensor) or value.requires_grad:
            continue
        if id(value) in seen or (loans is not None and loans.lent(value)) \
                or value.untyped_storage().data_ptr() in param_memory:
            continue
        seen.add(id(value))
        i, slot_name = key
        slots[(id(params[i]), slot_name)] = value
    return Offer(slots, params, loans)


def offer(probe: Any, placeholders: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
          values: Mapping[int, Any], loans: Optional[Loans] = None) -> Offer:
    """``offer_by_keys`` for ``values`` keyed by ``id(probe variable)`` (a slot of ``probe``, built on
    ``placeholders``, one per tensor of ``params``)."""
    owners = slot_keys(probe, placeholders)
    keys = list(values)
    return offer_by_keys([owners.get(k) for k in keys], params, [values[k] for k in keys], loans)


@contextlib.contextmanager
def offered(*builds: tuple[Any, Offer]) -> Iterator[None]:
    """Each ``(optimizer, offer)``: the optimizer (and those it wraps) built inside it take their slots from its
    offer, which is handed to it, not to whatever else builds meanwhile; what was taken is lent (``Loans``) when
    it ends without an error."""
    held = [(core, o) for opt, o in builds for core in _cores(opt)]
    for core, o in held:
        core.__dict__[_ADOPTION] = o
    try:
        yield
    finally:
        for core, _ in held:
            core.__dict__.pop(_ADOPTION, None)
    for _, o in builds:
        if o.loans is not None:
            for tensor in o.taken:
                o.loans.lend(tensor)
            for _, slot in o.packed:
                o.loans.lend(slot)


def _fits(value: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, device: Any) -> bool:
    return (tuple(value.shape) == tuple(int(s) for s in shape) and value.dtype == dtype
            and value.device == torch.device(device if device is not None else "cpu")
            and value.layout == torch.strided and value.is_contiguous())


def take(opt: Any, variable: torch.Tensor, slot_name: str, shape: Sequence[int], dtype: torch.dtype, device: Any,
         fill: Any) -> Optional[torch.Tensor]:
    """The file's tensor for the slot ``slot_name`` of ``variable`` when ``opt``'s build is offered one
    (``offered``) of exactly the ``shape``, ``dtype`` and ``device`` the face would allocate (dense, contiguous);
    else None (allocate). ``fill``: the number the face would have filled the slot with (what a reset writes
    back); None for an initializer that is not a constant, whose slots are always allocated."""
    o = opt.__dict__.get(_ADOPTION)
    if o is None or fill is None:
        return None
    value = o.slots.get((id(variable), slot_name))
    if value is None or not _fits(value, shape, dtype, device):
        return None
    del o.slots[(id(variable), slot_name)]
    o.fills[(value.data_ptr(), tuple(value.shape))] = fill
    o.taken.append(value)
    return value


def fill_packed(opt: Any, slot_name: str, views: Mapping[int, torch.Tensor], variables: Sequence[Any],
                fill: Callable[[torch.dtype], Any]) -> None:
    """Slots packed into one buffer (``views``: position -> view) filled from ``opt``'s offer (each view once from
    the file's tensor of its variable, ``variables``: ``(position, variable)``; ``fill(dtype)``: the number the face
    filled them with): a packed slot cannot be the file's
    tensor, so the offer records the pair and the reader keeps the slot in the file tensor's place
    (``Offer.packed``): the file's copy is freed, one copy stays."""
    o = opt.__dict__.get(_ADOPTION)
    if o is None:
        return
    with torch.no_grad():
        for pos, variable in variables:
            view = views.get(pos)
            value = o.slots.get((id(variable), slot_name))
            if view is None or value is None or not _fits(value, view.shape, view.dtype, view.device):
                continue
            del o.slots[(id(variable), slot_name)]
            view.copy_(value)
            o.fills[(view.data_ptr(), tuple(view.shape))] = fill(view.dtype)
            o.packed.append((value, view))


def taken_fill(opt: Any, tensor: torch.Tensor) -> Any:
    """What a reset writes back into a new slot of ``opt``: for a slot taken from a file (its values are the
    file's, not the initial ones) the fill the face would have allocated, else ``resume.initial_fill``, the one
    ``initial_fill``."""
    o = opt.__dict__.get(_ADOPTION)
    if o is not None:
        fill = o.fills.get((tensor.data_ptr(), tuple(tensor.shape)))
        if fill is not None:
            return fill
    return resume.initial_fill(tensor)


def check(targets: Sequence[torch.Tensor], values: Sequence[Any], *, argument: str = "weights",
          count: Optional[str] = None) -> None:
    """Every check ``set_weights`` applies to ``values`` for ``targets`` (a probe's variables), without copying
    them; a None value (not saved: the optimizer's own stays) is skipped."""
    if len(values) != len(targets):
        raise ValueError(count or f"Received {len(values)} values for {len(targets)} optimizer variables.")
    for i, (target, value) in enumerate(zip(targets, values)):
        if value is not None:
            weights.checked_entry(i, value, target, argument=argument)


def assign(targets: Sequence[torch.Tensor], values: Sequence[Any]) -> None:
    """Writes checked ``values`` into ``targets``: a value that is the target's memory (taken at the build) and a
    None value are left; any other is converted to the target's dtype and copied once."""
    with torch.no_grad():
        for target, value in zip(targets, values):
            if value is None:
                continue
            if isinstance(value, np.ndarray):
                value = torch.as_tensor(value)
            if isinstance(value, torch.Tensor) and same_memory(value, target):
                continue
            target.copy_(torch.as_tensor(value).to(dtype=target.dtype, device=target.device))
