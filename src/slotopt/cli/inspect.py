"""``slotopt inspect PATH``: what a training checkpoint holds, read as data: its variables (name, shape, dtype),
its optimizer (generation and class when the file says), the slots of every variable and the iteration count.
PATH is a Keras 3 ``.keras`` file, a tf.keras ``.h5`` file, or a TensorFlow checkpoint (prefix, ``.index`` file,
or a directory with a ``checkpoint`` state file)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Optional, TextIO

import numpy as np
import torch

__all__ = ["inspect_checkpoint"]

_GENERATIONS = {"keras3": "Keras 3", "legacy": "tf.keras legacy (OptimizerV2)", "v1": "TF1 train.Optimizer",
                "tfkeras_new": "tf-keras 2.11+ Optimizer (continued by the Keras 3 class)",
                "composite": "several optimizers (a composite)", "none": "none"}


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _scalar(value: torch.Tensor) -> str:
    return f" = {value.reshape(()).item()!r}" if value.numel() == 1 else ""


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``): names come from the file, and a terminal would
    run an escape sequence in one."""
    return text.translate(_CONTROL)


class _Escaped:
    """A text stream that escapes control characters in what is written, except the lines' own ends."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write("\n".join(_printable(line) for line in text.split("\n")))

    def flush(self) -> None:
        self._out.flush()


def _print_table(rows: list[tuple[str, ...]], out: TextIO, indent: str = "  ") -> None:
    rows = [tuple(_printable(c) for c in row) for row in rows]  # (a newline in a name stays in its cell)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    for row in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)


def _inspect_tf(path: str, out: TextIO) -> None:
    from ..io.tf_checkpoint import load_tf_checkpoint

    ck = load_tf_checkpoint(path, metadata_only=True)  # names, shapes, dtypes and scalars: no tensor data read
    print(f"TensorFlow checkpoint {ck.path}", file=out)
    _print_tf_optimizer(ck, out)
    for i, part in enumerate(ck.parts):  # several optimizers: each with its variables
        named = f"{part.optimizer_class.__module__.rsplit('.', 1)[0]}.{part.optimizer_class.__name__}" \
            if part.optimizer_class else "pass it"
        print(f"part {i}: {_GENERATIONS[part.kind]}, name {part.optimizer_name!r} ({named}"
              + (f", {part.optimizer_config}" if part.optimizer_config else "") + f"), iterations "
              f"{part.iterations}, variables {part.variable_names}", file=out)
    order = _print_variables(ck, out)
    slots = ck.slots
    if slots:
        print("slots:", file=out)
        _print_table([(n, ", ".join(f"{s} {_shape(v.shape)} {_dtype(v.dtype)}" for s, v in slots[n].items()))
                      for n in order if n in slots], out)
    own = [v for v in ck.optimizer_variables if v.owner is None]
    if own:
        print("optimizer variables:", file=out)
        _print_table([(v.name, _shape(v.value.shape), _dtype(v.value.dtype) + _scalar(v.value)) for v in own], out)
    placed = [(ck.keys[n], n, "optimized" if n in ck.variable_names else "variable") for n in order]
    placed += [(v.key, v.name, f"slot {v.slot} of {v.owner}" if v.owner else "optimizer")
               for v in ck.optimizer_variables]
    _print_placed(placed, ck.skipped, out)
    for note in ck.notes:
        print(f"note: {note}", file=out)


def _print_tf_optimizer(ck: Any, out: TextIO) -> None:
    named = ck.optimizer_class.__module__.rsplit(".", 1)[0] + "." + ck.optimizer_class.__name__ \
        if ck.optimizer_class else "not stored (pass it: optimizer(params, optimizer=...))"
    if ck.parts:
        named = f"{len(ck.parts)} optimizers, the parts below (continued together as a slotopt.CompositeOptimizer)"
    print(f"optimizer: {_GENERATIONS[ck.kind]}" + (f", name {ck.optimizer_name!r}" if ck.optimizer_name else "")
          + (f"; class: {named}" if ck.kind != "none" else ""), file=out)
    if ck.optimizer_config:
        print(f"hyperparameters (.meta graph): {ck.optimizer_config}", file=out)
    print(f"iterations: {ck.iterations if ck.iterations is not None else 'unknown'}", file=out)


def _print_placed(placed: list[tuple[str, str, str]], skipped: dict[str, str], out: TextIO) -> None:
    """What each entry of the file became (entry → name, role), then what was left and why."""
    print(f"placed ({len(placed)} entries of the file):", file=out)
    _print_table([(key, "->", name, role) for key, name, role in placed], out)
    print(f"skipped ({len(skipped)}):" if skipped else "skipped: nothing", file=out)
    if skipped:
        _print_table([(key, reason) for key, reason in skipped.items()], out)


def _print_variables(ck: Any, out: TextIO) -> list[str]:
    """The table of a checkpoint's variables (the optimized ones first, in the model's order); returns that
    order."""
    trainable = set(ck.variable_names)
    order = ck.variable_names + [n for n in ck.weights if n not in trainable]
    print(f"variables ({len(order)}):", file=out)
    _print_table([(n, _shape(ck.weights[n].shape), _dtype(ck.weights[n].dtype),
                   "optimized" if n in trainable else "not optimized") for n in order], out)
    return order


def _inspect_keras(path: str, out: TextIO) -> None:
    from ..io.keras import load_keras_checkpoint

    # metadata only (issue 40): the config, the datasets' shapes and dtypes, and one-element values; no weights
    ck = load_keras_checkpoint(path, metadata_only=True)
    kind = "Keras 3 .keras file" if ck.kind == "keras3" else "tf.keras .h5 file"
    print(f"{kind} {ck.path}" + (f" (Keras {ck.keras_version})" if ck.keras_version else ""), file=out)
    cls = ck.optimizer_class
    print(f"optimizer: {_GENERATIONS[ck.kind]}; class: {cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}", file=out)
    # The optimizer is built on meta tensors (names, shapes and dtypes, no memory); the values shown are the
    # file's (issue 40: inspect no longer builds a model-sized optimizer to list it).
    opt = ck._new_optimizer()
    opt.build([(n, torch.empty(ck.weights[n].shape, dtype=ck.weights[n].dtype, device="meta"))
               for n in ck.variable_names])
    variables = list(opt.variables if ck.kind == "keras3" else opt.weights)
    values = {id(var): stored for var, stored in zip(variables, ck.optimizer_state)}
    counter = next((values[id(v)] for v in variables if v is opt.iterations), ck.optimizer_state[0])
    print(f"iterations: {int(np.asarray(counter))}", file=out)
    _print_variables(ck, out)
    owners: list[Optional[int]] = list(getattr(ck, "_owners", [])) or [None] * len(variables)
    slots: dict[str, list[str]] = {}
    own = []
    for var, owner in zip(variables, owners):
        label = f"{str(getattr(var, 'path', ''))} {_shape(var.shape)} {_dtype(var.dtype)}"
        if owner is None:  # its value shown where it has one element (read even by a metadata-only load)
            stored = values[id(var)]
            shown = _scalar(torch.as_tensor(np.asarray(stored)).to(var.dtype)) if math.prod(stored.shape) == 1 else ""
            own.append((str(getattr(var, "path", "")), _shape(var.shape), _dtype(var.dtype) + shown))
        else:
            slots.setdefault(ck.variable_names[owner], []).append(label)
    if slots:
        print("slots:", file=out)
        _print_table([(n, ", ".join(slots[n])) for n in ck.variable_names if n in slots], out)
    if own:
        print("optimizer variables:", file=out)
        _print_table(own, out)
    placed = [(ck.entries[n], n, "optimized" if n in ck.variable_names else "variable")
              for n in ck.variable_names + ck.non_trainable_names]
    placed += [(entry, str(getattr(var, "path", "")), "optimizer")
               for entry, var in zip(ck.optimizer_entries, variables)]
    _print_placed(placed, ck.skipped, out)


def inspect_checkpoint(path: str, out: TextIO) -> None:
    """Prints what the checkpoint at ``path`` holds. Raises ``FileNotFoundError`` for a missing path and
    ``ValueError`` for a file that is not a readable checkpoint."""
    out = _Escaped(out)  # type: ignore[assignment]
    if os.path.isdir(path) or os.path.isfile(path + ".index") or path.endswith(".index"):
        _inspect_tf(path, out)
    elif os.path.isfile(path):
        _inspect_keras(path, out)
    else:
        raise FileNotFoundError(f"no checkpoint at {path!r} (a .keras or .h5 file, a TensorFlow checkpoint prefix, "
                                "a directory with a `checkpoint` state file, or a SavedModel directory)")

