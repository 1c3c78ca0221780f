"""Whole optimizers on a CUDA device against the CPU foreach path, bit for bit: the rules that run on torch's ops
on a GPU (Keras 3 Ftrl, Lamb, Adafactor, schedule-free AdamW), and what remains different for Muon.

The first GPU run found these four differing from the CPU. The causes: CUDA divides by a Python number as a
product with its reciprocal (two roundings; the CPU divides), fixed by ``numerics.div_scalar``; and TensorFlow's
``pow`` (Eigen's packet ``pow``) and reduction order, which the CPU path takes from ``numerics`` and a GPU's
``torch.pow``/``torch.sum`` do not give, fixed by computing those from a host copy on a GPU.

Marked ``cuda``: run wherever ``torch.cuda.is_available()``, reported as skipped with the reason elsewhere.
"""

from __future__ import annotations

import pytest
import torch

import slotopt
from slotopt import numerics
from slotopt.kernels import native

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (torch.cuda)")]

SHAPES = [(1,), (7,), (33, 45), (300, 200)]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def _run(make, dtype: torch.dtype, device: str, steps: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator, dtype=dtype).to(device)) for s in SHAPES]
    opt = make(params)
    for _ in range(steps):
        for p in params:  # the same gradients on both sides: drawn on the CPU
            p.grad = torch.randn(p.shape, generator=generator, dtype=dtype).to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


def _cpu_foreach(make, dtype: torch.dtype, steps: int) -> list[torch.Tensor]:
    previous = native.use("foreach")
    try:
        return _run(make, dtype, "cpu", steps)
    finally:
        native.use(previous)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_division_by_a_number_is_correctly_rounded_on_cuda(dtype):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(1 << 16, generator=generator, dtype=dtype)
    for divisor in (0.999, 0.1, 3.0, 1e-3):
        expected = torch._foreach_div([x], divisor)[0]
        got = numerics.div_scalar([x.cuda()], divisor)[0].cpu()
        assert torch.equal(_bits(got), _bits(expected)), divisor
        inplace = [x.cuda()]
        numerics.div_scalar_(inplace, divisor)
        assert torch.equal(_bits(inplace[0].cpu()), _bits(expected)), divisor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_tensorflow_pow_and_sums_give_the_cpu_bits_on_cuda(dtype):
    generator = torch.Generator().manual_seed(5)
    x = torch.rand(37, 129, generator=generator, dtype=dtype) + 0.01
    for expected, got in (
            (numerics.pow(x, 0.5), numerics.pow(x.cuda(), 0.5)),
            (numerics.pow(x, 2), numerics.pow(x.cuda(), 2)),
            (numerics.pow(x, -0.3, rows=True), numerics.pow(x.cuda(), -0.3, rows=True)),
            (numerics.sum(x), numerics.sum(x.cuda())),
            (numerics.mean(x), numerics.mean(x.cuda())),
            (numerics.mean(x, dim=-1, keepdim=True), numerics.mean(x.cuda(), dim=-1, keepdim=True)),
            (numerics.mean(x, dim=0), numerics.mean(x.cuda(), dim=0)),
            (numerics.exp(x[0]), numerics.exp(x[0].cuda())),
            (numerics.log(x[0]), numerics.log(x[0].cuda()))):
        assert got.is_cuda and got.dtype == dtype and got.shape == expected.shape
        assert torch.equal(_bits(got.cpu()), _bits(expected))


RULES = {
    "Ftrl": lambda p: slotopt.Ftrl(learning_rate=0.01, params=p),
    "Lamb": lambda p: slotopt.Lamb(learning_rate=1e-3, params=p),
    "Adafactor": lambda p: slotopt.Adafactor(learning_rate=1e-3, params=p),
    "ScheduleFreeAdamW": lambda p: slotopt.ScheduleFreeAdamW(learning_rate=1e-3, params=p),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("rule", list(RULES))
def test_the_rules_on_torch_ops_step_on_cuda_as_on_the_cpu_bit_for_bit(rule, dtype):
    expected = _cpu_foreach(RULES[rule], dtype, steps=10)
    got = _run(RULES[rule], dtype, "cuda", steps=10)
    for e, g in zip(expected, got):
        assert torch.equal(_bits(g), _bits(e)), rule


def test_muon_on_cuda_is_within_rounding_of_the_cpu_and_never_takes_tf32():
    """Newton-Schulz is matrix products: cuBLAS and the CPU's BLAS sum in other orders, so a CUDA step is not the
    CPU's bits (documented in docs/performance.md, GPU) but within float32 rounding of them; and its products
    are full float32 even where the user allowed TF32 (10-bit mantissas: ~1e-3 off)."""
    from slotopt.kernels.muon import newton_schulz5

    generator = torch.Generator().manual_seed(2)
    x = torch.randn(64, 256, generator=generator)
    constants = {"steps": 5, "a": 3.4445, "b": -4.7750, "c": 2.0315, "norm_epsilon": 1e-7}
    expected = newton_schulz5(x, **constants)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # TF32 allowed by the user
    try:
        got = newton_schulz5(x.cuda(), **constants).cpu()
        assert torch.get_float32_matmul_precision() == "high"  # given back as it was
    finally:
        torch.set_float32_matmul_precision(previous)
    assert (got - expected).abs().max().item() < 2e-5  # TF32 products: ~1e-2 here

    make = lambda p: slotopt.Muon(learning_rate=1e-3, params=p)  # noqa: E731
    cpu = _cpu_foreach(make, torch.float32, steps=5)
    cuda = _run(make, torch.float32, "cuda", steps=5)
    for e, g in zip(cpu, cuda):
        torch.testing.assert_close(g, e, rtol=0.0, atol=1e-7)
