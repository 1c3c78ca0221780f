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

from typing import TYPE_CHECKING

from ..engine import registry

if TYPE_CHECKING:  # derived from the registry by tools/write_typing_blocks.py; do not edit
    from .adabelief import AdaBelief as AdaBelief
    from .adadelta import Adadelta as Adadelta
    from .adafactor import Adafactor as Adafactor
    from .adagrad import Adagrad as Adagrad
    from .adam import Adam as Adam
    from .adam import AdamW as AdamW
    from .adamax import Adamax as Adamax
    from .ftrl import Ftrl as Ftrl
    from .lamb import Lamb as Lamb
    from .lion import Lion as Lion
    from .loss_scale import LossScaleOptimizer as LossScaleOptimizer
    from .multi_optimizer import MultiOptimizer as MultiOptimizer
    from .multi_optimizer import OptimizerMap as OptimizerMap
    from .muon import Muon as Muon
    from .nadam import Nadam as Nadam
    from .rmsprop import RMSprop as RMSprop
    from .schedule_free_adamw import ScheduleFreeAdamW as ScheduleFreeAdamW
    from .sgd import SGD as SGD
# end of the derived block
from . import serialization
from .optimizer import Optimizer
from .serialization import deserialize, get, serialize

# Every optimizer module registers its classes (``@registry.register("keras3")``); they are exported from there.
registry.import_face(__name__, __path__)
serialization.register()
globals().update(registry.exported_classes("keras3"))

__all__ = ["Optimizer", *registry.exported_names("keras3"), "get", "serialize", "deserialize"]
