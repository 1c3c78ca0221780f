"""AdaBelief, added to the three generations by its kernel module and three face modules only (the steps are in
docs/architecture.md, "Adding an optimizer"): each face against the paper's formula (Zhuang et al. 2020,
Algorithm 2) computed here in NumPy, the same bits, in float32 and float64. The hyperparameters are exact in
float32 so that every generation's rounding of them is the same number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import slotopt
from slotopt.engine import registry

LR, B1, B2, EPS = 0.125, 0.75, 0.875, 2.0 ** -20
GRADS = [np.array([0.5, -1.25, 3.0, 0.0]), np.array([-0.75, 2.0, 0.125, 1.5]), np.array([1.0, 1.0, -2.5, 0.25])]
START = np.array([1.0, -0.5, 0.25, 2.0])


def paper(dtype: type) -> list[np.ndarray]:
    """Algorithm 2 of the paper, operation by operation, in ``dtype``: the weights after each step."""
    f = dtype
    w, m, s = START.astype(f), np.zeros(4, f), np.zeros(4, f)
    out = []
    for t, g in enumerate(GRADS, start=1):
        g = g.astype(f)
        m = f(B1) * m + f(1 - B1) * g
        s = (f(B2) * s + f(1 - B2) * ((g - m) * (g - m))) + f(EPS)
        m_hat, s_hat = m / (f(1) - f(B1) ** t), s / (f(1) - f(B2) ** t)
        w = w - f(LR) * (m_hat / (np.sqrt(s_hat) + f(EPS)))
        out.append(w.copy())
    return out


FACES = {
    "keras3": lambda: slotopt.AdaBelief(learning_rate=LR, beta_1=B1, beta_2=B2, epsilon=EPS),
    "legacy": lambda: slotopt.legacy.AdaBelief(learning_rate=LR, beta_1=B1, beta_2=B2, epsilon=EPS),
    "v1": lambda: slotopt.v1.AdaBeliefOptimizer(LR, beta1=B1, beta2=B2, epsilon=EPS),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("face", sorted(FACES))
def test_each_generation_computes_the_papers_formula_bit_for_bit(face, dtype):
    expected = paper(np.float32 if dtype == torch.float32 else np.float64)
    w = slotopt.Variable(torch.tensor(START, dtype=dtype), name="w")
    opt = FACES[face]()
    for g, want in zip(GRADS, expected):
        opt.apply_gradients([(torch.tensor(g, dtype=dtype), w)])
        assert w.detach().numpy().tobytes() == want.tobytes(), (w.tolist(), want.tolist())


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_sparse_gradient_is_the_dense_rule_on_its_densified_gradient(face):
    table = slotopt.Variable(torch.linspace(-1.0, 1.0, 10).reshape(5, 2), name="table")
    dense = slotopt.Variable(table.detach().clone(), name="table")
    sparse_opt, dense_opt = FACES[face](), FACES[face]()
    values, indices = torch.tensor([[0.5, -1.0], [2.0, 0.25], [1.0, 1.0]]), torch.tensor([3, 0, 3])
    for _ in range(2):
        sparse_opt.apply_gradients([(slotopt.IndexedSlices(values, indices, (5, 2)), table)])
        dense_opt.apply_gradients([(torch.zeros(5, 2).index_add_(0, indices, values), dense)])
    assert torch.equal(table, dense)
    assert not torch.equal(table[3], torch.linspace(-1.0, 1.0, 10).reshape(5, 2)[3])


def test_adabelief_is_slotopts_own_in_every_generation():
    written = {g: registry.serialized_module(cls) for g, cls in
               (("keras3", slotopt.AdaBelief), ("legacy", slotopt.legacy.AdaBelief),
                ("v1", slotopt.v1.AdaBeliefOptimizer))}
    assert written == {"keras3": "slotopt.keras3", "legacy": "slotopt.legacy", "v1": "slotopt.v1"}
    assert slotopt.get("adabelief").__class__ is slotopt.AdaBelief
    assert slotopt.AdaBelief._sparse_one_pass is False  # foreach only: found from its kernel
