"""What a Keras layer stores, and how each stored variable maps onto a torch tensor.

A layer's *spec* lists its own variables (name, layout kind, trainable) in Keras's creation order and its sub-layers
(the HDF5 group key Keras 3 stores them under, their default name, class and config) in tracking order: the
reader walks these recursively, so MultiHeadAttention's projections, an RNN's cell and the layers wrapped by
Bidirectional/TimeDistributed or held by a nested model are all found, in ``model.trainable_variables`` order.

A *layout kind* names how a Keras tensor becomes the torch tensor of the counterpart module (weights and every
optimizer slot of the variable alike, since a slot has its variable's layout): see :data:`TORCH_COUNTERPARTS`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any, Callable, Optional

import torch

from ..engine.naming import snake_case

__all__ = ["LayerSpec", "layer_spec", "to_torch", "torch_shape", "TORCH_COUNTERPARTS", "SUPPORTED_LAYERS",
           "CONTAINER_CLASSES"]

#: Models that hold layers (their weights file nests ``layers/<class>`` groups).
CONTAINER_CLASSES = ("Sequential", "Functional", "Model")

#: Keras layer class → (its own variables in creation order, the layout kind of each), for the default config
#: (``use_bias=True``, ``center``/``scale`` on). Layers whose variables live in sub-layers have none of their own.
SUPPORTED_LAYERS: dict[str, tuple[tuple[str, str], ...]] = {
    "Dense": (("kernel", "dense_kernel"), ("bias", "as_is")),
    "EinsumDense": (("kernel", "einsum_kernel"), ("bias", "flatten")),
    "Conv1D": (("kernel", "conv1d_kernel"), ("bias", "as_is")),
    "Conv2D": (("kernel", "conv2d_kernel"), ("bias", "as_is")),
    "Conv3D": (("kernel", "conv3d_kernel"), ("bias", "as_is")),
    "Conv1DTranspose": (("kernel", "conv1d_kernel"), ("bias", "as_is")),
    "Conv2DTranspose": (("kernel", "conv2d_kernel"), ("bias", "as_is")),
    "Conv3DTranspose": (("kernel", "conv3d_kernel"), ("bias", "as_is")),
    "DepthwiseConv1D": (("kernel", "depthwise_kernel"), ("bias", "as_is")),
    "DepthwiseConv2D": (("kernel", "depthwise_kernel"), ("bias", "as_is")),
    "SeparableConv1D": (("depthwise_kernel", "depthwise_kernel"), ("pointwise_kernel", "conv1d_kernel"),
                        ("bias", "as_is")),
    "SeparableConv2D": (("depthwise_kernel", "depthwise_kernel"), ("pointwise_kernel", "conv2d_kernel"),
                        ("bias", "as_is")),
    "BatchNormalization": (("gamma", "as_is"), ("beta", "as_is"), ("moving_mean", "as_is"),
                           ("moving_variance", "as_is")),
    "LayerNormalization": (("gamma", "as_is"), ("beta", "as_is")),
    "GroupNormalization": (("gamma", "as_is"), ("beta", "as_is")),
    "Embedding": (("embeddings", "as_is"),),
    "PReLU": (("alpha", "prelu"),),
    "LSTMCell": (("kernel", "dense_kernel"), ("recurrent_kernel", "dense_kernel"), ("bias", "as_is")),
    "GRUCell": (("kernel", "gru_kernel"), ("recurrent_kernel", "gru_kernel"), ("bias", "gru_bias")),
    "SimpleRNNCell": (("kernel", "dense_kernel"), ("recurrent_kernel", "dense_kernel"), ("bias", "as_is")),
    # ConvLSTM (issue 49): the convolution kernels stay in Keras's layout (torch has no ConvLSTM module)
    "ConvLSTMCell": (("kernel", "as_is"), ("recurrent_kernel", "as_is"), ("bias", "as_is")),
    "LSTM": (), "GRU": (), "SimpleRNN": (), "MultiHeadAttention": (), "Bidirectional": (), "TimeDistributed": (),
    "ConvLSTM1D": (), "ConvLSTM2D": (), "ConvLSTM3D": (),
}

#: Layout kind → (the torch counterpart, the conversion), for the documentation and error messages.
TORCH_COUNTERPARTS: dict[str, str] = {
    "as_is": "same layout (biases, norms' gamma/beta, BatchNorm statistics, Embedding.weight, LSTM bias)",
    "flatten": "reshaped to one axis (EinsumDense bias (heads, key_dim) → nn.Linear bias (heads·key_dim,))",
    "dense_kernel": "(in, out) → nn.Linear weight (out, in): transposed (also LSTM/SimpleRNN kernels → weight_ih/hh)",
    "einsum_kernel": "EinsumDense (in axes..., out axes...) → nn.Linear weight (prod(out), prod(in))",
    "conv1d_kernel": "(k, in, out) → nn.Conv1d weight (out, in, k); ConvTranspose1d (k, out, in) → (in, out, k)",
    "conv2d_kernel": "(kh, kw, in, out) → nn.Conv2d weight (out, in, kh, kw); transpose form alike",
    "conv3d_kernel": "(kd, kh, kw, in, out) → nn.Conv3d weight (out, in, kd, kh, kw); transpose form alike",
    "depthwise_kernel": "(k..., in, mult) → nn.Conv{1,2}d(groups=in) weight (in·mult, 1, k...)",
    "gru_kernel": "(in, 3·units), gates z, r, h → nn.GRU weight (3·units, in), gates r, z, n",
    "gru_bias": "(2, 3·units) (reset_after) or (3·units,), gates z, r, h → same shape, gates r, z, n",
    "prelu": "(1, ..., 1, channels) → nn.PReLU weight (channels,)",
}

_EINSUM = re.compile(r"^einsum_kernel:(\d+)$")


def _perm(p: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: t.permute(*p).contiguous()


def _gru_gates(t: torch.Tensor, axis: int) -> torch.Tensor:
    """Keras gate blocks z, r, h along ``axis`` → torch's r, z, n."""
    z, r, h = torch.chunk(t, 3, dim=axis)
    return torch.cat([r, z, h], dim=axis).contiguous()


def _depthwise(t: torch.Tensor) -> torch.Tensor:
    # (k..., in, mult) → (in, mult, k...) → (in·mult, 1, k...): torch's grouped conv orders output channels
    # in-major, as TensorFlow's depthwise convolution does (channel c·mult + m).
    spatial = t.dim() - 2
    moved = t.permute(spatial, spatial + 1, *range(spatial))
    return moved.reshape(t.shape[spatial] * t.shape[spatial + 1], 1, *t.shape[:spatial]).contiguous()


def _converter(kind: str, shape: Sequence[int]) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The Keras → torch conversion of a tensor of Keras ``shape``; ``None``: no conversion exists."""
    rank = len(shape)
    if kind == "as_is":
        return lambda t: t
    if kind == "flatten":
        return lambda t: t.reshape(-1).contiguous()
    if kind == "dense_kernel" and rank == 2:
        return _perm((1, 0))
    for n in (1, 2, 3):
        if kind == f"conv{n}d_kernel" and rank == n + 2:
            return _perm((n + 1, n, *range(n)))
    if kind == "depthwise_kernel" and rank >= 3:
        return _depthwise
    match = _EINSUM.match(kind)
    if match and 0 < int(match.group(1)) < rank:
        n_in = int(match.group(1))
        n_rows = math.prod(shape[:n_in])
        return lambda t: t.reshape(n_rows, -1).T.contiguous()
    if kind == "gru_kernel" and rank == 2 and shape[1] % 3 == 0:
        return lambda t: _gru_gates(t.T, 0)
    if kind == "gru_bias" and rank in (1, 2) and shape[-1] % 3 == 0:
        return lambda t: _gru_gates(t, t.dim() - 1)
    if kind == "prelu" and rank >= 1 and all(d == 1 for d in shape[:-1]):
        return lambda t: t.reshape(-1).contiguous()
    return None


def to_torch(value: torch.Tensor, kind: str) -> torch.Tensor:
    """``value`` (Keras layout) in torch's layout for layout ``kind``; ``ValueError`` if it has none."""
    convert = _converter(kind, tuple(value.shape))
    if convert is None:
        raise ValueError(f"No torch layout for a {kind} of shape {tuple(value.shape)}.")
    return convert(value)


def keras_view(value: torch.Tensor, kind: str, shape: Sequence[int]) -> Optional[torch.Tensor]:
    """``value`` (torch's layout of a Keras tensor of ``shape`` and layout ``kind``) seen in Keras layout without a
    copy: a view of its memory; ``None`` where the conversion is not a view's (GRU gates are reordered)."""
    shape = tuple(shape)
    rank = len(shape)
    if kind in ("as_is", "flatten", "prelu"):
        view = value.view(shape)
    elif kind == "dense_kernel" and rank == 2:
        view = value.permute(1, 0)
    elif kind in ("conv1d_kernel", "conv2d_kernel", "conv3d_kernel") and rank == int(kind[4]) + 2:
        n = rank - 2  # to_torch's permutation (n + 1, n, 0, ..., n - 1), undone
        forward = (n + 1, n, *range(n))
        view = value.permute(*sorted(range(rank), key=lambda d: forward[d]))
    elif kind == "depthwise_kernel" and rank >= 3:
        spatial = rank - 2
        view = value.view(shape[spatial], shape[spatial + 1], *shape[:spatial]).permute(
            *range(2, spatial + 2), 0, 1)
    elif _EINSUM.match(kind):
        n_in = int(_EINSUM.match(kind).group(1))  # type: ignore[union-attr]
        view = value.T.view(math.prod(shape[:n_in]), -1).view(shape) if value.dim() == 2 else None
    else:
        return None
    if view is None or tuple(view.shape) != shape or view.data_ptr() != value.data_ptr():
        return None
    return view


def torch_view(value: torch.Tensor, kind: str) -> Optional[torch.Tensor]:
    """``value`` (Keras layout) seen in torch's layout without a copy, for the layouts that only permute axes
    (``as_is``, Dense and convolution kernels); ``None`` for the others. ``param.copy_(torch_view(...))`` writes
    a converted weight with no intermediate tensor (a 2-D transpose into contiguous memory takes torch's blocked
    path)."""
    rank = value.dim()
    if kind == "as_is":
        return value
    if kind == "dense_kernel" and rank == 2:
        return value.permute(1, 0)
    for n in (1, 2, 3):
        if kind == f"conv{n}d_kernel" and rank == n + 2:
            return value.permute(n + 1, n, *range(n))
    return None


def keras_order(kind: str, shape: Sequence[int]) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The function putting a tensor in torch's layout of a Keras tensor of ``shape`` and layout ``kind`` back in
    Keras's logical order (what TensorFlow sums a norm in, engine/summation.py); ``None`` where the two orders
    are the same (``as_is``, reshapes). A permutation of the axes where the layout is one (a view, no copy);
    otherwise an index computed once (GRU gates, depthwise and einsum kernels)."""
    shape = tuple(shape)
    rank = len(shape)
    if kind in ("as_is", "flatten", "prelu") or _converter(kind, shape) is None:
        return None
    if kind == "dense_kernel":
        return lambda t: t.permute(1, 0)
    if kind in ("conv1d_kernel", "conv2d_kernel", "conv3d_kernel"):
        forward = (rank - 1, rank - 2, *range(rank - 2))  # to_torch's permutation, undone
        inverse = tuple(sorted(range(rank), key=lambda d: forward[d]))
        return lambda t: t.permute(*inverse)
    numel = math.prod(shape)
    positions = to_torch(torch.arange(numel).reshape(shape), kind).reshape(-1)
    gather = torch.empty(numel, dtype=torch.long)
    gather[positions] = torch.arange(numel)  # Keras element k sits at torch element gather[k]
    return lambda t: t.reshape(-1)[gather.to(t.device)].view(shape)


def torch_shape(shape: Sequence[int], kind: str) -> Optional[tuple[int, ...]]:
    """The torch shape of a Keras ``shape`` of layout ``kind`` (``None``: no torch layout)."""
    convert = _converter(kind, tuple(shape))
    if convert is None:
        return None
    return tuple(convert(torch.empty(tuple(shape), device="meta")).shape)


# -------------------------------------------------------------------------------------------------- specs
@dataclass
class LayerSpec:
    """What a layer stores: its own variables ``(name, layout kind, trainable)`` in creation order, and its
    sub-layers ``(group key, default name, class, config)`` in tracking order."""

    own: list[tuple[str, str, bool]] = field(default_factory=list)
    children: list[tuple[str, str, str, dict]] = field(default_factory=list)
    known: bool = True
    #: From the recorded table of built-in layers (their default config): a file whose count differs is read as
    #: an unknown layer's (its variables by number, trainable only where floating point).
    from_table: bool = False


@functools.cache
def built_in_variables() -> dict[str, tuple[tuple[str, bool, str], ...]]:
    """Every built-in Keras 3 and tf-keras layer class → its own variables ``(name, trainable, dtype)`` in the
    order Keras saves them, for its default config: recorded from the layers themselves by
    ``tools/record_layer_table.py`` (``slotopt/data/keras_layer_variables.json``); Keras 3's entry wins."""
    table = json.loads(files("slotopt").joinpath("data/keras_layer_variables.json").read_text())
    out: dict[str, tuple[tuple[str, bool, str], ...]] = {}
    for generation in ("tf_keras", "keras3"):
        for name, variables in table[generation]["layers"].items():
            out[name] = tuple((str(v["name"]), bool(v["trainable"]), str(v["dtype"])) for v in variables)
    return out


def _einsum_kind(equation: Any) -> str:
    """``einsum_kernel:N`` when the kernel's first N axes are the contracted ones (the rest the output)."""
    if not isinstance(equation, str) or "->" not in equation or "," not in equation:
        return "as_is"
    inputs, output = equation.replace(" ", "").split("->")
    x_spec, k_spec = inputs.split(",", 1)
    n = 0
    for letter in k_spec:
        if letter in x_spec and letter not in output:
            n += 1
        else:
            break
    rest = k_spec[n:]
    if n == 0 or any(letter in x_spec and letter not in output for letter in rest):
        return "as_is"
    return f"einsum_kernel:{n}"


def _inner_config(entry: Any) -> tuple[str, dict]:
    if isinstance(entry, Mapping):
        return str(entry.get("class_name", "")), dict(entry.get("config") or {})
    return "", {}


def layer_spec(class_name: str, config: Mapping[str, Any]) -> LayerSpec:
    """The variables and sub-layers of a Keras layer of ``class_name`` with ``config``; ``known=False`` for a
    class the reader does not know (accepted only when the file holds no variable under it)."""
    use_bias = bool(config.get("use_bias", True))
    if class_name in ("BatchNormalization", "LayerNormalization", "GroupNormalization"):
        scale, center = bool(config.get("scale", True)), bool(config.get("center", True))
        if class_name == "LayerNormalization" and config.get("rms_scaling"):
            center = False
        own = ([("gamma", "as_is", True)] if scale else []) + ([("beta", "as_is", True)] if center else [])
        if class_name == "BatchNormalization":
            own += [("moving_mean", "as_is", False), ("moving_variance", "as_is", False)]
        return LayerSpec(own)
    if class_name == "EinsumDense":
        own = [("kernel", _einsum_kind(config.get("equation")), True)]
        if config.get("bias_axes"):
            own.append(("bias", "flatten", True))
        return LayerSpec(own)
    if class_name in SUPPORTED_LAYERS and SUPPORTED_LAYERS[class_name]:
        own = [(n, k, True) for n, k in SUPPORTED_LAYERS[class_name] if n != "bias" or use_bias]
        return LayerSpec(own)
    if class_name in ("LSTM", "GRU", "SimpleRNN"):
        cell = {"LSTM": "LSTMCell", "GRU": "GRUCell", "SimpleRNN": "SimpleRNNCell"}[class_name]
        return LayerSpec([], [("cell", f"{snake_case(class_name)}_cell", cell, dict(config))])
    if class_name in ("ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D"):
        return LayerSpec([], [("cell", "conv_lstm_cell", "ConvLSTMCell", dict(config))])
    if class_name == "MultiHeadAttention":
        heads = [("query_dense", "query", "abc,cde->abde"), ("key_dense", "key", "abc,cde->abde"),
                 ("value_dense", "value", "abc,cde->abde")]
        children = [(key, name, "EinsumDense", {"equation": eq, "bias_axes": "de" if use_bias else None})
                    for key, name, eq in heads]
        children.append(("output_dense", "attention_output", "EinsumDense",
                         {"equation": "abcd,cde->abe", "bias_axes": "e" if use_bias else None}))
        return LayerSpec([], children)
    if class_name == "Bidirectional":
        fwd_cls, fwd = _inner_config(config.get("layer"))
        bwd_cls, bwd = _inner_config(config.get("backward_layer"))
        if not bwd_cls:
            bwd_cls, bwd = fwd_cls, dict(fwd)
        return LayerSpec([], [("forward_layer", f"forward_{fwd.get('name', '')}", fwd_cls, fwd),
                              ("backward_layer", f"backward_{bwd.get('name', '')}", bwd_cls, bwd)])
    if class_name == "TimeDistributed":
        inner_cls, inner = _inner_config(config.get("layer"))
        return LayerSpec([], [("layer", str(inner.get("name", "")), inner_cls, inner)])
    if class_name in SUPPORTED_LAYERS:
        return LayerSpec([])
    # issue 49: any other built-in layer (Normalization's mean, variance and int64 count...) as it records itself
    recorded = built_in_variables().get(class_name)
    if recorded is not None:
        return LayerSpec([(name, "as_is", trainable) for name, trainable, _ in recorded], from_table=True)
    return LayerSpec([], [], known=False)

