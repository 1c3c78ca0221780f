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

__all__ = ["set_orders", "orders_of", "Order"]


def set_orders(opt: Any, orders: Mapping[int, Callable[[torch.Tensor], torch.Tensor]]) -> None:
    """Records ``orders`` (``id(variable)`` → the view putting a tensor of its layout in TensorFlow's order) on
    ``opt``; an empty mapping clears them."""
    opt._summation_orders = dict(orders)


def orders_of(opt: Any, pairs: Sequence[tuple[Any, Any]]) -> Optional[list[Order]]:
    """One entry per pair whose gradient is not None (the gradients ``map_gradient_values`` hands on): the view
    of its variable, or None where the variable is in TensorFlow's layout; None when no variable has one."""
    orders = getattr(opt, "_summation_orders", None)
    if not orders:
        return None
    return [orders.get(id(v)) for g, v in pairs if g is not None]
