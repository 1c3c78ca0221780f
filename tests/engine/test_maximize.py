"""torch's ``maximize=True`` in every generation: the step of a maximizing optimizer given ``g`` is, bit for bit, the
step of the same optimizer given ``-g`` (TensorFlow's gradients of the negated loss), for every registered class;
it goes upwards as torch's does; it is kept in ``param_groups``, ``defaults`` and ``state_dict``; an ordinary step
keeps its plan; and what cannot take it says so."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt.engine import pipeline, registry
from slotopt.engine.checks import HyperparameterTypeError
from slotopt.engine.pipeline import Step

_REQUIRED = {"learning_rate": 0.05, "momentum": 0.9}
#: Options that put a rule on its fuller path (momentum, centred RMSprop).
_WITH = {"SGD": {"momentum": 0.9}, "RMSprop": {"momentum": 0.5, "centered": True}}

ENTRIES = [pytest.param(e, id=f"{e.generation}-{e.cls.__name__}") for e in registry.registered()
           if isinstance(e.cls, type) and issubclass(e.cls, torch.optim.Optimizer)]


def _maker(entry: registry.Registration, maximize: bool) -> Callable[[torch.nn.Module], Any]:
    """The class on a model, maximizing where asked (a wrapper's or composite's own optimizers maximize)."""
    cls, generation, name = entry.cls, entry.generation, entry.cls.__name__
    if name == "LossScaleOptimizer":
        inner = registry.registered_classes(generation)["SGD"]
        return lambda model: cls(inner(learning_rate=0.05, momentum=0.9, maximize=maximize), params=model.parameters())
    if name == "MultiOptimizer":
        return lambda model: cls(slotopt.OptimizerMap(slotopt.Adam(0.01, maximize=maximize),
                                                      {"0\\..*": slotopt.SGD(0.05, momentum=0.9, maximize=maximize)}),
                                 params=model.named_parameters())
    if name == "CompositeOptimizer":
        return lambda model: cls([(slotopt.Adam(0.01, maximize=maximize), ["0.*"]),
                                  (slotopt.legacy.SGD(0.05, momentum=0.9, maximize=maximize), ["2.*"])], params=model)
    kwargs: dict[str, Any] = dict(_WITH.get(name, {}))
    for arg, parameter in inspect.signature(cls.__init__).parameters.items():
        if arg != "self" and parameter.default is inspect.Parameter.empty and parameter.kind not in (
                inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            kwargs[arg] = _REQUIRED.get(arg)
    if "global_step" in kwargs:  # AdagradDA's step counter: an integer tensor of each run's own
        return lambda model: cls(params=model.parameters(), maximize=maximize,
                                 **{**kwargs, "global_step": torch.tensor(0)})
    return lambda model: cls(params=model.parameters(), maximize=maximize, **kwargs)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 2))


def _train(model: torch.nn.Module, opt: Any, steps: int, negate: bool) -> None:
    for i in range(steps):
        opt.zero_grad()
        model(torch.linspace(-1.0, 1.0, 12).reshape(4, 3) * (1.0 + 0.25 * i)).square().mean().backward()
        if negate:
            for p in model.parameters():
                p.grad.neg_()
        opt.step()


def _raw(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.contiguous().view(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _state(model: torch.nn.Module, opt: Any) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        tensors += [t.detach().clone() for t in opt.state[p].values() if isinstance(t, torch.Tensor)]
    return tensors


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_maximizing_step_given_g_is_the_step_given_minus_g_bit_for_bit(entry):
    maximizing, plain = _model(), _model()
    up, down = _maker(entry, True)(maximizing), _maker(entry, False)(plain)
    _train(maximizing, up, 4, negate=False)
    _train(plain, down, 4, negate=True)
    a, b = _state(maximizing, up), _state(plain, down)
    assert len(a) == len(b) >= len(list(maximizing.parameters()))
    assert all(x.shape == y.shape and torch.equal(_raw(x), _raw(y)) for x, y in zip(a, b))
    moved = [not torch.equal(p, q) for p, q in zip(maximizing.parameters(), _model().parameters())]
    assert any(moved)  # (a run that did not move would prove nothing)


@pytest.mark.parametrize("face", ["keras3", "legacy", "v1"])
def test_sparse_gradients_and_the_full_path_are_negated_too(face):
    def run(maximize: bool, sign: float) -> list[torch.Tensor]:
        table = slotopt.Variable(torch.linspace(-1, 1, 12).reshape(4, 3), name="table")
        dense = slotopt.Variable(torch.linspace(0.5, 1, 3), name="dense")
        opt = {"keras3": lambda: slotopt.Adagrad(0.1, maximize=maximize),
               "legacy": lambda: slotopt.legacy.Adagrad(0.1, maximize=maximize),
               "v1": lambda: slotopt.v1.AdagradOptimizer(0.1, maximize=maximize)}[face]()
        for i in range(3):
            rows = slotopt.IndexedSlices(sign * torch.full((2, 3), 0.5 + i), torch.tensor([1, 3]), (4, 3))
            opt.apply_gradients([(rows, table), (sign * torch.full((3,), 0.25 * (i + 1)), dense)])
        return [table.detach().clone(), dense.detach().clone()]

    up, down = run(True, 1.0), run(False, -1.0)
    assert all(torch.equal(_raw(x), _raw(y)) for x, y in zip(up, down))
    assert not torch.equal(up[0], run(False, 1.0)[0])


def test_it_goes_up_as_torchs_adam_with_maximize_does():
    torch.manual_seed(1)
    start = torch.randn(5)
    ours, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    slot = slotopt.Adam([ours], lr=0.01, maximize=True)
    reference = torch.optim.Adam([theirs], lr=0.01, maximize=True)
    for i in range(5):
        g = torch.randn(5, generator=torch.Generator().manual_seed(i))
        ours.grad, theirs.grad = g.clone(), g.clone()
        slot.step()
        reference.step()
    moved = ours.detach() - start
    assert torch.equal(torch.sign(moved), torch.sign(theirs.detach() - start))
    # (the same direction and nearly the same size: Keras's epsilon sits elsewhere than torch's eps)
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=1e-6)
    assert float((moved * sum(torch.randn(5, generator=torch.Generator().manual_seed(i)) for i in range(5))).sum()) > 0


def test_the_torch_spelling_constructor_takes_it_and_torchs_places_show_it():
    w = torch.nn.Parameter(torch.ones(3))
    opt = slotopt.AdamW([w], lr=1e-3, maximize=True)
    assert opt.maximize is True and opt.param_groups[0]["maximize"] is True and opt.defaults["maximize"] is True
    saved = opt.state_dict()
    assert saved["param_groups"][0]["maximize"] is True
    assert slotopt.AdamW([w], lr=1e-3).param_groups[0]["maximize"] is False
    fresh = slotopt.AdamW([torch.nn.Parameter(torch.ones(3))], lr=1e-3)
    fresh.load_state_dict(saved)
    fresh.param_groups[0]["params"][0].grad = torch.ones(3)
    fresh.step()
    assert fresh.maximize is True and float(fresh.param_groups[0]["params"][0].detach().sum()) > 3.0
    assert slotopt.AdamW.from_config(opt.get_config()).maximize is True
    assert "maximize" not in slotopt.AdamW(1e-3).get_config()  # (a Keras config stays Keras's)
    assert slotopt.legacy.Adam.from_config(slotopt.legacy.Adam(maximize=True).get_config()).maximize is True
    assert slotopt.v1.AdamOptimizer.from_config(slotopt.v1.AdamOptimizer(maximize=True).get_config()).maximize
    opt.maximize = False
    assert opt.param_groups[0]["maximize"] is False


def test_what_cannot_take_it_says_so_and_changes_nothing():
    with pytest.raises(HyperparameterTypeError, match="maximize"):
        slotopt.Adam(0.1, maximize="yes")
    with pytest.raises(ValueError, match="pass `maximize=True` to those"):
        slotopt.LossScaleOptimizer(slotopt.Adam(0.1), maximize=True)
    with pytest.raises(ValueError, match="pass `maximize=True` to those"):
        slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(0.1)), maximize=True)
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = slotopt.Adam([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.param_groups[1]["maximize"] = True
    a.grad, b.grad = torch.ones(2), torch.ones(2)
    with pytest.raises(ValueError, match="whole optimizer's"):
        opt.step()
    assert torch.equal(a.detach(), torch.ones(2)) and int(opt.iterations) == 0


@pytest.mark.parametrize("make", [lambda p: slotopt.Adam(p, lr=0.01, maximize=True),
                                  lambda p: slotopt.legacy.Adam(params=p, learning_rate=0.01, maximize=True),
                                  lambda p: slotopt.v1.AdamOptimizer(0.01, params=p, maximize=True)],
                         ids=["keras3", "legacy", "v1"])
def test_an_ordinary_maximizing_step_keeps_its_plan(make):
    params = [torch.nn.Parameter(torch.full((4,), float(i + 1))) for i in range(3)]
    opt = make(params)
    seen: list[str] = []

    def record(opt: Any, pairs: Any, call: Any) -> Any:
        seen.append(type(pairs).__name__)
        return pairs

    entries = list(type(opt)._stages)
    entries.insert(entries.index(pipeline.negate_gradients) + 1, record)
    opt._stages = Step(*entries, result=type(opt)._stages.result)
    for i in range(4):
        for p in params:
            p.grad = torch.full((4,), 0.5 + i)
        opt.step()
    assert seen == ["Ordinary"] * 4  # (the negated gradients proven against the plan, not a plain list)
