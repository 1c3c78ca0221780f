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

from ..engine import registry
from . import serialization
from .optimizer import Optimizer
from .serialization import deserialize, get, serialize

# Every optimizer module registers its classes (``@registry.register("keras3")``); they are exported from there.
registry.import_face(__name__, __path__)
serialization.register()
globals().update(registry.exported_classes("keras3"))

__all__ = ["Optimizer", *registry.exported_names("keras3"), "get", "serialize", "deserialize"]
