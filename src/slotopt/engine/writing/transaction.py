"""All-or-nothing changes to an optimizer's bookkeeping (which variables and slots exist, pending checkpoints).

A build that applies a checkpoint loaded before it (Keras's deferred restoration) can only check the checkpoint
once the variables exist. When that check fails, the optimizer must be left as it was: unbuilt, with the
checkpoint still pending. ``snapshot`` copies the containers of an object's ``__dict__`` (dicts, lists, sets, at
every depth) but shares everything else (tensors, schedules, functions), which is cheap before a build, and
``restore`` puts them back.

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine.writing import transaction
    >>> opt = slotopt.SGD(momentum=0.5)
    >>> saved = transaction.snapshot(opt)
    >>> opt.build([torch.nn.Parameter(torch.ones(2))])
    >>> transaction.restore(opt, saved)
    >>> opt.built, len(opt.param_groups)
    (False, 0)
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["snapshot", "restore", "copy_values", "put_values"]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        out = copy.copy(value)
        for key in out:
            out[key] = _copy(out[key])
        return out
    if isinstance(value, list):
        out = copy.copy(value)
        for i, item in enumerate(out):
            out[i] = _copy(item)
        return out
    if isinstance(value, set):
        return copy.copy(value)
    if type(value).__name__ == "FlatState":  # the packed-state bookkeeping: plain containers inside
        out = copy.copy(value)
        out.__dict__.update(_copy(value.__dict__))
        return out
    return value


def snapshot(obj: Any) -> dict[str, Any]:
    """The object's attributes, with every container copied (tensors and other objects shared)."""
    return _copy(obj.__dict__)


def restore(obj: Any, saved: dict[str, Any]) -> None:
    """Puts back what ``snapshot`` took: attributes added since are removed. A top-level list or dict gets its
    old content back in place, so that another object sharing it (a wrapper's ``param_groups``) sees it too."""
    current = dict(obj.__dict__)
    obj.__dict__.clear()
    for key, value in saved.items():
        existing = current.get(key)
        if type(existing) is list and type(value) is list:
            existing[:] = value
            value = existing
        elif type(existing) is dict and type(value) is dict:
            existing.clear()
            existing.update(value)
            value = existing
        obj.__dict__[key] = value


def copy_values(tensors: Any) -> list[Any]:
    """Copies of the tensors' current values (to put back with ``put_values`` when a later step fails)."""
    return [t.detach().clone() for t in tensors]


def put_values(tensors: Any, values: list[Any]) -> None:
    import torch

    with torch.no_grad():
        for t, v in zip(tensors, values):
            t.copy_(v)
