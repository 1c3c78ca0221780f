"""Keras 3.15's ``MultiOptimizer`` and ``OptimizerMap``: a different Keras 3 optimizer per variable.

``OptimizerMap(default_optimizer, {pattern: optimizer})`` chooses by variable path: an exact key first, then
every key as a regular expression with ``re.fullmatch`` (two matches are an error), else the default.
``MultiOptimizer(optimizer_map)`` takes such a map, or any callable ``variable -> optimizer``, and routes each
gradient to its variable's optimizer. The routing machinery is shared with ``slotopt.CompositeOptimizer``
(TensorFlow Recommenders' API) in ``slotopt.engine.routing``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Callable, Optional, Union

import torch

from ..engine import limits, pipeline, plan_cache, registry, stages
from ..engine.composed import ComposesOptimizers
from ..engine.core import Pair
from ..engine.group_sync import check_param_groups, group_shares
from ..engine.pattern import compile_pattern
from ..engine.pipeline import Call, Step
from ..engine.plan import split
from ..engine.routing import (
    AGGREGATED,
    Routes,
    dispatch,
    group_by_owner,
    set_weights_all_or_nothing,
    split_weights,
    variable_path,
)
from ..engine.torch_protocol import TorchProtocol, is_param_group_list
from .loss_scale import LossScaleOptimizer
from .optimizer import Optimizer

__all__ = ["OptimizerMap", "MultiOptimizer"]

OptimizerSelector = Union["OptimizerMap", Callable[[Any], Optimizer]]


# Keras 3.15's own texts (its upstream suite matches them), each followed by slotopt's way forward.
_LOSS_SCALE_HINT = ("(the MultiOptimizer scales the loss: set its `loss_scale_factor`, or wrap the MultiOptimizer "
                    "in a LossScaleOptimizer)")
_NESTED_HINT = "(give the outer map the inner map's entries instead)"


def _refuse_nested(optimizer: Any, where: str, *, at_build: bool) -> None:
    """A LossScaleOptimizer or a MultiOptimizer as a sub-optimizer: Keras's ``map[key] =`` text, or its build's."""
    if isinstance(optimizer, LossScaleOptimizer):
        text = ("LossScaleOptimizer cannot be used inside an MultiOptimizer." if at_build
                else "optimizer cannot be LossScaleOptimizer.")
        raise ValueError(f"{text} {_LOSS_SCALE_HINT} Received: {where}={optimizer!r}")
    if isinstance(optimizer, MultiOptimizer):
        text = ("MultiOptimizer cannot be used inside an MultiOptimizer." if at_build
                else "optimizer cannot be MultiOptimizer.")
        raise ValueError(f"{text} {_NESTED_HINT} Received: {where}={optimizer!r}")


@registry.register("keras3", files=False)
class OptimizerMap(MutableMapping):
    """``{variable path or regex: optimizer}`` with a default optimizer (Keras 3.15 ``keras.optimizers.OptimizerMap``).

    ``optimizer_map[path]`` returns the optimizer stored under exactly ``path`` if there is one; otherwise the
    only key that matches the whole path as a regular expression (``re.fullmatch``; ``"encoder/.*"`` matches
    ``"encoder/dense/kernel"``, ``"encoder"`` does not); otherwise ``default_optimizer``. A path matching two
    or more keys raises ``ValueError``. Calling the map with a variable looks up its path.

    Args:
        default_optimizer: the Keras 3 optimizer (``slotopt.Optimizer``) for every unmatched variable.
        optimizer_map: optional initial ``{key: optimizer}`` (copied; each entry is checked as by ``map[key] =``).

    Keys are strings that compile as regular expressions; values are Keras 3 optimizers other than a
    ``MultiOptimizer``; a key cannot be assigned twice. Every invalid entry raises before anything is stored.

    Example:
        >>> import slotopt
        >>> opt_map = slotopt.OptimizerMap(slotopt.RMSprop(name="rmsprop"), {"decoder": slotopt.Adam(name="adam")})
        >>> opt_map["encoder/.*"] = slotopt.SGD(name="sgd")
        >>> opt_map["decoder"].name, opt_map["encoder/layer_0/kernel"].name, opt_map["decoder/kernel"].name
        ('adam', 'sgd', 'rmsprop')
    """

    def __init__(self, default_optimizer: Optimizer, optimizer_map: Optional[Mapping[str, Optimizer]] = None) -> None:
        if not isinstance(default_optimizer, Optimizer):
            raise TypeError(
                f"default_optimizer must be a Keras Optimizer instance. Received: {default_optimizer!r} "
                "(a Keras 3 slotopt optimizer, `slotopt.Optimizer`)"
            )
        # Keras takes such a default and refuses it when a MultiOptimizer builds on the map; refused here, with
        # the text of that build.
        _refuse_nested(default_optimizer, "default_optimizer", at_build=True)
        if optimizer_map is not None and not isinstance(optimizer_map, Mapping):
            raise TypeError(f"optimizer_map must be a dictionary. Received: {optimizer_map!r}")
        entries = dict(optimizer_map or {})
        for key, optimizer in entries.items():  # every entry is checked before any is kept
            self._check_entry(key, optimizer)
        self._default_optimizer = default_optimizer
        self._optimizer_map: dict[str, Optimizer] = entries

    @property
    def default_optimizer(self) -> Optimizer:
        return self._default_optimizer

    def __getitem__(self, key: str) -> Optimizer:
        if key in self._optimizer_map:
            return self._optimizer_map[key]
        # Matched without backtracking (engine/pattern.py): a key such as ``(a+)+b`` cannot stall a step.
        matching = [pattern for pattern in self._optimizer_map if compile_pattern(pattern).fullmatch(key)]
        if len(matching) > 1:
            raise ValueError(f"Multiple optimizers assigned to variable {key}: patterns {matching} all match it.")
        if matching:
            return self._optimizer_map[matching[0]]
        return self._default_optimizer

    def __setitem__(self, key: str, optimizer: Optimizer) -> None:
        if isinstance(key, str) and key in self._optimizer_map:
            raise ValueError(
                f"'{key}' already exists in the OptimizerMap with value {self._optimizer_map[key]!r}. Please make "
                "sure to not use duplicated keys."
            )
        self._check_entry(key, optimizer)
        self._optimizer_map[key] = optimizer

    @staticmethod
    def _check_entry(key: Any, optimizer: Any) -> None:
        if not isinstance(key, str):
            raise ValueError(f"key must be a string. Received: {key!r}")
        if not isinstance(optimizer, Optimizer):
            raise ValueError(f"optimizer must be a Keras Optimizer instance. Received: {optimizer!r}")
        _refuse_nested(optimizer, f"optimizer_map[{key!r}]", at_build=False)
        try:
            re.compile(key)
        except re.error as err:
            raise ValueError(f"key must be a valid regular expression. Received: {key!r} ({err})") from None
        compile_pattern(key)  # refuses what cannot be matched without backtracking (a backreference...)

    def __delitem__(self, key: str) -> None:
        del self._optimizer_map[key]

    def __len__(self) -> int:
        return len(self._optimizer_map)

    def __iter__(self) -> Iterator[str]:
        return iter(self._optimizer_map)

    def __call__(self, variable: Any) -> Optimizer:
        """The optimizer for ``variable`` (a ``slotopt.Variable`` or anything with a string ``path``)."""
        path = getattr(variable, "path", None)
        if not isinstance(path, str):
            raise ValueError(
                f"OptimizerMap looks variables up by their `path`; received a variable without one: {variable!r}"
            )
        return self[path]

    def __repr__(self) -> str:
        return f"OptimizerMap(default={self._default_optimizer!r}, {self._optimizer_map!r})"

    def get_config(self) -> dict[str, Any]:
        from .serialization import serialize

        return {
            "default_optimizer": serialize(self._default_optimizer),
            "optimizer_map": {k: serialize(v) for k, v in self._optimizer_map.items()},
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    custom_objects: Optional[Mapping[str, Any]] = None) -> OptimizerMap:
        limits.check_config_entries(config)  # each entry named, before any repr of it
        from .serialization import deserialize

        if not isinstance(config, Mapping) or "default_optimizer" not in config or "optimizer_map" not in config:
            raise ValueError(
                f"An OptimizerMap config needs `default_optimizer` and `optimizer_map`. Received: config={config!r}")
        default = deserialize(config["default_optimizer"], custom_objects=custom_objects)
        mapping = {k: deserialize(v, custom_objects=custom_objects) for k, v in config["optimizer_map"].items()}
        return cls(default, mapping)


@registry.register("keras3", files=False)
class MultiOptimizer(ComposesOptimizers, Optimizer):
    """Delegates each variable to its own Keras 3 optimizer (Keras 3.15 ``keras.optimizers.MultiOptimizer``).

    Args:
        optimizer_map: an ``OptimizerMap``, one optimizer (for every variable, as Keras takes it), or a callable
            ``variable -> optimizer`` (called once per variable at build, with the variable itself; an
            ``OptimizerMap`` gets the variable's path, which for a plain tensor is the name it was registered
            under, e.g. ``"0.weight"`` from ``named_parameters``).
        loss_scale_factor: overrides every sub-optimizer's: they are set to it (``None`` included) when they
            join, and whenever it is assigned; ``scale_loss`` multiplies by it and the sub-optimizers divide
            their gradients by it.
        name: the optimizer's name.
        params: optional variables to build on right away (as for every slotopt optimizer).

    ``optimizers`` lists the sub-optimizers as Keras 3.15 does: ``OptimizerMap``'s values in insertion order, then
    its default (each once), then those a callable returns, in the order the build meets them. A
    ``LossScaleOptimizer`` cannot be a sub-optimizer (Keras refuses it: the ``MultiOptimizer`` scales the loss). A ``MultiOptimizer`` has no
    ``learning_rate`` (reading or setting it raises ``AttributeError``: read each sub-optimizer's). Its own
    ``iterations`` counts ``apply`` calls; each sub-optimizer counts the steps it took. ``variables`` are its own
    (``iteration``, ``learning_rate`` 0.0) followed by each sub-optimizer's, in ``optimizers`` order.

    Every pair is validated, by the ``MultiOptimizer`` and then by each sub-optimizer, before any variable
    changes. Unlike Keras, ``apply`` accepts a subset of the variables it was built on.

    Example:
        >>> import torch, slotopt
        >>> kernel = slotopt.Variable(torch.ones(2, 2), name="kernel")
        >>> bias = slotopt.Variable(torch.ones(2), name="bias")
        >>> sgd, adam = slotopt.SGD(learning_rate=0.5), slotopt.Adam(learning_rate=0.1)
        >>> opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {"kern.*": adam}))
        >>> _ = opt.apply_gradients([(torch.ones(2, 2), kernel), (torch.ones(2), bias)])
        >>> [round(x, 4) for x in kernel[0].tolist()], bias.tolist()
        ([0.9, 0.9], [0.5, 0.5])
        >>> [type(o).__name__ for o in opt.optimizers], int(opt.iterations), int(adam.iterations)
        (['Adam', 'SGD'], 1, 1)
    """

    _supports_complex = True  # complex variables: the optimizer(s) it wraps decide (issue 24 item 8)
    # Its own checks of a step like the last one come from a plan (engine/plan.py), as in every Keras 3
    # optimizer; it has no stage of its own that takes the plan's shortcuts (``_apply_updates`` dispatches).
    _plans_steps = True

    def __init__(self, optimizer_map: OptimizerSelector, loss_scale_factor: Optional[float] = None,
                 name: Optional[str] = None, *, foreach: Optional[bool] = None) -> None:
        if isinstance(optimizer_map, Optimizer):  # Keras takes one optimizer: the default of an empty map
            optimizer_map = OptimizerMap(optimizer_map)
        if not callable(optimizer_map):
            raise TypeError(
                "Argument `optimizer_map` must be an OptimizerMap or a callable returning an optimizer for a "
                f"variable. Received: optimizer_map={optimizer_map!r}"
            )
        super().__init__(learning_rate=0.0, loss_scale_factor=loss_scale_factor, name=name, foreach=foreach)
        self._optimizer_map = optimizer_map
        self._owner: dict[int, int] = {}
        inner: list[Optimizer] = []
        if isinstance(optimizer_map, OptimizerMap):
            # Keras 3.15: the map's optimizers in insertion order, each once, the default last.
            # (a default that is also a value takes that value's place, as in Keras: it appends it only if absent)
            for optimizer in [*optimizer_map.values(), optimizer_map.default_optimizer]:
                if not any(optimizer is o for o in inner):
                    inner.append(optimizer)
        self._inner_optimizers = inner
        self.loss_scale_factor = loss_scale_factor  # now propagates to the sub-optimizers

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "loss_scale_factor":
            for optimizer in self.__dict__.get("_inner_optimizers", ()):
                optimizer.loss_scale_factor = value

    # ------------------------------------------------------------------------------------------ routing
    def _route(self, var: torch.Tensor) -> Optimizer:
        if isinstance(self._optimizer_map, OptimizerMap):
            optimizer = self._optimizer_map[variable_path(var, self._name_of(var))]
        else:
            optimizer = self._optimizer_map(var)
        path = variable_path(var, self._name_of(var))
        if not isinstance(optimizer, Optimizer):
            raise ValueError(
                f"Optimizer for variable {path} is not an Optimizer instance (a slotopt Keras 3 optimizer). "
                f"Received: {optimizer!r}"
            )
        _refuse_nested(optimizer, f"optimizer_map({path!r})", at_build=True)
        return optimizer

    def _after_copy(self) -> None:
        super()._after_copy()
        self._owner = {id(self._vars[p]): i for p, i in self.__dict__.get("_owner_positions", {}).items()}

    def build(self, variables: Any) -> None:
        """Routes every variable to its optimizer and builds each sub-optimizer on its own variables."""
        if self.built:
            return
        groups = None
        if is_param_group_list(variables):  # torch's group dicts: each sub-optimizer gets its share of each group
            groups = check_param_groups(variables)
            variables = [{**group, "params": named} for named, group in groups]
        positions = self._register(variables)  # names only: routing may still fail, state is built after it
        inner = list(self._inner_optimizers)
        owner: dict[int, int] = {}
        for pos in positions:
            var = self._vars[pos]
            optimizer = self._route(var)
            index = next((i for i, o in enumerate(inner) if o is optimizer), None)
            if index is None:
                inner.append(optimizer)
                index = len(inner) - 1
            owner[id(var)] = index
        self._inner_optimizers = inner
        self.loss_scale_factor = self.loss_scale_factor
        self._owner = owner
        self._owner_positions = {self._position(self._vars[p]): owner[id(self._vars[p])] for p in positions}
        # The sub-optimizers get the parameters as given (an FSDP2 parameter is a DTensor: its local shard is
        # what the rules update, and the DTensor is what ``param_groups`` and torch.distributed.checkpoint see).
        originals = {id(self._vars[p]): self._originals[p] for p in positions}
        for index, optimizer in enumerate(inner):
            own = [(self._name_of(self._vars[p]), originals[id(self._vars[p])]) for p in positions
                   if owner[id(self._vars[p])] == index]
            if not own:
                continue
            # (each group's own values, ``lr``, ``weight_decay``, timm's ``lr_scale``, go with its share)
            optimizer.build(own if groups is None else group_shares(own, groups))
        super().build(variables)

    # ------------------------------------------------------------------------------------------ torch protocol
    def _torch_optimizers(self) -> list[TorchProtocol]:
        return list(self._inner_optimizers)

    def _own_state(self) -> dict[str, torch.Tensor]:
        return {"multi_optimizer_step": self._iterations}

    def _shared_state(self) -> dict[str, torch.Tensor]:
        return {}

    @property
    def optimizers(self) -> list[Optimizer]:
        """The sub-optimizers (see the class docstring for their order)."""
        return list(self._inner_optimizers)

    def _optimizer_for(self, var: torch.Tensor) -> Optimizer:
        index = self._owner.get(id(var))
        if index is None:
            raise ValueError(f"Variable {self._name_of(var)} not found in any optimizer.")
        return self._inner_optimizers[index]

    # ------------------------------------------------------------------------------------------ state
    @property
    def variables(self) -> list[Any]:
        """Own ``[iteration, learning_rate]``, then every sub-optimizer's variables in ``optimizers`` order."""
        self._restore_pending_state()
        return list(self._variables) + [v for o in self._inner_optimizers for v in o.variables]

    @property
    def learning_rate(self) -> Any:
        raise AttributeError(
            "Learning rate cannot be accessed on a MultiOptimizer. Access the learning rate on the individual "
            "sub-optimizers instead (see `.optimizers`)."
        )

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        raise AttributeError(
            "Learning rate cannot be set on a MultiOptimizer. Set the learning rate on the individual "
            "sub-optimizers instead (see `.optimizers`)."
        )

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Assigns its own weights, then each sub-optimizer's, in ``variables`` order (all checked first)."""
        weights = list(weights)
        if not self.built:
            super().set_weights(weights)  # kept until the build
            return
        own, *parts = split_weights(self._inner_optimizers, weights, self.name, leading=len(self._variables))
        set_weights_all_or_nothing(self._inner_optimizers, parts, self._variables, own)

    def finalize_variable_values(self, var_list: Sequence[torch.Tensor]) -> None:
        """Each sub-optimizer finalizes (EMA overwrite) its own variables among ``var_list``."""
        var_list = list(var_list)
        groups = group_by_owner([(None, v) for v in var_list], lambda v: self._owner.get(id(v)),
                                lambda v: f"Variable {self._name_of(v)} not found in any optimizer.")
        for index in sorted(groups):
            self._inner_optimizers[index].finalize_variable_values([v for _, v in groups[index]])

    # ------------------------------------------------------------------------------------------ its step's parts
    def _by_owner(self, pairs: list[Pair]) -> dict[int, list[Pair]]:
        routes = self.__dict__.setdefault("_routes", Routes())  # the last grouping (engine/routing.py)
        groups = routes.group(pairs, lambda v: self._owner.get(id(v)),
                              lambda v: f"Variable {self._name_of(v)} not found in any optimizer.",
                              key=[(self._owner,)])  # (ownership is replaced, never edited, when it changes)
        return {i: groups[i] for i in sorted(groups)}

    def _aggregate_by_owner(self, pairs: list[Pair], call: Call) -> list[Pair]:
        # Each sub-optimizer's aggregator on its own pairs, in sub-optimizer order on every process (collectives
        # must be called in the same order everywhere); the updates below then skip aggregation.
        if all(pipeline.aggregates_nothing(o) for o in self._inner_optimizers):
            return pairs  # none aggregates anything: as they are (an ``Ordinary`` step stays one)
        return [pair for i, group in self._by_owner(pairs).items()
                for pair in pipeline.aggregate_across_processes(self._inner_optimizers[i], group, call)]

    def _dispatch(self, pairs: list[Pair], call: Call) -> None:
        if pairs.plan is not None:  # checked in this step: each group handed on as checked, where it can be
            groups = split(pairs, self._owner, lambda: self._by_owner(pairs),
                           [plan_cache.current_plan(o) for o in self._inner_optimizers])
        else:
            groups = self._by_owner(pairs)
        dispatch(self._inner_optimizers, groups, AGGREGATED, validate_first=True,
                 all_present=pairs.plan is not None)

    #: Its step: validation and the build come from the base class (``_prepare_pairs``); each sub-optimizer runs
    #: its own step on its variables (overwrite, unscaling, clipping, weight decay, constraints, EMA), so this
    #: level adds none of them: it aggregates through each sub-optimizer, dispatches, and counts its own steps.
    _stages = Step(
        pipeline.drop_missing_gradients,
        pipeline.UPDATE,
        _aggregate_by_owner,
        pipeline.FIRST_WRITE,
        _dispatch,
        pipeline.AFTER,
        stages.count_iterations,
        result=stages.iterations,
    )

    # ------------------------------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        return {"optimizer_map": _serialize_selector(self._optimizer_map), "loss_scale_factor": self.loss_scale_factor,
                "name": self.name}

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    custom_objects: Optional[Mapping[str, Any]] = None) -> MultiOptimizer:
        limits.check_config_entries(config)  # each entry named, before any repr of it
        config = dict(config)
        if "optimizer_map" not in config:
            raise ValueError(f"A MultiOptimizer config needs `optimizer_map`. Received: config={config}")
        config["optimizer_map"] = _deserialize_selector(config["optimizer_map"], custom_objects)
        return cls(**config)


def _serialize_selector(selector: Any) -> dict[str, Any]:
    """An ``OptimizerMap`` as Keras serializes it; a module-level function by module and qualified name."""
    if isinstance(selector, OptimizerMap):
        return {"module": "keras.optimizers", "class_name": "OptimizerMap", "config": selector.get_config(),
                "registered_name": None}
    name = getattr(selector, "__name__", None)
    module = getattr(selector, "__module__", None)
    return {"module": module, "class_name": "function", "config": name, "registered_name": "function"}


def _deserialize_selector(config: Any, custom_objects: Optional[Mapping[str, Any]]) -> Any:
    if isinstance(config, OptimizerMap) or (callable(config) and not isinstance(config, Mapping)):
        return config
    if not isinstance(config, Mapping) or "class_name" not in config:
        raise ValueError(f"`optimizer_map` must be a serialized OptimizerMap or function. Received: {config!r}")
    if config["class_name"] == "OptimizerMap":
        registry.resolve_class("OptimizerMap", config.get("module"), custom_objects, config.get("registered_name"),
                               what="optimizer map")
        return OptimizerMap.from_config(config["config"], custom_objects)
    # A routing function is code: it comes only from the caller's `custom_objects`, never from the module a
    # config names (nothing named in a config is imported or called).
    return registry.resolve_function(config.get("config"), config.get("module"), custom_objects,
                                     what="optimizer selector function")
