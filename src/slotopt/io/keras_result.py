"""The training state read from a Keras file (:class:`KerasCheckpoint`): the model's variables in Keras layout,
the saved optimizer's class, config and state, and the ways to continue: the optimizer built on your tensors, or
weights and state loaded into an ``nn.Module`` in torch's layout. Every check runs before anything is written.
"""

from __future__ import annotations

import contextvars
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np
import torch

from ..engine import adopt, summation
from ..engine.resume import saved_scalar_problem as _scalar_problem
from ..schedules.base import LearningRateSchedule
from ..schedules.serialization import _BUILTINS as BUILTIN_SCHEDULES
from .errors import CheckpointFormatError
from .keras_layers import keras_view, to_torch, torch_shape
from .named_weights import NamedWeights, handed_over, summation_orders, write_weight

# Optimizer variables built on placeholder names ``p0, p1, ...`` are named after them (Keras 3: ``p0_momentum``,
# tf.keras: ``p0/m``): this finds which model variable an optimizer variable belongs to.
_OWNER = re.compile(r"^p(\d+)(?:[_/]|$)")
# Torch names of a Keras variable's counterpart, to propose a mapping by name.
_TORCH_NAMES = {"kernel": ("weight", "weight_ih"), "bias": ("bias", "bias_ih"), "gamma": ("weight",),
                "beta": ("bias",), "moving_mean": ("running_mean",), "moving_variance": ("running_var",),
                "embeddings": ("weight",), "alpha": ("weight",), "recurrent_kernel": ("weight_hh",),
                "depthwise_kernel": ("weight",), "pointwise_kernel": ("weight",)}

# -------------------------------------------------------------------------------------------------- checkpoint
#: The ``custom_objects`` of the ``load_keras_checkpoint`` call reading a file (the checkpoint keeps them).
CUSTOM_OBJECTS: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("slotopt_keras_custom_objects",
                                                                               default=None)


@dataclass
class KerasCheckpoint(NamedWeights):
    """The training state read from a Keras checkpoint by :func:`load_keras_checkpoint`.

    Attributes:
        path: the file read.
        kind: ``"keras3"`` (Keras 3: ``.keras``, ``.weights.h5``, or ``.h5`` written by Keras 3) or ``"legacy"``
            (a tf.keras ``.h5`` file).
        keras_version: the Keras version that wrote the file.
        variable_names: the model's trainable variables, ``"<layer>/<sub-layer>/.../<variable>"`` (the Keras
            variable path without a Sequential model's name), in ``model.trainable_variables`` order.
        non_trainable_names: the model's other variables (BatchNormalization ``moving_mean``/``moving_variance``,
            frozen layers' variables), in model order.
        weights: name → tensor, in Keras layout and the stored dtype (trainable and non-trainable).
        layouts: name → layout kind (``"dense_kernel"``, ``"conv2d_kernel"``, ``"einsum_kernel:1"``, ``"as_is"``...:
            :data:`TORCH_COUNTERPARTS` says how each maps onto torch).
        entries: name → where the value is in the file (an HDF5 dataset path).
        optimizer_config: ``{"class_name", "config"}`` of the saved optimizer (a schedule stays serialized).
        optimizer_class: the slotopt class it maps to (``slotopt.Adam``, ``slotopt.LossScaleOptimizer``,
            ``slotopt.legacy.Adam``, ...).
        optimizer_state: the saved optimizer variables, in the order of the optimizer's ``set_weights``.
        optimizer_variable_names: the Keras name of each (``adam/convnet_conv_kernel_momentum``).
        floatx: the stored dtype of the learning-rate variable (Keras 3's ``floatx``; ``None`` with a schedule
            and for tf.keras, whose hyperparameters are always float32).
        dtype_policy: the Keras dtype policy the model computed in (``"float32"``, ``"mixed_float16"``,
            ``"mixed_bfloat16"``...): variables are stored in float32 under a mixed policy; run the torch side
            under ``torch.autocast`` with the policy's compute dtype to continue the same computation.
        loss_scale: a ``LossScaleOptimizer``'s saved dynamic scale (``None`` without one).
        regularizers: variable name → ``{"l1": ..., "l2": ...}`` (the layers' weight regularizers, which add to
            the loss: :meth:`regularization_loss`).
        constraints: ``"<layer>/<kernel|bias|...>"`` → the saved constraint config (not applied by slotopt).
        torch_options: layer name → the torch arguments that reproduce its options (BatchNormalization
            ``momentum`` ``1-m`` and ``eps``; LayerNormalization ``eps``).
        optimizer_entries: where each of ``optimizer_state`` is in the file.
        skipped: file entry → why it was left (a LossScaleOptimizer's copy of its inner optimizer's variables).
        notes: everything in the file that changes the loss or the update and is not part of the optimizer
            (regularizers, constraints, BatchNorm conversions, the dtype policy): read them.

    Example:
        >>> import slotopt
        >>> ckpt = slotopt.load_keras_checkpoint("tests/data/keras_checkpoints/keras3_adam_float32.keras")
        >>> ckpt.variable_names
        ['hidden/kernel', 'hidden/bias', 'out/kernel', 'out/bias']
        >>> opt = ckpt.optimizer(ckpt.parameters())
        >>> type(opt).__name__, int(opt.iterations)
        ('Adam', 5)
    """

    path: str
    kind: str
    keras_version: str
    variable_names: list[str]
    weights: dict[str, torch.Tensor]
    layouts: dict[str, str]
    optimizer_config: dict[str, Any]
    optimizer_class: type
    optimizer_state: list[np.ndarray]
    floatx: Optional[torch.dtype] = None
    non_trainable_names: list[str] = field(default_factory=list)
    entries: dict[str, str] = field(default_factory=dict)
    optimizer_variable_names: list[str] = field(default_factory=list)
    dtype_policy: str = "float32"
    loss_scale: Optional[float] = None
    regularizers: dict[str, dict[str, float]] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    torch_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    optimizer_entries: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    _owners: list[Optional[int]] = field(default_factory=list, repr=False)
    #: Per saved optimizer value: (index of its variable, slot name), or None (engine/adopt.py ``slot_keys``).
    _slot_keys: list[Optional[tuple[int, str]]] = field(default_factory=list, repr=False, compare=False)
    _keras_paths: dict[str, str] = field(default_factory=dict, repr=False)
    #: ``load_keras_checkpoint(custom_objects=...)``: name → the user's schedule class, factory or instance.
    custom_objects: dict[str, Any] = field(default_factory=lambda: dict(CUSTOM_OBJECTS.get() or {}), repr=False,
                                           compare=False)
    _loans: adopt.Loans = field(default_factory=adopt.Loans, repr=False, compare=False)
    _state_views: Optional[list[tuple[Any, Any]]] = field(default=None, repr=False, compare=False)
    _layout: Any = field(default=None, repr=False, compare=False)  # keras_write.FileLayout: the way back
    _module_mapping: Optional[dict[str, str]] = field(default=None, repr=False, compare=False)

    # ---------------------------------------------------------------------------------------------- helpers
    def _from_config(self, config: dict) -> Any:
        """``optimizer_class.from_config`` with the caller's ``custom_objects`` for a schedule the file names by a
        class slotopt does not have (issue 49: refused, with the way to pass it, before anything is built)."""
        lr = config.get("learning_rate")
        if isinstance(lr, Mapping):
            names = [n for n in (lr.get("registered_name"), lr.get("class_name")) if isinstance(n, str)]
            if not any(n in self.custom_objects for n in names) and lr.get("class_name") not in BUILTIN_SCHEDULES:
                shown = next(iter(names), repr(lr.get("class_name")))
                raise CheckpointFormatError(
                    self.path, "compile_config.optimizer.config.learning_rate",
                    f"is a learning-rate schedule of class {lr.get('class_name')!r} (registered as "
                    f"{lr.get('registered_name')!r}), which slotopt does not have (nothing a file names is "
                    f"imported): pass one that computes it, `load_keras_checkpoint(path, custom_objects={{"
                    f"{shown!r}: MySchedule}})` (a slotopt.schedules.LearningRateSchedule subclass built from the "
                    f"file's arguments {dict(lr.get('config') or {})}, a factory called with them, or a schedule "
                    "instance).")
        if not self.custom_objects:
            return self.optimizer_class.from_config(config)
        custom = {name: _built(value) if isinstance(value, LearningRateSchedule) else value
                  for name, value in self.custom_objects.items()}
        return self.optimizer_class.from_config(config, custom_objects=custom)

    def _new_optimizer(self) -> Any:
        config = json.loads(json.dumps(self.optimizer_config["config"]))  # a deep copy: from_config may pop
        if self.kind == "keras3" and self.floatx == torch.float64:  # the learning-rate variable in floatx
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                return self._count_as_saved(self._from_config(config))
            finally:
                torch.set_default_dtype(previous)
        return self._count_as_saved(self._from_config(config))

    def _tfkeras_new(self) -> bool:
        return any(note.startswith("the optimizer is tf-keras 2.11+'s") for note in self.notes)

    def _count_as_saved(self, opt: Any) -> Any:
        """issue 49: the iteration count keeps the file's integer dtype (Keras's torch backend saves int32); a
        tf-keras 2.11+ optimizer (the notes say so) sums a sparse gradient's repeated rows first."""
        if self._tfkeras_new():
            opt._deduplicate_sparse = True
        if self.kind != "keras3" or not self.optimizer_state or not hasattr(opt, "_iterations"):
            return opt
        saved = np.asarray(self.optimizer_state[0]).dtype
        if saved.kind in "iu" and saved.itemsize < 8 and saved != np.dtype(np.uint32):
            opt._iterations.data = torch.zeros((), dtype=torch.from_numpy(np.zeros((), saved)).dtype)
        return opt

    def _state_variables(self, opt: Any) -> list[torch.Tensor]:
        """What ``opt.set_weights`` assigns, in order: Keras 3 ``variables``, tf.keras ``weights``."""
        return list(opt.variables if self.kind == "keras3" else opt.weights)

    def _check_state(self, opt: Any, where: str, state: Optional[Sequence[Any]] = None) -> None:
        """Count and shapes of the saved state (or of ``state``: it converted to torch's layout) against the
        variables of ``opt`` (built in the same layout)."""
        variables = self._state_variables(opt)
        state = self.optimizer_state if state is None else state
        if len(variables) != len(state):
            raise CheckpointFormatError(
                where, "optimizer",
                f"the file holds {len(state)} optimizer variables, but a "
                f"{self.optimizer_class.__name__} built on the model's {len(self.variable_names)} trainable variables "
                f"has {len(variables)} ({[getattr(v, 'path', i) for i, v in enumerate(variables)]}).",
            )
        for i, (var, value) in enumerate(zip(variables, state)):
            if tuple(var.shape) != tuple(value.shape):
                raise CheckpointFormatError(
                    where, f"optimizer variable {i} ({getattr(var, 'path', '')})",
                    f"has shape {tuple(value.shape)} in the file; expected {tuple(var.shape)}.",
                )
            # issue 40: iterations, learning rate, loss scale checked at read as load_state_dict checks them
            problem = _scalar_problem(str(getattr(var, "path", "") or getattr(var, "name", "")), value)
            if problem is not None:
                raise CheckpointFormatError(where, f"optimizer variable {i} ({getattr(var, 'path', '')})",
                                            f"must be {problem}; the file holds {np.asarray(value).reshape(-1)[0]!r}.")

    def _probe(self) -> list[Optional[int]]:
        """Builds the optimizer on placeholders ``p0, p1, ...`` (Keras layout) to check the saved state, to learn
        which model variable each optimizer variable belongs to (``None``: the optimizer's own) and its Keras
        name (``adam/<variable path with _>_momentum``)."""
        opt = self._new_optimizer()
        placeholders = [torch.empty(self.weights[n].shape, dtype=self.weights[n].dtype, device="meta")
                        for n in self.variable_names]  # meta (issue 40): names and shapes, no memory
        opt.build([(f"p{j}", p) for j, p in enumerate(placeholders)])
        self._check_state(opt, self.path)
        # What this probe tells every later build (``_built_on``): which variable's slot, by name, each saved value is.
        slots = adopt.slot_keys(opt, placeholders)
        self._slot_keys = [slots.get(id(var)) for var in self._state_variables(opt)]
        owners: list[Optional[int]] = []
        names = []
        for var in self._state_variables(opt):
            path = str(getattr(var, "path", ""))
            scope, _, rest = path.partition("/")
            match = _OWNER.match(rest)
            owners.append(int(match.group(1)) if match else None)
            if match:  # the placeholder ``p<j>`` back to the variable's Keras path
                keras = self._keras_paths.get(self.variable_names[owners[-1]], self.variable_names[owners[-1]])
                keras = keras.replace("/", "_") if self.kind == "keras3" else keras
                rest = keras + rest[len(f"p{owners[-1]}"):]
            names.append(f"{scope}/{rest}" if rest else path)
        self.optimizer_variable_names = names
        return owners

    def _state_tensors(self) -> list[Any]:
        """``optimizer_state`` as tensors sharing the arrays' memory, each made once per array (its version counter
        tells whether a state handed over has been written since: ``adopt.Loans``)."""
        cache = self._state_views if self._state_views is not None else []
        views: list[tuple[Any, Any]] = []
        for i, value in enumerate(self.optimizer_state):
            if i < len(cache) and cache[i][0] is value:
                views.append(cache[i])
                continue
            array = np.asarray(value)
            if array.dtype.kind not in "biufc":  # left as it is: the checks refuse it with their message
                views.append((value, array))
            elif array.flags.writeable and array.dtype.isnative:
                views.append((value, torch.from_numpy(array)))
            else:  # (read-only or foreign-endian memory is not handed over: a native copy)
                views.append((value, torch.from_numpy(np.array(array, dtype=array.dtype.newbyteorder("=")))))
        self._state_views = views
        return [t for _, t in views]

    def _built_on(self, params: list[tuple[str, torch.Tensor]], state: list[Any],
                  write: Optional[Any] = None) -> Any:
        """The saved optimizer built on ``params`` (``variable_names`` order) with ``state`` loaded, in one build:
        the slots taken from ``state`` where they fit (engine/adopt.py; which value is which variable's slot was read
        from the probe the checkpoint built when it was read, ``_slot_keys``), then every check set_weights applies
        (without its copies), all before anything is written (the module's weights, ``write``) or handed over; the
        rest copied once."""
        opt = self._new_optimizer()
        if self._tfkeras_new():  # (the file is read, its weights usable: only the continuation is refused)
            refuse_tfkeras_new(opt, self.path)
        offer = adopt.offer_by_keys(self._slot_keys, [t for _, t in params], state, self._loans)
        with adopt.offered((opt, offer)):  # (nothing taken is lent unless every check below passes)
            opt.build(params)
            self._check_state(opt, f"optimizer({self.path})", state)
            for i, value in enumerate(state):
                self._loans.check(value, f"optimizer variable {i}", self.path)
            adopt.check(self._state_variables(opt), state)
        if write is not None:  # (the module's weights: after every check)
            write()
        self._keep_packed(offer, state)
        self._learning_rate_note(opt)
        adopt.assign(self._state_variables(opt), state)
        opt._show_current_learning_rate()  # (what set_weights does after writing)
        return opt

    def _keep_packed(self, offer: adopt.Offer, state: list[Any]) -> None:
        """Each slot packed into a shared buffer and filled from the file (``Offer.packed``) kept in place of the
        file's tensor (in Keras layout), so that the file's copy is freed: the checkpoint's value is the slot's
        memory, as for a slot taken whole."""
        index = {id(value): i for i, value in enumerate(state)}
        for value, slot in offer.packed:
            i = index.get(id(value))
            if i is None or self._state_views is None or i >= len(self._state_views):
                continue
            kept = self._state_views[i][1]
            if kept is value:
                entry: Optional[torch.Tensor] = slot
            else:  # (converted to torch's layout by load_module: the checkpoint keeps a Keras-layout view)
                owner = self._owners[i] if i < len(self._owners) else None
                kind = self.layouts.get(self.variable_names[owner], "as_is") if owner is not None else "as_is"
                entry = keras_view(slot, kind, tuple(kept.shape)) if isinstance(kept, torch.Tensor) else None
                if entry is None or entry.dtype != kept.dtype:
                    continue
                self._loans.lend(entry)
            state[i] = slot  # (what ``assign`` then leaves: the slot's own memory)
            self.optimizer_state[i] = entry.detach().numpy()
            self._state_views[i] = (self.optimizer_state[i], entry)

    def _learning_rate_note(self, opt: Any) -> None:
        """Warns when the stored learning rate does not fit the optimizer's learning-rate variable's dtype."""
        if self.kind != "keras3" or self.floatx is None:
            return
        lr = opt.learning_rate
        if not isinstance(lr, torch.Tensor):
            return
        for var, value in zip(self._state_variables(opt), self.optimizer_state):
            if var is lr and var.dtype != self.floatx:
                stored = torch.as_tensor(value)
                if not torch.equal(stored.to(var.dtype).to(stored.dtype), stored):
                    warnings.warn(
                        f"{self.path} was saved with floatx {self.floatx}: its learning rate {float(stored)!r} is "
                        f"rounded to the optimizer's {var.dtype} learning-rate variable.",
                        stacklevel=3,
                    )

    def _torch_shape(self, name: str) -> Optional[tuple[int, ...]]:
        return torch_shape(tuple(self.weights[name].shape), self.layouts[name])

    # ---------------------------------------------------------------------------------------------- public
    def optimizer(self, params: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]]) -> Any:
        """The saved optimizer, configured from the file and built on ``params`` (tensors in Keras layout: a list
        in ``variable_names`` order or a dict name → tensor), with its saved state and iteration count loaded.

        The values of ``params`` are not touched: start them from ``weights`` (or use :meth:`parameters`). The
        optimizer's slots are the file's tensors where they fit (no copy): ``optimizer_state`` shows them as they
        train, and a later ``optimizer(...)`` of this checkpoint copies them while unwritten, else is refused.
        """
        ordered = self._params_in_order(params)
        return self._built_on(list(zip(self.variable_names, ordered)), list(self._state_tensors()))

    def regularization_loss(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The loss the saved layers' L1/L2 weight regularizers add (Keras: ``l1·Σ|w| + l2·Σw²`` per variable),
        for ``tensors`` keyed by variable name (any layout: the sums do not depend on it). Zero without any."""
        total = torch.zeros(())
        for name, factors in self.regularizers.items():
            if name not in tensors:
                raise ValueError(f"Argument `tensors` has no {name!r}, which has a regularizer {factors}. "
                                 f"Regularized variables: {sorted(self.regularizers)}.")
            t = tensors[name]
            total = total + factors.get("l1", 0.0) * t.abs().sum() + factors.get("l2", 0.0) * t.square().sum()
        return total

    def mapping_for(self, module: torch.nn.Module) -> dict[str, str]:
        """Proposes ``load_module``'s mapping (Keras variable name → parameter or buffer name of ``module``)
        from names and shapes: a variable goes to the one parameter of its torch shape and dtype, or, when
        several fit, to the one whose name holds the layer's name and the torch name of the variable
        (``kernel`` → ``weight``, ``moving_mean`` → ``running_mean``...). Refuses an ambiguous or missing match,
        listing the candidates. BatchNorm statistics are proposed only when a buffer fits. Edit and pass back."""
        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())
        proposal: dict[str, str] = {}
        taken: dict[str, str] = {}
        for name in self.variable_names + self.non_trainable_names:
            trainable = name in self.variable_names
            pool = params if trainable or name not in self._buffer_names() else buffers
            shape = self._torch_shape(name)
            dtype = self.weights[name].dtype
            fits = [p for p, t in pool.items() if shape is not None and tuple(t.shape) == shape and t.dtype == dtype]
            chosen = self._by_name(name, fits)
            if not trainable and (chosen is None or chosen in taken):
                continue  # a statistic or a frozen variable is only proposed where it fits unambiguously
            if chosen is None:
                if not fits:
                    raise ValueError(f"No parameter of the module fits {name!r} (torch shape {shape}, {dtype}). "
                                     f"Parameters: {[(p, tuple(t.shape)) for p, t in params.items()]}. Pass `mapping`.")
                raise ValueError(f"Ambiguous mapping for {name!r}: parameters {fits} all have its torch shape {shape} "
                                 "and none is told apart by name. Pass `mapping` (see `mapping_for`).")
            if chosen in taken:
                raise ValueError(f"Ambiguous mapping: {name!r} and {taken[chosen]!r} both fit only {chosen!r}. "
                                 "Pass `mapping`.")
            taken[chosen] = name
            proposal[name] = chosen
        return proposal

    def _buffer_names(self) -> set[str]:
        return {n for n in self.non_trainable_names if n.rsplit("/", 1)[-1] in ("moving_mean", "moving_variance")}

    def _by_name(self, name: str, fits: list[str]) -> Optional[str]:
        if len(fits) <= 1:
            return fits[0] if fits else None
        layer_parts = name.split("/")[:-1]
        var = name.rsplit("/", 1)[-1]
        suffixes = _TORCH_NAMES.get(var, (var,))

        def tokens(p: str) -> list[str]:
            return p.split(".")

        named = [p for p in fits if any(part in tokens(p) for part in layer_parts)
                 and tokens(p)[-1].split("_l")[0] in suffixes + tuple(s.split("_l")[0] for s in suffixes)]
        if len(named) == 1:
            return named[0]
        deepest = [p for p in named if layer_parts[-1] in tokens(p)]
        return deepest[0] if len(deepest) == 1 else None

    def load_module(self, module: torch.nn.Module, mapping: Optional[Mapping[str, str]] = None) -> Any:
        """Loads the weights into ``module`` and returns the saved optimizer built on its parameters.

        ``mapping`` maps each Keras variable name (``variable_names``) to a parameter name of ``module``
        (``module.named_parameters()``); without it, :meth:`mapping_for` proposes one from names and shapes (and
        refuses an ambiguous one). It may also map non-trainable variables (``non_trainable_names``) to buffers
        or parameters: BatchNorm ``moving_mean``/``moving_variance`` → ``running_mean``/``running_var``; they are
        copied, not trained. Tensors are converted to torch's layout (:data:`TORCH_COUNTERPARTS`: Dense ↔
        ``nn.Linear`` transposed, convolutions ``(..., in, out)`` → ``(out, in, ...)``, GRU gates reordered...),
        and every optimizer slot of a variable the same way. A trainable parameter of ``module`` that nothing
        maps to must have ``requires_grad=False`` (it would not be trained). Everything is checked before the
        module is written.

        Nothing is held twice (issue 40): ``weights`` and ``optimizer_state`` become views of the module's
        parameters and the optimizer's slots (in Keras layout), and the file's copies are freed; a later use of
        this checkpoint copies them while unwritten and is refused once training has written them.
        """
        self._refuse_unread("load a module")
        if mapping is None:
            mapping = self.mapping_for(module)
        if not isinstance(mapping, Mapping):
            raise TypeError(f"Argument `mapping` must be a dict Keras name → parameter name. Received: {mapping!r}")
        self._check_names("mapping", mapping)
        named = dict(module.named_parameters())
        named_buffers = dict(module.named_buffers())
        targets = []
        for name in mapping:
            pname = mapping[name]
            tensor = named.get(pname, named_buffers.get(pname)) if isinstance(pname, str) else None
            if tensor is None:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} to {pname!r}, which is not a parameter or buffer of the "
                    f"module. Parameters: {list(named)}."
                )
            if name in self.variable_names and pname not in named:
                raise ValueError(f"Argument `mapping` maps the trainable {name!r} to buffer {pname!r}; it needs a "
                                 "parameter.")
            kind = self.layouts[name]
            shape = self._torch_shape(name)
            if shape is None:
                raise ValueError(f"Argument `mapping` maps {name!r} ({kind}, Keras shape "
                                 f"{tuple(self.weights[name].shape)}), which has no torch layout: use "
                                 "`optimizer(params)` with Keras-layout tensors.")
            if tuple(tensor.shape) != shape or tensor.dtype != self.weights[name].dtype:
                raise ValueError(
                    f"Argument `mapping` maps {name!r} ({kind}, Keras shape {tuple(self.weights[name].shape)}) to "
                    f"{pname!r} of shape {tuple(tensor.shape)} and dtype {tensor.dtype}; expected shape {shape} and "
                    f"dtype {self.weights[name].dtype}."
                )
            targets.append((name, pname, tensor))
        if len({id(p) for _, _, p in targets}) != len(targets):
            raise ValueError(f"Argument `mapping` maps two variables to the same parameter. Received: {dict(mapping)}")
        mapped = {id(p) for _, _, p in targets}
        left = [p for p, t in named.items() if t.requires_grad and id(t) not in mapped]
        if left:
            raise ValueError(f"Parameters {left} of the module are mapped to no Keras variable and would not be "
                             "trained: map them, or set `requires_grad_(False)` on them.")
        state = []
        sources: list[Any] = self._state_tensors()
        for i, owner in zip(range(len(sources)), self._owners):
            # A view: the optimizer takes it, or copies it once (issue 40); the list lets go of each as it is
            # converted, so that the file's copy of a converted slot is freed at once.
            tensor, sources[i] = sources[i], None
            if owner is not None:
                name = self.variable_names[owner]
                kind = self.layouts[name]
                if tuple(tensor.shape) == tuple(self.weights[name].shape):
                    converted = to_torch(tensor, kind)
                    if converted is not tensor:
                        converted = converted.contiguous()
                        # The checkpoint keeps a Keras-layout view of the converted slot (the file's is freed).
                        view = handed_over(self._loans, tensor, converted, kind)
                        if view is not None:
                            self.optimizer_state[i] = view.numpy()
                            self._state_views[i] = (self.optimizer_state[i], view)  # type: ignore[index]
                    tensor = converted
                elif kind != "as_is":
                    raise ValueError(
                        f"Optimizer variable {i} of {name!r} has shape {tuple(tensor.shape)}, not the variable's "
                        f"shape: a {self.optimizer_class.__name__} state of a {kind} cannot be converted to torch's "
                        "layout. Use `optimizer(params)` with Keras-layout tensors instead."
                    )
            state.append(tensor)
        by_name = {name: (pname, tensor) for name, pname, tensor in targets}
        for name, _, _ in targets:
            self._loans.check(self.weights[name], f"weight {name!r}", self.path)
        # issue 40, all or nothing: the state is checked on an optimizer built on meta copies of the targets
        # first, so whatever set_weights refuses is refused before the module is written.
        orders = summation_orders({n: t for n, _, t in targets}, self.layouts, self.weights)
        summation.refuse_unordered(self.optimizer_class, orders, self.path)  # (before any write)
        opt = self._built_on([by_name[n] for n in self.variable_names], state,
                             write=lambda: self._write_module(targets))
        summation.set_orders(opt, orders)  # issue 49: norms in TensorFlow's order of each variable's layout
        self._module_mapping = dict(mapping)  # save(path, module, opt) writes back through the same mapping
        return opt

    def save(self, path: Union[str, Any], params_or_module: Any, optimizer: Any) -> str:
        """Writes the training state back into a file of the format and layout read (``.keras`` → ``.keras``,
        ``.weights.h5`` → ``.weights.h5``, ``.h5`` → ``.h5``), which Keras restores and continues exactly.

        ``params_or_module``: what :meth:`parameters` returned (trained since; or a dict by the same names), or the
        module given to :meth:`load_module` (its weights go back through the same mapping and layout conversions);
        ``optimizer``: the one :meth:`optimizer` / :meth:`load_module` returned, trained since. Everything the
        file held that is not trained (config, metadata, statistics nobody mapped, metrics) is written back as
        read. Every check (class, slot layout, count, shape and dtype of every entry) runs before a byte is
        written; the file is written under a temporary name beside ``path``, verified, then renamed into place
        (``slotopt.io.keras_write``). Returns the absolute path written.

        Example:
            >>> import os, tempfile, torch, slotopt
            >>> ckpt = slotopt.load_keras_checkpoint("tests/data/keras_checkpoints/keras3_adam_float32.keras")
            >>> params = ckpt.parameters()
            >>> opt = ckpt.optimizer(params)
            >>> _ = opt.apply_gradients(zip([torch.ones_like(p) for p in params], params))
            >>> path = ckpt.save(os.path.join(tempfile.mkdtemp(), "model.keras"), params, opt)
            >>> int(slotopt.load_keras_checkpoint(path).optimizer_state[0])
            6
        """
        from . import keras_write

        return keras_write.save(self, path, params_or_module, optimizer)

    def _write_module(self, targets: list[tuple[str, str, torch.Tensor]]) -> None:
        with torch.no_grad():
            for name, _, tensor in targets:
                write_weight(self._loans, self.weights, name, tensor, self.layouts[name])


#: tf-keras 2.11+ classes whose dense update differs from the Keras 3 class's (recorded against tf-keras 2.21,
#: tests/data/migration4 ``d*``): continuing them with the Keras 3 class would not give the file's numbers.
TFKERAS_DIFFERS = frozenset({"RMSprop", "Ftrl", "Adadelta", "Nadam"})


def refuse_tfkeras_new(opt: Any, path: str) -> None:
    """Refuses continuing a tf-keras 2.11+ optimizer of a class whose arithmetic slotopt does not have (issue 49)."""
    name = type(opt).__name__
    if name in TFKERAS_DIFFERS:
        raise ValueError(
            f"{path}: the run's optimizer is tf-keras 2.11+'s {name}, whose update (or state) differs from Keras 3's "
            f"{name} (checked against tf-keras 2.21); slotopt continues tf-keras 2.11+'s Adam, AdamW, Adamax, SGD "
            "and Adagrad only. Start an optimizer from the file's values yourself (`weights`, `optimizer_state` / "
            "`optimizer_variables`), knowing it will not give the file's numbers, or continue the run in "
            "TensorFlow.")


def _built(schedule: Any) -> Any:
    """A schedule instance as the factory deserialization calls (with the file's arguments): itself."""
    return lambda **_: schedule
