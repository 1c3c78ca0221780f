"""Parameter groups as torch's tools write them, applied with Keras's rules: the group values' checks, the sync
that applies what a torch LR scheduler (or anyone) wrote into ``param_groups`` since the last step, torch's names
for Keras's hyperparameters (``betas``, ``eps``, ``weight_decay``) kept in step both ways, and the split of a step's
pairs by group with each group's own values. Part of the torch protocol: functions of the optimizer (``self``)
that ``TorchProtocol`` (engine/torch_protocol.py) binds as its methods, not a base class."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import torch

from ..variables import named_variables
from . import checks
from .distributed import known_local_view
from .plan import StepPairs

__all__ = ["TorchName", "torch_names_for", "is_param_group_list", "check_param_groups",
           "group_shares", "broadcast", "torch_names", "adopt_torch_names"]


def is_param_group_list(source: Any) -> bool:
    """True for ``[{"params": ...}, ...]``, torch's way of giving parameter groups."""
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(g, Mapping) for g in source)


def check_param_groups(groups: Sequence[Mapping[str, Any]]) -> list[tuple[list[tuple[str, torch.Tensor]], Any]]:
    """Each param-group dict's ``(name, tensor)`` pairs (a generator read once), checked before anything is
    registered: every group has ``params``, and no tensor is in two groups (torch refuses it: the second group's
    hyperparameters would never apply to it)."""
    out = []
    owner: dict[int, int] = {}
    for index, group in enumerate(groups):
        if "params" not in group:
            raise ValueError(f"A parameter group must have a 'params' entry. Received: {dict(group)!r}")
        params = group["params"]
        named = named_variables([params] if isinstance(params, torch.Tensor) else params)
        for name, var in named:
            first = owner.setdefault(id(var), index)
            if first != index:
                raise ValueError(
                    f"some parameters appear in more than one parameter group: {name!r} is in group {first} and "
                    f"group {index}. Each parameter belongs to one group (its hyperparameters are that group's).")
        out.append((named, group))
    return out


def group_shares(named: list[tuple[str, torch.Tensor]], groups: list[tuple[list[Any], Any]]) -> list[dict[str, Any]]:
    """A sub-optimizer's share of each param-group dict (``groups``: what ``check_param_groups`` returned), with
    the group's own values, in group order; its variables (``named``) that no group lists come last, with the
    sub-optimizer's own values. How a composite (MultiOptimizer, CompositeOptimizer) keeps torch's group dicts."""
    mine = {id(v): (n, v) for n, v in named}
    shares, listed = [], set()
    for pairs, group in groups:
        share = [mine[id(v)] for _, v in pairs if id(v) in mine]
        listed.update(id(v) for _, v in share)
        if share:
            shares.append({**group, "params": share})
    rest = [pair for pair in named if id(pair[1]) not in listed]
    return shares + ([{"params": rest}] if rest else [])


def _as_number(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _as_published(group: dict[str, Any], published: dict[str, Any]) -> bool:
    """Whether ``group`` holds exactly the keys of ``published``, in the same order, each with the very object
    published (one C-level pass; anything else is compared key by key)."""
    return len(group) == len(published) and all(map(operator.is_, group.values(), published.values())) \
        and all(map(operator.eq, group, published))


def _differs(a: Any, b: Any) -> bool:
    """``a != b`` for group values, with NaN equal to NaN (a schedule's learning rate before the first step)."""
    a, b = _as_number(a), _as_number(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    try:
        return bool(a != b)
    except (RuntimeError, TypeError, ValueError):  # a tensor of several values: changed (and then refused)
        return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class TorchName:
    """A hyperparameter under the name torch's tools read and write (``OneCycleLR``/``CyclicLR`` cycle
    ``betas[0]`` or ``momentum``; Hugging Face and ZeRO give groups a ``weight_decay``), shown beside the face's
    own keys in every group and kept in sync with them both ways.

    ``keys`` are the face's keys it stands for (``betas`` -> ``beta_1``, ``beta_2``: a tuple); with no keys it is
    a constant the generation does not have (``weight_decay`` of tf.keras and TF1: 0.0), which refuses any
    other value."""

    def __init__(self, name: str, keys: tuple[str, ...], constant: Any = None) -> None:
        self.name, self.keys, self.constant = name, keys, constant

    def value_in(self, group: Mapping[str, Any]) -> Any:
        if not self.keys:
            return self.constant
        if len(self.keys) == 1:
            return group[self.keys[0]]
        return tuple(group[k] for k in self.keys)

    def face_values(self, value: Any, index: int, owner: str) -> dict[str, Any]:
        """The face's keys for ``value`` written under the torch name; raises for a value that cannot be one."""
        if not self.keys:
            if _differs(value, self.constant):
                raise ValueError(
                    f"Parameter group {index}: {owner} has no `{self.name}` in its generation, so it stays "
                    f"{self.constant!r}. Received: {self.name}={value!r}")
            return {}
        if len(self.keys) == 1:
            return {self.keys[0]: value}
        if not isinstance(value, (tuple, list)) or len(value) != len(self.keys):
            raise ValueError(
                f"Parameter group {index}: `{self.name}` must be a tuple of {len(self.keys)} numbers "
                f"({', '.join(self.keys)}). Received: {self.name}={value!r}")
        return dict(zip(self.keys, (_as_number(v) for v in value)))


def torch_names_for(keys: Sequence[str]) -> tuple[TorchName, ...]:
    """torch's names for a face's hyperparameter ``keys``: ``betas`` for a pair of betas, ``eps`` for
    ``epsilon``, and ``weight_decay`` (a constant 0.0 where the face has none). ``momentum`` and ``weight_decay``
    are torch's names already where a face has them."""
    names = []
    for pair in (("beta_1", "beta_2"), ("beta1", "beta2")):
        if pair[0] in keys and pair[1] in keys:
            names.append(TorchName("betas", pair))
    if "epsilon" in keys and "eps" not in keys:
        names.append(TorchName("eps", ("epsilon",)))
    if "weight_decay" not in keys:
        names.append(TorchName("weight_decay", (), 0.0))
    return tuple(names)


# ------------------------------------------------------------------------------------------ sync
def _group_keys_of(self, index: int) -> tuple[str, ...]:
    """The hyperparameter keys of group ``index`` (the owning sub-optimizer's, for a composite)."""
    return _group_keys(self)


def _group_keys(self) -> tuple[str, ...]:
    keys = self._hyperparameter_keys()
    keys = (*keys, "maximize") if "maximize" not in keys and _maximizing(self) is not None else keys
    return ("lr", *keys) if self._has_learning_rate() else keys


def _maximizing(self: Any) -> Any:
    """The optimizer whose ``maximize`` the groups show (a wrapper's: the one it wraps), or None."""
    while not getattr(self, "_maximizes", False):
        if not hasattr(type(self), "_protocol_inner"):
            return None
        self = self._protocol_inner
    return self


def read_value(self: Any, key: str) -> Any:
    """A group key's current value (``maximize`` is every generation's; the rest the face's)."""
    return _maximizing(self).maximize if key == "maximize" else self._read_hyperparameter(key)


def _check_group_values(self, group: Mapping[str, Any], index: int) -> None:
    """Raises ``ValueError``/``TypeError`` for a group value slotopt cannot apply; changes nothing."""
    driven = self._lr_is_driven()
    for key in _group_keys(self):
        if key not in group:
            continue
        if key == "maximize":
            flag = checks.check_flag("maximize", group[key])  # (group 0's is the optimizer's: every group's then)
            if index != 0 and flag != read_value(self, key):
                raise ValueError(
                    f"Parameter group {index}: `maximize` is the whole optimizer's in slotopt (its step negates "
                    f"every gradient): set it on group 0 or the optimizer. Received: maximize={group[key]!r}")
            continue
        value = _as_number(group[key])
        current = self._shown_lr() if key == "lr" else read_value(self, key)
        if isinstance(current, bool) or not _is_number(current):
            if _differs(value, current):
                raise ValueError(
                    f"Parameter group {index}: `{key}` decides which state the optimizer keeps and cannot differ "
                    f"between groups. Received: {key}={value!r} (the optimizer has {current!r})")
            continue
        if key == "lr" and driven:
            published = self._published[index].get("lr") if index < len(self._published) else None
            if _differs(value, current) and _differs(value, published):
                raise TypeError(
                    f"Parameter group {index}: the learning rate is driven by a Keras schedule or callable, so "
                    f"`lr` cannot be set (received lr={value!r}). Create the optimizer with a float "
                    "`learning_rate` to let a torch LR scheduler drive it.")
            continue
        negative_lr = key == "lr" and value < 0 if _is_number(value) else False
        if not _is_number(value) or not math.isfinite(value) or (negative_lr and not self._negative_lr_allowed):
            what = "a finite number >= 0" if key == "lr" and not self._negative_lr_allowed else "a finite number"
            raise ValueError(f"Parameter group {index}: `{key}` must be {what}. Received: {key}={value!r}")
        try:
            self._check_hyperparameter(key, value)
        except (TypeError, ValueError) as err:
            raise type(err)(f"Parameter group {index}: {err}") from None


def _sync_param_groups(self) -> None:
    """Applies what was written into the groups since the last step (e.g. by a torch LR scheduler).

    Group 0's values become the optimizer's (``opt.learning_rate = v`` semantics); the other groups' values
    are used for their parameters at the update. Everything is checked before anything is applied.
    """
    groups = self.param_groups
    if not groups:
        return
    published = self._published
    if len(groups) == len(published) and all(map(_as_published, groups, published)):
        return  # nothing written since: every value is the very object slotopt published (the common case)
    keys = _group_keys(self)  # (once per step: every step syncs)
    names = torch_names(self, keys)
    for index, group in enumerate(groups):
        if index >= len(published):
            published.append({})
        adopt_torch_names(self, group, published[index], index, names)
    changed = []
    for index, group in enumerate(groups):
        seen = published[index]  # a value slotopt wrote is the same object: no comparison needed
        delta = {k: group[k] for k in keys
                 if k in group and group[k] is not seen.get(k) and _differs(seen.get(k), group[k])}
        if delta:
            self._check_group_values(delta, index)
            changed.append((index, delta))
    for index, delta in changed:
        if index == 0:
            for key, value in delta.items():
                if key == "lr":
                    if not self._lr_is_driven():
                        self._write_learning_rate(float(_as_number(value)))
                elif key == "maximize":
                    _maximizing(self).maximize = value
                else:
                    self._write_hyperparameter(key, _as_number(value))
        published[index].update(delta)
    if changed:
        _show_torch_names(self)
        self._hyperparameters_changed()


def _publish_param_groups(self) -> None:
    """Shows the optimizer's current values in the groups: a schedule's learning rate after each step."""
    if not self.param_groups or not self._has_learning_rate() or not self._lr_is_driven():
        return
    lr = self._shown_lr()
    for group, published in zip(self.param_groups, self._published):
        group["lr"] = published["lr"] = lr


def broadcast(self, key: str, value: Any) -> None:
    """An optimizer attribute was set: every group takes the value."""
    for group, published in zip(self.param_groups, self._published):
        if key in group:
            group[key] = published[key] = value
    _show_torch_names(self)


# ------------------------------------------------------------------------------------------ torch's names
def torch_names(self, keys: Optional[tuple[str, ...]] = None) -> tuple[TorchName, ...]:
    """The hyperparameters shown under torch's names too (``betas``, ``eps``, ``weight_decay``); ``keys``:
    the group keys, when the caller has them."""
    keys = _group_keys(self) if keys is None else keys
    cached = self.__dict__.get("_torch_names_cache")
    if cached is None or cached[0] != keys:  # (every step asks: derived once per set of keys)
        cached = self.__dict__["_torch_names_cache"] = (keys, torch_names_for(keys))
    return cached[1]


def adopt_torch_names(self, group: dict[str, Any], published: Mapping[str, Any], index: int,
                       names: Optional[tuple[TorchName, ...]] = None) -> None:
    """A torch name written since ``published`` (a scheduler's ``betas``) becomes the face's keys in the same
    group, to be checked and applied with them; writing both differently is refused."""
    for name in torch_names(self) if names is None else names:
        if name.name not in group:
            continue
        value = group[name.name]
        if value is published.get(name.name) or not _differs(value, published.get(name.name)):
            continue
        for key, value in name.face_values(group[name.name], index, type(self).__name__).items():
            if key in group and _differs(group[key], published.get(key)) and _differs(group[key], value):
                raise ValueError(
                    f"Parameter group {index}: `{name.name}` and `{key}` were both written, differently. "
                    f"Received: {name.name}={group[name.name]!r}, {key}={group[key]!r}")
            group[key] = value


def _show_torch_names(self) -> None:
    """Every group shows the face's current values under torch's names too."""
    for group, published in zip(self.param_groups, self._published):
        for name in torch_names(self):
            if all(k in group for k in name.keys):
                group[name.name] = published[name.name] = name.value_in(group)


def _hyperparameters_changed(self) -> None:
    """Face hook: runs after values written into the groups were applied (creates slots a new value needs,
    such as SGD's momentum slot when a scheduler raises ``momentum`` from 0)."""


#: A group key: the optimizer's iteration count when the group was added with its own step count (torch's
#: per-parameter ``step``; ``add_param_group(..., step_count="own")``). Its steps count from there.
STEP_OFFSET = "step_offset"


@contextmanager
def _group_scope(self, overrides: Mapping[str, Any]) -> Iterator[None]:
    if not overrides:
        yield
        return
    overrides = dict(overrides)
    offset = overrides.pop(STEP_OFFSET, None)
    restore = self._swap_hyperparameters(overrides) if overrides else (lambda: None)
    if offset is not None:
        self.__dict__["_group_step_offset"] = int(offset)
    try:
        yield
    finally:
        self.__dict__.pop("_group_step_offset", None)
        restore()


def _param_group_partitions(self, pairs: list[Any]) -> list[tuple[list[Any], dict[str, Any]]]:
    """The pairs split by parameter group, each with the hyperparameters where its group differs from
    group 0; one partition (no overrides) when every group agrees, which is the common case."""
    groups = self.param_groups
    if len(groups) <= 1:
        return [(pairs, {})]
    first = groups[0]
    keys = [k for k in _group_keys(self) if not (k == "lr" and self._lr_is_driven())]
    overrides = [{k: _as_number(g[k]) for k in keys if k in g and _differs(g[k], first.get(k))} for g in groups]
    for override, group in zip(overrides, groups):
        if group.get(STEP_OFFSET):
            override[STEP_OFFSET] = group[STEP_OFFSET]
    if not any(overrides):
        return [(pairs, {})]
    membership = {id(p): i for i, g in enumerate(groups) for p in g["params"]}
    # An FSDP2 parameter (a DTensor) is stepped as its local shard (``distributed.local_view``): both are its.
    membership.update({id(view): i for i, g in enumerate(groups) for p in g["params"]
                       if (view := known_local_view(p)) is not None})
    parts: dict[int, StepPairs] = {}  # (unplanned: each stage of a part asks its pairs, engine/plan.py)
    for pair in pairs:
        parts.setdefault(membership.get(id(pair[1]), 0), StepPairs()).append(pair)
    return [(parts[i], overrides[i]) for i in sorted(parts)]
