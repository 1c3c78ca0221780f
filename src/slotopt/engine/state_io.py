"""``state``, ``state_dict`` and ``load_state_dict`` in torch's format, a load that waits for the build, and the
writes into ``opt.state`` (``engine/resume.py`` holds the rules every loaded value passes). Part of the torch
protocol: functions of the optimizer (``self``) that ``TorchProtocol`` (engine/torch_protocol.py) binds as its
methods, not a base class."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch

from . import resume
from .group_sync import _as_number, _is_number

__all__ = ["CLASS_KEY", "apply_pending_torch_state"]

#: The key under which ``state_dict()`` saves the class that owns each parameter group.
CLASS_KEY = "optimizer_class"


def with_client_entries(entry: dict[str, Any], client: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """A parameter's state: the optimizer's entries, then a client's under the names the optimizer does not use (a
    slot made after a client wrote the same name, as TF1 makes its slots at the first step, is the optimizer's)."""
    if not client:
        return entry
    return {**entry, **{k: v for k, v in client.items() if k not in entry}}


# ------------------------------------------------------------------------------------------ state
@property
def state(self) -> defaultdict[torch.Tensor, dict[str, Any]]:  # type: ignore[override]
    """``{parameter: {slot name: tensor, ..., "step": iterations}}``: live tensors, as in torch. Writes,
    deletes and replacing the whole table reach the optimizer (``engine/resume.py`` says how)."""
    params = [p for group in self.param_groups for p in group["params"]]
    client = self.__dict__.get("_client_state")
    if client:  # what torch clients added (timm's Lookahead buffer), after the optimizer's own entries
        return resume.StateTable(self, [(p, with_client_entries(entry, client.get(p))) for p, entry in
                                        zip(params, self._param_states(params)) if entry or p in client])
    entries = [(p, entry) for p, entry in zip(params, self._param_states(params)) if entry]
    return resume.StateTable(self, entries)


def _client_entries(self, param: Any) -> dict[str, Any]:
    """The entries a torch client wrote into ``state[param]`` beside the optimizer's own (timm's Lookahead
    keeps its slow weights there, SAM its perturbation): kept as given, saved, loaded and copied with the
    optimizer, and never read by a step. An entry the optimizer keeps is never one of these."""
    return self.__dict__.get("_client_state", {}).get(param, {})


def _set_client_entries(self, param: Any, entries: Mapping[str, Any]) -> None:
    client = self.__dict__.setdefault("_client_state", {})
    if entries:
        client[param] = dict(entries)
    else:
        client.pop(param, None)


def _param_states(self, params: list[torch.Tensor]) -> list[dict[str, Any]]:
    """``state[p]`` for each of ``params`` (an optimizer whose entries share tensors computes those once)."""
    return [self._param_state(p) for p in params]


@state.setter
def state(self, value: Any) -> None:
    if "_param_groups" not in self.__dict__:
        return  # torch's base class assigns it before slotopt's set-up: nothing to reset yet
    _replace_all_state(self, value)


@torch._disable_dynamo
def state_dict(self) -> dict[str, Any]:
    """torch's format: ``{"state": {index: {name: tensor}}, "param_groups": [{..., "params": [index]}]}``.

    Tensors are copies (a snapshot), loadable with ``torch.load(weights_only=True)``.
    """
    for pre_hook in self._optimizer_state_dict_pre_hooks.values():
        pre_hook(self)
    self._before_state_io()
    waiting = _waiting_checkpoint(self)
    if waiting is not None:  # loaded before the build: it is still the optimizer's state
        return _run_state_dict_post_hooks(self, waiting)
    index: dict[int, int] = {}
    packed_groups = []
    for i, group in enumerate(self.param_groups):
        packed = {k: v for k, v in group.items() if k != "params"}
        packed[CLASS_KEY] = self._group_class_name(i)  # a load into another class is refused
        packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
        packed_groups.append(packed)
    state = {index[id(p)]: {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in entry.items()}
             for p, entry in self.state.items()}
    return _run_state_dict_post_hooks(self, {"state": state, "param_groups": packed_groups})


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
        _load_torch_format(self, state_dict)
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
    client_loads: list[tuple[torch.Tensor, dict[str, Any]]] = []
    own_names: Optional[set[str]] = None
    saved_state = state_dict["state"]
    for key, expected in zip(params, self._param_states(list(params.values()))):
        entry = saved_state.get(key)
        if entry is None:
            if self._client_entries(params[key]):
                client_loads.append((params[key], {}))  # (torch's load replaces the whole entry)
            if expected:
                raise ValueError(f"Loaded state dict has no state for parameter {key}; this optimizer keeps "
                                 f"{sorted(expected)} for it.")
            continue
        extra_names = set(entry) - set(expected) if isinstance(entry, Mapping) else set()
        if extra_names and own_names is None:
            own_names = _own_state_names(self)  # (once per load, and only when some entry has more)
        if not isinstance(entry, Mapping) or not set(expected) <= set(entry) or \
                (extra_names and extra_names & own_names):  # type: ignore[operator]
            raise ValueError(
                f"Loaded state of parameter {key} has entries {sorted(entry) if isinstance(entry, Mapping) else entry!r}"
                f"; {type(self).__name__} keeps {sorted(expected)}: the state dict was saved by another "
                "optimizer class or configuration.")
        extra = {name: value.detach().clone() if isinstance(value, torch.Tensor) else value
                 for name, value in entry.items() if name not in expected}  # (a torch client's: as saved)
        if extra or self._client_entries(params[key]):
            client_loads.append((params[key], extra))
        for name, value in entry.items():
            if name not in expected:
                continue
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
    for param, extra in client_loads:
        _set_client_entries(self, param, extra)
    for group, values in zip(groups, new_values):
        group.update(values)
    for i, lr in shown_lrs:
        self._remember_group_lr(i, lr)
    self._sync_param_groups()
    self._after_state_load()
    self._publish_param_groups()


def apply_pending_torch_state(self) -> None:
    """Loads a state dict that arrived before the build; on an error it stays pending."""
    if not self.param_groups:
        return
    pending = self.__dict__.pop("_pending_torch_state", None)
    if pending is None:
        return
    try:
        _load_torch_format(self, pending)
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
    """``opt.state[param][name] = value``: every value checked, then copied into the live tensors. A name the
    optimizer does not keep is a torch client's entry (timm's Lookahead, SAM): kept as given, as torch does."""
    self._before_state_io()
    _parameter_of(self, param)
    entry = self._param_state(param)
    checked = []
    client = dict(self._client_entries(param))
    for name, value in values.items():
        if name not in entry:
            _check_entry_name(name)
            client[name] = value
            continue
        target = entry[name]
        checked.append((target, resume.check_fits(f"Optimizer state {name!r}", name, value, target)))
    with torch.no_grad():
        for target, value in checked:
            if value is not target:
                _copy_into(target, value)
    _set_client_entries(self, param, client)


def _remove_client_entry(self, param: Any, name: str) -> None:
    """``del opt.state[param][name]`` for a torch client's entry (the optimizer's own cannot be removed)."""
    client = dict(self._client_entries(param))
    if name not in client:
        raise KeyError(f"Optimizer state {name!r} of a parameter cannot be removed: {type(self).__name__} "
                       "needs it at every step. Assign a value, or `del optimizer.state[param]` to reset the "
                       "parameter's state.")
    del client[name]
    _set_client_entries(self, param, client)


def _replace_param_state(self, param: Any, entry: Mapping[str, Any]) -> None:
    """``opt.state[param] = entry``: reset to the initial values, then ``entry``'s values (checked first)."""
    _parameter_of(self, param)
    live = self._param_state(param)
    for name, value in entry.items():
        _check_entry_name(name)
        if name in live:
            resume.check_fits(f"Optimizer state {name!r}", name, value, live[name])
    self._reset_param_state(param)
    self._write_param_state(param, {k: v for k, v in entry.items() if k not in live or live[k] is not v})


def _reset_param_state(self, param: Any) -> None:
    """``del opt.state[param]``: the parameter's slots as if it had never been stepped (a client's entries go)."""
    self._before_state_io()
    _parameter_of(self, param)
    self._reset_slots(param)
    _set_client_entries(self, param, {})


def _replace_all_state(self, value: Any) -> None:
    """``opt.state = mapping``: every slot and shared scalar reset, then the mapping's entries written."""
    if isinstance(value, resume.StateTable) and value._owner is self:
        return  # ``opt.state = opt.state`` (e.g. torch's own code re-assigning it)
    if not isinstance(value, Mapping):
        raise TypeError(f"`optimizer.state` must be a dict of {{parameter: dict}}. Received: {value!r}")
    entries = {p: dict(e) for p, e in value.items()}
    for p, entry in entries.items():
        live = self._param_state(_parameter_of(self, p))
        for name, v in entry.items():
            _check_entry_name(name)
            if name in live:
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
    self.__dict__.pop("_client_state", None)


def _own_state_names(self) -> set[str]:
    """Every state name the optimizer keeps for some parameter (a loaded entry by one of these names is never
    taken as a client's: it would be a slot saved by another configuration)."""
    params = [p for group in self.param_groups for p in group["params"]]
    return {name for entry in self._param_states(params) for name in entry}


def _reset_slots(self, param: torch.Tensor) -> None:
    """Face/engine hook: the parameter's slots back to their initial values."""


def _reset_shared_state(self) -> None:
    """Engine hook: the optimizer-wide scalars (iterations, loss scale...) back to their initial values."""


def _check_entry_name(name: Any) -> None:
    if not isinstance(name, str):
        raise KeyError(f"Optimizer state entries are named by strings. Received: {name!r}")


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
    if value_t.is_nested:  # (its shape is not a shape: torch's checks of it fail with an internal error)
        raise TypeError(f"Loaded state {name!r} of parameter {key} is a nested tensor; the optimizer keeps it as a "
                        f"dense tensor of shape "
                        f"{tuple(target.shape)}. Received: state[{key!r}][{name!r}] of type {type(value).__name__}")
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
