"""The launch table of a multi-tensor Triton call: one launch per group, whatever its number of tensors.

Each program covers a chunk of ``block`` elements of one tensor (like torch's multi-tensor apply; ``choose`` picks
the chunk and the warps from the group's size). The table is one int64 buffer on the tensors' device, in one of
two layouts (``layout``):

* ``rows`` (the default): one row per program of ``Launch.row`` int64 (a power of two, >= 1 + operands): its
  element count, then each operand's address of the chunk's first element. A program's prologue is then one
  memory round trip (every load depends on its id alone) before its data moves, as torch's kernels take their
  addresses from the kernel's parameters in one step.
* ``table``: the operands' addresses (``operands x T``, row ``k`` for operand list ``k``), then one row per
  program, ``(tensor, start, end)``: two round trips (the address load waits for the tensor's index).

It depends only on the
addresses and sizes, so it is built once for a set of addresses and reused while they stay (a step's tensors
normally keep their storage), and otherwise sent with a copy that does not block the host. A float64 rule's
scalars go the same way (``scalar_vector``: one small copy from pinned memory, never a synchronising one, once
per distinct vector); a float32 rule's are kernel arguments.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

__all__ = ["BLOCK", "LARGE", "LAYOUTS", "Launch", "launch_table", "proven", "proven_launches", "scalar_vector", "clear",
           "choose", "configure", "layout", "rows_layout"]

#: Elements per program of a group of small tensors (and the most of a slice kernel's program).
BLOCK = 1024
#: A larger (elements per program, warps) choice, for tuning on other GPUs (see ``choose``).
LARGE = (4096, 8)
#: A fixed (block, warps) for every group, set by ``configure`` or ``SLOTOPT_TRITON_BLOCK=4096x8`` (tuning).
_forced: Optional[tuple[int, int]] = None
#: The table's layouts (see the module's docstring). ``rows`` by default, for every group: on 2,000 tensors of
#: 1,024 a program's prologue is then one memory round trip, not two, and each of the 2,000 programs is one chunk,
#: so that latency is the kernel's (it is hidden behind other programs' data only on large tensors, where the
#: table is ~1/500 of the bytes moved in either layout: 8 int64 per 1,024 elements for Adam's five operands).
#: ``table`` stays for the device check's comparison (``benchmarks/gpu_check.py``, section ``layout``) and as a
#: fallback (``SLOTOPT_TRITON_LAYOUT=table`` or ``configure(layout="table")``); both give the same bits.
LAYOUTS = ("rows", "table")
_forced_layout: Optional[str] = None
#: Tables kept (by addresses and sizes): a few optimizers, each with a few groups, share it.
_CACHE_SIZE = 64
_cache: OrderedDict[tuple[object, ...], _Entry] = OrderedDict()


def _parse(text: str) -> Optional[tuple[int, int]]:
    try:
        block, warps = (int(part) for part in text.lower().split("x"))
    except ValueError:
        return None
    if block < 16 or block & (block - 1) or warps < 1 or warps & (warps - 1) or warps > 32:
        return None
    return block, warps


def configure(block: Optional[int] = None, warps: int = 4, layout: Optional[str] = None) -> None:
    """Every group's launch takes ``block`` elements per program and ``warps`` warps (a power of two each, block
    at least 16), or the size-based choice again with ``block=None``; ``layout`` one of ``LAYOUTS`` (None: the
    default, or ``SLOTOPT_TRITON_LAYOUT``). For tuning (``benchmarks/gpu_check.py``): the arithmetic, hence the
    bits, is the same for every choice."""
    global _forced, _forced_layout
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {LAYOUTS} wanted")
    _forced_layout = layout
    if block is None:
        _forced = None
        return
    forced = _parse(f"{block}x{warps}")
    if forced is None:
        raise ValueError(f"block {block} and warps {warps}: powers of two wanted (block >= 16, warps <= 32)")
    _forced = forced


def _fixed() -> Optional[tuple[int, int]]:
    if _forced is not None:
        return _forced
    text = os.environ.get("SLOTOPT_TRITON_BLOCK")
    return _parse(text) if text else None


def layout() -> str:
    """The table's layout for the next table made: ``configure``'s, else ``SLOTOPT_TRITON_LAYOUT``'s, else
    ``rows``."""
    if _forced_layout is not None:
        return _forced_layout
    text = os.environ.get("SLOTOPT_TRITON_LAYOUT", "")
    return text if text in LAYOUTS else "rows"


def choose(elements: int, tensors: int) -> tuple[int, int]:
    """Elements per program and warps for a group of ``tensors`` tensors holding ``elements`` in all.

    1,024 elements in 4 warps for every group: measured on an NVIDIA H200 (torch 2.11, Triton 3.6; the device
    check's ``tune`` section, device time alone), it was the fastest of six choices on one 4096x4096 tensor
    (Adam 0.1149 ms against 0.1174 for 4096x8; SGD momentum 0.0824 against 0.0833) and on a 150-tensor model
    (Adam 0.2502 against 0.2560), all within 1.05x of a device copy of the same bytes. ``LARGE`` (4096x8) stays
    for tuning on other GPUs: ``SLOTOPT_TRITON_BLOCK`` (``4096x8``) or ``configure`` fixes the choice."""
    fixed = _fixed()
    if fixed is not None:
        return fixed
    return BLOCK, 4


class Launch(NamedTuple):
    """One group's launch: the table on the device and what the kernel is told about it."""

    buffer: torch.Tensor  # the whole table (keeps both views' memory alive)
    addresses: torch.Tensor  # operands x tensors
    meta: torch.Tensor  # programs x 3
    tensors: int
    programs: int
    aligned: bool
    elements: int
    #: Whether a tensor of the second list is its counterpart of the first (a gradient that IS its variable).
    aliased: bool
    block: int = BLOCK  # elements per program
    warps: int = 4
    #: The operands' addresses on the host (uint64, operands x tensors) and the prefix sums of the tensors' element
    #: counts: what ``kernels.native.pins`` proves inside the storages it holds for the launch.
    host: Any = None
    offsets: Any = None
    #: The kernel's ``ROW``: the int64 per program row of the rows layout (``meta`` and ``addresses`` are then
    #: both the rows), or 0 for the table layout.
    row: int = 0


def clear() -> None:
    """Forgets every table and scalar vector (tests; neither holds a tensor of the caller's)."""
    _cache.clear()
    _scalars.clear()


def _upload(host: np.ndarray, device: torch.device) -> torch.Tensor:
    values = torch.from_numpy(host)
    if device.type != "cuda":
        return values  # the interpreter reads the host array itself
    # Pinned, then copied on the current stream without waiting: the caching host allocator keeps the pinned
    # block until the copy has run, so nothing here synchronises with the device.
    return values.pin_memory().to(device, non_blocking=True)


#: Scalar vectors already on a device, by value: a rule whose scalars do not change from step to step (SGD or
#: Adagrad at a constant rate) sends them once.
_scalars: OrderedDict[tuple[object, ...], torch.Tensor] = OrderedDict()


def scalar_vector(values: Sequence[float], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The rule's scalars as a tensor of the variables' dtype on their device (float64 rules keep float64
    scalars: a Python float kernel argument would be a float32 parameter). Never written by a kernel."""
    host = np.asarray(values, dtype=np.float64 if dtype == torch.float64 else np.float32)
    key = (device, host.tobytes())  # by bits: -0.0 is not 0.0 here
    kept = _scalars.get(key)
    if kept is not None:
        _scalars.move_to_end(key)
        return kept
    vector = _upload(host, device)
    _scalars[key] = vector
    if len(_scalars) > 4 * _CACHE_SIZE:
        _scalars.popitem(last=False)
    return vector


def _fits(tensors: Sequence[torch.Tensor], sizes: Sequence[int], total: int, dtype: torch.dtype,
          device: torch.device) -> bool:
    """Whether each tensor is a contiguous tensor of ``dtype`` on ``device`` of its counterpart's size (or the one
    flat tensor of a group of several: slotopt's packed state, ``total`` elements)."""
    if len(tensors) == 1 and len(sizes) > 1:
        flat = tensors[0]
        return flat.dtype == dtype and flat.device == device and flat.numel() == total and flat.is_contiguous()
    for t, n in zip(tensors, sizes):
        if t.dtype != dtype or t.device != device or t.numel() != n or not t.is_contiguous():
            return False
    return True


class _Entry(NamedTuple):
    launch: Launch
    sizes: list[int]
    ids: list[tuple[int, ...]]  # the tensor objects checked for each list (see launch_table)


_data_ptr = torch.Tensor.data_ptr


def launch_table(lists: Sequence[Optional[Sequence[torch.Tensor]]], read_only: Sequence[int] = (1,)
                 ) -> Optional[Launch]:
    """The launch of a group (the first list gives the tensors; an absent optional list reads as the first, its
    row is never read), or None when a tensor does not fit (see ``_fits``).

    Lists an ordinary step proved in this step (``proven``: its plan's variables, gradients and state, each
    with its addresses) are not read again: the table is found by those addresses, with no Python per tensor.
    Otherwise the lists at ``read_only`` positions (this step's gradients: new objects each step, whose ids
    Python may reuse) are checked on every call. A written list (the variables, the state) of the very objects
    already checked, at the very same addresses, is not checked again: a tensor's dtype and device never change,
    and its size and layout do not change in place without moving its data."""
    first = lists[0]
    assert first is not None
    n = len(first)
    found = proven(lists)
    if found is not None:
        return found
    operands = [first if tensors is None else tensors for tensors in lists]
    if any(len(tensors) != n and not (len(tensors) == 1 and n > 1) for tensors in operands):
        return None
    rows = [tuple(map(_data_ptr, tensors)) for tensors in operands]
    ids = [tuple(map(id, tensors)) for tensors in operands]
    dtype, device = first[0].dtype, first[0].device
    key = (dtype, n, *rows, _fixed(), layout())  # (a fixed choice, for tuning, makes other tables)
    entry = _cache.get(key)
    if entry is not None:
        stale = [i for i in range(len(operands)) if ids[i] != entry.ids[i] or i in read_only]
        if all(_fits(operands[i], entry.sizes, entry.launch.elements, dtype, device) for i in stale):
            _cache.move_to_end(key)
            for i in stale:
                entry.ids[i] = ids[i]
            return entry.launch
        # (other tensors at the same addresses: views of other sizes, say; the table is made anew below)
    sizes = [t.numel() for t in first]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if not all(_fits(tensors, sizes, total, dtype, device) for tensors in operands):
        return None
    table = np.empty((len(rows), n), dtype=np.uint64)
    for i, (tensors, row) in enumerate(zip(operands, rows)):
        if len(tensors) == n:
            table[i] = row
        else:  # one flat tensor: each tensor's place in it
            table[i] = row[0] + offsets[:-1].astype(np.uint64) * tensors[0].element_size()
    return _made(key, table, sizes, offsets, total, dtype, device, ids)


def _made(key: tuple[object, ...], table: np.ndarray, sizes: Sequence[int], offsets: np.ndarray, total: int,
          dtype: torch.dtype, device: torch.device, ids: list[tuple[int, ...]]) -> Launch:
    """The launch of a group whose operands' addresses are ``table`` (uint64, operands x tensors), sent to the
    device and kept under ``key``."""
    n = len(sizes)
    host_table = table  # (uint64: what the pins prove; the launch reads the int64 view)
    table = table.view(np.int64)
    block, warps = choose(total, n)
    # Vector loads and stores need every operand 16-byte aligned and every chunk's end a multiple of 16 elements
    # (the starts are multiples of the block); the arithmetic is the same either way.
    aligned = bool(np.all(table % 16 == 0) and np.all(np.asarray(sizes) % 16 == 0))
    aliased = bool(np.any(table[0] == table[1])) if len(table) > 1 else False
    if layout() == "rows":
        host = rows_layout(host_table, sizes, block, dtype.itemsize)
        buffer = _upload(host, device)
        launch = Launch(buffer, buffer, buffer, n, len(host) // _width(len(table)), aligned, total, aliased, block,
                        warps, host_table, offsets, _width(len(table)))
    else:
        counts = -(-np.asarray(sizes, dtype=np.int64) // block)  # empty tensors take no program
        which = np.repeat(np.arange(n, dtype=np.int64), counts)
        first_program = np.cumsum(counts) - counts
        meta = np.empty((len(which), 3), dtype=np.int64)
        meta[:, 0] = which
        meta[:, 1] = (np.arange(len(which), dtype=np.int64) - first_program[which]) * block
        meta[:, 2] = np.asarray(sizes, dtype=np.int64)[which]
        host = np.concatenate([table.ravel(), meta.ravel()])
        buffer = _upload(host, device)
        cut = table.size
        launch = Launch(buffer, buffer[:cut], buffer[cut:], n, len(which), aligned, total, aliased, block, warps,
                        host_table, offsets)
    _cache[key] = _Entry(launch, list(sizes), ids)
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return launch


_proven = 0


def proven_launches() -> int:
    """How many launches took a table by the step's proven addresses (``proven``) in this process (tests)."""
    return _proven


def _row_key(addresses: np.ndarray, holder: Any, name: str = "_table_key") -> bytes:
    """``addresses``' bytes, kept with ``holder`` (a list the plan keeps from step to step: its variables', a
    slot's) while it holds that very array: made and hashed once, not at every step."""
    kept = holder.__dict__.get(name)
    if kept is not None and kept[0] is addresses:
        return kept[1]
    key = addresses.tobytes()
    holder.__dict__[name] = (addresses, key)
    return key


def proven(lists: Sequence[Optional[Sequence[torch.Tensor]]]) -> Optional[Launch]:
    """The launch of a group every list of which the step proved in this step (an ordinary step, engine/plan.py),
    else None (``launch_table`` then reads the lists): the variables as ``native.Verified`` (their dtype, device,
    sizes, contiguity and addresses, re-proven by ``StepPlan.fits``), each other list a ``native.Matched`` with its
    ``addresses`` (the gradients, proven with the variables; a slot, proven by ``StepPlan.state_operands``), the
    packed state of the group (``native.FlatViews``, or its one flat tensor: one dtype, device, size and
    contiguity read here), or absent. The table is looked up by the operands' addresses and the group's sizes, in
    C-level bytes: one that does not exist yet is made from those arrays, without Python per tensor."""
    # (the lists' kinds by the role their class declares, ``native.Verified``/``Matched``/``FlatViews``: this
    # module is imported by the package that defines them, never the reverse)
    first = lists[0]
    if getattr(type(first), "launch_role", None) != "variables" or first.chunked or not len(first):  # type: ignore
        return None
    offsets = first.offsets  # type: ignore[attr-defined]
    addresses = first.addresses  # type: ignore[attr-defined]
    n, dtype, device = len(first), first.dtype, first[0].device  # type: ignore[attr-defined]
    total = int(offsets[-1])
    keys: list[object] = [dtype, device, n, _fixed(), layout(), _row_key(offsets, first, "_table_sizes"),
                           _row_key(addresses, first)]
    rows: list[Any] = [addresses]
    for tensors in lists[1:]:
        kind = getattr(type(tensors), "launch_role", None)
        if tensors is None:
            keys.append(None)
            rows.append(addresses)  # (never read: the rule's flag says it is absent)
        elif kind == "proven" and len(tensors) == n and getattr(tensors, "addresses", None) is not None:
            if getattr(tensors, "gradient_map", None) is not None:
                return None  # (a map the compiled CPU rules apply as they load: not Triton's)
            row = tensors.addresses  # type: ignore[attr-defined]
            keys.append(_row_key(row, tensors))
            rows.append(row)
        elif kind == "packed" or (len(tensors) == 1 and n > 1 and type(tensors) in (list, tuple)):
            whole = tensors.flat if kind == "packed" else tensors[0]  # type: ignore[attr-defined]
            if not (type(whole) in (torch.Tensor, torch.nn.Parameter) and whole.dtype is dtype
                    and whole.device == device and whole.numel() == total and whole.is_contiguous()):
                return None
            start = whole.data_ptr()
            keys.append(("flat", start))
            rows.append(start)
        else:
            return None
    key = tuple(keys)
    global _proven
    _proven += 1
    entry = _cache.get(key)
    if entry is not None:
        _cache.move_to_end(key)
        return entry.launch
    itemsize = first[0].element_size()
    table = np.empty((len(rows), n), dtype=np.uint64)
    for i, row in enumerate(rows):
        table[i] = row if isinstance(row, np.ndarray) else row + offsets[:-1].astype(np.uint64) * itemsize
    return _made(key, table, np.diff(offsets).tolist(), offsets, total, dtype, device, [])


def _width(operands: int) -> int:
    """A program's row in the rows layout: its count and one address per operand, padded to a power of two (a row
    never straddles a boundary of its own size: up to 8 int64, one 64-byte piece of a cache line)."""
    return 1 << operands.bit_length()  # the least power of two > operands, i.e. >= 1 + operands


def rows_layout(addresses: np.ndarray, sizes: Sequence[int], block: int, element_size: int) -> np.ndarray:
    """The rows layout's table (flat int64) for operands at ``addresses`` (uint64, operands x tensors) of tensors
    of ``sizes`` elements in chunks of ``block``: per program, ``[count, address_0 + start * element_size, ...,
    0 padding]``. An empty tensor takes no program. Pure arithmetic on the host (numpy, 64-bit: a chunk may start
    past 2**31 elements), no tensor needed: ``tests/kernels/test_triton_layouts.py`` checks it at such sizes."""
    operands = addresses.shape[0]
    width = _width(operands)
    size = np.asarray(sizes, dtype=np.int64).reshape(-1)
    counts = -(-size // block)
    which = np.repeat(np.arange(len(size), dtype=np.int64), counts)
    start = (np.arange(len(which), dtype=np.int64) - (np.cumsum(counts) - counts)[which]) * block
    rows = np.zeros((len(which), width), dtype=np.int64)
    rows[:, 0] = np.minimum(size[which] - start, block)
    shift = (start * element_size).astype(np.uint64)
    for k in range(operands):
        rows[:, 1 + k] = (addresses[k][which] + shift).view(np.int64)
    return rows.reshape(-1)
