"""The ``torch.optim.Optimizer`` protocol, written once for every generation.

Every slotopt optimizer (Keras 3, tf.keras legacy, TF1, the composites) is a real ``torch.optim.Optimizer``:
``param_groups``, ``state``, ``defaults``, ``step(closure)``, ``zero_grad``, ``add_param_group``,
``state_dict``/``load_state_dict`` in torch's format, the step and state-dict hooks and the profiler-visible
step all come from here. The faces only answer a few questions (the hook methods at the bottom of
``TorchProtocol``): which hyperparameters a group carries, how to read, set and temporarily override them, and
what state a parameter has.

How Keras and torch meet:

* ``param_groups[0]`` is the optimizer itself: writing ``group["lr"]`` (what a torch LR scheduler does) is the
  same as ``opt.learning_rate = value`` at the next step, with the generation's rounding; writing another
  hyperparameter of group 0 sets the optimizer's attribute. Setting an optimizer attribute
  (``opt.learning_rate = v``, ``opt.beta_1 = v``) sets it in every group.
* Other groups may carry their own ``lr`` and numeric hyperparameters, which apply to their parameters only.
  A first group given with its own values (``[{"params": ..., "lr": 0.5}, ...]``) sets the optimizer's.
* Every group also shows torch's names (``TorchName``: ``betas``, ``eps``, ``weight_decay``), kept in sync with
  the face's both ways, so that ``OneCycleLR``/``CyclicLR`` and Hugging Face's groups work unchanged.
* The step runs outside ``torch.compile``'s graphs, whole (see ``step``).
* A Keras ``LearningRateSchedule`` (or callable) owns the learning rate: every group's ``lr`` shows its current
  value, and writing a different value raises ``TypeError`` at the next step, as ``opt.learning_rate = v``
  does in Keras. Use a float learning rate to let a torch scheduler drive it.
* ``state[p]`` holds the parameter's slots under the generation's slot names, plus the optimizer's shared
  scalars (``step`` is the Keras iteration counter, shared by every parameter).
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch

from ..kernels.native import tensor_table
from . import resume
from .eager import outside_dynamo

__all__ = ["TorchProtocol", "is_param_group_list", "CLASS_KEY"]

#: The key under which ``state_dict()`` saves the class that owns each parameter group.
CLASS_KEY = "optimizer_class"

_HOOK_TABLES = (
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks",
    "_optimizer_load_state_dict_pre_hooks",
    "_optimizer_load_state_dict_post_hooks",
)


def is_param_group_list(source: Any) -> bool:
    """True for ``[{"params": ...}, ...]``, torch's way of giving parameter groups."""
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(g, Mapping) for g in source)


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


class TorchProtocol(torch.optim.Optimizer):
    """The torch side of every slotopt optimizer (not used directly)."""

    #: Whether a negative ``lr`` written into a group is taken (TF1 applies any rate; Keras refuses one < 0).
    _negative_lr_allowed: bool = False

    # ------------------------------------------------------------------------------------------ set-up
    def _init_torch_protocol(self) -> None:
        """What ``torch.optim.Optimizer.__init__`` sets up, without requiring parameters yet (Keras optimizers
        may be built lazily on their first ``apply_gradients``)."""
        torch._C._log_api_usage_once("python.optimizer")
        d = self.__dict__
        for table in _HOOK_TABLES:
            d[table] = OrderedDict()
        d["_param_groups"] = []
        d["_published"] = []  # per group: the values slotopt last wrote or applied (to see external writes)
        d["_warned_capturable_if_run_uncaptured"] = True
        self._patch_step_function()

    def __getstate__(self) -> dict[str, Any]:  # plain pickling/deepcopy of the whole object
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._after_copy()

    def _after_copy(self) -> None:
        """Runs after unpickling or ``copy.deepcopy``: the variables are new objects, so every table keyed by a
        variable's ``id()`` is rebuilt from the variables themselves (an old id may belong to anything now)."""

    # ------------------------------------------------------------------------------------------ groups
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self._param_groups  # attribute access: a wrapper that forwards attributes finds the real list

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.__dict__["_param_groups"] = groups
        self.__dict__["_published"] = [dict(g) for g in groups]

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        """The optimizer-level hyperparameters (what a new group without its own values gets)."""
        values = {key: self._read_hyperparameter(key) for key in self._hyperparameter_keys()}
        if self._has_learning_rate():
            values = {"lr": self._shown_lr(), **values}
        for name in self._torch_names():
            values[name.name] = name.value_in(values)
        return values

    @defaults.setter
    def defaults(self, value: Any) -> None:  # torch's base class assigns it; slotopt derives it
        pass

    def _remember_lr(self, value: Any) -> None:
        """A schedule's or callable's value, as the step evaluated it (shown in ``param_groups`` without
        calling the schedule again: user schedules may count their calls)."""
        try:
            self.__dict__["_last_evaluated_lr"] = float(_as_number(value))
        except (TypeError, ValueError):
            pass  # not a number: the step's own check names it

    def _shown_lr(self) -> float:
        """The learning rate ``param_groups`` show: a schedule's value as the last step used it (NaN before the
        first step: evaluating it here would be a call Keras does not make)."""
        if self._lr_is_driven():
            return self.__dict__.get("_last_evaluated_lr", math.nan)
        return self._current_lr()

    def _new_group(self, params: list[torch.Tensor], options: Mapping[str, Any]) -> dict[str, Any]:
        """A group dict: ``params``, then every hyperparameter (the group's own values over the optimizer's)."""
        defaults = self.defaults
        group = {"params": params, **defaults}
        for key, value in options.items():
            if key != "params":
                group[key] = value
        self._adopt_torch_names(group, defaults, len(self.param_groups))  # {"betas": ...} as torch takes it
        for name in self._torch_names():
            if all(k in group for k in name.keys):
                group[name.name] = name.value_in(group)
        return group

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None) -> None:
        """Puts newly registered variables into a group: a new one for ``options`` (a param-group dict), else
        the first group (created when there is none)."""
        if not variables and options is None:
            return
        groups = self.param_groups
        if options is not None or not groups:
            group = self._new_group(list(variables), options or {})
            self._check_group_values(group, len(groups))
            groups.append(group)
            if len(groups) == 1 and options:
                # Group 0 is the optimizer itself: its own values (``[{"params": ..., "lr": 0.5}, ...]``, Hugging
                # Face's ``weight_decay``) become the optimizer's at the next sync (after the other groups of the
                # same list took the constructor's values), as a scheduler's writes would.
                self._published.append({**group, **self.defaults})
            else:
                self._published.append(dict(group))
        else:
            groups[0]["params"].extend(variables)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group of parameters, with its own ``lr`` and hyperparameters if given (torch's API).

        The parameters get their optimizer state right away, as if the optimizer had been built with them.
        """
        if not isinstance(param_group, Mapping) or "params" not in param_group:
            raise TypeError(f"Argument `param_group` must be a dict with a 'params' entry. Received: {param_group!r}")
        params = param_group["params"]
        if isinstance(params, torch.Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        params = list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            name = p[0] if isinstance(p, tuple) else None
            tensor = p[1] if isinstance(p, tuple) else p
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"Argument `param_group['params']` entry {i} is not a tensor: {p!r}")
            if id(tensor) in seen:
                raise ValueError(
                    f"Argument `param_group['params']` entry {i} ({name or 'a tensor'}) is already in a parameter "
                    "group: some parameters appear in more than one parameter group.")
            seen.add(id(tensor))
        probe = self._new_group([], param_group)
        self._check_group_values(probe, len(self.param_groups))
        self._add_variables([{**param_group, "params": params}])
        self._hyperparameters_changed()  # the new group's own values may need slots (its momentum)

    def _add_variables(self, groups: list[Mapping[str, Any]]) -> None:
        """Face hook: registers the groups' variables and creates their state (see ``build``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ sync
    def _group_keys_of(self, index: int) -> tuple[str, ...]:
        """The hyperparameter keys of group ``index`` (the owning sub-optimizer's, for a composite)."""
        return self._group_keys()

    def _group_keys(self) -> tuple[str, ...]:
        keys = self._hyperparameter_keys()
        return ("lr", *keys) if self._has_learning_rate() else keys

    def _check_group_values(self, group: Mapping[str, Any], index: int) -> None:
        """Raises ``ValueError``/``TypeError`` for a group value slotopt cannot apply; changes nothing."""
        driven = self._lr_is_driven()
        for key in self._group_keys():
            if key not in group:
                continue
            value = _as_number(group[key])
            current = self._shown_lr() if key == "lr" else self._read_hyperparameter(key)
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
        keys = self._group_keys()  # (once per step: every step syncs)
        names = self._torch_names(keys)
        for index, group in enumerate(groups):
            if index >= len(published):
                published.append({})
            self._adopt_torch_names(group, published[index], index, names)
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
                    else:
                        self._write_hyperparameter(key, _as_number(value))
            published[index].update(delta)
        if changed:
            self._show_torch_names()
            self._hyperparameters_changed()

    def _publish_param_groups(self) -> None:
        """Shows the optimizer's current values in the groups: a schedule's learning rate after each step."""
        if not self.param_groups or not self._has_learning_rate() or not self._lr_is_driven():
            return
        lr = self._shown_lr()
        for group, published in zip(self.param_groups, self._published):
            group["lr"] = published["lr"] = lr

    def _broadcast(self, key: str, value: Any) -> None:
        """An optimizer attribute was set: every group takes the value."""
        for group, published in zip(self.param_groups, self._published):
            if key in group:
                group[key] = published[key] = value
        self._show_torch_names()

    # ------------------------------------------------------------------------------------------ torch's names
    def _torch_names(self, keys: Optional[tuple[str, ...]] = None) -> tuple[TorchName, ...]:
        """The hyperparameters shown under torch's names too (``betas``, ``eps``, ``weight_decay``); ``keys``:
        the group keys, when the caller has them."""
        keys = self._group_keys() if keys is None else keys
        cached = self.__dict__.get("_torch_names_cache")
        if cached is None or cached[0] != keys:  # (every step asks: derived once per set of keys)
            cached = self.__dict__["_torch_names_cache"] = (keys, torch_names_for(keys))
        return cached[1]

    def _adopt_torch_names(self, group: dict[str, Any], published: Mapping[str, Any], index: int,
                           names: Optional[tuple[TorchName, ...]] = None) -> None:
        """A torch name written since ``published`` (a scheduler's ``betas``) becomes the face's keys in the same
        group, to be checked and applied with them; writing both differently is refused."""
        for name in self._torch_names() if names is None else names:
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
            for name in self._torch_names():
                if all(k in group for k in name.keys):
                    group[name.name] = published[name.name] = name.value_in(group)

    def _hyperparameters_changed(self) -> None:
        """Face hook: runs after values written into the groups were applied (creates slots a new value needs,
        such as SGD's momentum slot when a scheduler raises ``momentum`` from 0)."""

    @contextmanager
    def _group_scope(self, overrides: Mapping[str, Any]) -> Iterator[None]:
        if not overrides:
            yield
            return
        restore = self._swap_hyperparameters(overrides)
        try:
            yield
        finally:
            restore()

    def _param_group_partitions(self, pairs: list[Any]) -> list[tuple[list[Any], dict[str, Any]]]:
        """The pairs split by parameter group, each with the hyperparameters where its group differs from
        group 0; one partition (no overrides) when every group agrees, which is the common case."""
        groups = self.param_groups
        if len(groups) <= 1:
            return [(pairs, {})]
        first = groups[0]
        keys = [k for k in self._group_keys() if not (k == "lr" and self._lr_is_driven())]
        overrides = [{k: _as_number(g[k]) for k in keys if k in g and _differs(g[k], first.get(k))} for g in groups]
        if not any(overrides):
            return [(pairs, {})]
        membership = {id(p): i for i, g in enumerate(groups) for p in g["params"]}
        parts: dict[int, list[Any]] = {}
        for pair in pairs:
            parts.setdefault(membership.get(id(pair[1]), 0), []).append(pair)
        return [(parts[i], overrides[i]) for i in sorted(parts)]

    # ------------------------------------------------------------------------------------------ state
    @property
    def state(self) -> defaultdict[torch.Tensor, dict[str, Any]]:  # type: ignore[override]
        """``{parameter: {slot name: tensor, ..., "step": iterations}}``: live tensors, as in torch. Writes,
        deletes and replacing the whole table reach the optimizer (``engine/resume.py`` says how)."""
        params = [p for group in self.param_groups for p in group["params"]]
        entries = [(p, entry) for p, entry in zip(params, self._param_states(params)) if entry]
        return resume.StateTable(self, entries)

    def _param_states(self, params: list[torch.Tensor]) -> list[dict[str, Any]]:
        """``state[p]`` for each of ``params`` (an optimizer whose entries share tensors computes those once)."""
        return [self._param_state(p) for p in params]

    @state.setter
    def state(self, value: Any) -> None:
        if "_param_groups" not in self.__dict__:
            return  # torch's base class assigns it before slotopt's set-up: nothing to reset yet
        self._replace_all_state(value)

    @torch._disable_dynamo
    def state_dict(self) -> dict[str, Any]:
        """torch's format: ``{"state": {index: {name: tensor}}, "param_groups": [{..., "params": [index]}]}``.

        Tensors are copies (a snapshot), loadable with ``torch.load(weights_only=True)``.
        """
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        self._before_state_io()
        waiting = self._waiting_checkpoint()
        if waiting is not None:  # loaded before the build: it is still the optimizer's state
            return self._run_state_dict_post_hooks(waiting)
        index: dict[int, int] = {}
        packed_groups = []
        for i, group in enumerate(self.param_groups):
            packed = {k: v for k, v in group.items() if k != "params"}
            packed[CLASS_KEY] = self._group_class_name(i)  # a load into another class is refused
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            packed_groups.append(packed)
        state = {index[id(p)]: {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in entry.items()}
                 for p, entry in self.state.items()}
        return self._run_state_dict_post_hooks({"state": state, "param_groups": packed_groups})

    def _run_state_dict_post_hooks(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    @torch._disable_dynamo
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads what ``state_dict()`` returned (also through ``torch.distributed.checkpoint``). Everything is
        checked first (group sizes, state names, shapes, hyperparameters): on an error nothing changes."""
        state_dict = state_dict.copy() if isinstance(state_dict, dict) else state_dict
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        if isinstance(state_dict, Mapping) and "state" not in state_dict and self._load_legacy_format(state_dict):
            pass
        else:
            self._load_torch_format(state_dict)
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

    def _load_torch_format(self, state_dict: Any) -> None:
        if not isinstance(state_dict, Mapping) or not isinstance(state_dict.get("state"), Mapping) or \
                not isinstance(state_dict.get("param_groups"), (list, tuple)):
            raise ValueError(
                "Argument `state_dict` must be a dict with 'state' (a dict) and 'param_groups' (a list), as "
                f"returned by state_dict(). Received: {_describe(state_dict)}")
        self._before_state_io()
        groups = self.param_groups
        saved_groups = list(state_dict["param_groups"])
        _check_saved_indices(saved_groups)
        if not groups and saved_groups:  # not built yet: applied when it builds (Keras's deferred restoration)
            _check_saved_values(state_dict["state"])  # what can be checked without the parameters
            self.__dict__["_pending_torch_state"] = _copied(state_dict)  # the caller may reuse its buffers
            return
        if len(saved_groups) != len(groups):
            raise ValueError(
                f"Loaded state dict has {len(saved_groups)} parameter groups; this optimizer has {len(groups)}.")
        params: dict[Any, torch.Tensor] = {}
        for i, (group, saved) in enumerate(zip(groups, saved_groups)):
            if not isinstance(saved, Mapping) or not isinstance(saved.get("params"), (list, tuple)):
                raise ValueError(f"Loaded parameter group {i} must be a dict with a 'params' list. Received: "
                                 f"{_describe(saved)}")
            saved_class = saved.get(CLASS_KEY)
            if saved_class is not None and saved_class != self._group_class_name(i):
                raise ValueError(
                    f"Loaded parameter group {i}: the state dict was saved by another optimizer class ({saved_class}"
                    f"); this group belongs to {self._group_class_name(i)}.")
            # (Keras 3's ``weight_decay`` is in every group since slotopt showed torch's names: a state dict saved
            # before has none where it was None, i.e. no decay, which the group keeps.)
            missing = [k for k in self._group_keys_of(i) if k not in saved and k != "weight_decay"]
            if missing:
                raise ValueError(
                    f"Loaded parameter group {i} has no {missing}, which {type(self).__name__} keeps: the state dict "
                    "was saved by another optimizer class or configuration.")
            foreign = sorted(k for k in saved if k in resume.HYPERPARAMETER_NAMES and k not in group)
            if foreign:
                raise ValueError(
                    f"Loaded parameter group {i} has {foreign}, which {type(self).__name__} does not keep (its group "
                    f"has {sorted(k for k in group if k != 'params')}): the state dict was saved by another "
                    "optimizer class or configuration.")
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"Loaded parameter group {i} has {len(saved['params'])} parameters; this optimizer's group has "
                    f"{len(group['params'])}: the state dict was saved for other parameters.")
            params.update(zip(saved["params"], group["params"]))
        assignments: list[tuple[torch.Tensor, Any]] = []
        shared: dict[str, tuple[torch.Tensor, Any]] = {}
        saved_state = state_dict["state"]
        for key, expected in zip(params, self._param_states(list(params.values()))):
            entry = saved_state.get(key)
            if entry is None:
                if expected:
                    raise ValueError(f"Loaded state dict has no state for parameter {key}; this optimizer keeps "
                                     f"{sorted(expected)} for it.")
                continue
            if not isinstance(entry, Mapping) or set(entry) != set(expected):
                raise ValueError(
                    f"Loaded state of parameter {key} has entries {sorted(entry) if isinstance(entry, Mapping) else entry!r}"
                    f"; {type(self).__name__} keeps {sorted(expected)}: the state dict was saved by another "
                    "optimizer class or configuration.")
            for name, value in entry.items():
                target = expected[name]
                value_t = _state_value(key, name, value, target)
                value_t = resume.check_fits(f"Loaded state {name!r} of parameter {key}", name, value_t, target)
                if _is_meta(target):
                    raise ValueError(f"State {name!r} of parameter {key} is on the meta device: materialize the "
                                     "parameters (and build the optimizer on them) before loading.")
                if name in shared and shared[name][0] is target:
                    if not torch.equal(torch.as_tensor(_local(shared[name][1])).cpu(),
                                       torch.as_tensor(_local(value_t)).cpu()):
                        raise ValueError(f"Loaded state {name!r} differs between parameters; it is shared by all.")
                    continue
                shared[name] = (target, value_t)
                assignments.append((target, value_t))
        new_values = []
        shown_lrs = []
        for i, saved in enumerate(saved_groups):
            values = {k: v for k, v in saved.items() if k not in ("params", CLASS_KEY)}
            if "lr" in values and self._group_lr_is_driven(i):
                # A schedule or callable owns the rate: the saved ``lr`` is what it showed, not a setting.
                shown_lrs.append((i, values.pop("lr")))
            self._check_group_values({k: v for k, v in values.items() if k in self._group_keys_of(i)}, i)
            new_values.append(values)
        with torch.no_grad():
            for target, value in assignments:
                _copy_into(target, value)
        for group, values in zip(groups, new_values):
            group.update(values)
        for i, lr in shown_lrs:
            self._remember_group_lr(i, lr)
        self._sync_param_groups()
        self._after_state_load()
        self._publish_param_groups()

    def _apply_pending_torch_state(self) -> None:
        """Loads a state dict that arrived before the build; on an error it stays pending."""
        if not self.param_groups:
            return
        pending = self.__dict__.pop("_pending_torch_state", None)
        if pending is None:
            return
        try:
            self._load_torch_format(pending)
        except BaseException:
            self.__dict__["_pending_torch_state"] = pending
            raise

    # ------------------------------------------------------------------------------------------ resume
    # One contract for every way state comes in or goes out (engine/resume.py): checked before written, all or
    # nothing, and a checkpoint that waits for the build is still the optimizer's state.
    def _waiting_checkpoint(self) -> Optional[dict[str, Any]]:
        """A copy of the state dict loaded before the build, while it waits; raises when values given to
        ``set_weights`` before the build wait instead (they only map to parameters once it builds)."""
        pending = self.__dict__.get("_pending_torch_state")
        if pending is not None:
            return _copied(pending)
        if self._has_pending_weights():
            raise RuntimeError(
                f"{type(self).__name__} holds weights given to `set_weights` before its build; they are matched to "
                "parameters when it builds. Build it first (`optimizer.build(params)`) to save them as a state dict.")
        return None

    def _has_pending_weights(self) -> bool:
        """Face hook: values given to ``set_weights`` before the build are waiting."""
        return False

    def _group_class_name(self, index: int) -> str:
        """The optimizer class that owns group ``index`` (saved with the group, checked at the load)."""
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}"

    def _group_lr_is_driven(self, index: int) -> bool:
        return self._lr_is_driven() if self._has_learning_rate() else False

    def _remember_group_lr(self, index: int, value: Any) -> None:
        """A loaded group's ``lr`` under a schedule: shown until the next step evaluates the schedule again."""
        number = _as_number(value)
        if _is_number(number) and math.isfinite(number) and number >= 0:
            self._remember_lr(number)

    def _show_current_learning_rate(self) -> None:
        """After ``set_weights`` (or a Keras file) wrote the learning-rate variable: group 0 shows it, so that
        ``state_dict()`` saves it and a torch scheduler starts from it."""
        groups = self.param_groups
        if not groups or not self._has_learning_rate() or self._lr_is_driven() or "lr" not in groups[0]:
            return
        lr = self._current_lr()
        groups[0]["lr"] = lr
        if self._published:
            self._published[0]["lr"] = lr

    def _parameter_of(self, param: Any) -> torch.Tensor:
        if not any(p is param for g in self.param_groups for p in g["params"]):
            raise KeyError(f"{_tensor_label(param)} is not a parameter of this {type(self).__name__}: its state "
                           "cannot be written.")
        return param

    def _write_param_state(self, param: Any, values: Mapping[str, Any]) -> None:
        """``opt.state[param][name] = value``: every value checked, then copied into the live tensors."""
        self._before_state_io()
        self._parameter_of(param)
        entry = self._param_state(param)
        checked = []
        for name, value in values.items():
            if name not in entry:
                raise KeyError(f"{type(self).__name__} keeps {sorted(entry)} for this parameter, not {name!r}: a "
                               "new entry would be ignored by every step.")
            target = entry[name]
            checked.append((target, resume.check_fits(f"Optimizer state {name!r}", name, value, target)))
        with torch.no_grad():
            for target, value in checked:
                if value is not target:
                    _copy_into(target, value)

    def _replace_param_state(self, param: Any, entry: Mapping[str, Any]) -> None:
        """``opt.state[param] = entry``: reset to the initial values, then ``entry``'s values (checked first)."""
        self._parameter_of(param)
        live = self._param_state(param)
        for name, value in entry.items():
            if name not in live:
                raise KeyError(f"{type(self).__name__} keeps {sorted(live)} for this parameter, not {name!r}.")
            resume.check_fits(f"Optimizer state {name!r}", name, value, live[name])
        self._reset_param_state(param)
        self._write_param_state(param, {k: v for k, v in entry.items() if live[k] is not v})

    def _reset_param_state(self, param: Any) -> None:
        """``del opt.state[param]``: the parameter's slots as if it had never been stepped."""
        self._before_state_io()
        self._parameter_of(param)
        self._reset_slots(param)

    def _replace_all_state(self, value: Any) -> None:
        """``opt.state = mapping``: every slot and shared scalar reset, then the mapping's entries written."""
        if isinstance(value, resume.StateTable) and value._owner is self:
            return  # ``opt.state = opt.state`` (e.g. torch's own code re-assigning it)
        if not isinstance(value, Mapping):
            raise TypeError(f"`optimizer.state` must be a dict of {{parameter: dict}}. Received: {value!r}")
        entries = {p: dict(e) for p, e in value.items()}
        for p, entry in entries.items():
            live = self._param_state(self._parameter_of(p))
            for name, v in entry.items():
                if name not in live:
                    raise KeyError(f"{type(self).__name__} keeps {sorted(live)} for this parameter, not {name!r}.")
                resume.check_fits(f"Optimizer state {name!r}", name, v, live[name])
        self._reset_all_state()
        for p, entry in entries.items():
            self._write_param_state(p, entry)

    def _reset_all_state(self) -> None:
        self._before_state_io()
        for group in self.param_groups:
            for p in group["params"]:
                self._reset_slots(p)
        self._reset_shared_state()

    def _reset_slots(self, param: torch.Tensor) -> None:
        """Face/engine hook: the parameter's slots back to their initial values."""

    def _reset_shared_state(self) -> None:
        """Engine hook: the optimizer-wide scalars (iterations, loss scale...) back to their initial values."""

    # ------------------------------------------------------------------------------------------ step
    # ``torch.compile``: the step runs outside the graph, whole (one clean graph break where a compiled training
    # step calls it, as torch.optim does for steps it cannot trace). Tracing it would turn the Python-float
    # scalar math that reproduces TensorFlow's float32 rounding into traced tensor math (measured: different
    # bits even with the "eager" backend), and the compiled C kernels are opaque ctypes calls.
    @outside_dynamo  # (engine/eager.py: the same as ``torch._disable_dynamo(recursive=True)``, cheaper)
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:  # type: ignore[override]
        """PyTorch style: runs ``closure`` (with autograd on) if given, then applies the ``.grad`` of every
        parameter in ``param_groups`` (parameters without ``.grad`` are skipped). Returns the closure's loss.

        Under ``torch.compile`` the whole step (closure included) runs eagerly: the same bits as without it."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        pairs = self._step_pairs()
        if pairs:
            self._apply_step(pairs)
        return loss

    def _step_pairs(self) -> list[tuple[Any, torch.Tensor]]:
        groups = self.param_groups
        if len(groups) == 1 and type(groups[0]["params"]) is list:
            params = groups[0]["params"]  # (read, not kept: no copy needed)
        else:
            params = [p for g in groups for p in g["params"]]
        if not params:
            raise ValueError(
                "`step()` needs parameters: pass `params=` when constructing the optimizer or call "
                "`optimizer.build(variables)` first.")
        planned = self._planned_params_step(params)
        if planned is not None:
            return planned
        return tensor_table.gradients(params)  # [(p.grad, p) for p in params if p.grad is not None]

    def _planned_params_step(self, params: list[torch.Tensor]) -> Optional[list[tuple[Any, torch.Tensor]]]:
        """Engine hook: the pairs of ``params`` with their ``.grad``, already checked as a step like the last one
        (the optimizer core's step plan), or None."""
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the ``.grad`` of every parameter in ``param_groups`` (torch's convention)."""
        # (Dynamo would warn that it ignores the profiler's ``record_function`` in a compiled training step)
        compiling = getattr(torch.compiler, "is_compiling", lambda: False)()
        with contextlib.nullcontext() if compiling else torch.autograd.profiler.record_function(
                self._zero_grad_profile_name):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if set_to_none:
                        p.grad = None
                    else:
                        if p.grad.grad_fn is not None:
                            p.grad.detach_()
                        else:
                            p.grad.requires_grad_(False)
                        p.grad.zero_()

    # ------------------------------------------------------------------------------------------ face hooks
    def _apply_step(self, pairs: list[tuple[Any, torch.Tensor]]) -> None:
        """Runs one optimizer step on ``(grad, param)`` pairs (the face's ``apply_gradients``)."""
        self.apply_gradients(pairs)  # type: ignore[attr-defined]

    def _has_learning_rate(self) -> bool:
        return True

    def _hyperparameter_keys(self) -> tuple[str, ...]:
        """Group keys besides ``params`` and ``lr``, under the generation's names."""
        return ()

    def _read_hyperparameter(self, key: str) -> Any:
        raise KeyError(key)

    def _write_hyperparameter(self, key: str, value: Any) -> None:
        """Sets an optimizer-level hyperparameter from group 0 (without broadcasting to the other groups)."""
        raise KeyError(key)

    def _check_hyperparameter(self, key: str, value: Any) -> None:
        """Face-specific range checks of a group value (beyond finite and >= 0)."""

    def _current_lr(self) -> float:
        raise NotImplementedError

    def _write_learning_rate(self, value: float) -> None:
        raise NotImplementedError

    def _lr_is_driven(self) -> bool:
        """True when a schedule or callable owns the learning rate."""
        return False

    def _swap_hyperparameters(self, overrides: Mapping[str, Any]) -> Callable[[], None]:
        """Uses ``overrides`` (a group's own values) until the returned function is called."""
        raise NotImplementedError

    def _param_state(self, param: torch.Tensor) -> dict[str, Any]:
        """The parameter's live state: its slots and the optimizer's shared scalars."""
        return {}

    def _before_state_io(self) -> None:
        """Runs before the state is read or written (e.g. restoring state that was loaded before the build)."""

    def _after_state_load(self) -> None:
        """Runs after ``load_state_dict`` changed the state."""

    def _load_legacy_format(self, state_dict: Mapping[str, Any]) -> bool:
        """Loads a checkpoint in an earlier slotopt format; False when ``state_dict`` is not one."""
        return False


def _copied(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A state dict whose tensors are copies (kept for later: the caller may reuse its buffers)."""
    return {
        "state": {k: {n: v.detach().clone() if isinstance(v, torch.Tensor) else v for n, v in entry.items()}
                  if isinstance(entry, Mapping) else entry for k, entry in state_dict["state"].items()},
        "param_groups": [dict(g) for g in state_dict["param_groups"]],
    }


def _state_value(key: Any, name: str, value: Any, target: torch.Tensor) -> torch.Tensor:
    """A loaded state entry as a tensor, refused (naming the parameter, the entry and the value) when it is not
    numeric, or complex for a real slot (casting would drop the imaginary part)."""
    if isinstance(value, torch.Tensor):
        value_t = value
    else:
        try:
            value_t = torch.as_tensor(value) if not isinstance(value, (str, bytes)) else None
        except (TypeError, ValueError, RuntimeError):
            value_t = None
    if value_t is None:
        raise TypeError(f"Loaded state {name!r} of parameter {key} must be a tensor or a number. Received: "
                        f"state[{key!r}][{name!r}]={value!r} (of type {type(value).__name__})")
    if value_t.is_complex() and not target.is_complex():
        raise TypeError(f"Loaded state {name!r} of parameter {key} is complex ({value_t.dtype}) but the optimizer "
                        f"keeps it as {target.dtype}: casting would drop the imaginary part. Received: "
                        f"state[{key!r}][{name!r}]={value!r}")
    return value_t


def _is_meta(tensor: Any) -> bool:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return isinstance(local, torch.Tensor) and local.device.type == "meta"


def _check_saved_indices(saved_groups: Sequence[Any]) -> None:
    """Every saved group is a dict with a ``params`` list, and no parameter index appears twice (a repeated index
    would pair the saved state with the wrong parameters)."""
    seen: set[Any] = set()
    for i, saved in enumerate(saved_groups):
        if not isinstance(saved, Mapping) or not isinstance(saved.get("params"), (list, tuple)):
            raise ValueError(f"Loaded parameter group {i} must be a dict with a 'params' list. Received: "
                             f"{_describe(saved)}")
        for index in saved["params"]:
            if index in seen:
                raise ValueError(f"Loaded parameter group {i} lists parameter index {index!r} again: each parameter "
                                 f"index appears once in a state dict. Received params={list(saved['params'])!r}")
            seen.add(index)


def _check_saved_values(saved_state: Mapping[Any, Any]) -> None:
    """The checks a state dict passes before the optimizer has parameters: dense real tensors, scalars in range."""
    for key, entry in saved_state.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"Loaded state of parameter {key} must be a dict. Received: {_describe(entry)}")
        for name, value in entry.items():
            label = f"Loaded state {name!r} of parameter {key}"
            if isinstance(value, torch.Tensor):
                resume.check_fits(label, name, value, value)
            else:
                problem = resume.state_value_problem(name, value) if isinstance(value, (int, float)) else None
                if problem is not None:
                    raise ValueError(f"{label} must be {problem}. Received: {value!r}")


def _local(value: Any) -> Any:
    to_local = getattr(value, "to_local", None)
    return to_local() if callable(to_local) else value


def _copy_into(target: torch.Tensor, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value)
    if type(target) is not type(value) and hasattr(target, "to_local") and not hasattr(value, "to_local"):
        target.to_local().copy_(value.to(dtype=target.dtype))
        return
    if hasattr(value, "to_local") and not hasattr(target, "to_local"):
        value = value.full_tensor()
    target.copy_(value.to(dtype=target.dtype, device=target.device) if not hasattr(value, "to_local") else value)


def _tensor_label(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"The tensor of shape {tuple(value.shape)}"
    return f"{value!r}"


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))}"
    return f"{type(value).__name__}"



class WrapsInnerOptimizer:
    """The torch protocol of a wrapper (a ``LossScaleOptimizer``): the inner optimizer's parameter groups (the
    same dicts), its hyperparameters, and its state plus the wrapper's own scalars."""

    _aggregates_gradients = False  # the inner optimizer aggregates (before the wrapper's finiteness check)
    _plans_steps = False  # the inner optimizer plans its own steps
    _protocol_inner: Any

    def _share_param_groups(self, inner: Any) -> None:
        self.__dict__["_param_groups"] = inner.__dict__["_param_groups"]
        self.__dict__["_published"] = inner.__dict__["_published"]

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None) -> None:
        return None  # the inner optimizer's groups already hold them

    def _param_group_partitions(self, pairs: list[Any]) -> list[tuple[list[Any], dict[str, Any]]]:
        return [(pairs, {})]  # the inner optimizer applies its groups' own values

    def _wrapper_state(self) -> dict[str, torch.Tensor]:
        return {}

    def _configuration_values(self) -> dict[str, Any]:
        return {}  # the inner optimizer checked its own

    def _param_state(self, param: torch.Tensor) -> dict[str, Any]:
        entry = self._protocol_inner._param_state(param)
        return {**entry, **self._wrapper_state()} if entry else entry

    def _param_states(self, params: list[torch.Tensor]) -> list[dict[str, Any]]:
        wrapper = self._wrapper_state()
        return [{**entry, **wrapper} if entry else entry for entry in self._protocol_inner._param_states(params)]

    def _has_learning_rate(self) -> bool:
        return self._protocol_inner._has_learning_rate()

    def _hyperparameter_keys(self) -> tuple[str, ...]:
        return self._protocol_inner._hyperparameter_keys()

    def _read_hyperparameter(self, key: str) -> Any:
        return self._protocol_inner._read_hyperparameter(key)

    def _write_hyperparameter(self, key: str, value: Any) -> None:
        self._protocol_inner._write_hyperparameter(key, value)

    def _check_hyperparameter(self, key: str, value: Any) -> None:
        self._protocol_inner._check_hyperparameter(key, value)

    def _current_lr(self) -> float:
        return self._protocol_inner._current_lr()

    def _shown_lr(self) -> float:
        return self._protocol_inner._shown_lr()

    def _write_learning_rate(self, value: float) -> None:
        self._protocol_inner._write_learning_rate(value)

    def _lr_is_driven(self) -> bool:
        return self._protocol_inner._lr_is_driven()

    def _add_variables(self, groups: list[Mapping[str, Any]]) -> None:
        self._protocol_inner._add_variables(groups)

    def _hyperparameters_changed(self) -> None:
        self._protocol_inner._hyperparameters_changed()

    def _remember_lr(self, value: Any) -> None:
        self._protocol_inner._remember_lr(value)

    def _reset_slots(self, param: torch.Tensor) -> None:
        self._protocol_inner._reset_slots(param)

    def _reset_shared_state(self) -> None:
        self._protocol_inner._reset_shared_state()
        self._reset_wrapper_state()

    def _reset_wrapper_state(self) -> None:
        """The wrapper's own scalars back to their initial values: counters to 0, the loss scale to
        ``initial_scale``."""
        with torch.no_grad():
            for tensor, initial in self.__dict__.get("_scalar_initials", ()):
                tensor.copy_(initial)
            for tensor in self._wrapper_state().values():
                if not tensor.is_floating_point():
                    tensor.zero_()
                elif isinstance(getattr(self, "initial_scale", None), (int, float)):
                    tensor.fill_(float(self.initial_scale))  # type: ignore[attr-defined]

    def _has_pending_weights(self) -> bool:
        return super()._has_pending_weights() or self._protocol_inner._has_pending_weights()  # type: ignore[misc]


class ComposesOptimizers:
    """The torch protocol of an optimizer made of sub-optimizers (``CompositeOptimizer``, ``MultiOptimizer``):
    ``param_groups`` are the sub-optimizers' groups (the same dicts, so a torch LR scheduler drives each
    sub-optimizer), ``state`` and ``state_dict`` cover every sub-optimizer."""

    _aggregates_gradients = False  # each sub-optimizer aggregates its own gradients
    _plans_steps = False  # and plans its own steps

    def _torch_optimizers(self) -> list[TorchProtocol]:
        raise NotImplementedError

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every sub-optimizer's parameter groups (the same dicts), in sub-optimizer order."""
        return [g for optimizer in self._torch_optimizers() for g in optimizer.param_groups]

    @param_groups.setter
    def param_groups(self, groups: Any) -> None:
        raise AttributeError("This optimizer's param_groups are its sub-optimizers'; set those instead.")

    @property
    def defaults(self) -> dict[str, Any]:
        """The hyperparameters every sub-optimizer has (values of the first): what torch's schedulers look for
        (``lr``; ``betas`` or ``momentum`` when every sub-optimizer can cycle it, as ``OneCycleLR`` and
        ``CyclicLR`` need every group to)."""
        optimizers = self._torch_optimizers()
        if not optimizers:
            return {}
        shared = dict(optimizers[0].defaults)
        for optimizer in optimizers[1:]:
            keys = optimizer.defaults.keys()
            shared = {k: v for k, v in shared.items() if k in keys}
        return shared

    @defaults.setter
    def defaults(self, value: Any) -> None:  # torch's base class assigns it; a composite derives it
        pass

    def _owner_of_group(self, index: int) -> tuple[TorchProtocol, int]:
        for optimizer in self._torch_optimizers():
            if index < len(optimizer.param_groups):
                return optimizer, index
            index -= len(optimizer.param_groups)
        raise IndexError(index)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} routes variables to its sub-optimizers: call `add_param_group` on the "
            "sub-optimizer that should own the parameters (see `.optimizers`).")

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None) -> None:
        return None  # the sub-optimizers' groups hold them

    def _has_learning_rate(self) -> bool:
        return False

    def _group_keys_of(self, index: int) -> tuple[str, ...]:
        optimizer, local = self._owner_of_group(index)
        return optimizer._group_keys_of(local)

    def _check_group_values(self, group: Mapping[str, Any], index: int) -> None:
        optimizer, local = self._owner_of_group(index)
        optimizer._check_group_values(group, local)

    def _sync_param_groups(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._sync_param_groups()

    def _publish_param_groups(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._publish_param_groups()

    def _param_group_partitions(self, pairs: list[Any]) -> list[tuple[list[Any], dict[str, Any]]]:
        return [(pairs, {})]  # each sub-optimizer applies its own groups' values

    def _start_updates(self) -> None:
        return None  # each sub-optimizer evaluates its own learning rate

    def _own_state(self) -> dict[str, torch.Tensor]:
        """The composite's own scalars, shown in every parameter's state."""
        return {}

    def _param_state(self, param: torch.Tensor) -> dict[str, Any]:
        for optimizer in self._torch_optimizers():
            entry = optimizer._param_state(param)
            if entry:
                return {**entry, **self._own_state()}
        return {}

    def _param_states(self, params: list[torch.Tensor]) -> list[dict[str, Any]]:
        own = self._own_state()
        found: list[dict[str, Any]] = [{} for _ in params]
        for optimizer in self._torch_optimizers():  # each shows its own parameters' state, the first one wins
            for i, entry in enumerate(optimizer._param_states(params)):
                if entry and not found[i]:
                    found[i] = {**entry, **own}
        return found

    def _before_state_io(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._before_state_io()

    def _after_state_load(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._after_state_load()

    def _group_lr_is_driven(self, index: int) -> bool:
        optimizer, local = self._owner_of_group(index)
        return optimizer._group_lr_is_driven(local)

    def _group_class_name(self, index: int) -> str:
        optimizer, local = self._owner_of_group(index)
        return optimizer._group_class_name(local)

    def _remember_group_lr(self, index: int, value: Any) -> None:
        optimizer, local = self._owner_of_group(index)
        optimizer._remember_group_lr(local, value)

    def _show_current_learning_rate(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._show_current_learning_rate()

    def _reset_slots(self, param: torch.Tensor) -> None:
        for optimizer in self._torch_optimizers():
            if optimizer._param_state(param):
                optimizer._reset_slots(param)

    def _reset_shared_state(self) -> None:
        for optimizer in self._torch_optimizers():
            optimizer._reset_shared_state()
        self._reset_own_state()

    def _reset_own_state(self) -> None:
        """The composite's own scalars back to their initial values."""
        with torch.no_grad():
            for tensor, initial in self.__dict__.get("_scalar_initials", ()):
                tensor.copy_(initial)
