"""The multi-tensor, cache-blocked and packed execution paths give the same bits as one tensor at a time.

Every optimizer is run twice on the same variables and gradients: once as shipped (variables grouped, large
tensors cut into cache-sized blocks, small variables' state packed into one buffer) and once one tensor at a
time with blocking disabled. The results must be identical, bit for bit.
"""

import pytest
import torch

import slotopt
from slotopt.kernels import blocks

SHAPES = [(600, 500), (5, 7), (7,), (3, 4), (2,), (40, 40), (5, 7), (9,)]

KERAS3 = {
    "SGD": dict(learning_rate=0.1), "SGD-momentum": dict(learning_rate=0.1, momentum=0.9, nesterov=True),
    "Adam": dict(learning_rate=0.01, amsgrad=True), "AdamW": dict(learning_rate=0.01),
    "Adamax": dict(learning_rate=0.01), "Nadam": dict(learning_rate=0.01),
    "RMSprop": dict(learning_rate=0.01, centered=True, momentum=0.5), "Adagrad": dict(learning_rate=0.1),
    "Adadelta": dict(learning_rate=1.0), "Ftrl": dict(learning_rate=0.1, l1_regularization_strength=0.01),
    "Lion": dict(learning_rate=0.01), "Adafactor": dict(learning_rate=0.01), "Lamb": dict(learning_rate=0.01),
    "SGD-ema": dict(learning_rate=0.1, momentum=0.5, use_ema=True, ema_momentum=0.75),
    "Adam-accumulation": dict(learning_rate=0.01, gradient_accumulation_steps=2, weight_decay=0.25),
    "AdamW-global_clipnorm": dict(learning_rate=0.01, global_clipnorm=1.0),
}
LEGACY = {
    "SGD": dict(learning_rate=0.1, momentum=0.9), "Adam": dict(learning_rate=0.01), "Adamax": {}, "Nadam": {},
    "RMSprop": dict(momentum=0.5, centered=True), "Adagrad": {}, "Adadelta": {}, "Ftrl": {},
}
V1 = {
    "GradientDescentOptimizer": dict(learning_rate=0.1), "MomentumOptimizer": dict(learning_rate=0.1, momentum=0.9),
    "AdamOptimizer": dict(learning_rate=0.01), "AdagradOptimizer": dict(learning_rate=0.1),
    "AdadeltaOptimizer": dict(learning_rate=1.0), "RMSPropOptimizer": dict(learning_rate=0.01, momentum=0.5),
    "FtrlOptimizer": dict(learning_rate=0.1), "ProximalGradientDescentOptimizer": dict(learning_rate=0.1),
    "ProximalAdagradOptimizer": dict(learning_rate=0.1),
}


def _make(api, name, kwargs):
    if api == "keras3":
        return getattr(slotopt, name.split("-")[0])(**kwargs)
    module = slotopt.legacy if api == "legacy" else slotopt.v1
    return getattr(module, name)(**kwargs)


def _run(api, name, kwargs, one_at_a_time, monkeypatch):
    gen = torch.Generator().manual_seed(0)
    variables = [slotopt.Variable(torch.randn(s, generator=gen), name=f"v{i}") for i, s in enumerate(SHAPES)]
    opt = _make(api, name, kwargs)
    if one_at_a_time:
        opt.foreach = False
        monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 1 << 40)
    else:
        monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 1 << 14)  # small blocks: many cuts even here
    blocks._plans.clear()
    for _ in range(3):
        pairs = [(torch.randn(v.shape, generator=gen), v) for v in variables]
        opt.apply_gradients(pairs)
    blocks._plans.clear()
    return [v.detach().clone() for v in variables]


@pytest.mark.parametrize("api,name,kwargs", [("keras3", n, k) for n, k in KERAS3.items()]
                         + [("legacy", n, k) for n, k in LEGACY.items()]
                         + [("v1", n, k) for n, k in V1.items()],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_grouped_blocked_packed_paths_equal_one_tensor_at_a_time(api, name, kwargs, monkeypatch):
    fast = _run(api, name, kwargs, one_at_a_time=False, monkeypatch=monkeypatch)
    slow = _run(api, name, kwargs, one_at_a_time=True, monkeypatch=monkeypatch)
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert torch.equal(a, b), f"variable {i} {tuple(a.shape)} differs: max {float((a - b).abs().max())}"


# Clipping is the exception to "sparse equals dense": Keras takes the norm over the rows as given, before
# duplicates are summed (spec §1.6).
SPARSE_LIKE_DENSE = {n: k for n, k in KERAS3.items() if not any("clip" in key for key in k)}


@pytest.mark.parametrize("name,kwargs", list(SPARSE_LIKE_DENSE.items()), ids=list(SPARSE_LIKE_DENSE))
def test_keras3_sparse_gradient_by_row_blocks_equals_dense(name, kwargs, monkeypatch):
    """Keras 3: a sparse gradient gives exactly the dense result, also when the table is updated a block of
    rows at a time (blocks made tiny here, so that rows fall in many blocks, some in none)."""
    monkeypatch.setattr(blocks, "CPU_BLOCK_ELEMENTS", 4)
    blocks._plans.clear()
    gen = torch.Generator().manual_seed(1)
    init = torch.randn(50, 3, generator=gen)
    steps = []
    for _ in range(3):
        indices = torch.randint(0, 50, (12,), generator=gen)
        steps.append(slotopt.IndexedSlices(torch.randn(12, 3, generator=gen), indices, (50, 3)))
    results = []
    for sparse in (True, False):
        table = slotopt.Variable(init, name="table")
        opt = _make("keras3", name, kwargs)
        for grad in steps:
            opt.apply_gradients([(grad if sparse else grad.to_dense(), table)])
        results.append(table.detach().clone())
    blocks._plans.clear()
    assert torch.equal(results[0], results[1])
