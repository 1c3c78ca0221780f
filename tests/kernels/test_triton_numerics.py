"""TensorFlow's reductions on the device (``kernels/triton/reductions.py``) against ``numerics`` on the CPU, bit for
bit under Triton's interpreter: Eigen's full-reduction order (leaves of 1,024 packets, trees of halves above), rows
reduced like whole tensors, outer axes added in order; random and edge values (signed zeros, subnormals,
infinities, NaN, huge and tiny magnitudes). And what a CUDA graph capture may not do in numerics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from slotopt import numerics
from slotopt.numerics import device, eigen, ops

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture
def interpreter(monkeypatch):
    from slotopt.kernels.triton import reductions

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(reductions, "_kernels", None)
    yield reductions


def _values(n, dtype, seed, edge):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=generator, dtype=torch.float64) * 10.0 ** (seed % 7 - 3)).to(dtype)
    if edge and n:
        info = torch.finfo(dtype)
        special = torch.tensor([0.0, -0.0, info.tiny / 4, -info.tiny / 16, info.tiny, info.max / 8, -info.max / 8,
                                1e-30, -2.0 ** 40], dtype=dtype)
        at = torch.randperm(n, generator=generator)[:len(special)]
        x[at] = special[:len(at)]
    return x


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and (a.tobytes() == b.tobytes() or bool(np.all(np.isnan(a) & np.isnan(b))))


# (sizes: empty, under a packet, whole packets, blocks of four, a leaf's limit of 8,192 float32 / 4,096 float64
# elements and past it: trees of two and more leaves)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 33, 100, 4097, 8193, 20011])
def test_a_device_sum_has_eigen_s_bits(n, dtype, interpreter):
    for edge in (False, True):
        x = _values(n, dtype, seed=n, edge=edge)
        assert _same(interpreter.full_sum(x).numpy(), eigen.full_sum(x.numpy())), (n, edge)


@pytest.mark.parametrize("special", [float("inf"), -float("inf"), float("nan")])
def test_infinities_and_nan_propagate_as_on_the_cpu(special, interpreter):
    for dtype in (torch.float32, torch.float64):
        x = _values(9000, dtype, seed=3, edge=True)
        x[4321] = special
        assert _same(interpreter.full_sum(x).numpy(), eigen.full_sum(x.numpy()))
        x[17] = -special
        assert _same(interpreter.full_sum(x).numpy(), eigen.full_sum(x.numpy()))


def test_the_plan_is_eigen_s_tree():
    from slotopt.kernels.triton import reductions

    leaves, nodes, roots = reductions.plan(1, 8 * 1024 * 3 + 5, 8)
    assert leaves[:, 1].sum() == 8 * 1024 * 3 + 5 and (leaves[:, 1] <= 8 * 1024).all()
    assert np.all(leaves[:, 0] % 8 == 0)  # every leaf starts on a packet
    assert roots.tolist() == [len(leaves) + len(nodes) - 1]  # the root is the last node of the postorder
    leaves, nodes, roots = reductions.plan(3, 10, 8)
    assert leaves.tolist() == [[0, 10], [10, 10], [20, 10]] and len(nodes) == 0 and roots.tolist() == [0, 1, 2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_a_device_mean_has_numerics_bits_over_every_axis(dtype, interpreter):
    x = _values(3 * 5 * 41, dtype, seed=5, edge=True).reshape(3, 5, 41)
    for dim in (None, 0, 1, 2, -1):
        for keepdim in (False, True):
            got = ops._device_mean(x, dim, keepdim)
            want = numerics.mean(x, dim, keepdim)
            assert got is not None and _same(got.numpy(), want.numpy()), (dim, keepdim)
    square = _values(9000, dtype, seed=6, edge=False) ** 2
    assert _same(ops._device_mean(square, None, False).numpy(), numerics.mean(square).numpy())


def test_numerics_is_handed_the_device_kernels(interpreter):
    rows = device.function("row_sums")
    assert rows is not None and device.function("column_sums") is not None
    x = _values(100, torch.float32, seed=1, edge=False)
    assert _same(rows(x, 1, 100).numpy(), eigen.full_sum(x.numpy()))
    assert _same(rows(x, 4, 25).numpy(), np.array([eigen.full_sum(r) for r in x.numpy().reshape(4, 25)]))


def test_during_a_capture_numerics_refuses_what_it_has_no_device_kernel_for(monkeypatch):
    x = torch.ones(3)
    monkeypatch.setattr(device, "capturing", lambda t: True)  # (no GPU here: the predicate's answer during one)
    with pytest.raises(device.NotCapturable, match=r"numerics.pow cannot be captured in a CUDA graph: it has no "
                                                   r"device kernel"):
        device.refuse_capture("numerics.pow", x)
    monkeypatch.setattr(device, "capturing", lambda t: False)
    device.refuse_capture("numerics.pow", x)  # not capturing: nothing to refuse


def test_the_reduction_kernels_compile_for_a_hopper_gpu_without_contraction():
    """Triton's compiler runs without a GPU: the leaf, tree and column kernels compile for sm_90 (their shape
    operations, loops and the barrier are valid there), with no fused multiply-add."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from slotopt.kernels.triton import reductions

    kernels = reductions._build()
    for dtype, width in (("fp32", 8), ("fp64", 4)):
        cases = ((kernels["leaf_sums"], {"x_ptr": f"*{dtype}", "leaves_ptr": "*i64", "out_ptr": f"*{dtype}",
                                         "W": "constexpr"}, {"W": width}),
                 (kernels["combine"], {"buf_ptr": f"*{dtype}", "nodes_ptr": "*i64", "n": "i64"}, {}),
                 (kernels["columns"], {"x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "rows": "i64", "width": "i64",
                                       "BLOCK": "constexpr"}, {"BLOCK": 256}))
        for kernel, signature, constants in cases:
            compiled = triton.compile(ASTSource(kernel, signature, constexprs=constants),
                                      target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})
            assert not re.search(r"\bfma\.", compiled.asm["ptx"])


def _pow_inputs(dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.rand(400, generator=generator, dtype=torch.float64) * 10,
                   torch.randn(400, generator=generator, dtype=torch.float64) * 1e-3,
                   torch.exp(torch.randn(400, generator=generator, dtype=torch.float64) * 40)]).to(dtype)
    info = torch.finfo(dtype)
    x[:16] = torch.tensor([0.0, -0.0, info.tiny / 4, -info.tiny / 3, info.tiny, info.max, -info.max, float("inf"),
                           -float("inf"), float("nan"), 1.0, -1.0, 2.0, -2.0, 0.5, -3.5], dtype=dtype)
    return x


# (exponents: Ftrl's and Lamb's, fractional and odd and even integers, tiny and huge ones that over- and underflow
# whole packets, and the special ones)
EXPONENTS = [-0.5, 2.0, 0.5, -1.5, 3.0, 1e-3, 100.0, -100.0, 0.0, -0.0, 1.0, 7.25, 1e10, float("inf"), float("nan")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_device_packet_pow_has_eigen_s_bits(dtype, monkeypatch):
    from slotopt.kernels.triton import eigen_pow

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(eigen_pow, "_kernels", None)
    x = _pow_inputs(dtype, seed=1)
    for exponent in EXPONENTS:
        assert eigen_pow.applies(x, exponent, False)
        want = eigen.generic_pow(x.numpy(), np.asarray(exponent, dtype=x.numpy().dtype))
        assert _same(eigen_pow.pow_packets(x, exponent).numpy(), want), exponent
    y = (torch.randn(x.numel(), generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 3).to(dtype)
    y[:16] = torch.tensor([0.5, -1.0, 2.0, 3.0, -0.5, 1.0, 0.0, -2.0, 0.5, 1.0, 7.0, 1e3, -1e3, 2.0, 3.0, -3.0])
    assert _same(eigen_pow.pow_packets(x, y).numpy(), eigen.generic_pow(x.numpy(), y.numpy()))
    # numerics.pow's own answer on the CPU (whole packets: Eigen's everywhere) is the kernel's
    assert _same(eigen_pow.pow_packets(x, -0.5).numpy(), numerics.pow(x, -0.5).numpy())


def test_the_packet_pow_takes_only_whole_packets():
    from slotopt.kernels.triton import eigen_pow, libm, step_scalars

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        assert eigen_pow.applies(torch.ones(16), 2.0, False) and eigen_pow.applies(torch.ones(3, 8), 2.0, True)
        # a tail of 4, the C library's pow there: glibc's powf on the device for float32, its pow for float64
        # (where the device kernel gives this C library's bits: kernels/triton/libm.py)
        assert eigen_pow.applies(torch.ones(12), 2.0, False) == step_scalars.available()
        assert eigen_pow.applies(torch.ones(6, dtype=torch.float64), 2.0, False) == libm.available()
        assert eigen_pow.applies(torch.ones(2, 4, dtype=torch.float64), 2.0, True)
        assert not eigen_pow.applies(torch.ones(3, 5), 2.0, True)
        assert not eigen_pow.applies(torch.ones(8), torch.ones(4), False)  # an exponent of another shape
        assert not eigen_pow.applies(torch.ones(8).half(), 2.0, False)
    assert not eigen_pow.applies(torch.ones(8), 2.0, False)  # CPU tensors without the interpreter: numerics' own


def test_the_packet_pow_compiles_for_a_hopper_gpu_without_contraction():
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from slotopt.kernels.triton import eigen_pow

    kernel = eigen_pow._build()["pow_packets"]
    for dtype, width in (("fp32", 8), ("fp64", 4)):
        signature = {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n": "i64", "whole": "i64",
                     "d_ptr": "*fp64", "e_ptr": "*i64", "Y_SCALAR": "constexpr", "W": "constexpr",
                     "TAIL": "constexpr", "BLOCK": "constexpr"}
        compiled = triton.compile(ASTSource(kernel, signature, constexprs={"Y_SCALAR": True, "W": width,
                                                                           "TAIL": dtype == "fp32",
                                                                           "BLOCK": 512}),
                                  target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})
        ptx = compiled.asm["ptx"]
        assert not re.search(r"\bfma\.", ptx) and "approx" not in ptx, dtype
