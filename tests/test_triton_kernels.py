"""The Triton kernels (the CUDA path) against the foreach kernels, bit for bit, under Triton's interpreter.

There is no GPU here: ``TRITON_INTERPRET=1`` runs the same kernels on CPU tensors with NumPy, which performs
every operation rounded in the tensor dtype, like the GPU with FMA contraction off and ``div_rn``/``sqrt_rn``.
"""

from __future__ import annotations

import pytest
import torch
from test_native_kernels import CASES, _assert_same_bits, _make_lists

from slotopt import numerics
from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels

pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN of sqrt(v - a*a) < 0, masked lanes

TRITON_CASES = [c for c in CASES if c[1].rule in triton_kernels.RULES]
SIZES = [1, 7, 1500]


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)  # define the kernels under the interpreter
    yield


def test_every_family_the_issue_names_has_triton_kernels():
    assert {"adam", "decoupled_weight_decay", "keras_momentum", "rmsprop", "adagrad"} <= set(triton_kernels.RULES)
    assert len({c[1].rule for c in TRITON_CASES}) == len(triton_kernels.RULES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", TRITON_CASES, ids=[c[0] for c in TRITON_CASES])
def test_triton_rule_equals_foreach_rule_bit_for_bit(case, dtype, interpreter, monkeypatch):
    import test_native_kernels

    monkeypatch.setattr(test_native_kernels, "SIZES", SIZES)
    # On the CPU, the foreach rules of TensorFlow's fused float32 Adagrad/ProximalAdagrad/Adadelta kernels take
    # the CPU's rsqrtps estimate (slotopt.numerics.rsqrt); on a GPU, where Triton runs, they take 1 / sqrt(x),
    # as the Triton kernels do. The reference here is the foreach rule as it runs on a GPU.
    monkeypatch.setattr(numerics.ops, "_estimate_function", lambda: None)
    name, kernel, roles, kwargs = case
    reference = _make_lists(roles, dtype, seed=len(name))
    candidate = [None if ts is None else [t.clone() for t in ts] for ts in reference]
    previous = native.use("foreach")
    try:
        for _ in range(2):
            kernel(*reference, **kwargs)
    finally:
        native.use(previous)
    values = kernel.scalar_vector(*candidate, **kwargs)
    for _ in range(2):
        assert triton_kernels.apply(kernel.rule, candidate, values)
    _assert_same_bits(reference, candidate, name)


def test_triton_path_declines_what_it_cannot_take(interpreter):
    params, grads = [torch.randn(8).half()], [torch.randn(8).half()]
    assert not triton_kernels.apply("sgd", [params, grads], [0.1])
    assert not triton_kernels.apply("adadelta", [params, grads], [0.1])


def test_without_the_interpreter_cpu_tensors_stay_on_the_other_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not triton_kernels.apply("sgd", [[torch.randn(8)], [torch.randn(8)]], [0.1])
