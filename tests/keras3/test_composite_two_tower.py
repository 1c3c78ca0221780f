"""Issue 5: a two-tower recommender trained by a CompositeOptimizer, checkpointed and restored mid-training."""

import copy

import pytest
import torch
from torch import nn

import slotopt


class TwoTower(nn.Module):
    def __init__(self, users: int = 50, items: int = 40, dim: int = 8) -> None:
        super().__init__()
        self.user_embedding = nn.Embedding(users, dim, sparse=True)
        self.item_embedding = nn.Embedding(items, dim, sparse=True)
        self.user_tower = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.item_tower = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u = self.user_tower(self.user_embedding(users))
        i = self.item_tower(self.item_embedding(items))
        return (u * i).sum(-1)


def _batches(steps: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        users = torch.randint(0, 50, (32,), generator=gen)
        items = torch.randint(0, 40, (32,), generator=gen)
        labels = ((users % 5) == (items % 5)).float()
        yield users, items, labels


def _composite(model: nn.Module) -> slotopt.CompositeOptimizer:
    return slotopt.CompositeOptimizer(
        [(slotopt.Adagrad(learning_rate=0.5), ["*embedding*"]), (slotopt.Adam(learning_rate=0.01), ["*tower*"])],
        params=model,
    )


def _train(model, opt, batches):
    losses = []
    for users, items, labels in batches:
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(users, items), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TwoTower()


def test_two_tower_trains_with_sparse_embeddings(model):
    opt = _composite(model)
    losses = _train(model, opt, _batches(150))
    assert sum(losses[-20:]) / 20 < 0.9 * sum(losses[:20]) / 20
    assert [int(o.iterations) for o in opt.optimizers] == [150, 150]
    assert isinstance(model.user_embedding.weight.grad, torch.Tensor)
    assert model.user_embedding.weight.grad.is_sparse


def test_restored_composite_continues_exactly_like_an_uninterrupted_run(model):
    batches = list(_batches(40))
    opt = _composite(model)
    _train(model, opt, batches[:20])
    saved_model = copy.deepcopy(model.state_dict())
    saved_config = opt.get_config()
    saved_state = opt.state_dict()

    reference_losses = _train(model, opt, batches[20:])
    reference_weights = copy.deepcopy(model.state_dict())

    torch.manual_seed(123)  # a different initialisation, overwritten by the checkpoint
    restored_model = TwoTower()
    restored_model.load_state_dict(saved_model)
    restored = slotopt.CompositeOptimizer.from_config(saved_config)
    restored.build(restored_model)
    restored.load_state_dict(saved_state)
    restored_losses = _train(restored_model, restored, batches[20:])

    assert restored_losses == reference_losses
    for name, value in restored_model.state_dict().items():
        assert torch.equal(value, reference_weights[name]), name
    assert [int(o.iterations) for o in restored.optimizers] == [40, 40]
