"""Complex variables (issue 24 item 8): TensorFlow's Keras 3 and tf.keras optimizers train complex64/complex128
variables by applying their formulas to the complex values as they are (``square(g)`` is ``g*g``, the principal
complex square root); the tf-keras suites run SGD, Adam, Nadam, RMSprop, Adagrad and Adadelta on them. TF1's
``train.Optimizer`` refuses complex variables ("Invalid type ... expected: [float32, float64, float16, bfloat16]",
verified in the spec), and so does every optimizer whose TensorFlow kernel has no complex variant (Ftrl, Adamax,
AMSGrad's maximum, clipping's comparisons). The compiled C kernels are real-only: complex runs the foreach path.

References are the formulas evaluated in NumPy complex128 (no recording of complex runs exists), and a complex run
whose imaginary parts are all zero must give the real run's bits.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import torch

import slotopt
from slotopt import legacy

RNG = np.random.default_rng(24)
W0 = RNG.normal(size=(3, 2)) + 1j * RNG.normal(size=(3, 2))
GRADS = [RNG.normal(size=(3, 2)) + 1j * RNG.normal(size=(3, 2)) for _ in range(3)]


# ------------------------------------------------------------------------------ the formulas, in complex128
# Hyperparameters exact in float32 (Keras keeps them as float32 variables): the references then see the same values.
LR, MOM, B1, B2, EPS, RHO = 0.125, 0.875, 0.875, 1 - 2.0 ** -10, 2.0 ** -20, 0.9375

def ref_keras3_sgd(w, grads, lr=LR, momentum=MOM, nesterov=False):
    m = np.zeros_like(w)
    for g in grads:
        m = momentum * m - lr * g
        w = w + (momentum * m - lr * g if nesterov else m)
    return w


def ref_adam(w, grads, lr=LR, b1=B1, b2=B2, eps=EPS):  # Keras 3 and tf.keras (ApplyAdam) alike
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        w = w - m * alpha / (np.sqrt(v) + eps)
    return w


def ref_keras3_rmsprop(w, grads, lr=LR, rho=RHO, eps=EPS):
    v = np.zeros_like(w)
    for g in grads:
        v = rho * v + (1 - rho) * g * g
        w = w - lr * g / np.sqrt(v + eps)
    return w


def ref_keras3_adagrad(w, grads, lr=LR, initial=0.25, eps=EPS):
    acc = np.full_like(w, initial)
    for g in grads:
        acc = acc + g * g
        w = w - lr * g / np.sqrt(acc + eps)
    return w


def ref_adadelta(w, grads, lr=LR, rho=RHO, eps=EPS):  # Keras 3 and tf.keras (ApplyAdadelta) alike
    acc_g, acc_d = np.zeros_like(w), np.zeros_like(w)
    for g in grads:
        acc_g = rho * acc_g + (1 - rho) * g * g
        delta = np.sqrt(acc_d + eps) / np.sqrt(acc_g + eps) * g
        acc_d = rho * acc_d + (1 - rho) * delta * delta
        w = w - lr * delta
    return w


def ref_lion(w, grads, lr=LR, b1=B1, b2=RHO):
    m = np.zeros_like(w)
    for g in grads:
        d = m * b1 + g * (1 - b1)
        w = w - lr * np.where(d == 0, 0, d / np.where(d == 0, 1, np.abs(d)))  # TF's complex sign: z / |z|
        m = m * b2 + g * (1 - b2)
    return w


def ref_legacy_rmsprop(w, grads, lr=LR, rho=RHO, momentum=0.5, eps=EPS, centered=True):  # ApplyCenteredRMSProp
    ms, mg, mom = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for g in grads:
        ms = ms + (g * g - ms) * (1 - rho)
        mg = mg + (g - mg) * (1 - rho)
        denom = ms - mg * mg + eps if centered else ms + eps
        mom = mom * momentum + lr * g / np.sqrt(denom)
        w = w - mom
    return w


def ref_legacy_adagrad(w, grads, lr=LR, initial=0.25, eps=EPS):  # ApplyAdagradV2
    acc = np.full_like(w, initial)
    for g in grads:
        acc = acc + g * g
        w = w - lr * g / (np.sqrt(acc) + eps)
    return w


CASES: dict[str, tuple[Callable[[], Any], Callable[..., Any]]] = {
    "keras3 SGD momentum": (lambda: slotopt.SGD(LR, momentum=MOM), ref_keras3_sgd),
    "keras3 SGD nesterov": (lambda: slotopt.SGD(LR, momentum=MOM, nesterov=True),
                            lambda w, g: ref_keras3_sgd(w, g, nesterov=True)),
    "keras3 Adam": (lambda: slotopt.Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS), ref_adam),
    "keras3 RMSprop": (lambda: slotopt.RMSprop(LR, rho=RHO, epsilon=EPS), ref_keras3_rmsprop),
    "keras3 Adagrad": (lambda: slotopt.Adagrad(LR, initial_accumulator_value=0.25, epsilon=EPS),
                       ref_keras3_adagrad),
    "keras3 Adadelta": (lambda: slotopt.Adadelta(LR, rho=RHO, epsilon=EPS), ref_adadelta),
    "keras3 Lion": (lambda: slotopt.Lion(LR, beta_1=B1, beta_2=RHO), ref_lion),
    "legacy SGD nesterov": (lambda: legacy.SGD(LR, momentum=MOM, nesterov=True),
                            lambda w, g: ref_keras3_sgd(w, g, nesterov=True)),
    "legacy Adam": (lambda: legacy.Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS), ref_adam),
    "legacy RMSprop centered momentum": (lambda: legacy.RMSprop(LR, rho=RHO, momentum=0.5, epsilon=EPS,
                                                                centered=True), ref_legacy_rmsprop),
    "legacy Adagrad": (lambda: legacy.Adagrad(LR, initial_accumulator_value=0.25, epsilon=EPS),
                       ref_legacy_adagrad),
    "legacy Adadelta": (lambda: legacy.Adadelta(LR, rho=RHO, epsilon=EPS), ref_adadelta),
}


def run(make: Callable[[], Any], w0: np.ndarray, grads: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
    w = slotopt.Variable(torch.tensor(w0, dtype=dtype), name="w")
    opt = make()
    for g in grads:
        opt.apply_gradients([(torch.tensor(g, dtype=dtype), w)])
    return w.detach()


@pytest.mark.parametrize("dtype, rtol", [(torch.complex128, 1e-12), (torch.complex64, 2e-5)],
                         ids=["complex128", "complex64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_complex_variables_follow_the_formulas_on_complex_values(case: str, dtype: torch.dtype, rtol: float):
    # tf-keras adagrad_test/adadelta_test/rmsprop_test/optimizer_v2_test loop their cases over complex64/128.
    make, reference = CASES[case]
    got = run(make, W0, GRADS, dtype).numpy().astype(np.complex128)
    expected = reference(W0.copy(), GRADS)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    assert np.abs(got.imag - W0.imag).max() > 1e-6  # the imaginary parts moved: the update is complex


ALL_SUPPORTED = {
    **{name: make for name, (make, _) in CASES.items()},
    "keras3 SGD": lambda: slotopt.SGD(0.1), "keras3 AdamW": lambda: slotopt.AdamW(0.1, weight_decay=0.1),
    "keras3 Nadam": lambda: slotopt.Nadam(0.1), "keras3 RMSprop centered": lambda: slotopt.RMSprop(
        0.1, momentum=0.5, centered=True), "keras3 Adam ema": lambda: slotopt.Adam(0.1, use_ema=True),
    "legacy SGD": lambda: legacy.SGD(0.1), "legacy Nadam": lambda: legacy.Nadam(0.1),
    "legacy RMSprop": lambda: legacy.RMSprop(0.1), "legacy Adam decay": lambda: legacy.Adam(0.1, decay=0.1),
    "keras3 LossScaleOptimizer": lambda: slotopt.LossScaleOptimizer(slotopt.Adam(0.1), initial_scale=1.0),
}


@pytest.mark.parametrize("case", sorted(ALL_SUPPORTED))
def test_a_complex_run_with_zero_imaginary_parts_stays_real_and_matches_the_real_run(case: str):
    # The real run is the one parity-tested against TensorFlow's recorded bits. A complex division takes two
    # roundings where a real one takes one (torch's and Eigen's complex division both scale), so the real parts
    # agree to an ULP or two, not bit for bit; the imaginary parts stay exactly zero.
    make = ALL_SUPPORTED[case]
    w0, grads = W0.real.copy(), [g.real.copy() for g in GRADS]
    for real_dtype, complex_dtype, rtol in ((torch.float64, torch.complex128, 1e-15),
                                            (torch.float32, torch.complex64, 1e-6)):
        real = run(make, w0, grads, real_dtype)
        as_complex = run(make, w0.astype(np.complex128), [g.astype(np.complex128) for g in grads], complex_dtype)
        assert torch.count_nonzero(as_complex.imag) == 0
        np.testing.assert_allclose(as_complex.real.numpy(), real.numpy(), rtol=rtol, atol=rtol)


REFUSED = {
    "keras3 Ftrl": lambda: slotopt.Ftrl(0.1), "keras3 Adamax": lambda: slotopt.Adamax(0.1),
    "keras3 Adam amsgrad": lambda: slotopt.Adam(0.1, amsgrad=True), "keras3 Lamb": lambda: slotopt.Lamb(0.1),
    "keras3 Adafactor": lambda: slotopt.Adafactor(0.1), "keras3 Muon": lambda: slotopt.Muon(),
    "keras3 SGD clipnorm": lambda: slotopt.SGD(0.1, clipnorm=1.0),
    "legacy Ftrl": lambda: legacy.Ftrl(0.1), "legacy Adamax": lambda: legacy.Adamax(0.1),
    "legacy Adam amsgrad": lambda: legacy.Adam(0.1, amsgrad=True),
    "legacy SGD clipvalue": lambda: legacy.SGD(0.1, clipvalue=1.0),
    "MultiOptimizer of Ftrl": lambda: slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Ftrl(0.1))),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_where_tensorflow_has_no_complex_kernel_it_is_refused_and_nothing_changes(case: str):
    w = slotopt.Variable(torch.tensor(W0, dtype=torch.complex64), name="w")
    before = w.detach().clone()
    with pytest.raises(TypeError, match="complex variable w"):
        REFUSED[case]().apply_gradients([(torch.tensor(GRADS[0], dtype=torch.complex64), w)])
    assert torch.equal(w.detach(), before)


@pytest.mark.parametrize("make", [lambda: slotopt.v1.GradientDescentOptimizer(0.1),
                                  lambda: slotopt.v1.AdamOptimizer(0.1)], ids=["GradientDescent", "Adam"])
def test_tf1_refuses_complex_variables_as_tensorflow_does(make):
    w = slotopt.Variable(torch.tensor(W0, dtype=torch.complex64), name="w")
    with pytest.raises(ValueError, match=r"Invalid type torch.complex64 for w, expected: \[torch.float32"):
        make().apply_gradients([(torch.tensor(GRADS[0], dtype=torch.complex64), w)])


def test_a_gradient_of_another_dtype_is_refused_for_a_complex_variable():
    w = slotopt.Variable(torch.tensor(W0, dtype=torch.complex64), name="w")
    with pytest.raises(ValueError, match="complex variable w must have its dtype"):
        slotopt.SGD(0.1).apply_gradients([(torch.ones(3, 2), w)])


def test_complex_parameters_train_through_the_torch_protocol():
    # As torch.optim trains complex parameters: backward on a real loss of complex weights, then step(). Plain SGD
    # is the same update in both conventions, so slotopt and torch.optim.SGD agree; (Adam-family steps follow
    # TensorFlow's g*g, which torch.optim, working on view_as_real, does not.)
    torch.manual_seed(0)
    ours, theirs = (torch.nn.Linear(2, 1, bias=False, dtype=torch.complex64) for _ in range(2))
    theirs.load_state_dict(ours.state_dict())
    opt, reference = slotopt.SGD(learning_rate=0.1, params=ours), torch.optim.SGD(theirs.parameters(), lr=0.1)
    x = torch.tensor([[1.0 + 1.0j, -0.5j]], dtype=torch.complex64)
    losses = []
    for _ in range(20):
        for model, optimizer in ((ours, opt), (theirs, reference)):
            optimizer.zero_grad()
            loss = ((model(x) - (0.5 - 0.25j)).abs() ** 2).sum()
            loss.backward()
            optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 1e-3 * losses[0]
    torch.testing.assert_close(ours.weight, theirs.weight, rtol=1e-6, atol=1e-7)
