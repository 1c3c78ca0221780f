"""slotopt.legacy end to end: an ``nn.Embedding(sparse=True)`` model trained by every legacy optimizer, and the
default gradient aggregator with ``torch.distributed`` (one process: no-op; two processes: summed)."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _processes import COLLECTIVE_TIMEOUT, run_processes

import slotopt
from slotopt.engine.distributed import all_reduce_sum_gradients, is_distributed
from slotopt.legacy import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, LossScaleOptimizer, Nadam, RMSprop

OPTIMIZERS = {
    "sgd": lambda: SGD(learning_rate=0.1),
    "sgd_nesterov": lambda: SGD(learning_rate=0.2, momentum=0.5, nesterov=True),
    "adam": lambda: Adam(learning_rate=0.05),
    "adam_amsgrad": lambda: Adam(learning_rate=0.05, amsgrad=True),
    "adamax": lambda: Adamax(learning_rate=0.05),
    "nadam": lambda: Nadam(learning_rate=0.05),
    "rmsprop": lambda: RMSprop(learning_rate=0.02),
    "rmsprop_centered_momentum": lambda: RMSprop(learning_rate=0.01, momentum=0.5, centered=True),
    "adagrad": lambda: Adagrad(learning_rate=0.5),
    "adadelta": lambda: Adadelta(learning_rate=20.0),
    "ftrl": lambda: Ftrl(learning_rate=0.5, l2_shrinkage_regularization_strength=0.01),
    "loss_scale_adam": lambda: LossScaleOptimizer(Adam(learning_rate=0.05), initial_scale=256.0),
}

# Embedding rows without gradient still move under Adam only (spec §7.2: its sparse update is on all rows).
MOVES_UNUSED_ROWS = {"adam", "adam_amsgrad", "loss_scale_adam"}


class TwoTower(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 4, sparse=True)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, ids):
        return self.head(self.embedding(ids)).squeeze(-1)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_sparse_embedding_model_trains(name):
    torch.manual_seed(0)
    model = TwoTower()
    ids = torch.tensor([1, 3, 5, 3, 7, 1])  # rows 1 and 3 repeat; rows 0, 2, 4, ... are never used
    targets = torch.tensor([1.0, -1.0, 0.5, -1.0, 2.0, 1.0])
    opt = OPTIMIZERS[name]()

    def loss():
        return torch.mean((model(ids) - targets) ** 2)

    grads = torch.autograd.grad(loss(), list(model.parameters()))
    assert grads[0].layout == torch.sparse_coo  # the embedding's gradient is sparse
    start = loss().item()
    # a first step on every row, so that every row has optimizer state
    opt.minimize(lambda: model(torch.arange(20)).pow(2).mean() * 1e-3, model)
    unused = [0, 2, 4, 6, 8]
    before_unused = model.embedding.weight[unused].detach().clone()
    for _ in range(60):
        opt.minimize(loss, model)
    assert loss().item() < 0.25 * start
    rows_moved = not torch.equal(before_unused, model.embedding.weight[unused])
    assert rows_moved == (name in MOVES_UNUSED_ROWS)
    assert int(opt.iterations) == 61


def test_embedding_with_step_and_dot_grad():
    torch.manual_seed(0)
    model = TwoTower()
    opt = Adagrad(learning_rate=0.5)
    opt.build(model)
    assert [w.path for w in opt.weights][1:] == ["Adagrad/embedding.weight/accumulator",
                                                  "Adagrad/head.weight/accumulator", "Adagrad/head.bias/accumulator"]
    for _ in range(3):
        opt.zero_grad()
        model(torch.tensor([2, 4])).sum().backward()
        opt.step()
    assert int(opt.iterations) == 3
    assert torch.equal(opt.get_slot(model.embedding.weight, "accumulator")[0], torch.full((4,), 0.1))


def test_default_aggregator_is_a_no_op_without_a_process_group():
    g, w = torch.ones(2), torch.zeros(2)
    pairs = all_reduce_sum_gradients([(g, w)])
    assert pairs[0][0] is g and not is_distributed()


def test_default_aggregator_is_a_no_op_with_a_single_process_group():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            g, w = torch.ones(2), slotopt.Variable(torch.zeros(2), name="w")
            assert all_reduce_sum_gradients([(g, w)])[0][0] is g
            SGD(learning_rate=1.0).apply_gradients([(g, w)])
            assert w.tolist() == [-1.0, -1.0]
        finally:
            dist.destroy_process_group()


def _worker(rank, store, results):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=COLLECTIVE_TIMEOUT)
    try:
        w = slotopt.Variable(torch.zeros(2), name="w")
        table = slotopt.Variable(torch.zeros(3, 1), name="table")
        grads = [(torch.full((2,), float(rank + 1)), w),
                 (slotopt.IndexedSlices(torch.ones(rank + 1, 1), [rank] * (rank + 1), (3, 1)), table)]
        user = torch.full((2,), float(rank + 1))
        grads[0] = (user, w)
        summing = SGD(learning_rate=1.0, gradient_aggregator=slotopt.distributed.all_reduce_sum)
        summing.apply_gradients(grads)
        results[rank] = (w.tolist(), table.flatten().tolist(), user.tolist())
        skipped = slotopt.Variable(torch.zeros(1), name="skipped")
        SGD(learning_rate=1.0, gradient_aggregator=slotopt.distributed.all_reduce_sum).apply_gradients(
            [(torch.full((1,), float(rank + 1)), skipped)], experimental_aggregate_gradients=False)
        results[f"local{rank}"] = skipped.item()
        plain = slotopt.Variable(torch.zeros(1), name="plain")
        SGD(learning_rate=1.0).apply_gradients([(torch.full((1,), float(rank + 1)), plain)])
        results[f"default{rank}"] = plain.item()
        mean = slotopt.Variable(torch.zeros(1), name="mean")
        SGD(learning_rate=1.0, gradient_aggregator=slotopt.distributed.all_reduce_mean).apply_gradients(
            [(torch.full((1,), float(rank + 1)), mean)])
        results[f"mean{rank}"] = mean.item()
        results[f"local{rank}"] = skipped.item()
    finally:
        dist.destroy_process_group()


def test_explicit_aggregators_sum_or_average_over_two_processes():
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        results = manager.dict()
        run_processes(_worker, (os.path.join(tmp, "store"), results), 2)
        for rank in (0, 1):
            w, table, user = results[rank]
            assert w == [-3.0, -3.0]  # 1 + 2 summed over the processes
            assert table == [-1.0, -2.0, 0.0]  # every process's rows, duplicates summed
            assert user == [float(rank + 1)] * 2  # the caller's gradient is not modified
            assert results[f"local{rank}"] == -(rank + 1.0)  # experimental_aggregate_gradients=False
            assert results[f"default{rank}"] == -(rank + 1.0)  # no reduction unless asked (DDP already reduced)
            assert results[f"mean{rank}"] == -1.5
