"""Learning-rate schedules with the numerics of ``keras.optimizers.schedules``.

A schedule is a callable ``schedule(step)``. The optimizers call it with their iteration counter: Keras 3 style
optimizers pass the raw int64 counter tensor, the tf.keras legacy optimizers pass the counter cast to the
variable's dtype. Plain Python numbers are accepted too.

Every schedule (except :class:`PiecewiseConstantDecay`) computes in one dtype, the dtype Keras would give
``initial_learning_rate`` as a tensor: float32 for a Python number, the tensor's own dtype for a floating torch
tensor. The step and every hyperparameter are cast to that dtype before any arithmetic, and each operation is a
separate op on 0-dim tensors, in the order Keras uses. That is what makes the results agree bit for bit.

Two rounding rules for Python constants are reproduced (they only differ for float64 schedules):

* a hyperparameter that Keras passes through ``ops.cast`` (``decay_rate``, ``decay_steps``, ``power``, ...) is
  turned into a float32 tensor first and then cast, as TensorFlow does;
* a Python number used directly in an op (``1 - p``, ``0.5 * ...``, ``pi``) is rounded once to the dtype.

The result is a tensor on the step's device (CPU for a Python step) and never requires grad. The constant
tensors of a call are cached per (device, hyperparameter values) while the hyperparameters are plain Python
values, so an optimizer step pays only for the few ops that involve the step.

The package's modules: ``tensors`` (Keras's tensor conversions and the constants cache), ``base``
(``LearningRateSchedule``), ``decays`` and ``cosine`` (the six built-in schedules) and ``serialization``. Every public
name is re-exported here, and the classes keep ``slotopt.schedules`` as their module (what pickles, reprs and
configs that name a class's module write, as before the split).
"""

from __future__ import annotations

import torch  # noqa: F401  (the examples of the classes' docstrings, run in this module's namespace, use it)

from .base import LearningRateSchedule
from .cosine import CosineDecay, CosineDecayRestarts
from .decays import ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay, PolynomialDecay
from .serialization import deserialize, get, serialize

__all__ = [
    "LearningRateSchedule",
    "ExponentialDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "InverseTimeDecay",
    "CosineDecay",
    "CosineDecayRestarts",
    "serialize",
    "deserialize",
    "get",
]


for _name in __all__:  # (what ``slotopt.schedules.X.__module__`` said before the package)
    globals()[_name].__module__ = __name__
del _name
