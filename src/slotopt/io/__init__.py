"""Training state written by Keras and TensorFlow, read as data (no TensorFlow, nothing in a file imported or
called): ``keras.py`` reads ``.keras`` and ``.h5`` files into slotopt optimizers and torch modules.

Example:
    >>> import slotopt.io
    >>> slotopt.io.load_keras_checkpoint is slotopt.load_keras_checkpoint
    True
"""

from .errors import CheckpointFormatError
from .keras import KerasCheckpoint, load_keras_checkpoint

__all__ = ["CheckpointFormatError", "KerasCheckpoint", "load_keras_checkpoint"]
