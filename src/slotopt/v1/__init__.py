"""TF1's ``tf.compat.v1.train`` optimizers on PyTorch tensors, with TF1-exact numerics.

``slotopt.v1.AdamOptimizer(0.001)`` is ``tf.compat.v1.train.AdamOptimizer(0.001)``: the same constructor
arguments and positional order, the same slots (``get_slot``, ``get_slot_names``, ``variables()``), the same
errors, and the same bits as TensorFlow 2.21's CPU kernels where the spec says they can be reproduced.
``loss`` for ``minimize``/``compute_gradients`` is a no-argument callable (TF1 eager style) or a tensor
computed with autograd on; ``global_step`` is an integer tensor such as
``slotopt.Variable(0, name="global_step", dtype=torch.int64)``. See ``docs/tf1_migration.md``.
"""

from ..engine import registry
from .adadelta import AdadeltaOptimizer
from .adagrad import AdagradOptimizer, ProximalAdagradOptimizer
from .adagrad_da import AdagradDAOptimizer
from .adam import AdamOptimizer
from .ftrl import FtrlOptimizer
from .gradient_descent import GradientDescentOptimizer, ProximalGradientDescentOptimizer
from .momentum import MomentumOptimizer
from .optimizer import GATE_GRAPH, GATE_NONE, GATE_OP, InvalidArgumentError, Optimizer
from .rmsprop import RMSPropOptimizer

# TF1's optimizers have no Keras config; slotopt.v1's ``get_config`` writes ``slotopt.v1`` (TF's own module paths
# resolve too).
registry.register_generation(
    "v1", public_module="slotopt.v1",
    classes={cls.__name__: cls for cls in (GradientDescentOptimizer, MomentumOptimizer, AdamOptimizer,
                                           AdagradOptimizer, AdadeltaOptimizer, RMSPropOptimizer, FtrlOptimizer,
                                           ProximalGradientDescentOptimizer, ProximalAdagradOptimizer,
                                           AdagradDAOptimizer)},
    modules=("tf.compat.v1.train", "tensorflow.compat.v1.train", "tf.train"),
    prefixes=("slotopt.v1", "tensorflow.python.training"),
)

__all__ = [
    "Optimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "AdamOptimizer",
    "AdagradOptimizer",
    "AdadeltaOptimizer",
    "RMSPropOptimizer",
    "FtrlOptimizer",
    "ProximalGradientDescentOptimizer",
    "ProximalAdagradOptimizer",
    "AdagradDAOptimizer",
    "InvalidArgumentError",
    "GATE_NONE",
    "GATE_OP",
    "GATE_GRAPH",
]
