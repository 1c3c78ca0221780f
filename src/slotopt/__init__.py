"""slotopt: the Keras optimizer system on PyTorch tensors, with Keras-exact numerics.

The top-level namespace is the Keras 3 face; ``slotopt.legacy`` is tf.keras's OptimizerV2 line and
``slotopt.v1`` TF1's ``train.Optimizer`` line. All of them run on the same engine (``slotopt.engine``) and the
same update kernels (``slotopt.kernels``).
"""

from . import distributed, legacy, schedules, v1
from .composite import CompositeOptimizer
from .keras_io import KerasCheckpoint, load_keras_checkpoint
from .multi_optimizer import MultiOptimizer, OptimizerMap
from .optimizer import Optimizer
from .optimizers.adadelta import Adadelta
from .optimizers.adafactor import Adafactor
from .optimizers.adagrad import Adagrad
from .optimizers.adam import Adam, AdamW
from .optimizers.adamax import Adamax
from .optimizers.ftrl import Ftrl
from .optimizers.lamb import Lamb
from .optimizers.lion import Lion
from .optimizers.loss_scale import LossScaleOptimizer
from .optimizers.muon import Muon
from .optimizers.nadam import Nadam
from .optimizers.rmsprop import RMSprop
from .optimizers.schedule_free_adamw import ScheduleFreeAdamW
from .optimizers.sgd import SGD
from .serialization import deserialize, get, serialize
from .variables import IndexedSlices, Variable

__version__ = "0.1.0"

__all__ = ["CompositeOptimizer", "Optimizer", "SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl", "Lion", "Adafactor", "Lamb", "LossScaleOptimizer", "Muon", "ScheduleFreeAdamW", "MultiOptimizer", "OptimizerMap", "get", "serialize", "deserialize", "Variable", "IndexedSlices", "schedules", "legacy", "v1", "distributed", "load_keras_checkpoint", "KerasCheckpoint"]
