"""TF1's ``tf.compat.v1.train`` optimizers on PyTorch tensors, with TF1-exact numerics.

``slotopt.v1.AdamOptimizer(0.001)`` is ``tf.compat.v1.train.AdamOptimizer(0.001)``: the same constructor
arguments and positional order, the same slots (``get_slot``, ``get_slot_names``, ``variables()``), the same
errors, and the same bits as TensorFlow 2.21's CPU kernels where the spec says they can be reproduced.
``loss`` for ``minimize``/``compute_gradients`` is a no-argument callable (TF1 eager style) or a tensor
computed with autograd on; ``global_step`` is an integer tensor such as
``slotopt.Variable(0, name="global_step", dtype=torch.int64)``. See ``docs/tf1_migration.md``.
"""

from typing import TYPE_CHECKING

from ..engine import registry

if TYPE_CHECKING:  # derived from the registry by tools/write_typing_blocks.py; do not edit
    from .adabelief import AdaBeliefOptimizer as AdaBeliefOptimizer
    from .adadelta import AdadeltaOptimizer as AdadeltaOptimizer
    from .adagrad import AdagradOptimizer as AdagradOptimizer
    from .adagrad import ProximalAdagradOptimizer as ProximalAdagradOptimizer
    from .adagrad_da import AdagradDAOptimizer as AdagradDAOptimizer
    from .adam import AdamOptimizer as AdamOptimizer
    from .ftrl import FtrlOptimizer as FtrlOptimizer
    from .gradient_descent import GradientDescentOptimizer as GradientDescentOptimizer
    from .gradient_descent import ProximalGradientDescentOptimizer as ProximalGradientDescentOptimizer
    from .momentum import MomentumOptimizer as MomentumOptimizer
    from .rmsprop import RMSPropOptimizer as RMSPropOptimizer
# end of the derived block
from .optimizer import GATE_GRAPH, GATE_NONE, GATE_OP, InvalidArgumentError, Optimizer

# Every optimizer module registers its classes (``@registry.register("v1")``); they are exported from there.
registry.import_face(__name__, __path__)
globals().update(registry.exported_classes("v1"))

# TF1's optimizers have no Keras config; slotopt.v1's ``get_config`` writes ``slotopt.v1`` (TF's own module paths
# resolve too).
registry.register_generation(
    "v1", base=Optimizer, public_module="slotopt.v1",
    modules=("tf.compat.v1.train", "tensorflow.compat.v1.train", "tf.train"),
    prefixes=("slotopt.v1", "tensorflow.python.training"),
)

__all__ = ["Optimizer", *registry.exported_names("v1"), "InvalidArgumentError", "GATE_NONE", "GATE_OP", "GATE_GRAPH"]
