"""``CompositeOptimizer``: different optimizers for different variables (TensorFlow Recommenders' API).

Each entry is ``(optimizer, variables)`` where ``variables`` is a no-argument callable returning variables (as
in TFRS), a list of variables, or a list of name patterns (``fnmatch`` style, e.g. ``"*embedding*"``) matched
against variable names. Patterns let a composite be configured before the model exists, and make it
serializable. Sub-optimizers may be of any slotopt generation. Keras 3.15's own composite (regular expressions on
variable paths, a default optimizer, Keras 3 sub-optimizers only) is ``slotopt.MultiOptimizer``; both route
through ``slotopt.engine.routing``.
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from ..engine import checks, limits, registry, state_io
from ..engine.composed import ComposesOptimizers
from ..engine.core import is_plain_gradient
from ..engine.eager import outside_dynamo
from ..engine.group_sync import check_param_groups, group_shares
from ..engine.proof import validation
from ..engine.routing import (
    Routes,
    aggregation_options,
    dispatch,
    group_by_owner,
    set_weights_all_or_nothing,
    split_weights,
)
from ..engine.routing import optimizer_weights as _optimizer_weights
from ..engine.torch_protocol import TorchProtocol, is_param_group_list
from ..engine.writing import transaction
from ..variables import named_variables, variable_name

__all__ = ["CompositeOptimizer"]

VariableSpec = Union[Callable[[], Sequence[torch.Tensor]], Sequence[torch.Tensor], Sequence[str]]


def _is_patterns(spec: Any) -> bool:
    return isinstance(spec, (list, tuple)) and len(spec) > 0 and all(isinstance(s, str) for s in spec)


@registry.register("tfrs")
class CompositeOptimizer(ComposesOptimizers, TorchProtocol):
    """Routes each ``(gradient, variable)`` pair to the optimizer that owns the variable.

    Args:
        optimizers_and_vars: ``[(optimizer, variables), ...]``; ``variables`` is a callable returning
            variables, a list of variables, or a list of name patterns such as ``["*embedding*"]``.
        name: the composite's name.
        params: optional variables (a module or ``(name, tensor)`` pairs) whose names patterns match against,
            and whose ``.grad`` ``step()`` applies.

    Every call validates first: a variable owned by two optimizers, or by none, raises ``ValueError`` before
    anything is updated. An optimizer that gets no gradient in a call does not step.

    It is a ``torch.optim.Optimizer``: ``param_groups`` are the sub-optimizers' groups (the same dicts, so a torch
    LR scheduler drives each sub-optimizer), ``state`` and ``state_dict`` cover every sub-optimizer.

    Example:
        >>> import torch, slotopt
        >>> model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 1))
        >>> opt = slotopt.CompositeOptimizer(
        ...     [(slotopt.Adagrad(learning_rate=0.1), ["0.*"]), (slotopt.Adam(learning_rate=0.01), ["1.*"])],
        ...     params=model)
        >>> model(torch.tensor([1, 2])).sum().backward()
        >>> _ = opt.step()
        >>> [int(o.iterations) for o in opt.optimizers]
        [1, 1]
        >>> opt.get_config()["optimizers_and_vars"][0]["variables"]
        ['0.*']
    """

    def __init__(self, optimizers_and_vars: Sequence[tuple[Any, VariableSpec]], name: str = "CompositeOptimizer",
                 *, params: Any = None) -> None:
        if not optimizers_and_vars:
            raise ValueError(f"`optimizers_and_vars` can't be empty. Received: optimizers_and_vars={optimizers_and_vars!r}")
        entries = []
        for i, entry in enumerate(optimizers_and_vars):
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
                raise ValueError(
                    f"Each entry of `optimizers_and_vars` must be an (optimizer, variables) pair. Received at index "
                    f"{i}: {entry!r}"
                )
            optimizer, spec = entry
            if not (callable(spec) or isinstance(spec, (list, tuple))):
                raise ValueError(
                    "The variables of each optimizer must be a callable, a list of variables or a list of name "
                    f"patterns. Received at index {i}: {spec!r}"
                )
            entries.append((optimizer, spec))
        if len({id(opt) for opt, _ in entries}) != len(entries):
            raise ValueError("The same optimizer instance appears twice in `optimizers_and_vars`.")
        self._init_torch_protocol()
        self.name = name
        self._entries = entries
        self._names: dict[int, str] = {}
        self._params: list[torch.Tensor] = []
        self._pending_weights: Optional[list[Any]] = None
        self._routes = Routes()  # the last step's grouping of its variables (engine/routing.py)
        self.built = False
        if params is not None:
            self.build(params)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if self.built:
            # A callable is shared by a copy (functions are not copied) and would route the copy's variables to
            # the original's: the copy gets what it returns now, copied with the rest (``copy.deepcopy((model,
            # opt))`` maps them to the model copy's parameters).
            state["_entries"] = [(optimizer, functools.partial(list, list(spec())) if callable(spec) else spec)
                                 for optimizer, spec in self._entries]
        state["_routes"] = Routes()  # the last grouping holds this composite's variables, never a copy's
        return state

    def _after_copy(self) -> None:
        super()._after_copy()
        self._names = {id(v): name for v, name in zip(self._params, self._names.values())}  # same order

    # ---------------------------------------------------------------------------------------- ownership
    def _remember(self, variables: Any) -> list[torch.Tensor]:
        out = []
        for name, var in named_variables(variables):
            if id(var) not in self._names:
                self._names[id(var)] = name
                self._params.append(var)
            out.append(var)
        return out

    def _name_of(self, var: torch.Tensor) -> str:
        return self._names.get(id(var)) or variable_name(var, "")

    def _spec_lists(self) -> list[Sequence[torch.Tensor]]:
        """The variables of each entry given by a list or a callable (called now, once), in entry order."""
        return [spec() if callable(spec) else spec for _, spec in self._entries if not _is_patterns(spec)]

    def _owner_map(self, candidates: Sequence[torch.Tensor],
                   spec_lists: Optional[list[Sequence[torch.Tensor]]] = None) -> dict[int, int]:
        """``id(variable) -> entry index`` for explicit lists/callables (``spec_lists``: their variables, as
        ``_spec_lists`` returns them; evaluated here when not given), plus pattern matches among ``candidates``."""
        owners: dict[int, int] = {}

        def claim(var: torch.Tensor, index: int) -> None:
            previous = owners.get(id(var))
            if previous is not None and previous != index:
                raise ValueError(
                    "The set of variables handled by each optimizer should be disjoint, but variable "
                    f"{self._name_of(var) or repr(var)} is handled both by {self._describe(previous)} and "
                    f"{self._describe(index)}."
                )
            owners[id(var)] = index

        lists = iter(self._spec_lists() if spec_lists is None else spec_lists)
        for index, (_, spec) in enumerate(self._entries):
            if _is_patterns(spec):
                continue
            for var in next(lists):
                claim(var, index)
        patterns = [(index, spec) for index, (_, spec) in enumerate(self._entries) if _is_patterns(spec)]
        for var in candidates if patterns else ():  # (names are only read for patterns)
            name = self._name_of(var)
            for index, spec in patterns:
                if _is_patterns(spec) and name and any(fnmatch.fnmatchcase(name, p) for p in spec):
                    claim(var, index)
        return owners

    def _describe(self, index: int) -> str:
        optimizer = self._entries[index][0]
        return f"optimizer {index} ({type(optimizer).__name__} {getattr(optimizer, 'name', '')!s})".replace(" )", ")")

    def _variables_of(self, index: int, owners: dict[int, int]) -> list[torch.Tensor]:
        spec = self._entries[index][1]
        if not _is_patterns(spec):
            return list(spec() if callable(spec) else spec)
        return [v for v in self._params if owners.get(id(v)) == index]

    # ---------------------------------------------------------------------------------------- build
    def build(self, variables: Any = None) -> None:
        """Builds every sub-optimizer on its variables (``variables``: a module or named pairs for patterns).

        Weights or a state dict loaded before the build are applied now; when they do not fit, the composite and
        its sub-optimizers are left as they were (unbuilt, the checkpoint still pending)."""
        if self._pending_weights is None and "_pending_torch_state" not in self.__dict__:
            self._build(variables)
            return
        objects = [self, *self.optimizers]
        saved = [transaction.snapshot(o) for o in objects]
        try:
            self._build(variables)
        except BaseException:
            for o, s in zip(objects, saved):
                transaction.restore(o, s)
            raise

    def _build(self, variables: Any) -> None:
        self._routes.forget()
        groups = None
        if is_param_group_list(variables):  # torch's group dicts: each sub-optimizer gets its share of each group
            groups = check_param_groups(variables)
            variables = [pair for named, _ in groups for pair in named]
        if variables is not None:
            self._remember(variables)
        owners = self._owner_map(self._params)
        for index, (optimizer, _) in enumerate(self._entries):
            own = self._variables_of(index, owners)
            if not own:
                continue
            named = [(self._name_of(v) or f"variable_{i}", v) for i, v in enumerate(own)]
            if groups is not None and hasattr(optimizer, "add_param_group"):
                optimizer.build(group_shares(named, groups))
            elif hasattr(optimizer, "build"):
                optimizer.build(named)
            elif hasattr(optimizer, "_create_all_weights"):
                optimizer._create_all_weights(own)
        self.built = True
        if self._pending_weights is not None:
            self.set_weights(self._pending_weights)  # all checked first; kept pending when it does not fit
            self._pending_weights = None
        state_io.apply_pending_torch_state(self)

    # ---------------------------------------------------------------------------------------- apply
    @outside_dynamo  # eager under torch.compile, whole: routing included (one break)
    def apply_gradients(self, grads_and_vars: Any, name: Optional[str] = None,
                        experimental_aggregate_gradients: bool = True,
                        skip_gradients_aggregation: Optional[bool] = None) -> None:
        """Sends each pair to its optimizer (groups ordered by first appearance) after validating all of them."""
        options = {"name": name, **aggregation_options(experimental_aggregate_gradients, skip_gradients_aggregation)}
        spec_lists = self._spec_lists()
        # A step like the last one: a list of 2-tuples with the same variables, owned as before, each group an
        # ordinary step of its optimizer's last plan (every pair checked there, in one pass, before any
        # optimizer steps; the variables are the kept ones, so tensors). Anything else is checked in full.
        pending = self._pending_weights is not None or "_pending_torch_state" in self.__dict__
        ordinary = not pending and checks.two_tuples(grads_and_vars)
        groups = self._routes.lookup(grads_and_vars, spec_lists) if ordinary else None
        if groups is not None:
            checked = {index: self._ordinary_for(index, group) for index, group in groups.items()}
            if all(group is not None for group in checked.values()):
                dispatch(self.optimizers, checked, options)  # (each optimizer takes its checked group as it is)
                return
        pairs = checks.check_pairs(grads_and_vars)
        owners = self._owner_map([v for _, v in pairs], spec_lists)
        groups = group_by_owner(
            pairs, lambda var: owners.get(id(var)),
            lambda var: f"Variable {self._name_of(var) or repr(var)} is not handled by any optimizer. This would "
                        "cause it to be not trained.",
            check=lambda pair: is_plain_gradient(*pair) or validation.check_gradient(
                pair[0], pair[1], lambda: self._name_of(pair[1]) or "variable"))
        if not any(g is not None for g, _ in pairs) and pairs:
            raise ValueError("No gradients provided for any variable.")
        for index, group in groups.items():  # what a sub-optimizer would refuse, refused before any of them steps
            optimizer = self._entries[index][0]
            if getattr(optimizer, "_refuses_repeated_variables", False):
                seen: set[int] = set()
                for _, var in group:
                    if id(var) in seen:
                        raise ValueError(
                            f"Variable {self._name_of(var) or repr(var)} appears more than once in "
                            f"`grads_and_vars` for {self._describe(index)}; sum its gradients first."
                        )
                    seen.add(id(var))
        if not self.built and (self._pending_weights is not None or "_pending_torch_state" in self.__dict__):
            self._remember([(self._name_of(v) or f"variable_{i}", v) for i, (_, v) in enumerate(pairs)])
            self.build()
        self._routes.remember(pairs, groups, spec_lists)
        dispatch(self.optimizers, groups, options)  # an optimizer with nothing to apply does not step

    def _ordinary_for(self, index: int, group: list[Any]) -> Optional[list[Any]]:
        """``group`` as an ordinary step of its optimizer's last plan (engine/plan.py), or None."""
        planned = getattr(self._entries[index][0], "_planned_step", None)
        return None if planned is None else planned(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        with torch.autograd.profiler.record_function(self._zero_grad_profile_name):  # under the composite's name
            self._zero_grads(set_to_none)

    def _zero_grads(self, set_to_none: bool) -> None:
        for optimizer, _ in self._entries:
            if hasattr(optimizer, "zero_grad"):
                optimizer.zero_grad(set_to_none=set_to_none)
        for v in self._params:
            if v.grad is not None:
                if set_to_none:
                    v.grad = None
                else:
                    v.grad.zero_()

    # ---------------------------------------------------------------------------------------- state
    @property
    def optimizers(self) -> list[Any]:
        return [optimizer for optimizer, _ in self._entries]

    @property
    def iterations(self) -> Any:
        """The first sub-optimizer's iteration count."""
        return self._entries[0][0].iterations

    @iterations.setter
    def iterations(self, value: Any) -> None:
        for optimizer, _ in self._entries:
            optimizer.iterations = value

    @property
    def weights(self) -> list[torch.Tensor]:
        """Every sub-optimizer's weights, in constructor order."""
        return [w for optimizer, _ in self._entries for w in _optimizer_weights(optimizer)]

    def variables(self) -> list[torch.Tensor]:
        return self.weights

    def get_weights(self) -> list[np.ndarray]:
        """The weights' values; before the build, the weights given to ``set_weights`` (still the state)."""
        if not self.built and self._pending_weights is not None:
            return [np.array(w.detach().cpu().numpy() if isinstance(w, torch.Tensor) else w, copy=True)
                    for w in self._pending_weights]
        return [w.detach().cpu().numpy().copy() for w in self.weights]

    def _has_pending_weights(self) -> bool:
        return not self.built and self._pending_weights is not None

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Assigns weights in ``weights`` order; before ``build`` they are kept and applied when it builds."""
        weights = list(weights)
        started = self.built or any(getattr(o, "built", bool(_optimizer_weights(o))) for o in self.optimizers)
        if not started and len(weights) != len(self.weights):
            # Kept until the build (the sub-optimizers' slots do not exist yet). Copies: they must not follow the
            # caller's later changes.
            self._pending_weights = [w.detach().clone() if isinstance(w, torch.Tensor) else np.array(w, copy=True)
                                     for w in weights]
            return
        parts = split_weights(self.optimizers, weights, self.name)[1:]
        set_weights_all_or_nothing(self.optimizers, parts)

    # ---------------------------------------------------------------------------------------- torch protocol
    def _torch_optimizers(self) -> list[TorchProtocol]:
        return [o for o, _ in self._entries if isinstance(o, TorchProtocol)]

    def _load_legacy_format(self, state_dict: Mapping[str, Any]) -> bool:
        if "weights" not in state_dict:
            return False
        self.set_weights(list(state_dict["weights"]))  # slotopt 0.1's {"weights": [...]}
        return True

    # ---------------------------------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        """Serializable when every group is given as name patterns."""
        entries = []
        for optimizer, spec in self._entries:
            if not _is_patterns(spec):
                kind = "a callable" if callable(spec) else "a list of variables"
                raise NotImplementedError(
                    f"CompositeOptimizer cannot be serialized because it uses {kind} to get variables. "
                    "Give each optimizer's variables as a list of name patterns (e.g. ['*embedding*']) to make "
                    "it serializable."
                )
            entries.append({
                "optimizer": registry.serialized(optimizer),
                "variables": list(spec),
            })
        return {"name": self.name, "optimizers_and_vars": entries}

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    custom_objects: Optional[Mapping[str, Any]] = None) -> CompositeOptimizer:
        """Rebuilds a composite from ``get_config()``. Each sub-optimizer's class is looked up in the registry
        every entry point uses (``slotopt.engine.registry``: by generation, from its ``module``) or in
        ``custom_objects``; nothing named in the config is imported, and the result must be an optimizer."""
        limits.check_config_entries(config)  # each entry named, before any repr of it
        checks.check_config_dict(config)
        entries_config = config.get("optimizers_and_vars")
        if not isinstance(entries_config, (list, tuple)) or not entries_config:
            raise ValueError("A CompositeOptimizer config needs a non-empty list `optimizers_and_vars`. Received: "
                             f"optimizers_and_vars={entries_config!r}")
        entries = []
        for i, entry in enumerate(entries_config):
            spec = entry.get("optimizer") if isinstance(entry, Mapping) else None
            patterns = entry.get("variables") if isinstance(entry, Mapping) else None
            if not isinstance(spec, Mapping) or not isinstance(spec.get("config", {}), Mapping) or \
                    not _is_patterns(patterns):
                raise ValueError(
                    f"`optimizers_and_vars[{i}]` must be {{'optimizer': {{'class_name', 'module', 'config'}}, "
                    f"'variables': [name patterns]}}. Received: {entry!r}")
            klass = registry.resolve_class(spec.get("class_name"), spec.get("module"), custom_objects,
                                           spec.get("registered_name"))
            from_config = getattr(klass, "from_config", None)
            if not callable(from_config):
                raise ValueError(f"`optimizers_and_vars[{i}]`: {klass.__name__} has no `from_config`, so it is not "
                                 "an optimizer.")
            inner = dict(spec.get("config") or {})
            optimizer = from_config(inner, custom_objects) if _takes_custom(klass) else from_config(inner)
            if not isinstance(optimizer, TorchProtocol):
                raise ValueError(f"`optimizers_and_vars[{i}]`: {klass.__name__}.from_config returned "
                                 f"{type(optimizer).__name__}, which is not a slotopt optimizer.")
            entries.append((optimizer, list(patterns)))
        name = config.get("name", "CompositeOptimizer")
        return cls(entries, name=name if isinstance(name, str) else "CompositeOptimizer")

    def __getattr__(self, item: str) -> Any:
        if item in ("learning_rate", "lr"):
            raise AttributeError(
                f"CompositeOptimizer has no `{item}`: each sub-optimizer has its own (see `.optimizers`)."
            )
        raise AttributeError(item)


def _takes_custom(klass: Any) -> bool:
    try:
        return "custom_objects" in inspect.signature(klass.from_config).parameters
    except (TypeError, ValueError):
        return False

