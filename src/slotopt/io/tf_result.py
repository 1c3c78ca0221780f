"""The training state read from a TensorFlow checkpoint (:class:`TFCheckpoint`): its variables, its optimizer's
variables, and the optimizer built on your tensors with that state, checked against the file before anything is
written. ``tf_checkpoint.py`` reads the files into it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch

from ..engine import adopt, registry, summation
from . import tf_write
from .keras_layers import keras_view, to_torch, torch_shape
from .keras_result import refuse_tfkeras_new
from .named_weights import NamedWeights, handed_over, summation_orders, write_weight
from .tf1_optimizers import disagreement
from .tf_files import OptimizerVariable, _op_base

# tf-keras 2.11+ slot names → the Keras 3 class's (the rest are the same in both).
_TFKERAS_SLOTS = {"m": "momentum", "v": "velocity", "vhat": "velocity_hat", "u": "norm"}


# ------------------------------------------------------------------------------------------------ the result
@dataclass
class TFCheckpoint(NamedWeights):  # (the argument checks of a Keras checkpoint: ``io/keras.py``)
    """The training state read from a TensorFlow checkpoint by :func:`load_tf_checkpoint`; the same interface as
    :class:`~slotopt.io.keras.KerasCheckpoint` (``variable_names``, ``weights``, ``parameters()``,
    ``optimizer(params, optimizer=None)``, ``load_module(module, mapping)``).

    Attributes:
        path: the checkpoint prefix read (``.../ckpt-1``).
        kind: the optimizer's generation: ``"keras3"`` (``tf.train.Checkpoint`` of a Keras 3 optimizer),
            ``"tfkeras_new"`` (of tf-keras 2.11+'s ``tf.keras.optimizers.<Class>``, continued by the Keras 3 class
            with tf-keras's deduplication of sparse rows; the classes whose arithmetic differs are refused), ``"composite"`` (several optimizers, a TFRS ``CompositeOptimizer``: ``parts``),
            ``"legacy"`` (of a tf.keras ``OptimizerV2``), ``"v1"`` (a TF1 ``Saver`` checkpoint), or ``"none"``
            (variables only).
        variable_names: the trainable variables the optimizer holds state for, in the optimizer's order (TF1:
            the ``.meta`` graph's order, or sorted). Keras 3: ``variable.path``; TF1: the variable's op name.
        weights: name → tensor of every model variable (trainable or not; TF1: ``global_step`` too), stored dtype.
        layouts: name → layout kind for :meth:`load_module` (guessed from names: ``.../kernel`` of rank 2, 3, 4
            is a Dense/Conv1D/Conv2D kernel; set an entry to ``"as_is"`` or another kind to correct it).
        keys: name → checkpoint key of each model variable.
        optimizer_variables: the optimizer's variables (:class:`OptimizerVariable`), in the optimizer's order.
        optimizer_name: the saved optimizer's name (Keras: ``"adam"``; TF1: the slots' op name, ``"Adam"``).
        optimizer_class: the slotopt class the file names, when it does (TF1 with its default names); else None.
        optimizer_config: constructor arguments read from the ``.meta`` graph (TF1), else None.
        iterations: the saved step count (Keras ``iterations``; TF1 ``global_step``), or None.
        notes: what the reader skipped and why.
        skipped: checkpoint key → why it was left (an iterator's position, a string, the save counter): what is
            not training state. Training state that cannot be read refuses the file instead.
        parts: for ``"composite"``, one checkpoint per optimizer, in the file's order (``Optimizer0``, ...), each
            with its ``variable_names``, ``optimizer_variables`` and ``iterations``.

    Example:
        >>> import slotopt
        >>> ck = slotopt.load_tf_checkpoint("tests/data/migration/m_tf1_saver_adam")
        >>> ck.kind, ck.variable_names, ck.iterations
        ('v1', ['layer1/w', 'layer1/b', 'layer2/w', 'layer2/b'], 5)
        >>> opt = ck.optimizer(params := ck.parameters())
        >>> type(opt).__name__, round(float(opt.variables()[0]), 6)
        ('AdamOptimizer', 0.531441)
    """

    path: str
    kind: str
    variable_names: list[str]
    weights: dict[str, torch.Tensor]
    layouts: dict[str, str]
    keys: dict[str, str]
    optimizer_variables: list[OptimizerVariable]
    optimizer_name: Optional[str] = None
    optimizer_class: Optional[type] = None
    optimizer_config: Optional[dict[str, Any]] = None
    iterations: Optional[int] = None
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    parts: list[TFCheckpoint] = field(default_factory=list)
    #: What the file says the optimizer did that slotopt cannot do (TF1: a ``.meta`` graph's kernel or attribute,
    #: two optimizers on one variable): ``optimizer``/``load_module`` refuse, with this message.
    unsupported: Optional[str] = None
    _loans: adopt.Loans = field(default_factory=adopt.Loans, repr=False, compare=False)
    _built_state: Any = field(default=None, repr=False, compare=False)  # what the optimizer took (tf_write.py)

    # ---------------------------------------------------------------------------------------------- views
    @property
    def slots(self) -> dict[str, dict[str, torch.Tensor]]:
        """Variable name → {slot name: value}, for the optimizer variables that belong to a variable."""
        out: dict[str, dict[str, torch.Tensor]] = {}
        for var in self.optimizer_variables:
            if var.owner is not None:
                out.setdefault(var.owner, {})[var.slot or var.name] = var.value
        return out

    # ---------------------------------------------------------------------------------------------- checks
    def _optimizer_for(self, optimizer: Any) -> Any:
        """The caller's optimizer, or one built from what the file names; checked for its generation."""
        if self.kind == "none":
            raise ValueError(f"{self.path} holds no optimizer state: only variables ({sorted(self.weights)[:8]}...).")
        if self.unsupported is not None and (optimizer is None or self.kind == "v1" and not self.parts):
            raise ValueError(f"{self.path}: {self.unsupported}; slotopt cannot continue it as it ran.")
        if optimizer is None:
            if self.optimizer_class is None or self.optimizer_config is None:
                hint = {"keras3": "slotopt.Adam(0.01)", "tfkeras_new": "slotopt.Adam(0.01)",
                        "legacy": "slotopt.legacy.Adam(0.01)", "v1": "slotopt.v1.AdamOptimizer(0.01)"}[self.kind]
                raise ValueError(
                    f"{self.path} does not hold the optimizer's class and hyperparameters (a {self.kind} optimizer "
                    f"named {self.optimizer_name!r}): pass the optimizer you trained with, e.g. "
                    f"`optimizer={hint}`.")
            return self.optimizer_class(**self.optimizer_config)
        # tf-keras 2.11+'s Optimizer: the Keras 3 class continues it (deduplicating sparse rows, issue 49).
        expected = registry.base_class({"tfkeras_new": "keras3"}.get(self.kind, self.kind))
        if not isinstance(optimizer, expected):
            raise TypeError(
                f"Argument `optimizer` must be a {expected.__module__}.{expected.__name__} for this checkpoint (its "
                f"optimizer state is of generation {self.kind!r}). Received: optimizer={optimizer!r}")
        built = optimizer.built if expected is registry.base_class("keras3") else bool(
            optimizer.weights if self.kind == "legacy" else optimizer.variables())
        if built:
            raise ValueError(
                "Argument `optimizer` must be a new optimizer (not built yet): the checkpoint's state is loaded into "
                f"it as it is built. Received: optimizer={optimizer!r}")
        if self.kind == "tfkeras_new":  # issue 49: tf-keras 2.11+ sums a sparse gradient's repeated rows first
            refuse_tfkeras_new(optimizer, self.path)
            optimizer._deduplicate_sparse = True
        differs = disagreement(optimizer, self.optimizer_config) if self.kind == "v1" else None
        if differs is not None:  # issue 49: e.g. plain momentum passed for a Nesterov run
            raise ValueError(f"{self.path}: {differs}: pass the optimizer the run was trained with.")
        return optimizer

    def _planned_state(self, probe: Any) -> list[tuple[str, Optional[str], Optional[torch.Tensor], Any]]:
        """Matches the file's optimizer variables with those of ``probe`` (built on the checkpoint's names, in Keras
        layout) and returns, in the probe's order, ``(what, owner, value, probe variable)`` to assign (value None:
        not saved, the optimizer's own stays); raises when they differ."""
        where = f"optimizer({self.path})"
        file_vars = self.optimizer_variables
        if self.kind == "keras3":
            built = list(probe.variables)
            # The last component: a LossScaleOptimizer's inner variables are scoped differently in the file.
            own = [str(v.path).rsplit("/", 1)[-1] for v in built]
            # A slot by its variable and slot name: a tf.Variable's slot is named after ``w:0`` (``w_0_momentum``).
            saved = [f"{v.owner.replace('/', '_')}_{v.slot}" if v.owner and v.slot else v.name.rsplit("/", 1)[-1]
                     for v in file_vars]
            if own != saved:
                raise ValueError(
                    f"{where}: a {type(probe).__name__} built on the checkpoint's variables has optimizer variables "
                    f"{own}, but the checkpoint holds {saved} (optimizer {self.optimizer_name!r}): pass the optimizer "
                    "class (and options such as amsgrad, use_ema) the run was trained with.")
            plan = [(str(v.path), fv.owner, fv.value, v) for v, fv in zip(built, file_vars)]
        elif self.kind == "tfkeras_new":
            plan = self._planned_tfkeras_new(probe, where)
        elif self.kind == "legacy":
            built = list(probe.weights)
            by_slot = {(v.owner, v.slot): v for v in file_vars if v.owner is not None}
            iters = [v for v in file_vars if v.owner is None and v.slot == "iter"]
            plan = []
            for i, v in enumerate(built):
                if i == 0:
                    if not iters:
                        raise ValueError(f"{where}: the checkpoint holds no `iter` for the optimizer")
                    plan.append(("iter", None, iters[0].value, v))
                    continue
                owner, slot = str(v.path).split("/", 1)[-1].rsplit("/", 1)
                if (owner, slot) not in by_slot:
                    raise ValueError(
                        f"{where}: a {type(probe).__name__} has slot {slot!r} of {owner!r}, which the checkpoint does "
                        f"not hold (it holds {sorted(set(s for _, s in by_slot))}): pass the optimizer class (and "
                        "options) the run was trained with.")
                plan.append((f"{owner}/{slot}", owner, by_slot[(owner, slot)].value, v))
            if len(plan) - 1 != len(by_slot):
                raise ValueError(
                    f"{where}: the checkpoint holds {len(by_slot)} slots, a {type(probe).__name__} has {len(plan) - 1}.")
        else:
            by_name = {v.name: v for v in file_vars}
            built = list(probe.variables())
            plan = []
            for v in built:
                saved = by_name.get(v.name)
                if saved is None:
                    raise ValueError(
                        f"{where}: a {type(probe).__name__} named {probe.get_name()!r} has optimizer variable "
                        f"{v.name!r}, which the checkpoint does not hold (its optimizer variables: "
                        f"{sorted(by_name)}): pass the optimizer class, name and options the run was trained with.")
                plan.append((v.name, saved.owner, saved.value, v))
            built_names = {v.name for v in built}
            # Slots of this optimizer (its name is their op name) must all be used; another optimizer's state
            # (a TF1 graph may keep an earlier optimizer's variables) is left out.
            missing = sorted(v.name for v in file_vars if v.name not in built_names and v.owner is not None
                             and _op_base(v.slot) == probe.get_name())
            if missing:
                raise ValueError(
                    f"{where}: the checkpoint holds optimizer variables {missing} that a {type(probe).__name__} named "
                    f"{probe.get_name()!r} does not have: pass the optimizer class and options the run was trained "
                    "with.")
        for name, _, value, var in plan:
            if value is None:  # not saved (tf-keras's learning rate): the optimizer's own value stays
                continue
            self._loans.check(value, f"optimizer variable {name!r}", self.path)
            if tuple(var.shape) != tuple(value.shape) or var.dtype != value.dtype:
                raise ValueError(
                    f"{where}: optimizer variable {name!r} has shape {tuple(value.shape)} and dtype {value.dtype} in "
                    f"the checkpoint; the optimizer's has shape {tuple(var.shape)} and dtype {var.dtype}.")
        return plan

    def _planned_tfkeras_new(self, probe: Any, where: str
                             ) -> list[tuple[str, Optional[str], Optional[torch.Tensor], Any]]:
        """tf-keras 2.11+ keeps ``[iterations, slots...]`` and its learning rate apart, and names a slot
        ``<optimizer>/<slot>/<variable>``; the Keras 3 class keeps ``[iteration, learning_rate, slots...]``, its
        slots named ``<optimizer>/<variable>_<slot>``: each variable's slots are matched in order, counted."""
        own = {v.slot: v for v in self.optimizer_variables if v.owner is None}
        saved: dict[str, list[Any]] = {}
        for v in self.optimizer_variables:
            if v.owner is not None:
                saved.setdefault(v.owner, []).append(v)
        flat = sorted(((n.replace("/", "_"), n) for n in self.variable_names), key=lambda x: -len(x[0]))
        mine: dict[str, list[Any]] = {}
        for v in probe.variables:
            local = str(v.path).split("/", 1)[-1]
            owner = next((n for f, n in flat if local.startswith(f + "_")), None)
            if owner is not None:
                mine.setdefault(owner, []).append(v)
        for name in self.variable_names:
            ours, theirs = mine.get(name, []), saved.get(name, [])
            if len(ours) != len(theirs) or any(
                    t.slot in _TFKERAS_SLOTS and not str(o.path).endswith("_" + _TFKERAS_SLOTS[t.slot])
                    for o, t in zip(ours, theirs)):
                raise ValueError(
                    f"{where}: a {type(probe).__name__} keeps slots {[str(o.path).split('/', 1)[-1] for o in ours]} "
                    f"for {name!r}; the checkpoint holds {[t.slot for t in theirs]} (optimizer "
                    f"{self.optimizer_name!r}): pass the optimizer class (and options such as amsgrad) the run was "
                    "trained with.")
        slots = {id(o): (name, t) for name in self.variable_names for o, t in zip(mine.get(name, []),
                                                                                 saved.get(name, []))}
        plan = []
        for v in probe.variables:  # in the order set_weights takes them
            local = str(v.path).split("/", 1)[-1]
            if id(v) in slots:
                name, t = slots[id(v)]
                plan.append((str(v.path), name, t.value, v))
            elif local in own:
                plan.append((local, None, own[local].value, v))
            elif local == "learning_rate":  # not saved (a schedule's step, or untracked): the given value stays
                plan.append((local, None, None, v))
            else:
                raise ValueError(f"{where}: a {type(probe).__name__} has variable {local!r}, which the checkpoint "
                                 f"does not hold (it holds {sorted(own)}): pass the optimizer class (and options) "
                                 "the run was trained with.")
        return plan

    def _legacy_hypers(self, probe: Any) -> dict[str, float]:
        """The saved hyperparameter variables (``learning_rate``, ``beta_1``...) the optimizer has."""
        config = probe.get_config()
        return {v.slot: float(v.value) for v in self.optimizer_variables
                if v.owner is None and v.slot not in (None, "iter") and v.slot in config and v.value.dim() == 0}

    def _probe(self, optimizer: Any) -> tuple[Any, list[torch.Tensor], list[tuple[str, Optional[str], Any, Any]]]:
        """A copy of ``optimizer`` built on placeholders named and shaped like ``variable_names``, the
        placeholders, and the checked plan of the state to load."""
        probe = copy.deepcopy(optimizer)
        # On the meta device: the probe checks names, shapes, dtypes and values but holds no memory (a model of
        # gigabytes is not built twice).
        placeholders = [torch.empty(self.weights[n].shape, dtype=self.weights[n].dtype, device="meta")
                        for n in self.variable_names]
        probe.build(list(zip(self.variable_names, placeholders)))
        plan = self._planned_state(probe)
        # Every check set_weights / load_state_dict applies, on the probe and without copies (issue 40): whatever
        # would refuse the load does so before the caller's module or optimizer is written (all or nothing). A
        # composite's parts are each probed so before any is built.
        adopt.check([var for *_, var in plan], [value for _, _, value, _ in plan])
        return probe, placeholders, plan

    def _state_values(self, probe: tuple[Any, list[torch.Tensor], Any], layout: bool) -> list[Any]:
        """The plan's values, in the plan's order; with ``layout``, slots shaped like their variable in torch's
        layout. A converted slot is a new tensor (the optimizer takes it as it is), which the checkpoint keeps from
        then on as a Keras-layout view in place of the file's tensor (handed over: the file's copy is freed)."""
        plan = probe[2]
        where = {id(v.value): j for j, v in enumerate(self.optimizer_variables)}
        values = []
        for i, (name, owner, value, var) in enumerate(plan):
            if layout and value is not None and owner is not None \
                    and tuple(value.shape) == tuple(self.weights[owner].shape):
                kind = self.layouts.get(owner, "as_is")
                converted = to_torch(value, kind)
                if converted is not value:
                    converted = converted.contiguous()
                    view = handed_over(self._loans, value, converted, kind)
                    if view is not None:  # the file's tensor is dropped by every holder
                        plan[i] = (name, owner, view, var)
                        j = where.get(id(value))
                        if j is not None and self.optimizer_variables[j].value is value:
                            self.optimizer_variables[j] = dataclasses.replace(self.optimizer_variables[j], value=view)
                value = converted
            values.append(value)
            value = None
        return values

    def _offer(self, probe: tuple[Any, list[torch.Tensor], Any], targets: list[torch.Tensor],
               values: list[Any]) -> adopt.Offer:
        """The file's tensors offered as the slots of an optimizer built on ``targets`` (engine/adopt.py)."""
        probe_opt, placeholders, plan = probe
        return adopt.offer(probe_opt, placeholders, targets, {id(var): value for (*_, var), value in zip(plan, values)},
                           self._loans)

    def _keep_packed(self, offer: adopt.Offer, probe: tuple[Any, list[torch.Tensor], Any], values: list[Any]) -> None:
        """Each slot packed into a shared buffer and filled from the file (``Offer.packed``) kept in place of the
        file's tensor (in checkpoint layout) in ``optimizer_variables`` and the plan, so that the file's copy is
        freed: the checkpoint's value is the slot's memory, as for a slot taken whole."""
        plan = probe[2]
        index = {id(value): i for i, value in enumerate(values)}
        for value, slot in offer.packed:
            i = index.get(id(value))
            if i is None:
                continue
            name, owner, kept, var = plan[i]
            entry: Optional[torch.Tensor] = slot
            if kept is not value:  # (converted to torch's layout by load_module: a checkpoint-layout view is kept)
                kind = self.layouts.get(owner, "as_is") if owner is not None else "as_is"
                entry = keras_view(slot, kind, tuple(kept.shape)) if isinstance(kept, torch.Tensor) else None
                if entry is None or entry.dtype != kept.dtype:
                    continue
                self._loans.lend(entry)
            plan[i] = (name, owner, entry, var)
            values[i] = slot  # (what ``_load_state`` then leaves: the slot's own memory)
            for j, v in enumerate(self.optimizer_variables):
                if v.value is kept:
                    self.optimizer_variables[j] = dataclasses.replace(v, value=entry)

    def _load_state(self, opt: Any, probe: tuple[Any, list[torch.Tensor], Any], values: list[Any]) -> None:
        """Writes the checked plan's ``values`` into ``opt`` (built inside ``adopt.offered``): slots that are the
        file's tensors are left, the rest copied once into the optimizer's own."""
        probe_opt, _, plan = probe
        if self.kind in ("keras3", "tfkeras_new"):
            adopt.assign(list(opt.variables), values)
            opt._show_current_learning_rate()  # (what set_weights does after writing: group 0 shows the rate)
            return
        if self.kind == "legacy":
            adopt.assign(list(opt.weights), values)
            for name, value in self._legacy_hypers(probe_opt).items():  # tf.keras restores its hyperparameters too
                setattr(opt, name, value)
            return
        # TF1: by name (the probe was built on the same names).
        own = {v.name: v for v in opt.variables()}
        adopt.assign([own[name] for name, *_ in plan], values)

    # ---------------------------------------------------------------------------------------------- public
    def optimizer(self, params: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]], optimizer: Any = None) -> Any:
        """The checkpoint's optimizer built on ``params`` (tensors in Keras/TF layout: a list in ``variable_names``
        order or a dict name → tensor), with its saved state and step count loaded.

        ``optimizer``: a new (unbuilt) slotopt optimizer of the checkpoint's generation, configured as the run was
        (``slotopt.Adam(0.01)`` for a Keras 3 Adam; ``slotopt.v1.AdamOptimizer(0.01)``). It is needed when the
        file does not name the class (Keras 3, tf.keras, TF1 without ``.meta``); its variables must be the
        checkpoint's, name for name, shape and dtype, or nothing is changed and ``ValueError`` says which
        differ. The values of ``params`` are not touched: start them from ``weights`` (or :meth:`parameters`).
        The optimizer's slots are the file's tensors where they fit (no copy): ``optimizer_variables`` show them
        as they train, and a later ``optimizer(...)`` of this checkpoint copies them while unwritten, else is
        refused.

        A ``"composite"`` checkpoint (TFRS ``CompositeOptimizer``) takes a list of optimizers, one per part in
        ``parts`` order (``[slotopt.legacy.Adagrad(0.1), slotopt.legacy.Adam(0.01)]``), and returns a
        ``slotopt.CompositeOptimizer`` routing each part's variables to its optimizer, every part's state and
        step count loaded; every part is checked before any is built.
        """
        ordered = self._params_in_order(params)
        if isinstance(optimizer, registry.registered_classes("tfrs")["CompositeOptimizer"]):
            optimizer = self._parts_of(optimizer, ordered, params)  # issue 49: the composite a TFRS user builds
        if self.kind == "composite" or (self.parts and (optimizer is None or isinstance(optimizer, (list, tuple)))):
            return self._composite(ordered, optimizer)
        opt = self._optimizer_for(optimizer)
        probe = self._probe(opt)
        values = self._state_values(probe, layout=False)
        # The slots are the file's tensors where they fit (issue 40: no zero-filled slots overwritten at once).
        offer = self._offer(probe, ordered, values)
        with adopt.offered((opt, offer)):
            opt.build(list(zip(self.variable_names, ordered)))
        self._keep_packed(offer, probe, values)
        self._load_state(opt, probe, values)
        tf_write.remember(self, opt, probe[2], layout=False)
        return opt

    def _parts_of(self, composite: Any, ordered: list[torch.Tensor], params: Any) -> list[Any]:
        """A ``slotopt.CompositeOptimizer`` built as a TFRS user builds one (``[(optimizer, variables), ...]`` on
        ``params``) → its optimizers in ``parts`` order, each matched to the part holding its variables."""
        if not self.parts:
            raise TypeError(f"{self.path} holds one optimizer ({self.kind}); a CompositeOptimizer continues a "
                            "checkpoint of several (a TFRS CompositeOptimizer's). Pass that one optimizer.")
        if composite.built:
            raise ValueError("Argument `optimizer` must be a new CompositeOptimizer (not built yet): the checkpoint's "
                             "state is loaded into its optimizers as they are built.")
        names = {id(t): n for n, t in zip(self.variable_names, ordered)}
        if isinstance(params, Mapping) or any(spec for _, spec in composite._entries if isinstance(spec, list)
                                              and spec and isinstance(spec[0], str)):
            composite._remember(list(zip(self.variable_names, ordered)))  # names for its patterns
        owners = composite._owner_map(ordered)
        chosen: list[Any] = [None] * len(self.parts)
        for index, (sub, _) in enumerate(composite._entries):
            mine = {names.get(id(v), "?") for v in composite._variables_of(index, owners)}
            part = next((j for j, p in enumerate(self.parts) if set(p.variable_names) == mine), None)
            if part is None or chosen[part] is not None:
                raise ValueError(
                    f"Argument `optimizer`: the CompositeOptimizer's optimizer {index} ({type(sub).__name__}) trains "
                    f"{sorted(mine)}; the checkpoint's parts train {[p.variable_names for p in self.parts]}: give each "
                    "optimizer the variables of one part (the tensors passed as `params`).")
            chosen[part] = sub
        if None in chosen:
            raise ValueError(f"Argument `optimizer`: the CompositeOptimizer has {len(composite._entries)} optimizers; "
                             f"the checkpoint {len(self.parts)} parts ({[p.optimizer_name for p in self.parts]}).")
        return chosen

    def _composite(self, ordered: list[torch.Tensor], optimizers: Any) -> Any:
        if self.unsupported is not None:
            raise ValueError(f"{self.path}: {self.unsupported}.")
        if optimizers is None and all(p.optimizer_config is not None for p in self.parts):
            optimizers = [None] * len(self.parts)  # each part's class and hyperparameters from the .meta graph
        if not isinstance(optimizers, (list, tuple)) or len(optimizers) != len(self.parts):
            raise ValueError(
                f"{self.path} holds {len(self.parts)} optimizers ({[p.optimizer_name for p in self.parts]}, a "
                "composite): pass `optimizer=[...]`, one new optimizer per part in that order, configured as the run "
                f"was. Received: optimizer={optimizers!r}")
        given = dict(zip(self.variable_names, ordered))
        checked = []
        for part, opt in zip(self.parts, optimizers):  # every part checked before anything is built
            opt = part._optimizer_for(opt)
            probe = part._probe(opt)
            checked.append((part, opt, probe, [given[n] for n in part.variable_names],
                            part._state_values(probe, layout=False)))
        offers = [part._offer(probe, tensors, values) for part, _, probe, tensors, values in checked]
        with adopt.offered(*((opt, offer) for (_, opt, *_), offer in zip(checked, offers))):
            composite = registry.registered_classes("tfrs")["CompositeOptimizer"](
                [(opt, tensors) for _, opt, _, tensors, _ in checked], params=list(given.items()))
        for (part, opt, probe, _, values), offer in zip(checked, offers):
            part._keep_packed(offer, probe, values)
            part._load_state(opt, probe, values)
            tf_write.remember(part, opt, probe[2], layout=False)
        return composite

    def load_module(self, module: torch.nn.Module, mapping: Optional[Mapping[str, str]] = None,
                    optimizer: Any = None) -> Any:
        """Loads the weights into ``module`` and returns the checkpoint's optimizer built on its parameters (see
        :meth:`optimizer` for ``optimizer``).

        ``mapping`` maps each variable name (``variable_names``; others of ``weights`` may be added: they are
        copied, not trained) to a parameter name of ``module``; without it the module's parameters are taken in
        order. Tensors and slots are converted with ``layouts`` (``dense_kernel``: transposed for
        ``nn.Linear``...). Everything is checked before the module is written. Nothing is held twice (issue 40):
        ``weights`` and the optimizer variables become views of the module's parameters and the optimizer's slots
        (checkpoint layout) and the file's copies are freed; a later use of this checkpoint copies them while
        unwritten and is refused once training has written them.
        """
        self._refuse_unread("load a module")
        if self.kind == "composite":
            raise ValueError(f"{self.path} holds several optimizers: load the weights yourself (`weights`, "
                             "`layouts`) and call `optimizer(params, optimizer=[...])` on the module's tensors.")
        named = dict(module.named_parameters())
        if mapping is None:
            if len(named) != len(self.variable_names):
                raise ValueError(
                    f"Argument `mapping` is None, so the module's parameters are taken in order, but the module has "
                    f"{len(named)} parameters ({list(named)}) and the checkpoint {len(self.variable_names)} "
                    f"trainable variables ({self.variable_names}). Pass `mapping` (checkpoint name → parameter name).")
            mapping = dict(zip(self.variable_names, named))
        if not isinstance(mapping, Mapping):
            raise TypeError(f"Argument `mapping` must be a dict checkpoint name → parameter name. Received: {mapping!r}")
        self._check_names("mapping", mapping)
        targets = {}
        for name, pname in mapping.items():
            if pname not in named:
                raise ValueError(f"Argument `mapping` maps {name!r} to {pname!r}, which is not a parameter of the "
                                 f"module. Parameters: {list(named)}.")
            kind = self.layouts.get(name, "as_is")
            shape = torch_shape(tuple(self.weights[name].shape), kind)
            if shape is None:
                raise ValueError(f"`layouts[{name!r}]` is {kind!r}, which has no torch layout for a tensor of shape "
                                 f"{tuple(self.weights[name].shape)}.")
            param = named[pname]
            if tuple(param.shape) != shape or param.dtype != self.weights[name].dtype:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} ({kind}, checkpoint shape {tuple(self.weights[name].shape)}) "
                    f"to {pname!r} of shape {tuple(param.shape)} and dtype {param.dtype}; expected shape {shape} and "
                    f"dtype {self.weights[name].dtype}.")
            targets[name] = param
        if len({id(p) for p in targets.values()}) != len(targets):
            raise ValueError(f"Argument `mapping` maps two variables to the same parameter. Received: {dict(mapping)}")
        opt = self._optimizer_for(optimizer)
        probe = self._probe(opt)
        for name, owner, value, _ in probe[2]:
            if owner is not None and tuple(value.shape) != tuple(self.weights[owner].shape) \
                    and self.layouts.get(owner, "as_is") != "as_is":
                raise ValueError(
                    f"Optimizer variable {name!r} of {owner!r} has shape {tuple(value.shape)}, not the variable's: it "
                    "cannot be converted to torch's layout. Use `optimizer(params)` with checkpoint-layout tensors.")
        for name in targets:
            self._loans.check(self.weights[name], f"weight {name!r}", self.path)
        orders = summation_orders(targets, self.layouts, self.weights)
        summation.refuse_unordered(type(opt), orders, self.path)  # (before any write)
        values = self._state_values(probe, layout=True)
        with torch.no_grad():
            for name, param in targets.items():
                write_weight(self._loans, self.weights, name, param, self.layouts.get(name, "as_is"))
        ordered = [targets[n] for n in self.variable_names]
        offer = self._offer(probe, ordered, values)
        with adopt.offered((opt, offer)):
            opt.build([(mapping[n], targets[n]) for n in self.variable_names] if self.kind != "v1"
                      else list(zip(self.variable_names, ordered)))
        self._keep_packed(offer, probe, values)
        self._load_state(opt, probe, values)
        tf_write.remember(self, opt, probe[2], layout=True, mapping=mapping)
        summation.set_orders(opt, orders)  # issue 49: norms in TensorFlow's order of each variable's layout
        return opt


    def save(self, path: Union[str, Any], params: Any, optimizer: Any = None, *,
             global_step: Optional[Union[int, torch.Tensor]] = None,
             weights: Optional[Mapping[str, torch.Tensor]] = None) -> str:
        """Writes the training state continued in PyTorch back as a checkpoint of the format read, which
        TensorFlow restores and continues (``io/tf_write.py``, ``docs/way_back.md``). Returns the prefix written.

        ``path``: a folder (the prefix is named there as TensorFlow would: ``ckpt-<n+1>`` after ``ckpt-<n>``,
        TF1 ``model.ckpt-<global_step>``) or a prefix; for a SavedModel, the SavedModel folder to write. The
        folder's ``checkpoint`` state file is updated to name it (a SavedModel has none). ``params``: what
        :meth:`parameters` returned (trained since, in ``variable_names`` order, or a dict by name), or the module
        :meth:`load_module` loaded (written through the same mapping and layouts). ``optimizer``: the optimizer
        :meth:`optimizer` or :meth:`load_module` built (a composite's ``CompositeOptimizer``). ``global_step``
        (TF1): the graph's step as you carry it (else ``weights["global_step"]`` as it stands). ``weights``: new
        values for variables that are not trained (a BatchNormalization's moving statistics, by name).

        Everything else the file held (the object graph, ``save_counter``, an iterator's position, strings) is
        written back as read. A parameter or optimizer variable whose shape or dtype changed, an optimizer of
        another class or slot layout, or a file read that has changed since refuses before anything is written;
        the files are written under temporary names, read back and checked, then renamed into place.

        Example:
            >>> import os, tempfile, torch, slotopt
            >>> ck = slotopt.load_tf_checkpoint("tests/data/migration/k_tf_ckpt_keras3_mlp_bn_adam")
            >>> params = ck.parameters()
            >>> opt = ck.optimizer(params, optimizer=slotopt.Adam(0.01))
            >>> _ = opt.apply_gradients(zip([torch.ones_like(p) for p in params], params))
            >>> prefix = ck.save(tempfile.mkdtemp(), params, opt)
            >>> os.path.basename(prefix), slotopt.load_tf_checkpoint(prefix).iterations
            ('ckpt-2', 6)
        """
        return tf_write.save(self, path, params, optimizer, global_step=global_step, weights=weights)
