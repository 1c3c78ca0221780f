"""Keras 3 updates the moving averages (``use_ema``) before it applies the variables' constraints: the average of
a constrained variable is taken of its unconstrained value. Recorded by ``tools/record_ema_constraint.py`` (Keras
3.15.1 on TensorFlow 2.21): Adam, ``use_ema=True``, a ``NonNeg`` kernel, three steps; bit for bit on every path."""

from pathlib import Path

import numpy as np
import pytest
import torch
from _kernel_paths import ALL_PATHS, on_path, path_id

import slotopt

RECORDED = np.load(Path(__file__).parents[1] / "data" / "keras3_order" / "ema_constraint.npz")


@pytest.mark.parametrize("path", ALL_PATHS, ids=path_id)
def test_moving_average_is_taken_before_the_constraint(path):
    with on_path(*path):
        kernel = slotopt.Variable(torch.tensor(RECORDED["k0"]), name="kernel", constraint=lambda v: v.clamp(min=0))
        bias = slotopt.Variable(torch.ones(3), name="bias")
        opt = slotopt.Adam(learning_rate=0.5, use_ema=True, ema_momentum=0.5)
        for s in range(3):
            opt.apply_gradients([(torch.tensor(RECORDED[f"g{s}_0"]), kernel), (torch.tensor(RECORDED[f"g{s}_1"]), bias)])
    averages = {v.name: v.detach().numpy() for v in opt.variables if v.name.endswith("_average")}
    np.testing.assert_array_equal(kernel.detach().numpy(), RECORDED["kernel"])
    np.testing.assert_array_equal(bias.detach().numpy(), RECORDED["bias"])
    # The recorded average went negative where the constraint clamped the kernel to 0.
    assert (RECORDED["ema"] < 0).any()
    np.testing.assert_array_equal(averages["kernel_average"], RECORDED["ema"])
    np.testing.assert_array_equal(averages["bias_average"], RECORDED["ema_b"])
