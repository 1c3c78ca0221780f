"""Gradients of a loss for the faces' ``minimize`` / ``compute_gradients``: the role TensorFlow's tape plays.

A loss is a no-argument callable (run with autograd on) or a tensor computed with autograd recording. Which
variables a loss uses can be discovered two ways, as TF1 does it: for a callable, the trainable tensors it reads,
in first-access order (``tape.watched_variables()``); for a tensor, the trainable leaves of its graph in the order
the forward pass first used them.

Example:
    >>> import torch
    >>> from slotopt.engine import gradients
    >>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    >>> value, used = gradients.run_watching(lambda: (w * w).sum())
    >>> used == [w], [g.tolist() for g in gradients.gradients_of(value, used)]
    (True, [[2.0, 4.0]])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Callable, Optional, Union

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

from ..variables import named_variables

__all__ = ["gradients_of", "differentiate", "resolve_var_list", "run_watching", "graph_leaves", "watching"]

Loss = Union[Callable[[], torch.Tensor], torch.Tensor]


@contextmanager
def watching(variables: Optional[Sequence[torch.Tensor]]) -> Iterator[None]:
    """TensorFlow's ``tape.watch(var_list)``: the floating leaf tensors of ``variables`` that do not require a
    gradient (a constant, a non-trainable variable) get one while the loss runs, and stop after."""
    watched = [v for v in variables or () if isinstance(v, torch.Tensor) and v.is_leaf and not v.requires_grad
               and (v.is_floating_point() or v.is_complex())]
    try:
        for v in watched:
            v.requires_grad_(True)
        yield
    finally:
        for v in watched:
            v.requires_grad_(False)


def resolve_var_list(var_list: Any) -> list[torch.Tensor]:
    """The tensors of ``var_list``: a list, a module, or a no-argument callable returning either."""
    if callable(var_list) and not isinstance(var_list, (nn.Module, torch.Tensor)):
        var_list = var_list()
    return [v for _, v in named_variables(var_list)]


def gradients_of(loss: Loss, variables: Sequence[torch.Tensor],
                 grad_loss: Optional[torch.Tensor] = None) -> list[Optional[torch.Tensor]]:
    """Gradients of ``loss`` (a no-argument callable or a tensor with a graph); ``None`` where unused. A
    non-scalar (or complex) loss is differentiated as the sum of its elements (unit output gradients), as
    TensorFlow does."""
    if callable(loss) and not isinstance(loss, torch.Tensor):
        with torch.enable_grad():
            value = loss()
    else:
        value = loss
    if not isinstance(value, torch.Tensor) or value.grad_fn is None:
        raise ValueError(
            "`loss` must be a no-argument callable returning a tensor, or a tensor with a graph "
            f"(computed from the variables with autograd on). Received: {loss!r}"
        )
    by_id = differentiate(value, variables, grad_loss)
    return [by_id.get(id(v)) for v in variables]


def differentiate(value: Any, variables: Sequence[Any], grad_loss: Any = None) -> dict[int, torch.Tensor]:
    """``{id(variable): gradient}`` of the tensor ``value`` for the variables that require grad and are used.
    ``grad_loss`` (broadcast to ``value``'s shape) is the output gradient; by default ones."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"`loss` must return a tensor. Received: {value!r}")
    targets = [v for v in variables if isinstance(v, torch.Tensor) and v.requires_grad]
    if not targets or value.grad_fn is None:
        return {}
    output_grad = None
    if grad_loss is not None:
        output_grad = torch.broadcast_to(torch.as_tensor(grad_loss, dtype=value.dtype, device=value.device),
                                         value.shape)
    elif value.numel() != 1 or value.is_complex():  # TensorFlow: unit output gradients (1 + 0j for complex)
        output_grad = torch.ones_like(value)
    grads = torch.autograd.grad(value, targets, grad_outputs=output_grad, allow_unused=True)
    return {id(v): g for v, g in zip(targets, grads) if g is not None}


class _AccessRecorder(TorchFunctionMode):
    """Records the leaf tensors that require grad in the order torch functions first receive them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, torch.Tensor] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        for leaf in _pytree.tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.Tensor) and leaf.is_leaf and leaf.requires_grad and id(leaf) not in self.seen:
                self.seen[id(leaf)] = leaf
        return func(*args, **kwargs)


def run_watching(loss: Callable[[], Any]) -> tuple[Any, list[torch.Tensor]]:
    """Runs ``loss()`` with autograd on and returns its value and the trainable leaf tensors it read, in the
    order it first read them."""
    recorder = _AccessRecorder()
    with torch.enable_grad(), recorder:
        value = loss()
    return value, list(recorder.seen.values())


def graph_leaves(value: torch.Tensor) -> list[torch.Tensor]:
    """Leaf tensors of ``value``'s autograd graph in the order the forward pass first used them.

    A leaf's first use is the earliest-created backward node (``_sequence_nr``) that consumes it.

    The walk holds every node it visited: torch may free a node's Python object once nothing references it and give
    its ``id`` to the next node's (torch 2.9 does), which would then pass for visited and its leaves be missed.
    """
    first_use: dict[int, tuple[int, int]] = {}
    leaves: dict[int, torch.Tensor] = {}
    visited: dict[int, Any] = {}  # id -> the node itself, so that no id is reused while the walk runs
    stack = [value.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in visited:
            continue
        visited[id(node)] = node
        order = node._sequence_nr() if hasattr(node, "_sequence_nr") else 0
        for position, (child, _) in enumerate(node.next_functions):
            variable = getattr(child, "variable", None)
            if isinstance(variable, torch.Tensor):
                leaves.setdefault(id(variable), variable)
                key = (order, position)
                if key < first_use.get(id(variable), (2**63, 0)):
                    first_use[id(variable)] = key
            elif child is not None:
                stack.append(child)
    return sorted(leaves.values(), key=lambda v: first_use[id(v)])
