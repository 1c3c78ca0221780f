"""Update rules written once, as functions over lists of tensors.

Every kernel takes the variables, their gradients and their state as parallel lists, plus hyperparameters that
the calling face has already rounded the way its generation rounds them (see ``slotopt.engine.constants``).
Called with one-element lists it is the per-tensor path; with a whole (device, dtype) group it is the
multi-tensor path. Kernels only use ``torch._foreach_*`` ops, evaluated in the order of the reference libraries,
with no fused multiply-adds, so results match Keras/TensorFlow bit for bit where the spec says they can.
"""

from ..numerics import compiled as _compiled
from ..numerics import device as _device
from . import native as _native

# numerics calls two helpers of the compiled library (rsqrtps, the denormal mode): handed down from here, the
# floor that loads it, so that numerics never imports a floor above it.
_compiled.provide(_native._library)


def _device_numerics() -> dict:
    """numerics' device kernels (TensorFlow's reductions in Eigen's order, Eigen's packet pow, the C library's
    exp/log/pow: ``libm_*``), where Triton is installed."""
    from . import triton

    if not triton.available():
        return {}
    from .triton import device_libm, eigen_pow, reductions

    def only_where_applies(fn):
        return lambda t, *args: fn(t, *args) if reductions.applies(t) else None

    def packet_pow(x, exponent, rows):
        return eigen_pow.pow_packets(x, exponent) if eigen_pow.applies(x, exponent, rows) else None

    return {"row_sums": only_where_applies(reductions.row_sums),
            "column_sums": only_where_applies(reductions.column_sums), "pow": packet_pow, **device_libm.FUNCTIONS}


_device.provide(_device_numerics)  # (loaded on first use: Triton is imported only when a GPU tensor needs it)
