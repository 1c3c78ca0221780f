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

from typing import TYPE_CHECKING

from ..engine import registry

if TYPE_CHECKING:  # derived from the registry by tools/write_typing_blocks.py; do not edit
    from .adabelief import AdaBelief as AdaBelief
    from .adagrad import Adadelta as Adadelta
    from .adagrad import Adagrad as Adagrad
    from .adam import Adam as Adam
    from .adam import Adamax as Adamax
    from .adam import Nadam as Nadam
    from .ftrl import Ftrl as Ftrl
    from .gradient_descent import SGD as SGD
    from .loss_scale import LossScaleOptimizer as LossScaleOptimizer
    from .rmsprop import RMSprop as RMSprop
    RMSProp = RMSprop
# end of the derived block
from .optimizer import Optimizer, OptimizerV2

# Every optimizer module registers its classes (``@registry.register("legacy")``); they are exported from there.
registry.import_face(__name__, __path__)
globals().update(registry.exported_classes("legacy"))

# tf-keras writes these modules for its OptimizerV2 line and its mixed-precision wrapper (older releases wrote
# ``keras.optimizers.optimizer_v2.*``); slotopt.legacy's own paths resolve too.
registry.register_generation(
    "legacy", base=Optimizer, public_module="keras.optimizers.legacy", own_module="slotopt.legacy",
    modules=("keras.mixed_precision", "tf_keras.mixed_precision", "tf.keras.mixed_precision",
             "tf.keras.optimizers.legacy"),
    prefixes=("keras.optimizers.legacy", "tf_keras.optimizers.legacy", "keras.src.optimizers.legacy",
              "tf_keras.src.optimizers.legacy", "keras.optimizers.optimizer_v2", "keras.src.optimizers.optimizer_v2",
              "tensorflow.python.keras.optimizer_v2", "keras.mixed_precision.loss_scale_optimizer",
              "keras.src.mixed_precision", "tf_keras.src.mixed_precision", "tensorflow.python.keras.mixed_precision",
              "slotopt.legacy"),
)

__all__ = ["Optimizer", "OptimizerV2", *registry.exported_names("legacy")]
