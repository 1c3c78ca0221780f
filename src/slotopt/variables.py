"""Variables and sparse gradients: the two tensor types every optimizer generation shares.

``Variable`` is a ``torch.nn.Parameter`` that also carries a Keras-style ``name`` and an optional ``constraint``.
Plain tensors and ``nn.Parameter`` objects are accepted everywhere a ``Variable`` is; their names come from
``named_parameters()`` when the user hands the optimizer a module or ``(name, parameter)`` pairs.

``IndexedSlices`` is TensorFlow's sparse row gradient. Torch sparse COO gradients (what
``nn.Embedding(sparse=True)`` produces) are converted to it on entry.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch import nn

__all__ = ["Variable", "IndexedSlices", "Gradient", "variable_name", "as_indexed_slices", "is_sparse"]


class Variable(nn.Parameter):
    """A ``torch.nn.Parameter`` with a Keras name and an optional constraint.

    Integer variables (counters such as ``iterations`` or a TF1 ``global_step``) are allowed and are never
    trainable. ``trainable=False`` float variables are not optimized by ``step()``/``minimize()`` defaults.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.ones(2), name="kernel", constraint=lambda v: v.clamp(max=0.5))
        >>> w.name, w.trainable, w.shape
        ('kernel', True, torch.Size([2]))
        >>> step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
        >>> step.trainable
        False
    """

    _variable_name: Optional[str]
    _variable_path: Optional[str]
    constraint: Optional[Callable[[torch.Tensor], torch.Tensor]]

    def __new__(
        cls,
        value: Any = None,
        name: Optional[str] = None,
        dtype: Optional[torch.dtype] = None,
        trainable: bool = True,
        constraint: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> Variable:
        if value is None:
            raise ValueError("Argument `value` must be given. Received: value=None")
        if constraint is not None and not callable(constraint):
            raise ValueError(f"Argument `constraint` must be callable. Received: constraint={constraint!r}")
        if isinstance(value, torch.Tensor):
            data = value.detach().clone()
            if dtype is not None:
                data = data.to(dtype)
        else:
            # A copy, as TF and Keras make: a step must never write into the caller's NumPy array.
            data = torch.tensor(np.asarray(value), dtype=dtype)
            if dtype is None and data.dtype == torch.float64 and not isinstance(value, np.ndarray):
                data = data.to(torch.float32)  # Python floats become float32, as in Keras (floatx)
        requires_grad = bool(trainable) and (data.is_floating_point() or data.is_complex())
        var = torch.Tensor._make_subclass(cls, data, requires_grad)
        var._variable_name = name
        var._variable_path = None
        var.constraint = constraint
        return var

    @property
    def overwrite_with_gradient(self) -> bool:
        """Keras 3: when True, an optimizer step sets this variable to its gradient instead of updating it (the
        float8 scales and amax histories); set it before the variable's first step. A plain tensor can carry
        the same attribute."""
        return self.__dict__.get("_overwrite_with_gradient", False)

    @overwrite_with_gradient.setter
    def overwrite_with_gradient(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"`overwrite_with_gradient` must be a boolean. Received: {value!r}")
        self.__dict__["_overwrite_with_gradient"] = value

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # construction happens in __new__
        pass

    @classmethod
    def _adopt(cls, data: torch.Tensor, name: Optional[str], trainable: bool = False) -> Variable:
        """Wraps a tensor the caller just created, without the copy the public constructor makes.

        Optimizers create their state this way: a slot for a large embedding table is allocated once.
        """
        requires_grad = bool(trainable) and data.is_floating_point()
        var = torch.Tensor._make_subclass(cls, data.detach(), requires_grad)
        var._variable_name = name
        var._variable_path = None
        var.constraint = None
        return var

    @property  # type: ignore[override]
    def name(self) -> Optional[str]:
        return self._variable_name

    @name.setter
    def name(self, value: Optional[str]) -> None:
        self._variable_name = value

    @property
    def path(self) -> Optional[str]:
        """Where the variable lives, e.g. ``"adam/kernel_momentum"`` for an optimizer slot; else its name."""
        return self._variable_path or self._variable_name

    @property
    def trainable(self) -> bool:
        return self.requires_grad

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self.requires_grad_(bool(value) and self.is_floating_point())

    def assign(self, value: Any) -> Variable:
        """Copies ``value`` (a tensor, number or array) into this variable in place."""
        with torch.no_grad():
            self.copy_(torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value))
        return self

    def assign_add(self, value: Any) -> Variable:
        with torch.no_grad():
            self.add_(torch.as_tensor(value, dtype=self.dtype, device=self.device))
        return self

    def assign_sub(self, value: Any) -> Variable:
        with torch.no_grad():
            self.sub_(torch.as_tensor(value, dtype=self.dtype, device=self.device))
        return self

    def numpy(self) -> np.ndarray:  # type: ignore[override]
        """A copy of the value, as Keras's ``Variable.numpy()`` (a snapshot, not a view of the live tensor)."""
        return self.detach().cpu().numpy().copy()

    def __repr__(self) -> str:
        return f"<slotopt.Variable name={self.name!r} shape={tuple(self.shape)} dtype={self.dtype}>\n{self.data!r}"

    def __deepcopy__(self, memo: dict) -> Variable:
        if id(self) in memo:
            return memo[id(self)]
        # torch's deepcopy of the data keeps storage sharing (an optimizer slot that is a view of a packed buffer
        # stays a view of the copied buffer), which a clone would break.
        result = Variable._adopt(copy.deepcopy(self.data, memo), name=self.name, trainable=self.requires_grad)
        result.constraint = copy.deepcopy(self.constraint, memo)
        result._variable_path = self._variable_path
        if self.overwrite_with_gradient:
            result.overwrite_with_gradient = True
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, proto: Any) -> Any:
        return (_rebuild_variable, (self.data, self.name, self.requires_grad, self.constraint, self._variable_path,
                                    self.overwrite_with_gradient))


def _rebuild_variable(data: torch.Tensor, name: Optional[str], trainable: bool, constraint: Any,
                      path: Optional[str] = None, overwrite_with_gradient: bool = False) -> Variable:
    # ``data`` was just unpickled (it shares storage only with tensors of the same pickle): adopted, not copied.
    var = Variable._adopt(data, name=name, trainable=trainable)
    var.constraint = constraint
    var._variable_path = path
    if overwrite_with_gradient is True:
        var.overwrite_with_gradient = True
    return var


# A saved Variable (without a constraint function) is plain data: let torch.load(weights_only=True) rebuild it.
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([_rebuild_variable])


class IndexedSlices:
    """A sparse gradient made of rows: ``dense[indices[i]] += values[i]`` (indices may repeat).

    Example:
        >>> import torch, slotopt
        >>> g = slotopt.IndexedSlices(torch.ones(3, 2), torch.tensor([0, 2, 0]), (4, 2))
        >>> g.to_dense()[:, 0].tolist()
        [2.0, 0.0, 1.0, 0.0]
    """

    __slots__ = ("values", "indices", "dense_shape")

    def __init__(self, values: Any, indices: Any, dense_shape: Optional[Sequence[int]] = None) -> None:
        values = values if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))
        given = indices
        indices = torch.as_tensor(indices, device=values.device)
        if not is_integer_dtype(indices.dtype) and indices.numel():  # [] is float to torch: nothing to truncate
            # Casting would truncate (1.7 -> row 1) and silently update the wrong row.
            raise TypeError(
                f"IndexedSlices `indices` must be integers. Received: indices={given!r} (dtype {indices.dtype})"
            )
        indices = indices.to(torch.int64).reshape(-1)
        if values.dim() == 0 or values.shape[0] != indices.shape[0]:
            raise ValueError(
                "IndexedSlices `values` must have one row per index. Received: "
                f"values.shape={tuple(values.shape)}, indices.shape={tuple(indices.shape)}"
            )
        if dense_shape is not None:
            try:
                dense_shape = tuple(operator.index(s) for s in dense_shape)
            except TypeError as err:
                raise TypeError(
                    f"IndexedSlices `dense_shape` must be a sequence of integers. Received: dense_shape={dense_shape!r}"
                ) from err
        self.values = values
        self.indices = indices
        self.dense_shape = dense_shape

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def to_dense(self, shape: Optional[Sequence[int]] = None) -> torch.Tensor:
        shape = tuple(shape) if shape is not None else self.dense_shape
        if shape is None:
            raise ValueError("IndexedSlices.to_dense() needs `dense_shape` or an explicit `shape`.")
        out = torch.zeros(shape, dtype=self.values.dtype, device=self.values.device)
        return out.index_add_(0, self.indices, self.values)

    def __repr__(self) -> str:
        return (
            f"IndexedSlices(indices={self.indices.tolist()}, values.shape={tuple(self.values.shape)}, "
            f"dense_shape={self.dense_shape})"
        )


Gradient = Union[torch.Tensor, IndexedSlices]


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """True for the dtypes that may index rows (not floating, complex or bool)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def is_sparse(grad: Any) -> bool:
    """True for an ``IndexedSlices`` or a torch sparse COO tensor."""
    return isinstance(grad, IndexedSlices) or (isinstance(grad, torch.Tensor) and grad.layout == torch.sparse_coo)


def as_indexed_slices(grad: Any) -> IndexedSlices:
    """Converts a torch sparse COO row gradient (as from ``nn.Embedding(sparse=True)``) to ``IndexedSlices``."""
    if isinstance(grad, IndexedSlices):
        return grad
    if grad.sparse_dim() != 1:
        raise ValueError(
            "Sparse COO gradients must be sparse in the first dimension only (row gradients). "
            f"Received: a gradient with sparse_dim={grad.sparse_dim()}"
        )
    return IndexedSlices(grad._values(), grad._indices()[0], tuple(grad.shape))


def variable_name(var: torch.Tensor, fallback: str) -> str:
    """A variable's Keras name: its own ``name`` if it has one, else ``fallback``."""
    name = getattr(var, "name", None)
    return name if isinstance(name, str) and name else fallback


def named_variables(source: Any) -> list[tuple[str, torch.Tensor]]:
    """Normalises what users pass as variables into ``(name, tensor)`` pairs.

    Accepts an ``nn.Module`` (its ``named_parameters()``), an iterable of tensors, or of ``(name, tensor)`` pairs.
    """
    if isinstance(source, nn.Module):
        return [(n, p) for n, p in source.named_parameters()]
    if isinstance(source, torch.Tensor):
        source = [source]
    if not isinstance(source, Iterable):
        raise TypeError(
            "Expected an nn.Module, a list of tensors or a list of (name, tensor) pairs. "
            f"Received: {type(source).__name__}"
        )
    pairs: list[tuple[str, torch.Tensor]] = []
    for i, item in enumerate(source):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            pairs.append((item[0], item[1]))
        elif isinstance(item, torch.Tensor):
            pairs.append((variable_name(item, f"variable_{i}" if i else "variable"), item))
        else:
            raise TypeError(f"Expected a tensor or a (name, tensor) pair at position {i}. Received: {item!r}")
    return pairs
