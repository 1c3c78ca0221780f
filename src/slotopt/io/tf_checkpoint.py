"""Import TensorFlow training checkpoints (``tf.train.Checkpoint`` / ``CheckpointManager`` and TF1 ``Saver``),
optimizer state included, without TensorFlow.

``load_tf_checkpoint(prefix_or_directory)`` reads the TensorBundle (``tensor_bundle.py``) and works out what each
tensor is:

* a ``tf.train.Checkpoint`` holds its object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``), which names every variable
  (``full_name``) and says which optimizer owns which slot. A **Keras 3** optimizer (children ``_iterations``,
  ``_variables``, ``_trainable_variables``) keeps its iteration count, learning rate and slots; its class and
  hyperparameters are not in the file, so the caller passes the optimizer: ``ck.optimizer(params,
  optimizer=slotopt.Adam(0.01))``. A **tf.keras legacy** optimizer (children ``iter`` and its hyperparameter
  variables, slots in ``slot_variables``) → ``slotopt.legacy.<Class>``, also passed by the caller.
* a TF1 ``Saver`` checkpoint names each tensor after its variable: slots are ``<variable>/<optimizer name>`` (made
  unique with ``_1``, ``_2``), non-slot state ``beta1_power``... → ``slotopt.v1.<Class>Optimizer``. The class and
  hyperparameters come from the ``.meta`` graph when it is there (the optimizer's scalar ``Const`` nodes), or
  from the caller.

Whatever the generation, the optimizer is checked against the file first (every optimizer variable's name,
shape and dtype, built on placeholders), and only then built on your tensors and filled, so a refused call
changes nothing. A malformed file raises :class:`~slotopt.io.tensor_bundle.TFCheckpointError`, naming the file
and the entry.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from . import protowire as pw
from .bounds import check_object_graph, check_optimizer_values, iterations_of
from .keras import _NamedWeights
from .keras_layers import to_torch, torch_shape
from .tensor_bundle import DTYPES, MetadataBundle, TensorBundle, TFCheckpointError, inside_directory
from .tf_meta import read_meta_graph as _read_meta_graph  # issue 40: walked field by field, bounded

__all__ = ["TFCheckpoint", "TFCheckpointError", "OptimizerVariable", "load_tf_checkpoint", "latest_checkpoint"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"

#: TF1 optimizers slotopt can name from a checkpoint alone: default name (the slots' op name) → (slotopt.v1
#: class, ``Const`` node name in the optimizer's scope → constructor argument).
_V1_OPTIMIZERS: dict[str, tuple[str, dict[str, str]]] = {
    "Adam": ("AdamOptimizer", {"learning_rate": "learning_rate", "beta1": "beta1", "beta2": "beta2",
                               "epsilon": "epsilon"}),
    "Momentum": ("MomentumOptimizer", {"learning_rate": "learning_rate", "momentum": "momentum"}),
    "RMSProp": ("RMSPropOptimizer", {"learning_rate": "learning_rate", "decay": "decay", "momentum": "momentum",
                                     "epsilon": "epsilon"}),
    "Adagrad": ("AdagradOptimizer", {"learning_rate": "learning_rate"}),
}
#: TF1 non-slot variables (shared by all variables of one optimizer).
_V1_NON_SLOT = ("beta1_power", "beta2_power")
_SLOT_OP = re.compile(r"^(?P<op>[A-Za-z][\w.\-]*?)(?:_(?P<n>\d+))?$")


@dataclass(frozen=True)
class OptimizerVariable:
    """One optimizer variable of the checkpoint: ``name`` (Keras 3 / tf.keras: the object graph's ``full_name``;
    TF1: the key), ``key`` (the checkpoint key), ``owner`` (the trainable variable it is a slot of, or ``None``
    for the optimizer's own: iterations, learning rate, ``beta1_power``...), ``slot`` (the slot's name when known:
    ``"momentum"``, ``"m"``, ``"Adam_1"``...), ``value``."""

    name: str
    key: str
    owner: Optional[str]
    slot: Optional[str]
    value: torch.Tensor


def _op_base(slot: Optional[str]) -> Optional[str]:
    """A TF1 slot's op name without its ``_<n>`` uniquifier (``Adam_1`` → ``Adam``)."""
    match = _SLOT_OP.match(slot or "")
    return match.group("op") if match else None


def _guess_layout(name: str, shape: Sequence[int]) -> str:
    """Keras names a Dense/Conv kernel ``.../kernel`` (Keras layout ``(..., in, out)``); other names are taken as
    they are. The object graph holds no layer classes, so this is a guess ``layouts`` lets you correct."""
    if name.rsplit("/", 1)[-1] in ("kernel", "_kernel"):
        return {2: "dense_kernel", 3: "conv1d_kernel", 4: "conv2d_kernel"}.get(len(shape), "as_is")
    return "as_is"


# ------------------------------------------------------------------------------------------------ files
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        body = m.group(1)
        if body[0] in _ESCAPES:
            return _ESCAPES[body[0]]
        if body[0] == "x":
            return chr(int(body[1:], 16))
        return chr(int(body, 8))
    return re.sub(r"\\([ntr\"'\\]|x[0-9a-fA-F]{1,2}|[0-7]{1,3})", one, text)


def latest_checkpoint(directory: Union[str, Path]) -> Optional[str]:
    """The prefix of the latest checkpoint in ``directory``, as ``tf.train.latest_checkpoint`` finds it: the
    ``model_checkpoint_path`` of the ``checkpoint`` state file (a text ``CheckpointState``), relative to the
    directory or absolute. A path that leads outside the directory is not followed: an absolute path from a
    moved directory is looked up by its file name inside it. ``None`` without a state file or an index."""
    directory = os.path.realpath(str(directory))
    state = os.path.join(directory, "checkpoint")
    if not os.path.isfile(state):
        return None
    with open(state, "rb") as f:
        raw = f.read(1 << 20)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TFCheckpointError(f"{state}: the checkpoint state file is not UTF-8 text") from None
    found = re.findall(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', text, flags=re.MULTILINE)
    if not found:
        raise TFCheckpointError(f"{state}: no `model_checkpoint_path` in the checkpoint state file")
    named = _unescape(found[-1])
    if "\x00" in named or not named:
        raise TFCheckpointError(f"{state}: invalid model_checkpoint_path {named!r}")
    candidate = os.path.realpath(named if os.path.isabs(named) else os.path.join(directory, named))
    if os.path.dirname(candidate) != directory and not candidate.startswith(directory + os.sep):
        if os.path.isabs(named):  # written with absolute paths, then the directory moved
            candidate = os.path.join(directory, os.path.basename(named))
        else:
            raise TFCheckpointError(
                f"{state}: model_checkpoint_path {named!r} leads outside {directory}; it is not followed")
    return candidate if os.path.isfile(candidate + ".index") else None


def _resolve(prefix_or_directory: Union[str, Path]) -> str:
    path = str(prefix_or_directory)
    if os.path.isdir(path):
        found = latest_checkpoint(path)
        if found is None:
            raise FileNotFoundError(
                f"Argument `prefix_or_directory` is a directory without a checkpoint (no `checkpoint` state file "
                f"naming an existing `.index`). Received: {path!r}")
        return found
    if path.endswith(".index"):
        path = path[: -len(".index")]
    elif re.search(r"\.data-\d{5}-of-\d{5}$", path):
        path = path.rsplit(".data-", 1)[0]
    if not os.path.isfile(path + ".index"):
        raise FileNotFoundError(
            f"Argument `prefix_or_directory` must be a checkpoint prefix (with `<prefix>.index` next to it) or a "
            f"directory holding a `checkpoint` state file. Received: {str(prefix_or_directory)!r}")
    return path


@dataclass
class _Node:
    children: list[tuple[int, str]]
    attributes: list[tuple[str, str, str]]  # name, full_name, checkpoint_key
    slots: list[tuple[int, str, int]]  # original variable node, slot name, slot node

    def child(self, name: str) -> Optional[int]:
        return next((i for i, n in self.children if n == name), None)

    def value_key(self) -> Optional[tuple[str, str]]:
        return next(((full, key) for name, full, key in self.attributes if name == "VARIABLE_VALUE"), None)


def _object_graph(data: bytes, where: str) -> list[_Node]:
    try:
        nodes = []
        for node in pw.get_messages(pw.decode(data), 1):
            nodes.append(_Node(
                children=[(pw.get_int(c, 1, bits=32), pw.get_str(c, 2)) for c in pw.get_messages(node, 1)],
                attributes=[(pw.get_str(a, 1), pw.get_str(a, 2), pw.get_str(a, 3)) for a in pw.get_messages(node, 2)],
                slots=[(pw.get_int(s, 1, bits=32), pw.get_str(s, 2), pw.get_int(s, 3, bits=32))
                       for s in pw.get_messages(node, 3)]))
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: entry {OBJECT_GRAPH_KEY!r} is not a TrackableObjectGraph: {err}") from None
    for i, node in enumerate(nodes):
        ids = [c for c, _ in node.children] + [x for a, _, b in node.slots for x in (a, b)]
        if any(not 0 <= c < len(nodes) for c in ids):
            raise TFCheckpointError(f"{where}: object graph node {i} refers to a node outside the graph")
    return nodes


# ------------------------------------------------------------------------------------------------ the result
@dataclass
class TFCheckpoint(_NamedWeights):  # (the argument checks of a Keras checkpoint: ``io/keras.py``)
    """The training state read from a TensorFlow checkpoint by :func:`load_tf_checkpoint`; the same interface as
    :class:`~slotopt.io.keras.KerasCheckpoint` (``variable_names``, ``weights``, ``parameters()``,
    ``optimizer(params, optimizer=None)``, ``load_module(module, mapping)``).

    Attributes:
        path: the checkpoint prefix read (``.../ckpt-1``).
        kind: the optimizer's generation: ``"keras3"`` (``tf.train.Checkpoint`` of a Keras 3 optimizer),
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

    # ---------------------------------------------------------------------------------------------- views
    @property
    def slots(self) -> dict[str, dict[str, torch.Tensor]]:
        """Variable name → {slot name: value}, for the optimizer variables that belong to a variable."""
        out: dict[str, dict[str, torch.Tensor]] = {}
        for var in self.optimizer_variables:
            if var.owner is not None:
                out.setdefault(var.owner, {})[var.slot or var.name] = var.value
        return out

    def parameters(self, device: Any = None) -> list[torch.Tensor]:
        """Fresh leaf tensors (``requires_grad=True``) holding the saved weights, in ``variable_names`` order."""
        return [self.weights[n].detach().clone().to(device).requires_grad_(True) for n in self.variable_names]

    # ---------------------------------------------------------------------------------------------- checks
    def _optimizer_for(self, optimizer: Any) -> Any:
        """The caller's optimizer, or one built from what the file names; checked for its generation."""
        import slotopt

        if self.kind == "none":
            raise ValueError(f"{self.path} holds no optimizer state: only variables ({sorted(self.weights)[:8]}...).")
        if optimizer is None:
            if self.optimizer_class is None or self.optimizer_config is None:
                hint = {"keras3": "slotopt.Adam(0.01)", "legacy": "slotopt.legacy.Adam(0.01)",
                        "v1": "slotopt.v1.AdamOptimizer(0.01)"}[self.kind]
                raise ValueError(
                    f"{self.path} does not hold the optimizer's class and hyperparameters (a {self.kind} optimizer "
                    f"named {self.optimizer_name!r}): pass the optimizer you trained with, e.g. "
                    f"`optimizer={hint}`.")
            return self.optimizer_class(**self.optimizer_config)
        expected = {"keras3": slotopt.keras3.Optimizer, "legacy": slotopt.legacy.Optimizer,
                    "v1": slotopt.v1.Optimizer}[self.kind]
        if not isinstance(optimizer, expected):
            raise TypeError(
                f"Argument `optimizer` must be a {expected.__module__}.{expected.__name__} for this checkpoint (its "
                f"optimizer state is of generation {self.kind!r}). Received: optimizer={optimizer!r}")
        built = optimizer.built if self.kind == "keras3" else bool(
            optimizer.weights if self.kind == "legacy" else optimizer.variables())
        if built:
            raise ValueError(
                "Argument `optimizer` must be a new optimizer (not built yet): the checkpoint's state is loaded into "
                f"it as it is built. Received: optimizer={optimizer!r}")
        return optimizer

    def _planned_state(self, probe: Any) -> list[tuple[str, Optional[str], torch.Tensor]]:
        """Matches the file's optimizer variables with those of ``probe`` (built on the checkpoint's names, in Keras
        layout) and returns, in the probe's order, ``(what, owner, value)`` to assign; raises when they differ."""
        where = f"optimizer({self.path})"
        file_vars = self.optimizer_variables
        if self.kind == "keras3":
            built = list(probe.variables)
            own = [str(v.path).split("/", 1)[-1] for v in built]
            saved = [v.name.split("/", 1)[-1] for v in file_vars]
            if own != saved:
                raise ValueError(
                    f"{where}: a {type(probe).__name__} built on the checkpoint's variables has optimizer variables "
                    f"{own}, but the checkpoint holds {saved} (optimizer {self.optimizer_name!r}): pass the optimizer "
                    "class (and options such as amsgrad, use_ema) the run was trained with.")
            plan = [(str(v.path), fv.owner, fv.value, v) for v, fv in zip(built, file_vars)]
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
            if tuple(var.shape) != tuple(value.shape) or var.dtype != value.dtype:
                raise ValueError(
                    f"{where}: optimizer variable {name!r} has shape {tuple(value.shape)} and dtype {value.dtype} in "
                    f"the checkpoint; the optimizer's has shape {tuple(var.shape)} and dtype {var.dtype}.")
        return [(name, owner, value) for name, owner, value, _ in plan]

    def _legacy_hypers(self, probe: Any) -> dict[str, float]:
        """The saved hyperparameter variables (``learning_rate``, ``beta_1``...) the optimizer has."""
        config = probe.get_config()
        return {v.slot: float(v.value) for v in self.optimizer_variables
                if v.owner is None and v.slot not in (None, "iter") and v.slot in config and v.value.dim() == 0}

    def _probe(self, optimizer: Any) -> tuple[Any, list[torch.Tensor], list[tuple[str, Optional[str], torch.Tensor]]]:
        """A copy of ``optimizer`` built on placeholders named and shaped like ``variable_names``, the
        placeholders, and the checked plan of the state to load."""
        probe = copy.deepcopy(optimizer)
        # On the meta device: the probe checks names, shapes, dtypes and values but holds no memory (a model of
        # gigabytes is not built twice).
        placeholders = [torch.empty(self.weights[n].shape, dtype=self.weights[n].dtype, device="meta")
                        for n in self.variable_names]
        probe.build(list(zip(self.variable_names, placeholders)))
        plan = self._planned_state(probe)
        # The whole load is tried on the probe first: whatever would refuse it (a value set_weights refuses)
        # does so before the caller's module or optimizer is written (all or nothing).
        self._load_state(probe, (probe, placeholders, plan), placeholders, layout=False)
        return probe, placeholders, plan

    def _load_state(self, opt: Any, probe: tuple[Any, list[torch.Tensor], Any], targets: list[torch.Tensor],
                    layout: bool) -> None:
        """Writes the checked plan into ``opt``, built on ``targets`` (``variable_names`` order); with ``layout``,
        slots shaped like their variable are converted to torch's layout."""
        probe_opt, placeholders, plan = probe

        def converted(owner: Optional[str], value: torch.Tensor) -> torch.Tensor:
            if layout and owner is not None and tuple(value.shape) == tuple(self.weights[owner].shape):
                return to_torch(value, self.layouts.get(owner, "as_is"))
            return value  # copied into the optimizer's own tensor by set_weights / copy_ (no extra copy here)
        if self.kind in ("keras3", "legacy"):
            opt.set_weights([converted(owner, value) for _, owner, value in plan])
            if self.kind == "legacy":  # tf.keras restores its hyperparameter variables too
                for name, value in self._legacy_hypers(probe_opt).items():
                    setattr(opt, name, value)
            return
        # TF1: slots by (variable, slot name), non-slot variables by name; the probe tells which file entry is which.
        values = {name: (owner, value) for name, owner, value in plan}
        with torch.no_grad():
            for slot_name in probe_opt.get_slot_names():
                for placeholder, target in zip(placeholders, targets):
                    slot = probe_opt.get_slot(placeholder, slot_name)
                    if slot is not None:
                        opt.get_slot(target, slot_name).copy_(converted(*values[slot.name]))
            own = {v.name: v for v in opt._non_slot_variables()}
            for var in probe_opt._non_slot_variables():
                own[var.name].copy_(values[var.name][1])

    # ---------------------------------------------------------------------------------------------- public
    def optimizer(self, params: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]], optimizer: Any = None) -> Any:
        """The checkpoint's optimizer built on ``params`` (tensors in Keras/TF layout: a list in ``variable_names``
        order or a dict name → tensor), with its saved state and step count loaded.

        ``optimizer``: a new (unbuilt) slotopt optimizer of the checkpoint's generation, configured as the run was
        (``slotopt.Adam(0.01)`` for a Keras 3 Adam; ``slotopt.v1.AdamOptimizer(0.01)``). It is needed when the
        file does not name the class (Keras 3, tf.keras, TF1 without ``.meta``); its variables must be the
        checkpoint's, name for name, shape and dtype, or nothing is changed and ``ValueError`` says which
        differ. The values of ``params`` are not touched: start them from ``weights`` (or :meth:`parameters`).
        """
        ordered = self._params_in_order(params)
        opt = self._optimizer_for(optimizer)
        probe = self._probe(opt)
        opt.build(list(zip(self.variable_names, ordered)))
        self._load_state(opt, probe, ordered, layout=False)
        return opt

    def load_module(self, module: torch.nn.Module, mapping: Optional[Mapping[str, str]] = None,
                    optimizer: Any = None) -> Any:
        """Loads the weights into ``module`` and returns the checkpoint's optimizer built on its parameters (see
        :meth:`optimizer` for ``optimizer``).

        ``mapping`` maps each variable name (``variable_names``; others of ``weights`` may be added: they are
        copied, not trained) to a parameter name of ``module``; without it the module's parameters are taken in
        order. Tensors and slots are converted with ``layouts`` (``dense_kernel``: transposed for
        ``nn.Linear``...). Everything is checked before the module is written.
        """
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
        for name, owner, value in probe[2]:
            if owner is not None and tuple(value.shape) != tuple(self.weights[owner].shape) \
                    and self.layouts.get(owner, "as_is") != "as_is":
                raise ValueError(
                    f"Optimizer variable {name!r} of {owner!r} has shape {tuple(value.shape)}, not the variable's: it "
                    "cannot be converted to torch's layout. Use `optimizer(params)` with checkpoint-layout tensors.")
        with torch.no_grad():
            for name, param in targets.items():
                param.copy_(to_torch(self.weights[name], self.layouts.get(name, "as_is")))
        ordered = [targets[n] for n in self.variable_names]
        opt.build([(mapping[n], targets[n]) for n in self.variable_names] if self.kind != "v1"
                  else list(zip(self.variable_names, ordered)))
        self._load_state(opt, probe, ordered, layout=True)
        return opt


# ------------------------------------------------------------------------------------------------ readers
def _from_object_graph(bundle: TensorBundle, nodes: list[_Node]) -> TFCheckpoint:
    where = bundle.index_path

    def variable(node_id: int) -> tuple[str, str]:
        found = nodes[node_id].value_key()
        if found is None:
            raise TFCheckpointError(f"{where}: object graph node {node_id} should be a variable but holds no value")
        full_name, key = found
        if key not in bundle.entries:
            raise TFCheckpointError(f"{where}: the object graph names key {key!r}, which the index does not hold")
        return full_name or key, key

    def numbered(node_id: Optional[int]) -> list[int]:
        if node_id is None:
            return []
        children = nodes[node_id].children
        if not all(name.isascii() and name.isdigit() and len(name) < 20 for _, name in children):
            raise TFCheckpointError(f"{where}: object graph list node {node_id} has non-numeric children "
                                    f"{[n for _, n in children][:8]}")
        return [c for c, _ in sorted(children, key=lambda item: int(item[1]))]

    keras3 = [i for i, n in enumerate(nodes) if n.child("_iterations") is not None and n.child("_variables") is not None]
    legacy = [i for i, n in enumerate(nodes) if n.child("iter") is not None and (n.slots or n.child("learning_rate"))]
    if len(keras3) + len(legacy) > 1:
        raise TFCheckpointError(
            f"{where}: the checkpoint holds {len(keras3) + len(legacy)} optimizers; slotopt reads checkpoints with one "
            "(restore a TFRS CompositeOptimizer's parts one by one)")
    kind = "keras3" if keras3 else "legacy" if legacy else "none"
    optimizer_ids: set[int] = set()
    optimizer_variables: list[OptimizerVariable] = []
    variable_names: list[str] = []
    iterations: Optional[int] = None
    optimizer_name: Optional[str] = None
    if kind == "keras3":
        opt = nodes[keras3[0]]
        variable_ids = numbered(opt.child("_trainable_variables"))
        variable_names = [variable(i)[0] for i in variable_ids]
        flat = {n.replace("/", "_"): n for n in variable_names}
        for node_id in numbered(opt.child("_variables")):
            full_name, key = variable(node_id)
            optimizer_ids.add(node_id)
            optimizer_name, _, local = full_name.rpartition("/")
            owner = slot = None
            # Keras 3 names a slot ``<optimizer>/<variable path with _>_<slot>``: the longest variable that fits.
            for flat_name in sorted(flat, key=len, reverse=True):
                if local.startswith(flat_name + "_"):
                    owner, slot = flat[flat_name], local[len(flat_name) + 1:]
                    break
            value = bundle.read(key)
            if node_id == opt.child("_iterations"):
                iterations = iterations_of(value, where, key)
            optimizer_variables.append(OptimizerVariable(full_name, key, owner, slot, value))
    elif kind == "legacy":
        opt = nodes[legacy[0]]
        for local_name, child in [(n, c) for c, n in opt.children]:
            if nodes[child].value_key() is not None:
                full_name, key = variable(child)
                optimizer_ids.add(child)
                value = bundle.read(key)
                if local_name == "iter":
                    iterations = iterations_of(value, where, key)
                optimizer_variables.append(OptimizerVariable(full_name, key, None, local_name, value))
        for original, slot_name, slot_node in opt.slots:
            owner, _ = variable(original)
            if owner not in variable_names:
                variable_names.append(owner)
            full_name, key = variable(slot_node)
            optimizer_ids.add(slot_node)
            optimizer_variables.append(OptimizerVariable(full_name, key, owner, slot_name, bundle.read(key)))
        optimizer_name = next((v.name.split("/")[0] for v in optimizer_variables if v.slot == "iter"), None)
    weights: dict[str, torch.Tensor] = {}
    keys: dict[str, str] = {}
    for i, node in enumerate(nodes):
        found = node.value_key()
        if found is None or i in optimizer_ids or found[1] == "save_counter" + _VALUE_SUFFIX:
            continue
        full_name, key = variable(i)
        if full_name in weights:
            continue
        weights[full_name], keys[full_name] = bundle.read(key), key
    for name in variable_names:
        if name not in weights:
            raise TFCheckpointError(f"{where}: trainable variable {name!r} has no value in the checkpoint")
    return TFCheckpoint(
        path=bundle.prefix, kind=kind, variable_names=variable_names, weights=weights,
        layouts={n: _guess_layout(n, w.shape) for n, w in weights.items()}, keys=keys,
        optimizer_variables=optimizer_variables, optimizer_name=optimizer_name, iterations=iterations)


def _from_tf1_names(bundle: TensorBundle, numeric: list[str]) -> TFCheckpoint:
    """A TF1 ``Saver`` checkpoint: keys are variable names, slots ``<variable>/<op name>[_<n>]``."""
    meta_path = bundle.prefix + ".meta"
    consts: dict[str, float] = {}
    order: list[str] = []
    notes: list[str] = []
    if os.path.isfile(meta_path):
        inside_directory(meta_path, bundle.prefix)
        consts, order = _read_meta_graph(meta_path)
    names = set(numeric)
    slot_of: dict[str, tuple[str, str]] = {}
    for key in numeric:
        owner, _, op = key.rpartition("/")
        # TF1's built-in slots have their variable's shape and dtype: that keeps a variable named like a child
        # of another (``layer`` and ``layer/w``) from being taken for a slot.
        if owner in names and _SLOT_OP.match(op) and key not in order and (
                bundle.entries[key].shape, bundle.entries[key].dtype) == (
                bundle.entries[owner].shape, bundle.entries[owner].dtype):
            slot_of[key] = (owner, op)
    non_slot = [k for k in numeric if k.rpartition("/")[2] in _V1_NON_SLOT and k not in order]
    ops = sorted({_op_base(op) for _, op in slot_of.values()})  # type: ignore[type-var]
    trainable = [n for n in order if n in names] or sorted({owner for owner, _ in slot_of.values()})
    optimizer_name = ops[0] if len(ops) == 1 else None
    if len(ops) > 1:
        notes.append(f"slots of several TF1 optimizers: {ops}; pass the one to continue as `optimizer=`")
    optimizer_variables = [OptimizerVariable(k, k, None, None, bundle.read(k)) for k in non_slot]
    optimizer_variables += [OptimizerVariable(k, k, owner, op, bundle.read(k)) for k, (owner, op) in slot_of.items()]
    used = set(slot_of) | set(non_slot)
    weights = {k: bundle.read(k) for k in numeric if k not in used}
    # Variables the optimizer holds state for, in the graph's order when the .meta says it.
    trainable = [n for n in trainable if n in weights]
    optimizer_class = optimizer_config = None
    if optimizer_name in _V1_OPTIMIZERS:
        import slotopt

        class_name, arguments = _V1_OPTIMIZERS[optimizer_name]
        optimizer_class = getattr(slotopt.v1, class_name)
        config = {arg: consts[f"{optimizer_name}/{const}"] for const, arg in arguments.items()
                  if f"{optimizer_name}/{const}" in consts}
        if config.keys() == set(arguments.values()):
            optimizer_config = config
            if optimizer_name == "RMSProp" and any(op == "RMSProp_2" for _, op in slot_of.values()):
                optimizer_config["centered"] = True
        elif consts or order:
            notes.append(f"the .meta graph has no scalar Const for every {class_name} hyperparameter")
    global_step = weights.get("global_step")
    iterations = iterations_of(global_step, bundle.index_path, "global_step") if global_step is not None \
        and not global_step.is_floating_point() else None
    kind = "v1" if slot_of or non_slot else "none"
    return TFCheckpoint(
        path=bundle.prefix, kind=kind, variable_names=trainable if kind == "v1" else [], weights=weights,
        layouts={n: _guess_layout(n, w.shape) for n, w in weights.items()}, keys={n: n for n in weights},
        optimizer_variables=optimizer_variables, optimizer_name=optimizer_name,
        optimizer_class=optimizer_class, optimizer_config=optimizer_config, iterations=iterations, notes=notes)


def load_tf_checkpoint(prefix_or_directory: Union[str, Path], *, metadata_only: bool = False) -> TFCheckpoint:
    """Reads a TensorFlow checkpoint, ``tf.train.Checkpoint`` (``CheckpointManager``) or TF1 ``Saver``, without
    TensorFlow.

    ``prefix_or_directory``: the checkpoint prefix (``.../ckpt-3``, as ``CheckpointManager.save`` returns it; the
    ``.index`` file's name is accepted too) or a directory, whose latest checkpoint is read as
    ``tf.train.latest_checkpoint`` finds it (its ``checkpoint`` state file). Every dtype TF stores variables in
    is read (float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool, complex64/128); string tensors are
    skipped (noted in ``notes``), partitioned variables refused. A malformed checkpoint raises
    :class:`TFCheckpointError` (a ``ValueError``). ``metadata_only=True`` reads the index, the object graph and
    the scalars only (every check still runs): the other tensors are ``meta`` tensors of their shape and dtype,
    for listing what the file holds (``slotopt inspect``), not for loading.

    Example:
        >>> import slotopt, torch
        >>> ck = slotopt.load_tf_checkpoint("tests/data/migration/k_tf_ckpt_keras3_mlp_bn_adam")
        >>> ck.kind, ck.variable_names[:2], ck.iterations
        ('keras3', ['mlp/hidden/kernel', 'mlp/hidden/bias'], 5)
        >>> opt = ck.optimizer(ck.parameters(), optimizer=slotopt.Adam(0.01))
        >>> int(opt.iterations), opt.variables[2].path.split("/")[1]
        (5, 'mlp_hidden_kernel_momentum')
    """
    prefix = _resolve(prefix_or_directory)
    # metadata_only (issue 40, for `slotopt inspect`): tensors past one element stay unread, on the meta device.
    bundle = MetadataBundle(prefix) if metadata_only else TensorBundle(prefix)
    numeric, notes = [], []
    for key, entry in bundle.entries.items():
        if key == OBJECT_GRAPH_KEY:
            continue
        if entry.slices:
            raise TFCheckpointError(
                f"{bundle.index_path}: entry {key!r} is a partitioned variable ({len(entry.slices)} slices); slotopt "
                "does not read partitioned variables")
        if key.startswith("\x00"):
            continue  # the data of a slice, keyed by TensorFlow's binary slice name
        if entry.dtype == "string":
            notes.append(f"string tensor {key!r} skipped")
            continue
        if entry.dtype_code not in DTYPES:
            raise TFCheckpointError(f"{bundle.index_path}: entry {key!r} has dtype {entry.dtype}, which is not a "
                                    "variable dtype slotopt reads")
        numeric.append(key)
    if OBJECT_GRAPH_KEY in bundle.entries:
        strings = bundle.read_strings(OBJECT_GRAPH_KEY)
        if len(strings) != 1:
            raise TFCheckpointError(f"{bundle.index_path}: entry {OBJECT_GRAPH_KEY!r} must be one string")
        check_object_graph(strings[0], bundle.index_path, OBJECT_GRAPH_KEY)  # issue 40: bounded before it is built
        checkpoint = _from_object_graph(bundle, _object_graph(strings[0], bundle.index_path))
    else:
        checkpoint = _from_tf1_names(bundle, numeric)
    checkpoint.notes = notes + checkpoint.notes
    check_optimizer_values(checkpoint.optimizer_variables, bundle.index_path)  # as load_state_dict checks them
    return checkpoint
