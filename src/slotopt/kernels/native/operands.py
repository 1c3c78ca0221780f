"""What the compiled path requires of a tensor it takes by address, and how it records a write (``native.apply``).

A kernel reads and writes memory at the addresses it is given: a tensor qualifies only when its class leaves
dispatch to torch (a wrapper subclass such as torchao's or float8's, or a fake tensor, keeps no elements in its
storage), it is contiguous, its elements lie inside its storage, and, when written, it is writable now (no
inference tensor outside inference mode). Anything else goes to torch's ops (the foreach kernels), which handle
or refuse it. A write moves the tensor's version counter, on every torch slotopt supports.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import add, attrgetter, is_, le
from typing import Any, Optional

import numpy as np
import torch

from . import tensor_table

__all__ = ["in_storage", "within_storage", "is_python_dispatch", "direct", "Held", "Kinds", "direct_type", "plain",
           "writable_now", "inside", "inside_ends", "plain_reads"]

try:
    from torch.autograd.graph import increment_version as _torch_increment_version
except ImportError:  # older torch
    _torch_increment_version = torch._C._increment_version  # type: ignore[attr-defined]

_NO_DISPATCH = torch._C._disabled_torch_dispatch_impl

#: A context in which reading a property of a tensor subclass (slotopt.Variable, whose class torch asks for a
#: ``__torch_function__`` on every call: three times the cost of a plain tensor's read) reads it from the tensor
#: itself, as the C++ checks do. Only around the checks' reads: user code and torch's ops never run inside it.
plain_reads = torch._C.DisableTorchFunctionSubclass


def _takes_lists() -> bool:
    """Whether this torch's ``increment_version`` takes a list (2.5 on); torch 2.4's takes one tensor and raises on
    a list, which a compiled call found only after its kernel had written."""
    try:
        _torch_increment_version([torch.zeros(1)])
    except (TypeError, RuntimeError):
        return False
    return True


_LIST_VERSIONS = _takes_lists()


def _increment_version(tensors: Sequence[torch.Tensor]) -> None:
    """Moves the version counter of each of ``tensors``, on every torch (called before a kernel writes them)."""
    if _LIST_VERSIONS:
        _torch_increment_version(tensors)
    else:
        for tensor in tensors:
            _torch_increment_version(tensor)


def in_storage(t: torch.Tensor) -> bool:
    """Whether the elements of a contiguous tensor lie inside its storage (a storage shrunk under its tensor, as
    ``untyped_storage().resize_`` does, fails this even where the allocator gave the old address back)."""
    numel = t.numel()
    if not numel:
        return True
    storage = t.untyped_storage()
    return storage.data_ptr() != 0 and (t.storage_offset() + numel) * t.element_size() <= storage.nbytes()


def within_storage(t: torch.Tensor) -> bool:
    """``in_storage`` for a tensor of any strides: its last element's byte lies inside its storage."""
    numel = t.numel()
    if not numel:
        return True
    if t.is_contiguous():
        return in_storage(t)
    if is_python_dispatch(t) or t.layout is not torch.strided or t.is_nested:
        return True  # (no storage of its own elements to check: torch's ops handle it)
    last = t.storage_offset() + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    storage = t.untyped_storage()
    return storage.data_ptr() != 0 and (last + 1) * t.element_size() <= storage.nbytes()


_is_functional = torch._is_functional_tensor


def is_python_dispatch(t: torch.Tensor) -> bool:
    """Whether ``t``'s class dispatches torch's ops itself (a wrapper subclass: torchao, float8, fake tensors)."""
    return getattr(type(t), "__torch_dispatch__", _NO_DISPATCH) is not _NO_DISPATCH


def direct(t: torch.Tensor) -> bool:
    """Whether a kernel may read a tensor by address: no wrapper subclass (``__torch_dispatch__``: torchao, float8,
    fake tensors), no functional wrapper, lazily negated or conjugated view; inside its storage; and writable now
    (no inference tensor outside inference mode). The C++ checks' ``dense``, ``in_storage`` and ``writable``."""
    return (not is_python_dispatch(t) and not _is_functional(t)
            and not t.is_neg() and not t.is_conj() and in_storage(t)
            and (not t.is_inference() or torch.is_inference_mode_enabled()))


# The same checks in bulk, for lists of tensors whose type, address, dtype and sizes the caller compared already
# with what it recorded (engine/plan.py): one C-level pass per property, no Python call per tensor.
_is_neg, _is_conj, _is_inference = torch.Tensor.is_neg, torch.Tensor.is_conj, torch.Tensor.is_inference
_untyped_storage = torch.Tensor.untyped_storage
_data_ptr = torch.Tensor.data_ptr
_storage_ptr = torch.UntypedStorage.data_ptr
_storage_bytes = torch.UntypedStorage.nbytes
_dtype, _shape = attrgetter("dtype"), attrgetter("shape")
_contiguous = torch.Tensor.is_contiguous


def direct_type(cls: type) -> bool:
    """Whether tensors of class ``cls`` leave dispatch to torch (no ``__torch_dispatch__`` of their own): read
    per class, on every step (a class attribute can be set at any time)."""
    return getattr(cls, "__torch_dispatch__", _NO_DISPATCH) is _NO_DISPATCH


def plain(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether none of ``tensors`` is a lazily negated or conjugated view or a functional wrapper (``direct``'s
    other kinds; ``t.data = t.data._neg_view()`` keeps the object, its address, dtype and sizes)."""
    return not (any(map(_is_neg, tensors)) or any(map(_is_conj, tensors)) or any(map(_is_functional, tensors)))


def writable_now(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether every one of ``tensors`` may be written now: no inference tensor outside inference mode."""
    return torch.is_inference_mode_enabled() or not any(map(_is_inference, tensors))


def inside(tensors: Sequence[torch.Tensor], ends: Sequence[int], extents: Sequence[int]) -> bool:
    """``in_storage`` of every one of ``tensors``, contiguous, each at an address ``a`` with ``ends[i] = a +
    extents[i]`` (its bytes; 0 when empty, which is inside whatever its storage): its storage has a base and
    reaches ``ends[i]``. (Its address is the base plus a storage offset, never negative: only the end is in
    question.) Two passes over the storages instead of ``in_storage``'s six calls per tensor."""
    storages = list(map(_untyped_storage, tensors))
    bases = list(map(_storage_ptr, storages))
    if not all(map(le, ends, map(add, bases, map(_storage_bytes, storages)))):
        return False
    return 0 not in bases or all([base != 0 or not extent for base, extent in zip(bases, extents)])


def inside_ends(tensors: Sequence[torch.Tensor], ends: np.ndarray) -> bool:
    """``inside`` with the ends as a uint64 array (``ends[i]``: the end of tensor ``i``'s bytes, 0 when it is empty):
    the storages' bases and sizes read in two C-level passes into arrays, compared in one vector pass (no Python
    int arithmetic per tensor)."""
    storages = list(map(_untyped_storage, tensors))
    n = len(storages)
    bases = np.fromiter(map(_storage_ptr, storages), dtype=np.uint64, count=n)
    limits = bases + np.fromiter(map(_storage_bytes, storages), dtype=np.uint64, count=n)
    return bool(np.all((ends == 0) | ((bases != 0) & (ends <= limits))))


def _readable(tensors: Sequence[torch.Tensor], written: bool) -> bool:
    """Whether a kernel may take every one of ``tensors`` by address (``direct``: kind, contiguity,
    storage bounds, and writability when ``written``), in one C++ pass where the table is built."""
    if tensor_table.active():
        return tensor_table.readable(tensors, written)
    return all([t.is_contiguous() and direct(t) for t in tensors])


class Kinds:
    """The Python checks' record of what a list of tensors is, proven again for a whole list in one C++ call: each
    tensor's exact class, dtype, device, sizes, strides, ``requires_grad`` and dispatch keys. The keys are where torch
    marks a lazily negated or conjugated view, a functional wrapper, an inference tensor, a sparse, mkldnn, nested or
    meta tensor and the device type, so a list that matches a record of tensors found plain, contiguous and writable
    is that again (what ``plain``, ``writable_now``, ``is_contiguous`` and the dtype, shape and device reads prove,
    in one pass instead of a call into torch per tensor and property). Not their addresses or storages.

    The pass is torch's own tensor guard, the one ``torch.compile`` checks its inputs with
    (``torch._C._dynamo.guards.TensorGuards``). It compares the keys after the thread's local dispatch state is
    applied, so a record is used only under the local state it was made in (an inference-mode or autocast region
    reads again in full). Where this torch has no such guard, or it fails the checks ``_guard_sound`` makes once of
    what it tells apart, ``of`` returns None and each property is read on its own, with the same verdicts.

    >>> kinds = Kinds.of([torch.zeros(3)])
    >>> kinds is None or (kinds.same([torch.ones(3)]) and not kinds.same([torch.ones(4)]))
    True
    """

    __slots__ = ("guard", "state")

    def __init__(self, guard: Any, state: tuple[int, int]) -> None:
        self.guard, self.state = guard, state

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor]) -> Optional[Kinds]:
        """A record of ``tensors`` (which the caller has just proven plain), or None: no guard on this torch."""
        if not tensors or not _guard_sound():
            return None
        try:
            return cls(_make_guard(tensors), _local_state())
        except Exception:  # (a tensor the guard cannot record: the properties are read one by one)
            return None

    def same(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether every one of ``tensors`` (as many as recorded) is of its recorded class, dtype, device, sizes,
        strides, ``requires_grad`` and dispatch keys, under the local dispatch state of the record."""
        try:
            return _local_state() == self.state and self.guard.check(*tensors) is True
        except Exception:  # (the wrong number of tensors, an object the guard refuses to read: not proven)
            return False


def _make_guard(tensors: Sequence[torch.Tensor]) -> Any:
    return _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                         dynamic_dims_strides=[list(t.stride()) for t in tensors])


try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
    _include_set, _exclude_set = torch._C._dispatch_tls_local_include_set, torch._C._dispatch_tls_local_exclude_set
except (ImportError, AttributeError):  # (a torch without them: every property read on its own)
    _TensorGuards = None


def _local_state() -> tuple[int, int]:
    """The thread's local dispatch state (included and excluded keys), which the guard applies to the keys."""
    return _include_set().raw_repr(), _exclude_set().raw_repr()


_soundness: Optional[bool] = None


def _guard_sound() -> bool:
    """Whether this torch's tensor guard tells apart everything ``Kinds`` relies on (checked once): a tensor of the
    recorded kind passes, and one that differs in any single respect the Python checks read fails."""
    global _soundness
    if _soundness is None:
        _soundness = False
        if _TensorGuards is not None:
            try:
                _soundness = _probe()
            except Exception:
                _soundness = False
    return _soundness


def _probe() -> bool:
    base = torch.zeros(4, 3)
    with torch.inference_mode():
        inference = torch.zeros(4, 3)
    complex_base = torch.zeros(4, 3, dtype=torch.complex64)
    guard, complex_guard = _make_guard([base]), _make_guard([complex_base])
    state = _local_state()
    others = [torch.zeros(4, 3, dtype=torch.float64), torch.zeros(3, 4), torch.zeros(4, 3, 1), torch.zeros(3, 4).t(),
              torch._neg_view(torch.zeros(4, 3)), inference, torch.zeros(4, 3, device="meta"),
              torch.zeros(4, 3).to_sparse(), torch.nn.Parameter(torch.zeros(4, 3)),
              torch.zeros(4, 3).requires_grad_(), torch._to_functional_tensor(torch.zeros(4, 3))]
    return (guard.check(torch.ones(4, 3)) is True and complex_guard.check(torch.ones(4, 3, dtype=torch.complex64))
            and not complex_guard.check(complex_base.conj()) and not any(guard.check(t) for t in others)
            and _local_state() == state)


class Held:
    """The Python checks' record of tensors found whole (each of its kind, inside its storage): the tensors, their
    addresses, dtypes and sizes, and their storages, held. A tensor still the same object at the same address, of
    the same dtype and sizes, whose held storage still has the same base and bytes, covers the same bytes of that
    storage, which the record keeps alive: proven with a handful of C-level passes, instead of reading every
    tensor's storage through torch's bindings again (several hundred ns each). (For the optimizer's own slots: the
    user's variables are not held, so that a storage let go between steps is freed then.)"""

    def __init__(self, tensors: list[Any]) -> None:
        self.tensors = tensors
        self.addresses = list(map(_data_ptr, tensors))
        self.dtypes = list(map(_dtype, tensors))
        self.shapes = list(map(_shape, tensors))
        # Each storage once (the packed slots of a group are views of one buffer: a storage object per
        # ``StorageImpl``, so thousands of slots hold a handful): every tensor's storage of now is among those held.
        self.storages = list({id(s): s for s in map(_untyped_storage, tensors)}.values())
        self.bases = list(map(_storage_ptr, self.storages))
        self.sizes = list(map(_storage_bytes, self.storages))
        #: Their kinds (``Kinds``: class, dtype, sizes, strides, dispatch keys), when the tensors are contiguous and
        #: this torch has the guard; then ``holds`` proves their contiguity and kind too (``whole``).
        self.kinds = Kinds.of(tensors) if all(map(_contiguous, tensors)) else None

    @property
    def whole(self) -> bool:
        """Whether ``holds`` also proves each tensor contiguous and of a kind read directly (``plain``,
        ``writable_now``), from its ``Kinds``."""
        return self.kinds is not None

    @classmethod
    def of(cls, tensors: list[Any]) -> Optional[Held]:
        """A record of ``tensors``, or None when one is not a tensor read directly (checked in full every step)."""
        if not tensors or not all([isinstance(t, torch.Tensor) and direct(t) for t in tensors]):
            return None
        return cls(tensors)

    def holds(self, tensors: list[Any]) -> bool:
        with plain_reads():  # (each read straight from the tensor, as the C++ checks read it)
            return self._holds(tensors)

    def _holds(self, tensors: list[Any]) -> bool:
        if self.kinds is not None:  # (class, dtype, sizes, strides, views, inference: one C++ pass)
            return (all(map(is_, tensors, self.tensors)) and self.kinds.same(tensors)
                    and list(map(_data_ptr, tensors)) == self.addresses
                    and list(map(_storage_ptr, self.storages)) == self.bases
                    and list(map(_storage_bytes, self.storages)) == self.sizes)
        return (all(map(is_, tensors, self.tensors)) and list(map(_data_ptr, tensors)) == self.addresses
                and list(map(_dtype, tensors)) == self.dtypes and list(map(_shape, tensors)) == self.shapes
                and list(map(_storage_ptr, self.storages)) == self.bases
                and list(map(_storage_bytes, self.storages)) == self.sizes
                and (torch.is_inference_mode_enabled() or not any(map(torch.Tensor.is_inference, tensors))))
