"""torch's spellings of constructor arguments, for every generation: taken where torch's name means exactly what
the generation's does, refused with the difference where it does not.

A PyTorch user's first line is ``AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99))``. ``lr`` is the
learning rate in both libraries and ``betas`` the two moment decay rates, so they become ``learning_rate`` and
``beta_1``/``beta_2`` (TF1: ``beta1``/``beta2``) before the constructor runs. ``weight_decay`` is already the
Keras 3 name. ``eps`` is not the same number: torch adds it to the bias-corrected root of the second moment,
Keras adds its ``epsilon`` where its own formula puts it (for Adam, to the root before the bias correction), so
taking it silently would train differently; it is refused with a message naming ``epsilon``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["TorchSpellingError", "accepted_arguments", "translate"]


class TorchSpellingError(TypeError, ValueError):
    """A torch spelling that cannot be taken (``eps``, or a value given under both names). Both a ``TypeError``
    (what torch raises for an unknown argument) and a ``ValueError`` (what Keras raises)."""


def accepted_arguments(cls: type) -> tuple[list[str], set[str]]:
    """The positional parameter names of ``cls``'s constructor (after ``self``) and every name any constructor of
    its chain declares (a subclass passes the rest on through ``**kwargs``)."""
    positional: list[str] = []
    names: set[str] = set()
    for index, klass in enumerate(k for k in cls.__mro__ if "__init__" in k.__dict__):
        try:
            params = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]
        except (TypeError, ValueError):
            continue
        names.update(p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
        if index == 0:
            positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional, names


def _both(cls: type, torch_name: str, keras_names: str, value: Any) -> TorchSpellingError:
    return TorchSpellingError(
        f"{cls.__name__}() got `{torch_name}` (torch's name) and {keras_names} (its own) together: pass one. "
        f"Received: {torch_name}={value!r}")


def translate(cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with torch's ``lr`` and ``betas`` under ``cls``'s own names; raises ``TorchSpellingError`` for
    ``eps`` and for a value given under both names. Names ``cls`` takes itself (tf.keras's ``lr``) stay."""
    if not any(k in kwargs for k in ("lr", "betas", "eps")):
        return dict(kwargs)
    positional, names = accepted_arguments(cls)
    given = set(kwargs) | set(positional[:len(args)])
    out = dict(kwargs)
    native = getattr(cls, "_native_torch_spellings", frozenset())
    if "lr" in out and "lr" not in names and "lr" not in native and "learning_rate" in names:
        if "learning_rate" in given:
            raise _both(cls, "lr", "`learning_rate`", out["lr"])
        out["learning_rate"] = out.pop("lr")
    if "betas" in out and "betas" not in names:
        pair = next((p for p in (("beta_1", "beta_2"), ("beta1", "beta2")) if set(p) <= names), None)
        if pair is not None:
            if given & set(pair):
                raise _both(cls, "betas", f"`{pair[0]}`/`{pair[1]}`", out["betas"])
            betas = out.pop("betas")
            if not isinstance(betas, (tuple, list)) or len(betas) != 2:
                raise TorchSpellingError(
                    f"Argument `betas` must be a pair ({pair[0]}, {pair[1]}), as in torch. Received: betas={betas!r}")
            out[pair[0]], out[pair[1]] = betas
    if "eps" in out and "eps" not in names:
        if "epsilon" not in names:
            raise TorchSpellingError(f"{cls.__name__}() has no epsilon: torch's `eps` has nothing to stand for. "
                                     f"Received: eps={out['eps']!r}")
        raise TorchSpellingError(
            f"{cls.__name__}() does not take torch's `eps`: pass Keras's `epsilon=`, which is added in another "
            "place (torch adds eps to the bias-corrected root of the second moment, Keras adds epsilon where its "
            "own formula does: for Adam, to the root before the bias correction, so torch's eps matches a Keras "
            f"epsilon of eps * sqrt(1 - beta_2**t), which changes every step). Received: eps={out['eps']!r}")
    return out
