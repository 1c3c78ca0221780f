"""The tf.keras legacy optimizers (``tf.keras.optimizers.legacy``, the OptimizerV2 line) on PyTorch tensors.

Same API and numerics as tf.keras 2.x's legacy optimizers: hyperparameters stored as float32 values and readable
or assignable as attributes (``opt.lr = 0.01``), ``iterations``, slots, ``get_weights``/``set_weights``,
``minimize``/``apply_gradients``, the ``decay`` argument, clipping by value/norm/global norm, gradient
aggregators and transformers, lazy sparse (``IndexedSlices`` / ``nn.Embedding(sparse=True)``) updates, and a
dynamic ``LossScaleOptimizer``.

Example:
    >>> import torch, slotopt
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = slotopt.legacy.Adam(learning_rate=0.01, decay=0.1)
    >>> _ = opt.minimize(lambda: model(torch.ones(1, 2)).pow(2).sum(), model)
    >>> int(opt.iterations), opt.get_slot_names(), len(opt.get_weights())
    (1, ['m', 'v'], 5)
"""

from .adagrad import Adadelta, Adagrad
from .adam import Adam, Adamax, Nadam
from .ftrl import Ftrl
from .gradient_descent import SGD
from .loss_scale import LossScaleOptimizer
from .optimizer import Optimizer, OptimizerV2
from .rmsprop import RMSProp, RMSprop

__all__ = ["Optimizer", "OptimizerV2", "SGD", "Adam", "Adamax", "Nadam", "RMSprop", "RMSProp", "Adagrad", "Adadelta",
           "Ftrl", "LossScaleOptimizer"]
