"""The TF1 optimizer a ``Saver`` checkpoint's ``.meta`` graph names, with every hyperparameter the graph holds.

A TF1 optimizer leaves three kinds of evidence in its graph: the scalar ``Const`` nodes of its scope
(``Momentum/learning_rate``), the attributes of its update nodes (``use_nesterov`` of every
``ResourceApplyMomentum``; ``multiply_linear_by_lr`` of Ftrl's; ``update_slots`` of Adagrad's) and the update
kernel itself (``ResourceApplyCenteredRMSProp`` is a centered RMSProp). All three are read; each hyperparameter
input of each update node is checked to be the Const read (a computed one, such as a decayed learning rate, is
named and the optimizer left to the caller), and anything the graph says that the slotopt class cannot do
(a kernel or an attribute it does not know, ``use_nesterov`` on Adam) refuses the continuation, naming it.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ..engine import registry
from .tf_meta import ApplyNode, MetaGraph

#: TF1 optimizers slotopt can name from a checkpoint: default name (the slots' op name) → (slotopt.v1 class,
#: ``Const`` node name in the optimizer's scope → constructor argument). Ftrl's ``l2_regularization_strength``
#: reaches its kernel as ``l2 + beta / (2 * max(lr, 1e-36))`` (the Add node ``Ftrl/add``): ``add/x`` is the l2.
V1_OPTIMIZERS: dict[str, tuple[str, dict[str, str]]] = {
    "Adam": ("AdamOptimizer", {"learning_rate": "learning_rate", "beta1": "beta1", "beta2": "beta2",
                               "epsilon": "epsilon"}),
    "Momentum": ("MomentumOptimizer", {"learning_rate": "learning_rate", "momentum": "momentum"}),
    "RMSProp": ("RMSPropOptimizer", {"learning_rate": "learning_rate", "decay": "decay", "momentum": "momentum",
                                     "epsilon": "epsilon"}),
    "Adagrad": ("AdagradOptimizer", {"learning_rate": "learning_rate"}),
    "Ftrl": ("FtrlOptimizer", {"learning_rate": "learning_rate", "learning_rate_power": "learning_rate_power",
                               "l1_regularization_strength": "l1_regularization_strength",
                               "add/x": "l2_regularization_strength",
                               "l2_shrinkage_regularization_strength": "l2_shrinkage_regularization_strength",
                               "beta": "beta"}),
    "Adadelta": ("AdadeltaOptimizer", {"lr": "learning_rate", "rho": "rho", "epsilon": "epsilon"}),
    "ProximalAdagrad": ("ProximalAdagradOptimizer", {
        "learning_rate": "learning_rate", "l1_regularization_strength": "l1_regularization_strength",
        "l2_regularization_strength": "l2_regularization_strength"}),
}
#: Each optimizer's update kernels (``Resource``/``Sparse`` prefixes removed) → {input position: argument}, the
#: dense form first, the sparse form (an ``indices`` input after the gradient) second.
_KERNELS: dict[str, dict[str, tuple[dict[int, str], dict[int, str]]]] = {
    "Adam": {"ApplyAdam": ({5: "learning_rate", 6: "beta1", 7: "beta2", 8: "epsilon"},) * 2},
    "Momentum": {"ApplyMomentum": ({2: "learning_rate", 4: "momentum"}, {2: "learning_rate", 5: "momentum"})},
    "RMSProp": {"ApplyRMSProp": ({3: "learning_rate", 4: "decay", 5: "momentum", 6: "epsilon"},) * 2,
                "ApplyCenteredRMSProp": ({4: "learning_rate", 5: "decay", 6: "momentum", 7: "epsilon"},) * 2},
    "Adagrad": {"ApplyAdagrad": ({2: "learning_rate"},) * 2},
    "Ftrl": {"ApplyFtrl": ({4: "learning_rate", 5: "l1_regularization_strength", 7: "learning_rate_power"},
                           {5: "learning_rate", 6: "l1_regularization_strength", 8: "learning_rate_power"}),
             "ApplyFtrlV2": ({4: "learning_rate", 5: "l1_regularization_strength",
                              7: "l2_shrinkage_regularization_strength", 8: "learning_rate_power"},
                             {5: "learning_rate", 6: "l1_regularization_strength",
                              8: "l2_shrinkage_regularization_strength", 9: "learning_rate_power"})},
    "Adadelta": {"ApplyAdadelta": ({3: "learning_rate", 4: "rho", 5: "epsilon"},) * 2},
    "ProximalAdagrad": {"ApplyProximalAdagrad": ({2: "learning_rate", 3: "l1_regularization_strength",
                                                  4: "l2_regularization_strength"},) * 2},
}
#: Node attributes an optimizer's kernel may carry → (constructor argument or None, the value slotopt does when
#: the class has no such argument). A value other than that one cannot be honoured.
_ATTRS: dict[str, dict[str, tuple[Optional[str], Any]]] = {
    "Adam": {"use_nesterov": (None, False)},
    "Momentum": {"use_nesterov": ("use_nesterov", False)},
    "Adagrad": {"update_slots": (None, True)},
    "Ftrl": {"multiply_linear_by_lr": (None, False)},
}
#: Where an optimizer's slot initializer keeps its fill value: slot op name, initializer node → argument.
_FILLS = {"Adagrad": ("Adagrad", "Initializer/Const", "initial_accumulator_value"),
          "Ftrl": ("Ftrl", "Initializer/mul/y", "initial_accumulator_value"),
          "ProximalAdagrad": ("ProximalAdagrad", "Initializer/Const", "initial_accumulator_value")}
#: Arguments the graph may leave out (Ftrl's are Consts only when the option is used).
_OPTIONAL = frozenset({"beta", "l2_shrinkage_regularization_strength"})
_KERNEL_PREFIX = re.compile(r"^(?:Resource)?(?:Sparse)?")


def _kernel(op: str) -> tuple[str, bool]:
    """``ResourceSparseApplyMomentum`` → (``ApplyMomentum``, sparse)."""
    return _KERNEL_PREFIX.sub("", op), "Sparse" in op.split("Apply", 1)[0]


def v1_class(optimizer_name: Optional[str], meta: MetaGraph, slot_of: dict[str, tuple[str, str]],
             notes: list[str]) -> tuple[Optional[type], Optional[dict], Optional[str]]:
    """The slotopt.v1 class a TF1 optimizer's default name means, its hyperparameters from the ``.meta`` graph
    (``None`` when the graph does not hold every one: the caller passes the optimizer), and what the graph says
    that the class cannot honour (``None`` when nothing: else the continuation is refused with that message)."""
    if optimizer_name not in V1_OPTIMIZERS:
        return None, None, None
    class_name, arguments = V1_OPTIMIZERS[optimizer_name]
    optimizer_class = registry.registered_classes("v1")[class_name]  # the one registry, not a lazy import
    consts = meta.consts
    config: dict[str, Any] = {arg: consts[f"{optimizer_name}/{const}"] for const, arg in arguments.items()
                              if f"{optimizer_name}/{const}" in consts}
    scope = optimizer_name + "/"
    applies: list[ApplyNode] = [a for a in meta.applies if a.name.startswith(scope)]
    kernels = _KERNELS.get(optimizer_name, {})
    known_attrs = _ATTRS.get(optimizer_name, {})
    computed: list[str] = []
    for node in applies:
        kernel, sparse = _kernel(node.op)
        if kernel not in kernels:
            return optimizer_class, None, (
                f"the .meta graph updates its variables with {node.op} ({node.name}), which slotopt.v1.{class_name} "
                "does not compute")
        for position, arg in kernels[kernel][1 if sparse else 0].items():
            source = node.inputs[position] if position < len(node.inputs) else None
            if source in consts:
                if arg in config and config[arg] != consts[source]:
                    return optimizer_class, None, (
                        f"the .meta graph's {node.name} reads {arg} = {consts[source]!r} from {source!r}, the "
                        f"optimizer's Const is {config[arg]!r}: two values of one hyperparameter")
                config[arg] = consts[source]
            elif source is not None and arg not in computed:
                computed.append(f"{arg} (computed by {source!r})")
        for attr, value in node.attrs.items():
            if attr not in known_attrs:
                return optimizer_class, None, (
                    f"the .meta graph's {node.name} has attribute {attr}={value!r}, which slotopt.v1.{class_name} "
                    "does not know")
            arg, done = known_attrs[attr]
            if arg is not None:
                if config.get(arg, value) != value:
                    return optimizer_class, None, (
                        f"the .meta graph's update nodes disagree on {attr} ({config[arg]!r} and {value!r})")
                config[arg] = bool(value) if isinstance(done, bool) else value
            elif value != done:
                return optimizer_class, None, (
                    f"the .meta graph's {node.name} has {attr}={value!r}; slotopt.v1.{class_name} computes "
                    f"{attr}={done!r} only")
        if kernel == "ApplyCenteredRMSProp":
            config["centered"] = True
    if optimizer_name in _FILLS:
        slot_op, initializer, arg = _FILLS[optimizer_name]
        for key, (_, op) in slot_of.items():
            value = meta.consts.get(f"{key}/{initializer}", meta.fills.get(f"{key}/{initializer}"))
            if op == slot_op and value is not None:
                config.setdefault(arg, value)
    if optimizer_name == "RMSProp" and any(op == "RMSProp_2" for _, op in slot_of.values()):
        config["centered"] = True
    required = set(arguments.values()) - _OPTIONAL
    if computed and not required <= config.keys():
        notes.append(f"the .meta graph computes {optimizer_name}'s {', '.join(computed)}: pass the optimizer "
                     "configured as the run was (`optimizer=`)")
        return optimizer_class, None, None
    if not required <= config.keys():
        if consts or meta.trainable:
            notes.append(f"the .meta graph has no scalar Const for every {class_name} hyperparameter")
        return optimizer_class, None, None
    if optimizer_name == "Adam":  # a .meta graph ran in a Session: Grappler's order of the sparse update
        config["graph_mode_sparse"] = True
    return optimizer_class, config, None


#: Options that change what a TF1 class computes: a caller's optimizer must agree with the graph on each.
STRUCTURAL = ("use_nesterov", "centered")


def disagreement(optimizer: Any, config: Optional[dict]) -> Optional[str]:
    """Where a caller's TF1 optimizer differs from the graph on an option that changes its arithmetic."""
    if not config:
        return None
    for option in STRUCTURAL:
        if option in config and bool(getattr(optimizer, "_" + option, False)) != bool(config[option]):
            return (f"the .meta graph's optimizer has {option}={config[option]!r}; the optimizer passed has "
                    f"{option}={bool(getattr(optimizer, '_' + option, False))!r}")
    return None
