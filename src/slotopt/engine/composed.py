"""The torch protocol of optimizers built on others: a wrapper (``LossScaleOptimizer``) shows its inner
optimizer's groups and state; a composite (``MultiOptimizer``, ``CompositeOptimizer``) shows its sub-optimizers'."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch

from .torch_protocol import TorchProtocol

__all__ = ["WrapsInnerOptimizer", "ComposesOptimizers"]


class WrapsInnerOptimizer:
    """The torch protocol of a wrapper (a ``LossScaleOptimizer``): the inner optimizer's parameter groups (the
    same dicts), its hyperparameters, and its state plus the wrapper's own scalars."""

    _aggregates_gradients = False  # the inner optimizer aggregates (before the wrapper's finiteness check)
    _maximizes = False  # and takes ``maximize``
    _plans_steps = False  # the inner optimizer plans its own steps
    _protocol_inner: Any

    def _share_param_groups(self, inner: Any) -> None:
        self.__dict__["_param_groups"] = inner.__dict__["_param_groups"]
        self.__dict__["_published"] = inner.__dict__["_published"]

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None,
               names: Optional[list[str]] = None) -> None:
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
    _maximizes = False  # and takes its own ``maximize``
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

    def _track(self, variables: Sequence[torch.Tensor], options: Optional[Mapping[str, Any]] = None,
               names: Optional[list[str]] = None) -> None:
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
