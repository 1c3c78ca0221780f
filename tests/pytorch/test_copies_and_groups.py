"""Copies, group dicts and client state as torch training scripts use them (issue 38).

* A copy is a copy: ``copy.deepcopy``, ``pickle`` and ``torch.save`` of every registered optimizer (alone, and with
  its model and a torch LR scheduler), on both kernel paths, continue exactly like the original and share no
  tensor with it.
* Parameter-group dicts keep their own values in every face and composite; a tensor in two groups is refused.
* ``opt.state[p]`` keeps the entries a torch client adds (timm's Lookahead), saves, loads and copies them.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import io
import math
import pickle
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt.engine import registry
from slotopt.kernels import native

GENERATIONS = ("keras3", "legacy", "v1", "tfrs")
_REQUIRED = {"learning_rate": 0.05, "momentum": 0.9}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def _maker(generation: str, name: str, cls: type) -> Callable[[torch.nn.Module], Any]:
    """How to build ``cls`` on a model: its required arguments from a small table; a wrapper or composite around
    the generation's SGD and Adam(-like) optimizers."""
    if name == "LossScaleOptimizer":
        inner = registry.registered_classes(generation)["SGD"]
        return lambda model: cls(inner(learning_rate=0.05, momentum=0.9), params=model.parameters())
    if name == "MultiOptimizer":
        return lambda model: cls(slotopt.OptimizerMap(slotopt.Adam(0.01), {"0\\..*": slotopt.SGD(0.05, momentum=0.9)}),
                                 params=model.named_parameters())
    if name == "CompositeOptimizer":
        def composite(model: torch.nn.Module) -> Any:
            first, last = list(model[0].parameters()), list(model[2].parameters())
            return cls([(slotopt.Adam(0.01), first), (slotopt.legacy.SGD(0.05, momentum=0.9), last)],
                       params=model.parameters())
        return composite
    signature = inspect.signature(cls.__init__)
    kwargs: dict[str, Any] = {}
    for arg, parameter in signature.parameters.items():
        if arg == "self" or parameter.default is not inspect.Parameter.empty or parameter.kind in (
                inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        kwargs[arg] = torch.tensor(0, dtype=torch.int64) if arg == "global_step" else _REQUIRED[arg]
    return lambda model: cls(params=model.parameters(), **kwargs)


def _registered() -> list[Any]:
    out = []
    for generation in GENERATIONS:
        for name, cls in registry.registered_classes(generation).items():
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
                out.append(pytest.param(generation, name, cls, id=f"{generation}-{name}"))
    return out


REGISTERED = _registered()


@pytest.fixture(params=["native", "foreach"])
def kernel_path(request: pytest.FixtureRequest) -> Any:
    if request.param == "native" and not native.dtypes():
        pytest.skip("the compiled kernels are not built here")
    previous = native.use(request.param)
    yield request.param
    native.use(previous)


def _batch(i: int) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, 20).reshape(5, 4) * (1.0 + 0.25 * i)


def _train(model: torch.nn.Module, opt: Any, scheduler: Any, steps: range) -> None:
    for i in steps:
        opt.zero_grad()
        model(_batch(i)).square().mean().backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def _tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor of the optimizer's state and groups (what a copy must not share)."""
    found = [v for entry in obj.state.values() for v in entry.values() if isinstance(v, torch.Tensor)]
    return found + [p for g in obj.param_groups for p in g["params"]]


def _copied(how: str, value: Any) -> Any:
    if how == "deepcopy":
        return copy.deepcopy(value)
    if how == "pickle":
        return pickle.loads(pickle.dumps(value))
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _storages(tensors: list[torch.Tensor]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


@pytest.mark.parametrize("generation,name,cls", REGISTERED)
def test_a_copy_continues_like_the_original(generation: str, name: str, cls: type, kernel_path: str) -> None:
    """Property over every registered optimizer and both kernel paths: a copy made after a step (alone; with its
    model and an LR scheduler attached) steps exactly like the original from there, and shares no tensor with
    it. The original trains first, so a copy that still stepped (or viewed) the original would differ."""
    make = _maker(generation, name, cls)
    for how in ("deepcopy", "pickle", "torch.save"):
        # With its model and a scheduler (torch wraps ``opt.step`` on the instance).
        model = _model()
        opt = make(model)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        _train(model, opt, scheduler, range(1))
        model2, opt2, scheduler2 = _copied(how, (model, opt, scheduler))
        assert not _storages(_tensors(opt)) & _storages(_tensors(opt2)), how
        _train(model, opt, scheduler, range(1, 3))
        with warnings.catch_warnings():  # (the copy's scheduler no longer sees a wrapped step: torch warns)
            warnings.simplefilter("ignore")
            _train(model2, opt2, scheduler2, range(1, 3))
        for a, b in zip(model.parameters(), model2.parameters()):
            assert torch.equal(a, b), (how, name)
        # Alone: the copy brings copies of the parameters.
        model = _model()
        opt = make(model)
        _train(model, opt, None, range(1))
        alone = _copied(how, opt)
        params = [p for g in opt.param_groups for p in g["params"]]
        copies = [p for g in alone.param_groups for p in g["params"]]
        assert len(params) == len(copies) and not _storages(params) & _storages(copies)
        for step in range(2):
            for p, q in zip(params, copies):
                p.grad = torch.full_like(p, 0.5 - step)
                q.grad = torch.full_like(q, 0.5 - step)
            opt.step()
            alone.step()
        for p, q in zip(params, copies):
            assert torch.equal(p, q), (how, name)


# ---------------------------------------------------------------------------------------------- group dicts
def _groups(model: torch.nn.Module) -> list[dict[str, Any]]:
    first, last = model[0], model[2]
    return [{"params": [first.weight, last.weight]}, {"params": [first.bias], "lr": 0.01},
            {"params": [last.bias], "lr": 0.2, "lr_scale": 0.5, "name": "head_bias"}]


def _alone(model: torch.nn.Module, make: Callable[..., Any]) -> list[torch.Tensor]:
    """Each group's parameters trained by an optimizer of their own with the group's learning rate."""
    first, last = model[0], model[2]
    opts = [make(params=[first.weight, last.weight]), make(0.01, params=[first.bias]), make(0.2, params=[last.bias])]
    for i in range(2):
        for o in opts:
            o.zero_grad()
        model(_batch(i)).square().mean().backward()
        for o in opts:
            o.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("composite", ["multi", "composite"])
def test_group_dicts_keep_their_values_in_a_composite(composite: str, kernel_path: str) -> None:
    """The issue's recipe: each group's ``lr`` applies to its parameters (it moved them by the first group's), and
    the keys torch clients add (timm's ``lr_scale``, a group ``name``) stay in the groups."""
    def sgd(lr: float = 0.1, **kw: Any) -> Any:
        return slotopt.SGD(learning_rate=lr, momentum=0.9, **kw)

    expected = _alone(_model(), sgd)
    model = _model()
    if composite == "multi":
        opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd()), params=_groups(model))
    else:
        opt = slotopt.CompositeOptimizer([(sgd(), list(model.parameters()))], params=_groups(model))
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.1), 0.01, 0.2]
    assert opt.param_groups[2]["lr_scale"] == 0.5 and opt.param_groups[2]["name"] == "head_bias"
    _train(model, opt, None, range(2))
    for a, b in zip(model.parameters(), expected):
        assert torch.equal(a, b)


@pytest.mark.parametrize("generation", ["keras3", "legacy"])
def test_group_dicts_keep_their_values_in_a_loss_scale_optimizer(generation: str) -> None:
    """A LossScaleOptimizer built on group dicts: its inner optimizer keeps each group (the Keras 3 one refused
    them with a TypeError)."""
    def make(lr: float = 0.1, *, params: Any) -> Any:
        if generation == "keras3":
            return slotopt.LossScaleOptimizer(slotopt.SGD(lr, momentum=0.9), params=params)
        return slotopt.legacy.LossScaleOptimizer(slotopt.legacy.SGD(lr, momentum=0.9), dynamic=False, initial_scale=1.0,
                                                  params=params)

    expected = _alone(_model(), make)
    model = _model()
    opt = make(params=_groups(model))
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.1), 0.01, 0.2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Keras 3's: step() without a scaled loss)
        _train(model, opt, None, range(2))
    for a, b in zip(model.parameters(), expected):
        assert torch.equal(a, b)


def test_transformers_schedule_survives_copies() -> None:
    """Hugging Face's warmup schedule (a LambdaLR over a partial) attached, then the whole (model, optimizer,
    scheduler) deep-copied and pickled: each copy trains like the original."""
    transformers = pytest.importorskip("transformers")
    model = _model()
    opt = slotopt.AdamW(0.01, params=[{"params": [model[0].weight, model[2].weight], "weight_decay": 0.01},
                                      {"params": [model[0].bias, model[2].bias], "weight_decay": 0.0}])
    scheduler = transformers.get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)
    _train(model, opt, scheduler, range(1))
    copies = [copy.deepcopy((model, opt, scheduler)), pickle.loads(pickle.dumps((model, opt, scheduler)))]
    _train(model, opt, scheduler, range(1, 4))
    for model2, opt2, scheduler2 in copies:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _train(model2, opt2, scheduler2, range(1, 4))
        assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
        for a, b in zip(model.parameters(), model2.parameters()):
            assert torch.equal(a, b)


def test_multi_optimizer_groups_follow_a_scheduler_and_the_routing() -> None:
    """Groups split across sub-optimizers: each sub-optimizer gets its share of each group, a torch scheduler
    scales every group's own ``lr``, and a state dict round trip keeps them."""
    model = _model()
    first, last = model[0], model[2]
    adam, sgd = slotopt.Adam(0.01), slotopt.SGD(0.1)
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {"0\\..*": adam}),
                                 params=[{"params": list(first.named_parameters(prefix="0")) + [("2.weight", last.weight)]},
                                         {"params": [("2.bias", last.bias)], "lr": 0.5, "weight_decay": 0.0}])
    assert len(adam.param_groups) == 1 and len(sgd.param_groups) == 2
    assert sgd.param_groups[1]["params"] == [last.bias] and sgd.param_groups[1]["lr"] == 0.5
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    before = last.bias.detach().clone()
    opt.zero_grad()
    model(_batch(0)).square().mean().backward()
    grad = last.bias.grad.clone()
    opt.step()
    scheduler.step()
    assert torch.equal(last.bias.detach(), before - torch.tensor(0.5) * grad)
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.005), pytest.approx(0.05), 0.25]
    twin_model = copy.deepcopy(model)
    twin = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(0.1), {"0\\..*": slotopt.Adam(0.01)}),
                                  params=[{"params": list(twin_model[0].named_parameters(prefix="0"))
                                           + [("2.weight", twin_model[2].weight)]},
                                          {"params": [("2.bias", twin_model[2].bias)], "lr": 0.5}])
    twin.load_state_dict(opt.state_dict())
    assert [g["lr"] for g in twin.param_groups] == [g["lr"] for g in opt.param_groups]


def _factories() -> list[Any]:
    return [pytest.param(lambda p: slotopt.SGD(0.1, params=p), id="keras3"),
            pytest.param(lambda p: slotopt.legacy.SGD(0.1, params=p), id="legacy"),
            pytest.param(lambda p: slotopt.v1.GradientDescentOptimizer(0.1, params=p), id="v1"),
            pytest.param(lambda p: slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(0.1)), params=p),
                         id="multi"),
            pytest.param(lambda p: slotopt.CompositeOptimizer([(slotopt.SGD(0.1), [g for d in p for g in d["params"]])],
                                                              params=p), id="composite")]


@pytest.mark.parametrize("make", _factories())
def test_a_tensor_in_two_group_dicts_is_refused(make: Callable[[Any], Any]) -> None:
    """torch raises for it (and so did slotopt's ``add_param_group``); the second group's ``lr`` was ignored."""
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="more than one parameter group"):
        make([{"params": [a, b]}, {"params": [b], "lr": 0.5}])
    with pytest.raises(ValueError, match="more than one parameter group"):
        torch.optim.SGD([{"params": [a, b]}, {"params": [b], "lr": 0.5}], lr=0.1)


# ---------------------------------------------------------------------------------------------- client state
@pytest.mark.parametrize("generation", ["keras3", "legacy", "v1", "multi"])
def test_state_keeps_entries_a_client_adds(generation: str, kernel_path: str) -> None:
    """What timm's Lookahead does with ``base_optimizer.state[p]``: add a buffer, read it back, update it in place.
    It is kept (the very tensor), saved and loaded, copied with the optimizer, removable; the step ignores it."""
    def make(model: torch.nn.Module) -> Any:
        if generation == "keras3":
            return slotopt.Adam(0.01, params=model.parameters())
        if generation == "legacy":
            return slotopt.legacy.Adam(0.01, params=model.parameters())
        if generation == "v1":
            return slotopt.v1.AdamOptimizer(0.01, params=model.parameters())
        return slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(0.01)), params=model.named_parameters())

    model, plain_model = _model(), _model()
    opt, plain = make(model), make(plain_model)
    _train(model, opt, None, range(1))
    _train(plain_model, plain, None, range(1))
    p = model[0].weight
    state = opt.state[p]
    own = sorted(state)
    with torch.no_grad():  # (as Lookahead's update runs)
        state["lookahead_slow_buff"] = torch.empty_like(p)
        state["lookahead_slow_buff"].copy_(p)
        slow = opt.state[p]["lookahead_slow_buff"]
        slow.add_(torch.ones_like(slow))  # in place, as Lookahead does: the kept tensor is the one given
    assert torch.equal(opt.state[p]["lookahead_slow_buff"], p.detach() + 1)
    assert sorted(opt.state[p]) == sorted([*own, "lookahead_slow_buff"])
    _train(model, opt, None, range(1, 3))
    _train(plain_model, plain, None, range(1, 3))
    for a, b in zip(model.parameters(), plain_model.parameters()):
        assert torch.equal(a, b)  # never read by a step
    saved = opt.state_dict()
    assert torch.equal(saved["state"][0]["lookahead_slow_buff"], slow)
    twin_model = _model()
    twin = make(twin_model)
    twin.load_state_dict(saved)
    assert torch.equal(twin.state[twin_model[0].weight]["lookahead_slow_buff"], slow)
    copied = copy.deepcopy(opt)
    copied_p = copied.param_groups[0]["params"][0]
    assert torch.equal(copied.state[copied_p]["lookahead_slow_buff"], slow)
    assert copied.state[copied_p]["lookahead_slow_buff"] is not slow
    del opt.state[p]["lookahead_slow_buff"]
    assert sorted(opt.state[p]) == own
    with pytest.raises(KeyError, match="cannot be removed"):
        del opt.state[p][own[0]]
    before = {k: v.clone() for k, v in opt.state[p].items()}
    with pytest.raises(KeyError, match="named by strings"):  # refused before the reset: nothing changes
        opt.state[p] = {"lookahead_slow_buff": slow, 3: slow}
    assert sorted(opt.state[p]) == own and all(torch.equal(v, before[k]) for k, v in opt.state[p].items())


def _timm(module: str, attribute: str) -> Any:
    """``attribute`` of ``timm.<module>``: imported from timm, or, where timm is installed but cannot be imported
    (its torchvision is PyPI's CUDA build against a CPU torch), loaded from timm's own files (``optim/lookahead.py``
    and ``scheduler/`` need torch only). Skips where timm is not installed (the ``timm`` extra)."""
    try:
        return getattr(importlib.import_module(f"timm.{module}"), attribute)
    except Exception:  # noqa: BLE001 (timm's import of torchvision raises RuntimeError there)
        pass
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed (the `timm` extra)")
    package, _, leaf = module.rpartition(".")
    folder = Path(list(spec.submodule_search_locations)[0]) / package
    alias = f"_timm_files_{package}"
    if alias not in sys.modules:  # the folder as a package of its own, without timm's __init__ files
        holder = types.ModuleType(alias)
        holder.__path__ = [str(folder)]
        sys.modules[alias] = holder
    name = f"{alias}.{leaf}"
    if name not in sys.modules:
        file_spec = importlib.util.spec_from_file_location(name, folder / f"{leaf}.py")
        loaded = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = loaded
        file_spec.loader.exec_module(loaded)
    return getattr(sys.modules[name], attribute)


def test_timm_cosine_schedule_drives_each_group_with_its_lr_scale() -> None:
    """timm's CosineLRScheduler over a MultiOptimizer's group dicts: each group's ``lr`` follows the cosine from its
    own base, times its ``lr_scale``, and each group trains as an optimizer of its own at that rate would; a deep
    copy of (model, optimizer, scheduler) taken midway continues the same."""
    scheduler_cls = _timm("scheduler.cosine_lr", "CosineLRScheduler")
    model, hand_model = _model(), _model()
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(0.1, momentum=0.9)), params=_groups(model))
    scheduler = scheduler_cls(opt, t_initial=4)
    first, last = hand_model[0], hand_model[2]
    hand = [slotopt.SGD(0.1, momentum=0.9, params=[first.weight, last.weight]),
            slotopt.SGD(0.1, momentum=0.9, params=[first.bias]), slotopt.SGD(0.1, momentum=0.9, params=[last.bias])]
    bases, scales = [g["initial_lr"] for g in opt.param_groups], [1.0, 1.0, 0.5]  # (group 0's: float32 0.1)
    assert bases == [pytest.approx(0.1), 0.01, 0.2]
    copied = None
    for epoch in range(4):
        scheduler.step(epoch)
        cosine = 0.5 * (1 + math.cos(math.pi * epoch / 4))
        rates = [base * cosine * scale for base, scale in zip(bases, scales)]
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(rates, rel=1e-12)
        _train(model, opt, None, range(epoch, epoch + 1))
        for o, rate in zip(hand, rates):
            o.param_groups[0]["lr"] = rate
        for o in hand:
            o.zero_grad()
        hand_model(_batch(epoch)).square().mean().backward()
        for o in hand:
            o.step()
        if epoch == 1:
            copied = copy.deepcopy((model, opt, scheduler))
    for a, b in zip(model.parameters(), hand_model.parameters()):
        assert torch.equal(a, b)
    model2, opt2, scheduler2 = copied
    for epoch in range(2, 4):
        scheduler2.step(epoch)
        _train(model2, opt2, None, range(epoch, epoch + 1))
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("generation", ["keras3", "legacy", "multi"])
def test_timm_lookahead_over_slotopt_trains_like_its_slow_weights_rule(generation: str) -> None:
    """timm's Lookahead keeps its slow weights in ``base_optimizer.state[p]`` (it raised ``KeyError``): every ``k``
    steps the parameters move halfway back to them (the buffer is made at the first sync). Checked against the
    rule applied by hand, and the buffer goes through the state dict."""
    lookahead = _timm("optim.lookahead", "Lookahead")

    def make(model: torch.nn.Module) -> Any:
        groups = _groups(model)
        if generation == "keras3":
            return slotopt.Adam(0.01, params=groups)
        if generation == "legacy":
            return slotopt.legacy.Adam(0.01, params=groups)
        return slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(0.01)), params=groups)

    model, hand_model = _model(), _model()
    opt, hand = lookahead(make(model), alpha=0.5, k=2), make(hand_model)
    slow: list[torch.Tensor] = []
    for i in range(4):
        _train(model, opt, None, range(i, i + 1))
        _train(hand_model, hand, None, range(i, i + 1))
        if (i + 1) % 2 == 0:
            with torch.no_grad():
                slow = slow or [p.detach().clone() for p in hand_model.parameters()]  # (made at the first sync)
                for s, p in zip(slow, hand_model.parameters()):
                    s.add_(p - s, alpha=0.5)
                    p.copy_(s)
    for a, b in zip(model.parameters(), hand_model.parameters()):
        assert torch.equal(a, b)
    saved = opt.state_dict()
    assert all("lookahead_slow_buff" in entry for entry in saved["state"].values())
    assert [g["lookahead_step"] for g in saved["param_groups"]] == [4, 4, 4]
