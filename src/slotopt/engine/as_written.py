"""Hyperparameters shown as the user wrote them, and an optimizer's ``repr`` listing them as torch's does: ``lr=3e-3`` reads back ``0.003`` in ``param_groups``,
``defaults`` and ``repr`` (as torch shows it), while the step still computes with the float32 value the variable
holds (``0.003000000026077032``), as TensorFlow does.

A face remembers what was written (``remember``) and shows it while the variable still holds what writing it
gave (``shown``); a value written into the variable another way (a checkpoint, ``assign``) is shown as stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["describe", "remember", "shown"]


def remember(table: dict[str, Any], key: str, value: Any) -> None:
    """Records ``value`` as written for ``key`` in ``table`` (a plain number only; anything else forgets)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        table[key] = (float(value), float(np.float32(value)))
    else:
        table.pop(key, None)


def shown(table: dict[str, Any], key: str, stored: float) -> float:
    """The value written for ``key`` where ``stored`` (the variable's value) is what writing it gave, in float32
    or exactly (a float64 variable), else ``stored``."""
    entry = table.get(key)
    if entry is not None and (stored == entry[1] or stored == entry[0]):
        return entry[0]
    return stored


def describe(optimizer: Any, label: str, name: str) -> str:
    """``repr`` of an optimizer as torch writes one (each parameter group's hyperparameters, sorted), under
    ``label`` and with its Keras ``name``; an optimizer without variables yet lists its defaults."""
    groups = [(f"Parameter Group {i}", {k: v for k, v in g.items() if k != "params"})
              for i, g in enumerate(optimizer.param_groups)] or [("Defaults", optimizer.defaults)]
    lines = [f"{label} (name={name!r}"]
    for title, values in groups:
        lines.append(title)
        lines += [f"    {key}: {values[key]}" for key in sorted(values)]
    return "\n".join(lines) + "\n)"
