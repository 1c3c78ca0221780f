"""Optimizer checkpoints and variables survive torch.save / torch.load(weights_only=True)."""

import io

import torch

import slotopt


def _roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_variable_round_trips_with_its_name():
    v = slotopt.Variable(torch.tensor([1.0, 2.0]), name="kernel")
    w = _roundtrip(v)
    assert isinstance(w, slotopt.Variable) and w.name == "kernel" and torch.equal(w, v)


def _train(opt, model, steps):
    for _ in range(steps):
        model.zero_grad()
        model(torch.ones(3, 2)).pow(2).sum().backward()
        opt.step()


def test_keras3_and_legacy_state_dicts_round_trip_and_continue_identically():
    for make in (lambda m: slotopt.Adam(learning_rate=0.1, params=m),
                 lambda m: _built(slotopt.legacy.Adam(learning_rate=0.1), m)):
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 2)
        opt = make(model)
        _train(opt, model, 2)
        saved_model = {k: v.clone() for k, v in model.state_dict().items()}
        state = _roundtrip(opt.state_dict())
        _train(opt, model, 2)
        expected = [p.detach().clone() for p in model.parameters()]

        model.load_state_dict(saved_model)
        restored = make(model)
        restored.load_state_dict(state)
        _train(restored, model, 2)
        assert all(torch.equal(p, e) for p, e in zip(model.parameters(), expected))


def _built(opt, model):
    opt.build(model)
    return opt
