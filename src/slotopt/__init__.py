"""slotopt: the Keras optimizer system on PyTorch tensors, with Keras-exact numerics.

The top-level namespace is the Keras 3 face (``slotopt.keras3``); ``slotopt.legacy`` is tf.keras's OptimizerV2
line, ``slotopt.v1`` TF1's ``train.Optimizer`` line and ``slotopt.tfrs`` TensorFlow Recommenders'
``CompositeOptimizer``. All of them run on the same engine (``slotopt.engine``: the step, the torch protocol,
state) and the same update kernels (``slotopt.kernels``); ``slotopt.io`` reads Keras files, and ``slotopt.cli``
is the command line.
"""

from . import distributed, io, keras3, legacy, schedules, tfrs, v1
from .io.keras import KerasCheckpoint, load_keras_checkpoint
from .io.tensor_bundle import TFCheckpointError
from .io.tf_checkpoint import TFCheckpoint, load_tf_checkpoint
from .tfrs import CompositeOptimizer
from .variables import IndexedSlices, Variable

__version__ = "0.1.0"

# The Keras 3 face at the top: its ``__all__`` derives from the registry (``engine/registry.py``).
globals().update({name: getattr(keras3, name) for name in keras3.__all__})

__all__ = ["CompositeOptimizer", *keras3.__all__, "Variable", "IndexedSlices", "schedules", "keras3", "legacy", "v1",
           "tfrs", "io", "distributed", "load_keras_checkpoint", "KerasCheckpoint", "load_tf_checkpoint",
           "TFCheckpoint", "TFCheckpointError"]
