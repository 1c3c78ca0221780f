"""slotopt: the Keras optimizer system on PyTorch tensors, with Keras-exact numerics.

The top-level namespace is the Keras 3 face (``slotopt.keras3``); ``slotopt.legacy`` is tf.keras's OptimizerV2
line, ``slotopt.v1`` TF1's ``train.Optimizer`` line and ``slotopt.tfrs`` TensorFlow Recommenders'
``CompositeOptimizer``. All of them run on the same engine (``slotopt.engine``: the step, the torch protocol,
state) and the same update kernels (``slotopt.kernels``); ``slotopt.io`` reads Keras files, and ``slotopt.cli``
is the command line.
"""

from typing import TYPE_CHECKING

from . import distributed, io, keras3, legacy, schedules, tfrs, v1
from .io.keras import KerasCheckpoint, load_keras_checkpoint
from .io.tensor_bundle import TFCheckpointError
from .io.tf_checkpoint import TFCheckpoint, load_tf_checkpoint
from .tfrs import CompositeOptimizer
from .variables import IndexedSlices, Variable

if TYPE_CHECKING:  # derived from the registry by tools/write_typing_blocks.py; do not edit
    from .keras3 import SGD as SGD
    from .keras3 import AdaBelief as AdaBelief
    from .keras3 import Adadelta as Adadelta
    from .keras3 import Adafactor as Adafactor
    from .keras3 import Adagrad as Adagrad
    from .keras3 import Adam as Adam
    from .keras3 import Adamax as Adamax
    from .keras3 import AdamW as AdamW
    from .keras3 import Ftrl as Ftrl
    from .keras3 import Lamb as Lamb
    from .keras3 import Lion as Lion
    from .keras3 import LossScaleOptimizer as LossScaleOptimizer
    from .keras3 import MultiOptimizer as MultiOptimizer
    from .keras3 import Muon as Muon
    from .keras3 import Nadam as Nadam
    from .keras3 import OptimizerMap as OptimizerMap
    from .keras3 import RMSprop as RMSprop
    from .keras3 import ScheduleFreeAdamW as ScheduleFreeAdamW
# end of the derived block

__version__ = "0.1.0"

# The Keras 3 face at the top: its ``__all__`` derives from the registry (``engine/registry.py``).
globals().update({name: getattr(keras3, name) for name in keras3.__all__})

__all__ = ["CompositeOptimizer", *keras3.__all__, "Variable", "IndexedSlices", "schedules", "keras3", "legacy", "v1",
           "tfrs", "io", "distributed", "load_keras_checkpoint", "KerasCheckpoint", "load_tf_checkpoint",
           "TFCheckpoint", "TFCheckpointError"]
