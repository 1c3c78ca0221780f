"""The order TensorFlow sums a variable's values in, where the optimizer holds the variable in another layout.

A norm (``clipnorm``, ``global_clipnorm``) is a sum of squares, and a float32 sum's bits depend on the order its
terms are added in: TensorFlow adds a Dense kernel's in its ``(in, out)`` row-major order. A checkpoint loaded into
a torch module (``load_module``: ``nn.Linear`` holds the kernel transposed) leaves the optimizer with the module's
layout; the reader records here, per variable, a view that puts a tensor of the module's layout back in
TensorFlow's logical order (a permutation, no copy where one suffices), and the clipping takes its sums through it.

Example:
    >>> import torch
    >>> from slotopt.engine import summation
    >>> class Opt: pass
    >>> opt, w = Opt(), torch.zeros(3, 2)
    >>> summation.set_orders(opt, {id(w): lambda t: t.T})
    >>> [o(torch.ones(3, 2)).shape for o in summation.orders_of(opt, [(w, w)])]
    [torch.Size([2, 3])]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import torch

Order = Optional[Callable[[torch.Tensor], torch.Tensor]]

__all__ = ["set_orders", "orders_of", "refuse_unordered", "Order"]


def set_orders(opt: Any, orders: Mapping[int, Callable[[torch.Tensor], torch.Tensor]]) -> None:
    """Records ``orders`` (``id(variable)`` → the view putting a tensor of its layout in TensorFlow's order) on
    ``opt``; an empty mapping clears them."""
    opt._summation_orders = dict(orders)


def refuse_unordered(cls: type, orders: Mapping[int, Any], where: str) -> None:
    """Refuses, before anything is written, an optimizer class whose own update sums whole tensors
    (``_sums_whole_tensors``: Lamb's trust ratio, Adafactor's RMS, Muon's matrix products) for variables held in
    another layout than TensorFlow's: those sums would run in the layout's memory order and give other last bits
    than the file's run, silently. Clipping is summed in TensorFlow's order (``orders_of``); these are not yet."""
    if orders and getattr(cls, "_sums_whole_tensors", False):
        raise ValueError(
            f"{where}: {cls.__name__}'s update sums whole tensors in the order of the tensors it is given, and "
            f"{len(orders)} variable(s) of this module are held in torch's layout (a transposed or permuted "
            "kernel), so its bits would differ from TensorFlow's continuing the same file. Use "
            "`optimizer(parameters())` (the file's layout) to continue exactly, then copy the weights into the "
            "module.")


def orders_of(opt: Any, pairs: Sequence[tuple[Any, Any]]) -> Optional[list[Order]]:
    """One entry per pair whose gradient is not None (the gradients ``map_gradient_values`` hands on): the view
    of its variable, or None where the variable is in TensorFlow's layout; None when no variable has one."""
    orders = getattr(opt, "_summation_orders", None)
    if not orders:
        return None
    return [orders.get(id(v)) for g, v in pairs if g is not None]
