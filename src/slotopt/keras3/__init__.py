"""The Keras 3 optimizers (``keras.optimizers``) on PyTorch tensors: the face that ``slotopt`` itself exports.

``optimizer.py`` is the base ``Optimizer`` (hyperparameters, the step's stages, config), ``optimizer_variables.py``
its own variables (``iterations``, slots, ``variables``/weights I/O); one module per optimizer family
(``adam.py``: Adam, AdamW; ...), ``loss_scale.py`` (LossScaleOptimizer), ``multi_optimizer.py``
(MultiOptimizer/OptimizerMap) and ``serialization.py`` (``get``/``serialize``/``deserialize``).

Example:
    >>> import torch, slotopt.keras3
    >>> w = slotopt.Variable(torch.ones(2), name="w")
    >>> opt = slotopt.keras3.Adam(learning_rate=0.1)
    >>> _ = opt.apply_gradients([(torch.ones(2), w)])
    >>> int(opt.iterations), slotopt.Adam is slotopt.keras3.Adam
    (1, True)
"""

from . import serialization
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .ftrl import Ftrl
from .lamb import Lamb
from .lion import Lion
from .loss_scale import LossScaleOptimizer
from .multi_optimizer import MultiOptimizer, OptimizerMap
from .muon import Muon
from .nadam import Nadam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .schedule_free_adamw import ScheduleFreeAdamW
from .serialization import deserialize, get, serialize
from .sgd import SGD

serialization.register(globals())

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl", "Lion",
           "Adafactor", "Lamb", "LossScaleOptimizer", "Muon", "ScheduleFreeAdamW", "MultiOptimizer", "OptimizerMap",
           "get", "serialize", "deserialize"]
