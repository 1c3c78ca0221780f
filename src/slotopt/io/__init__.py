"""Training state written by Keras and TensorFlow, read as data (no TensorFlow, nothing in a file imported or
called): ``keras.py`` reads ``.keras`` and ``.h5`` files, ``tf_checkpoint.py`` TensorFlow checkpoints
(``tensor_bundle.py``: the TensorBundle format), into slotopt optimizers and torch modules.

Example:
    >>> import slotopt.io
    >>> slotopt.io.load_keras_checkpoint is slotopt.load_keras_checkpoint
    True
"""

from .errors import CheckpointFormatError
from .keras import KerasCheckpoint, load_keras_checkpoint
from .tensor_bundle import TFCheckpointError
from .tf_checkpoint import TFCheckpoint, load_tf_checkpoint

__all__ = ["CheckpointFormatError", "KerasCheckpoint", "load_keras_checkpoint", "TFCheckpoint", "TFCheckpointError",
           "load_tf_checkpoint"]
