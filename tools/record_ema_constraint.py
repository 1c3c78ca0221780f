"""Records ``tests/data/keras3_order/ema_constraint.npz``: Keras 3.15.1 (TensorFlow 2.21 backend) Adam with
``use_ema=True`` on a Dense layer whose kernel has a ``NonNeg`` constraint, three ``apply_gradients`` calls with
seeded gradients. Keras updates the moving averages before the constraints run (``BaseOptimizer.apply``), so the
average holds values the constrained kernel never had. Run with the separate TensorFlow venv:

    /work/tfvenv/bin/python tools/record_ema_constraint.py
"""

import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

layer = keras.layers.Dense(3, kernel_constraint=keras.constraints.NonNeg(), bias_initializer="ones")
layer.build((None, 2))
opt = keras.optimizers.Adam(learning_rate=0.5, use_ema=True, ema_momentum=0.5)
rng = np.random.default_rng(0)
k0 = np.abs(rng.standard_normal((2, 3)).astype("float32"))
layer.kernel.assign(k0)
recorded = {"k0": k0}
for s in range(3):
    grads = [rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal(3).astype("float32")]
    recorded.update({f"g{s}_{i}": g for i, g in enumerate(grads)})
    opt.apply_gradients(zip([tf.constant(g) for g in grads], layer.trainable_variables))
averages = opt._model_variables_moving_average
np.savez("tests/data/keras3_order/ema_constraint.npz", **recorded, kernel=layer.kernel.numpy(),
         bias=layer.bias.numpy(), ema=averages[0].numpy(), ema_b=averages[1].numpy())
