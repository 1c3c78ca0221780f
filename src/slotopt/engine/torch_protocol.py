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
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import torch

from ..kernels.native import tensor_table
from . import checks, group_sync, state_io, torch_arguments
from .eager import outside_dynamo
from .group_sync import TorchName, _as_number, is_param_group_list, torch_names_for
from .state_io import CLASS_KEY
from .writing import atomic

__all__ = ["TorchProtocol", "is_param_group_list", "CLASS_KEY", "TorchName", "torch_names_for"]

_HOOK_TABLES = (
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks",
    "_optimizer_load_state_dict_pre_hooks",
    "_optimizer_load_state_dict_post_hooks",
)


class TorchProtocol(torch.optim.Optimizer):
    """The torch side of every slotopt optimizer (not used directly)."""

    # Group sync and the state's format and loads are modules of functions of the optimizer, not base classes;
    # bound here as methods are the public protocol, the hooks a composite overrides and what engine/resume.py
    # calls.

    # engine/group_sync.py: parameter groups kept in step with the optimizer
    _group_keys_of = group_sync._group_keys_of
    _check_group_values = group_sync._check_group_values
    _sync_param_groups = group_sync._sync_param_groups
    _publish_param_groups = group_sync._publish_param_groups
    _hyperparameters_changed = group_sync._hyperparameters_changed
    _group_scope = group_sync._group_scope
    _param_group_partitions = group_sync._param_group_partitions
    # engine/state_io.py: the state and state_dict
    state = state_io.state
    _client_entries = state_io._client_entries
    _param_states = state_io._param_states
    state_dict = state_io.state_dict
    load_state_dict = state_io.load_state_dict
    _has_pending_weights = state_io._has_pending_weights
    _group_class_name = state_io._group_class_name
    _group_lr_is_driven = state_io._group_lr_is_driven
    _remember_group_lr = state_io._remember_group_lr
    _show_current_learning_rate = state_io._show_current_learning_rate
    _write_param_state = state_io._write_param_state
    _remove_client_entry = state_io._remove_client_entry
    _replace_param_state = state_io._replace_param_state
    _reset_param_state = state_io._reset_param_state
    _reset_all_state = state_io._reset_all_state
    _reset_slots = state_io._reset_slots
    _reset_shared_state = state_io._reset_shared_state

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

    def __getstate__(self) -> dict[str, Any]:  # pickling, ``torch.save`` and ``copy.deepcopy`` of the object
        state = self.__dict__.copy()
        # A torch LR scheduler replaces ``step`` on the instance with a wrapper that calls the original optimizer
        # (through a weak reference): a copy keeping it would step the original, and the wrapper cannot be
        # pickled. The hooks belong to the original's surroundings. torch's own ``__getstate__`` leaves out both.
        state.pop("step", None)
        for table in _HOOK_TABLES:
            state[table] = OrderedDict()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._patch_step_function()
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
        values = {key: group_sync.read_value(self, key) for key in group_sync._group_keys(self) if key != "lr"}
        if self._has_learning_rate():
            values = {"lr": self._shown_lr(), **values}
        for name in group_sync.torch_names(self):
            values[name.name] = name.value_in(values)
        values.update(torch_arguments.implementation_flags(self))  # torch's ``fused``/``foreach``/...: what they are
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
        group_sync.adopt_torch_names(self, group, defaults, len(self.param_groups))  # {"betas": ...} as torch takes it
        for name in group_sync.torch_names(self):
            if all(k in group for k in name.keys):
                group[name.name] = name.value_in(group)
        return group

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None,
               names: Optional[list[str]] = None) -> None:
        """Puts newly registered variables into a group: a new one for ``options`` (a param-group dict), else
        the first group (created when there is none). ``names``: the names the caller gave them (a module's, or
        ``(name, tensor)`` pairs), kept as the group's ``param_names`` as torch (2.6+) keeps them, so that its
        load-by-name recipe works (``state_dict()`` carries them, ``load_state_dict`` takes the saved ones)."""
        if not variables and options is None:
            return
        groups = self.param_groups
        if options is not None or not groups:
            group = self._new_group(list(variables), {k: v for k, v in (options or {}).items()
                                                      if k != "param_names"})
            if names is not None:
                group["param_names"] = list(names)
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
            if "param_names" in groups[0]:  # (a named group stays named: slotopt's names where none was given)
                groups[0]["param_names"].extend(names if names is not None else [
                    self._var_names[self._var_index[id(v)]] for v in variables])

    #: Whether every rule's step count goes through ``_step_count`` (``add_param_group(step_count="own")``).
    _group_step_counts: bool = False

    def add_param_group(self, param_group: dict[str, Any], *, step_count: str = "shared") -> None:
        """Adds a group of parameters, with its own ``lr`` and hyperparameters if given (torch's API).

        The parameters get their optimizer state right away, as if the optimizer had been built with them.

        ``step_count``: Keras and TensorFlow keep one iteration count per optimizer, and the bias corrections
        (Adam's ``1 - beta ** t``...) of a group added mid-training use it: after 3 steps, a new group's first
        Adam step moves by ``lr * 0.58`` (t = 4), not by ``lr`` ("shared", the default: Keras's and TF's
        semantics, what a continued Keras run needs). torch counts each parameter's steps from its first update,
        so its new group's first step moves by ``lr``: ``step_count="own"`` gives the new group that count
        (progressive unfreezing, ULMFiT, as torch trains them). Kept in the group as ``step_offset`` (the
        optimizer's count when it was added), so ``state_dict()`` carries it. Keras 3 optimizers only; the others
        refuse it (``ValueError``).

        Example:
            >>> import torch, slotopt
            >>> w, v = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
            >>> opt = slotopt.Adam([w], lr=0.1)
            >>> for _ in range(3):
            ...     w.grad = torch.ones(2); opt.step()
            >>> opt.add_param_group({"params": [v]}, step_count="own")
            >>> v.grad = torch.ones(2); opt.step()
            >>> round(1 - v[0].item(), 4)
            0.1
        """
        if step_count not in ("shared", "own"):
            raise ValueError(f"Argument `step_count` must be 'shared' (the optimizer's one iteration count, as "
                             f"Keras and TensorFlow count) or 'own' (torch's: from the group's first step). "
                             f"Received: step_count={step_count!r}")
        if step_count == "own" and not self._group_step_counts:
            raise ValueError(f"{type(self).__name__}.add_param_group(step_count='own'): this generation's rules "
                             "count steps with the optimizer's one iteration count (or its beta powers) and cannot "
                             "give one group its own; use a Keras 3 optimizer (slotopt.Adam...) for it.")
        if not isinstance(param_group, Mapping) or "params" not in param_group:
            raise TypeError(f"Argument `param_group` must be a dict with a 'params' entry. Received: {param_group!r}")
        if step_count == "own":
            param_group = {**param_group, group_sync.STEP_OFFSET: int(getattr(self, "iterations", 0))}
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
            checks.check_leaf(tensor, f"param_group['params'] entry {i}")
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
        held = atomic.hold()  # from the parameters' proof to the last write: no finalizer, no SIGINT handler
        try:
            pairs = self._step_pairs()
            if pairs:
                self._apply_step(pairs)
        finally:
            atomic.release(held)
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
