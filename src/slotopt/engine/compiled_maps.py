"""Clipping, unscaling and ``clipvalue`` of an ordinary step in compiled passes, the same bits as the foreach
path (``engine/clipping.py``, the reference, which every other step takes).

On an ordinary step (``engine/plan.py``) of one (device, dtype) kind of contiguous float32 or float64 CPU
gradients, a gradient map costs one compiled pass over the gradients (``kernels/native/maps.py``):

* ``g / factor`` (Keras 3's ``loss_scale_factor``), ``clamp(g, -c, c)`` (``clipvalue``): one pass that reads the
  gradients and writes the mapped ones into a buffer kept with the plan;
* clipping by norm, per tensor or global: first one pass computing every tensor's sum of squares in Eigen's order
  (``numerics.sum(g * g)``: TensorFlow's), of the gradients as the preceding maps leave them (unscaled, clamped:
  mapped on the fly, not written), then the norms, denominators and global scale from those sums exactly as the
  foreach path computes them (NumPy scalars of the dtype: the same IEEE operations torch's 0-d ops perform), then
  the map pass with the scale or the per-tensor denominators.

The result is an ``Ordinary`` step of the same plan whose gradients are the buffer's views, made by this module
(held by nothing else, their addresses known), with what the step's start proved kept. The buffer is kept between
steps only where nothing can hold on to the gradients the update receives (a built-in optimizer updating with its
own kernels, no gradient transformer); elsewhere each step maps into a new one. Anything else (other dtypes or
devices, mixed kinds, FSDP2 shards, a missing compiled library, a value that is not a Python number) returns None
and the stage takes the foreach path.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import torch

from ..kernels import native
from ..kernels.native import maps
from .loss_scaling import keeps_no_gradients
from .plan import Ordinary, quiet_now
from .writing import atomic

__all__ = ["mapped", "accumulated", "keeps_none", "flush"]

_unflatten = torch._C._nn.unflatten_dense_tensors


def _number(value: Any) -> bool:
    return type(value) in (float, int)


def keeps_none(opt: Any) -> bool:
    """Whether ``opt`` drops the gradients it updates with once its step is done (so their buffer can be kept):
    Keras 3's built-ins (``loss_scaling.keeps_no_gradients``), tf.keras legacy built-ins whose dense update is the
    grouped kernel call, with no ``gradient_transformers``."""
    if keeps_no_gradients(opt):
        return True
    cls = type(opt)  # (legacy/updates.py marks its grouped kernel calls with this attribute)
    return (cls.__module__.startswith("slotopt.legacy.") and not getattr(opt, "gradient_transformers", None)
            and getattr(getattr(cls, "_resource_apply_dense", None), "_slotopt_grouped", False) is True)


def mapped(opt: Any, step: Any, key: str, divisor: Optional[float] = None, clipvalue: Optional[float] = None,
           clipnorm: Optional[float] = None, global_clipnorm: Optional[float] = None) -> Optional[Ordinary]:
    """``step``'s gradients mapped in the step's order (``/ divisor``, then clamped to ``[-clipvalue,
    clipvalue]``, then clipped to ``clipnorm`` per tensor, or to ``global_clipnorm`` together) in compiled passes,
    as an ``Ordinary`` step of its plan; None where this path does not apply (see the module docstring). ``key``
    names the stage (its buffer is its own).

    Where only the update rules read the result (:func:`_fused`), nothing is written: the result holds the
    gradients as they are and the map (``gradient_map``), which the rules apply as they load each element. A step
    that holds a map already (an unscale before a clip) takes it as the first operations of this one; where it
    cannot, its gradients are mapped into its buffer first (``_flush``), so that every other reader sees them
    mapped."""
    pending = step.__dict__.get("gradient_map") if getattr(step, "plan", None) is not None else None
    if pending is not None:
        before = pending.flags
        new = (1 if divisor is not None else 0) | (2 if clipvalue is not None else 0) \
            | (4 if clipnorm is not None else 0) | (8 if global_clipnorm is not None else 0)
        if before & ~3 or not new or (new & -new) <= before:  # (its operations must all come before these)
            pending.flush(step)
        else:
            if before & 1:
                divisor = float(pending.scalars[1])
            if before & 2:
                clipvalue = float(pending.scalars[3])
    result = _mapped(opt, step, key, divisor, clipvalue, clipnorm, global_clipnorm)
    if result is None:
        flush(step)  # (the caller's foreach path then reads the gradients mapped)
    return result


def _mapped(opt: Any, step: Any, key: str, divisor: Optional[float], clipvalue: Optional[float],
            clipnorm: Optional[float], global_clipnorm: Optional[float]) -> Optional[Ordinary]:
    if getattr(step, "plan", None) is None or opt.__dict__.get("_sharded") or getattr(opt, "_layouts", None) \
            or getattr(opt, "_summation_orders", None) or step.grad_addresses is None:
        # (FSDP2 shards: a norm is summed over the processes, engine/shards.py; a variable held in another layout
        # than TensorFlow's is summed in TF's order of it, engine/summation.py)
        return None
    plan = step.plan
    if len(plan.kinds) != 1 or not plan.on_cpu or plan.dtypes[0] not in maps.DTYPES:
        return None
    given = [v for v in (divisor, clipvalue, clipnorm, global_clipnorm) if v is not None]
    if not given or not all(map(_number, given)) or (clipnorm is not None and global_clipnorm is not None):
        return None
    if clipvalue is not None and not clipvalue > 0:
        return None  # (clamp(g, -0.0, 0.0): torch's vector and scalar loops differ on the zero's sign)
    dtype = plan.dtypes[0]
    f = maps.DTYPES[dtype]
    addresses = step.grad_addresses
    if type(addresses) is not np.ndarray:
        addresses = np.asarray(addresses, dtype=np.uint64)
    offsets = _offsets(plan)
    grads = step.grads
    tensors = lambda: grads  # noqa: E731
    pre = (1 if divisor is not None else 0) | (2 if clipvalue is not None else 0)
    lo, hi = (-float(clipvalue), float(clipvalue)) if clipvalue is not None else (0.0, 0.0)
    div = float(divisor) if divisor is not None else 1.0
    flags, denominators, scale, clip = pre, None, 1.0, 1.0
    if clipnorm is not None or global_clipnorm is not None:
        sums = maps.square_sums(addresses, offsets, dtype, tensors, pre, div, lo, hi)
        if sums is None:
            return None
        with np.errstate(all="ignore"):
            if clipnorm is not None:
                # clipping.clip_by_norm: norm = sqrt(sq) where sq > 0, else sq; (g * c) / max(norm, c)
                positive = sums > 0
                norms = np.where(positive, np.sqrt(np.where(positive, sums, f(1))), sums)
                denominators = np.maximum(norms, f(clipnorm))  # (NaN wins, as torch.maximum)
                flags, clip = flags | 4, float(clipnorm)
            else:
                # clipping.clip_by_global_norm: c * min(1 / N, 1 / c) + (N - N), N the sqrt of the sums' sum
                total = maps.eigen_sum(sums)
                if total is None:
                    return None
                norm = np.sqrt(f(total))
                limit = f(1.0 / global_clipnorm if global_clipnorm else math.inf)
                scale = float(f(global_clipnorm) * np.minimum(f(1) / norm, limit) + (norm - norm))
                flags |= 8
    gm = maps.GradientMap(dtype, flags, div, lo, hi, clip, denominators, scale)
    if _fused(opt, step, key):
        result = Ordinary.of(list(step), plan, grads, step.grad_addresses, step.constrained)
        gm.flush = lambda pending: _flush(opt, pending)
        result.__dict__["gradient_map"] = gm  # (read by plan.Ordinary.gradients: the update rules map as they load)
    else:
        buffer, views, pairs, view_addresses = _buffer(plan, key, grads, offsets, dtype, keeps_none(opt))
        if maps.gradient_map(addresses, offsets, dtype, tensors, buffer, flags, *gm.arguments()) is None:
            return None
        result = Ordinary.of(pairs, plan, views, view_addresses, step.constrained)
    result.quiet, result.held, result.proof = step.quiet, step.held, step.proof
    return result


#: The update methods of the built-ins whose dense update hands the step's gradients, as the list it is given, to
#: compiled rules of their own (``kernels.<rule>(params, grads, ...)``), each with a form that takes a gradient map
#: (``slotopt_kernels.c``): (module, qualified name). Any other update (a subclass's, a rule written in Python, one
#: that indexes the list) gets its gradients mapped into a buffer, as before. (Keras 3's Ftrl is not among them: its
#: dense rule runs as foreach ops, which would take the mapped gradients from a new buffer every step.)
_FUSED_UPDATES = frozenset(
    [(f"slotopt.keras3.{module}", f"{name}._update_group") for module, name in (
        ("adam", "Adam"), ("adamax", "Adamax"), ("nadam", "Nadam"), ("sgd", "SGD"), ("rmsprop", "RMSprop"), ("adagrad", "Adagrad"), ("adadelta", "Adadelta"), ("lion", "Lion"))]
    + [("slotopt.legacy.adam", f"{name}._apply_dense_group") for name in ("Adam", "Adamax", "Nadam")]
    + [(f"slotopt.legacy.{module}", f"{name}._apply_dense_group") for module, name in (
        ("gradient_descent", "SGD"), ("rmsprop", "RMSprop"), ("adagrad", "Adagrad"), ("adagrad", "Adadelta"),
        ("ftrl", "Ftrl"))])


def _update_method(opt: Any) -> Optional[tuple[str, str]]:
    """(module, qualified name) of the method that updates ``opt``'s dense groups."""
    cls = type(opt)
    name = "_update_group" if cls.__module__.startswith("slotopt.keras3.") else \
        "_apply_dense_group" if cls.__module__.startswith("slotopt.legacy.") else None
    fn = getattr(cls, name, None) if name is not None else None
    return None if fn is None else (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""))


def _fused(opt: Any, step: Ordinary, key: str) -> bool:
    """Whether the map of ``step`` can be left to the update rules: between this stage and the update no code but
    slotopt's own runs (no callable, schedule or hook, no finalizer: no user code can change a gradient under the
    map) and nothing but the update
    reads the gradients: a built-in's own update (``_FUSED_UPDATES``, not overridden), no per-variable
    ``update_step``, no gradient transformers, no tf-keras sparse deduplication; after an unscale, no accumulation
    and no aggregation either (their stages come between it and the update)."""
    if _update_method(opt) not in _FUSED_UPDATES or not _has_mapped_rules():
        return False
    if step.quiet is None and not (atomic.held() and quiet_now(step.plan) and not _may_run_user_code(opt, step.plan)):
        return False  # (``quiet``: the same, proven when the step was: engine/plan_cache.py)
    if getattr(opt, "gradient_transformers", None) or getattr(opt, "_deduplicate_sparse", False):
        return False
    custom = getattr(opt, "_has_custom_update", None)
    if custom is not None and custom():
        return False
    if type(opt).__module__.startswith("slotopt.legacy.") and not getattr(
            getattr(type(opt), "_resource_apply_dense", None), "_slotopt_grouped", False):
        return False
    if key == "unscale":
        from .pipeline import aggregates_nothing  # (pipeline imports the stages, which import this module)

        if getattr(opt, "gradient_accumulation_steps", None) or not aggregates_nothing(opt):
            return False
    return True


def _may_run_user_code(opt: Any, plan: Any) -> bool:
    """``atomic.may_run_user_code(opt)`` (a pass over every attribute and list of the optimizer: ~0.4 ms with 500
    variables), kept with the plan while the optimizer's attributes are the same objects and its lists and
    hyperparameter table the same lengths (a new schedule, callable or hook is a new object or a longer list)."""
    own = opt.__dict__
    hyper = own.get("_hyper")
    mark = (tuple(map(id, own.values())), tuple(map(id, hyper.values())) if type(hyper) is dict else (),
            tuple([len(v) for v in own.values() if type(v) in (list, tuple, dict)]))
    kept = plan.memo.get(("gradient maps", "user code", id(opt)))
    if kept is None or kept[0] != mark:
        kept = (mark, atomic.may_run_user_code(opt))
        plan.memo[("gradient maps", "user code", id(opt))] = kept
    return kept[1]


def _has_mapped_rules() -> bool:
    """Whether the loaded library has the rules that take a gradient map (one built before them has not)."""
    return native.active() and maps.mapped_function("sgd", torch.float32, _PROBE) is not None


_PROBE = maps.GradientMap(torch.float32, 1)


def _flush(opt: Any, step: Ordinary) -> None:
    """``step``'s gradients mapped by the map it holds, into its buffer, and the step made of them in place (every
    reader of it from now on sees the mapped gradients); the map dropped."""
    gm = step.__dict__.pop("gradient_map", None)
    if gm is None:
        return
    plan, grads = step.plan, list(step.grads)
    dtype, offsets = plan.dtypes[0], _offsets(plan)
    buffer, views, pairs, view_addresses = _buffer(plan, "deferred", grads, offsets, dtype, keeps_none(opt))
    addresses = np.array([g.data_ptr() for g in grads], dtype=np.uint64)
    if maps.gradient_map(addresses, offsets, dtype, lambda: grads, buffer, gm.flags, *gm.arguments()) is None:
        views = maps.materialized(grads, gm)  # (the compiled path turned off since: torch's ops, the same bits)
        pairs = list(zip(views, plan.variables))
        view_addresses = np.array([v.data_ptr() for v in views], dtype=np.uint64)
    step[:] = pairs
    step.grads, step.grad_addresses = list(views), view_addresses


def flush(step: Any) -> None:
    """Maps ``step``'s gradients now where it holds a map, for a reader of its gradients other than the update."""
    gm = step.__dict__.get("gradient_map") if getattr(step, "plan", None) is not None else None
    if gm is not None:
        gm.flush(step)


def accumulated(opt: Any, step: Any, accumulators: list[torch.Tensor], steps: int) -> Optional[Ordinary]:
    """Gradient accumulation's update call on an ordinary step: ``(g + acc) / steps`` for every gradient of
    ``step`` and its accumulator (in pair order) in one compiled pass into a buffer kept with the plan, as an
    ``Ordinary`` step of its plan; None where this path does not apply (the caller takes torch's ops, the same
    bits). The accumulators are proven in the same C++ pass as any slot (``state_operands``)."""
    if getattr(step, "plan", None) is None or step.grad_addresses is None or type(steps) is not int:
        return None
    plan = step.plan
    if len(plan.kinds) != 1 or not plan.on_cpu or plan.dtypes[0] not in maps.DTYPES:
        return None
    proven = plan.state_operands("gradient_accumulator", plan.positions, accumulators)
    if type(proven) is not native.Matched:
        return None
    dtype, grads, offsets = plan.dtypes[0], step.grads, _offsets(plan)
    buffer, views, pairs, view_addresses = _buffer(plan, "accumulate", grads, offsets, dtype, keeps_none(opt))
    if maps.accumulated_mean(np.asarray(step.grad_addresses, dtype=np.uint64), proven.addresses, offsets, dtype,
                             lambda: (grads, proven), buffer, steps) is None:
        return None
    result = Ordinary.of(pairs, plan, views, view_addresses, step.constrained)
    result.quiet, result.held, result.proof = step.quiet, step.held, step.proof
    return result


def _offsets(plan: Any) -> np.ndarray:
    """The prefix sums of the plan's element counts (int64), kept with the plan."""
    offsets = plan.memo.get(("gradient maps", "offsets"))
    if offsets is None:
        offsets = np.concatenate([[0], np.cumsum([math.prod(s) for s in plan.shapes], dtype=np.int64)]).astype(
            np.int64)
        plan.memo[("gradient maps", "offsets")] = offsets
    return offsets


def _buffer(plan: Any, key: str, grads: list[torch.Tensor], offsets: np.ndarray, dtype: torch.dtype,
            keep: bool) -> tuple[torch.Tensor, list[torch.Tensor], list[Any], np.ndarray]:
    """The flat buffer a map writes, its views shaped like the gradients, the pairs of those views with the plan's
    variables and the views' addresses: kept with the plan (``keep``) or made for this step."""
    memo_key = ("gradient maps", "buffer", key)
    kept = plan.memo.get(memo_key) if keep else None
    if kept is None:
        buffer = torch.empty(int(offsets[-1]), dtype=dtype)
        views = list(_unflatten(buffer, grads)) if len(grads) > 1 else [buffer.view(grads[0].shape)]
        addresses = (np.uint64(buffer.data_ptr()) + offsets[:-1].astype(np.uint64) * np.uint64(dtype.itemsize))
        kept = (buffer, views, list(zip(views, plan.variables)), addresses)
        if keep:
            plan.memo[memo_key] = kept
    return kept
