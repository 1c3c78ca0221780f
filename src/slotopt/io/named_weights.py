"""What both readers' results share (``KerasCheckpoint`` here, ``TFCheckpoint`` in ``tf_result.py``): the checks of
the parameters a caller gives against a checkpoint's trainable ``variable_names`` and ``weights``, and the
handing over of the file's tensors to the module or optimizer that continues the run (issue 40: nothing held
twice), in torch's layout where it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch

from ..engine import adopt
from .errors import CheckpointFormatError
from .keras_layers import keras_order, keras_view, to_torch, torch_view

__all__ = ["NamedWeights", "handed_over", "summation_orders", "write_weight"]


class NamedWeights:
    """The argument checks of a checkpoint read into memory (Keras files, ``keras_result.py``; TensorFlow
    checkpoints, ``tf_result.py``): parameters given by the caller against its trainable ``variable_names`` and
    ``weights``, the only attributes they read."""

    path: str
    variable_names: list[str]
    weights: dict[str, torch.Tensor]
    _loans: adopt.Loans

    def parameters(self, device: Any = None) -> list[torch.Tensor]:
        """Leaf tensors (``requires_grad=True``) holding the saved weights, in ``variable_names`` order.

        The first call hands the weights the reader holds over, without a copy (issue 40: a model of gigabytes is
        not held twice): each parameter shares the memory of ``weights[name]``, so training it shows in
        ``weights`` too. A later call returns copies while those weights are unwritten, and raises ``ValueError``
        once training has written them (read the file again for a second model). On another ``device``: copies."""
        self._refuse_unread("build parameters")
        for n in self.variable_names:  # all checked before any is handed out
            weight = self.weights[n]
            if not (weight.is_floating_point() or weight.is_complex()):
                # (torch's own refusal, "only Tensors of floating point dtype can require gradients", names
                # neither the file nor the entry)
                entry = getattr(self, "keys", {}).get(n, n)
                raise CheckpointFormatError(
                    self.path, entry, f"trainable variable {n!r} holds {str(weight.dtype).replace('torch.', '')} "
                    "values, but TensorFlow trains floating-point variables only (the file was altered, or was not "
                    "written by a training run): refused, nothing handed out.")
            self._loans.check(weight, f"weight {n!r}", self.path)
        out = []
        for n in self.variable_names:
            weight = self.weights[n]
            if device is not None and torch.device(device) != weight.device:
                out.append(weight.detach().to(device).requires_grad_(True))
            else:
                out.append(self._loans.take(weight, f"weight {n!r}", self.path).detach().requires_grad_(True))
        return out

    def _refuse_unread(self, action: str) -> None:
        """Refuses to ``action`` from a checkpoint read with ``metadata_only=True`` (``slotopt inspect``): its
        tensors past one element are ``meta`` tensors (shapes and dtypes), with no values to train from."""
        state = getattr(self, "optimizer_state", None) or [v.value for v in getattr(self, "optimizer_variables", ())]
        for value in (*self.weights.values(), *state):
            if isinstance(value, torch.Tensor) and value.is_meta:
                raise ValueError(f"{self.path} was read with metadata_only=True (names, shapes and dtypes, no "
                                 f"values): read it again without metadata_only to {action}.")

    def _check_names(self, argument: str, given: Mapping[str, Any]) -> None:
        """``given`` (keyed by Keras name) names every trainable variable of the checkpoint and nothing else."""
        missing = [n for n in self.variable_names if n not in given]
        unknown = [n for n in given if n not in self.weights]
        if missing or unknown:
            raise ValueError(
                f"Argument `{argument}` must name every trainable variable of the checkpoint: missing {missing}, "
                f"unknown {unknown}. Expected names: {self.variable_names}."
            )

    def _params_in_order(self, params: Any) -> list[torch.Tensor]:
        self._refuse_unread("build its optimizer")
        if isinstance(params, Mapping):
            self._check_names("params", params)
            ordered = [params[n] for n in self.variable_names]
        elif isinstance(params, (list, tuple)):
            if len(params) != len(self.variable_names):
                raise ValueError(
                    f"Argument `params` must hold {len(self.variable_names)} tensors, one per name in "
                    f"`variable_names` ({self.variable_names}). Received {len(params)} tensors."
                )
            ordered = list(params)
        else:
            raise TypeError(
                "Argument `params` must be a list of tensors in `variable_names` order or a dict name → tensor. "
                f"Received: params={params!r}"
            )
        for name, p in zip(self.variable_names, ordered):
            expected = self.weights[name]
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"Argument `params` entry {name!r} must be a tensor. Received: {p!r}")
            if tuple(p.shape) != tuple(expected.shape) or p.dtype != expected.dtype:
                raise ValueError(
                    f"Argument `params` entry {name!r} has shape {tuple(p.shape)} and dtype {p.dtype}; the checkpoint "
                    f"has shape {tuple(expected.shape)} and dtype {expected.dtype} (Keras layout)."
                )
        return ordered


def handed_over(loans: adopt.Loans, original: torch.Tensor, converted: torch.Tensor, kind: str
                 ) -> Optional[torch.Tensor]:
    """``converted`` (``original`` in torch's layout, now the module's or the optimizer's) seen in Keras layout, to
    keep in place of ``original`` so that the file's copy is freed (issue 40: ``load_module`` at the loaded data);
    lent (``adopt.Loans``): it is the model's from now on. None where ``original`` was handed out before or the
    layout has no view (it is kept)."""
    if loans.lent(original):
        return None
    # (keras_view undoes to_torch exactly for every layout it covers: tests/io/test_adopt_at_memory_floor.py checks each)
    view = keras_view(converted, kind, tuple(original.shape))
    if view is None or view.dtype != original.dtype:
        return None
    loans.lend(view)
    return view


def summation_orders(targets: Mapping[str, torch.Tensor], layouts: Mapping[str, str],
                      weights: Mapping[str, torch.Tensor]) -> dict[int, Any]:
    """``id(parameter)`` → the view putting a tensor of its torch layout in TensorFlow's order, for each
    parameter whose layout is not the file's (engine/summation.py)."""
    out = {}
    for name, param in targets.items():
        order = keras_order(layouts.get(name, "as_is"), tuple(weights[name].shape))
        if order is not None:
            out[id(param)] = order
    return out


def write_weight(loans: adopt.Loans, weights: dict[str, torch.Tensor], name: str, param: torch.Tensor,
                  kind: str) -> None:
    """``param.copy_`` of ``weights[name]`` in torch's layout (written through a Keras-layout view of ``param``:
    no converted copy on the way), then ``weights[name]`` handed over to ``param`` (``handed_over``). Under
    ``torch.no_grad``."""
    weight = weights[name]
    source = torch_view(weight, kind)
    param.copy_(source if source is not None else to_torch(weight, kind))
    # The module holds the weight from now on: the checkpoint sees it through a view (the file's copy is freed).
    kept = handed_over(loans, weight, param.detach(), kind)
    if kept is not None:
        weights[name] = kept
