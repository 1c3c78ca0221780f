"""Hostile input, copies and checkpoints (issue 15): one section per numbered item of the issue.

Each test reproduces what a probe of the public API found and checks what happens now: a clear error naming the
argument and the value with nothing changed (variables, slots, iterations, param_groups), or correct training
where the input is legitimate.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest
import torch

import slotopt
from slotopt import legacy, v1
from slotopt import schedules as S

NAN = float("nan")


def param(*values: float, dtype: torch.dtype = torch.float32) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=dtype))


def same(a: Any, b: Any) -> bool:
    """Deep equality of state dicts (tensors bit for bit, NaN equal to NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and \
            a.dtype == b.dtype and bool(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def snapshot(opt: Any, *variables: torch.Tensor) -> Any:
    """Everything a failed call must leave alone: the variables, the state dict (slots, iterations,
    param_groups) and whether the optimizer is built."""
    return ([v.detach().clone() for v in variables], opt.state_dict(), getattr(opt, "built", None),
            len(opt.param_groups))


# ---------------------------------------------------------------------------------------------------------- 3
@pytest.mark.parametrize("build, argument, shown", [
    (lambda: slotopt.SGD(weight_decay=NAN), "weight_decay", "nan"),
    (lambda: slotopt.AdamW(weight_decay=math.inf), "weight_decay", "inf"),
    (lambda: slotopt.SGD(momentum=NAN), "momentum", "nan"),
    (lambda: slotopt.Adam(beta_1=1.0), "beta_1", "1.0"),
    (lambda: slotopt.Nadam(beta_1=1.0), "beta_1", "1.0"),
    (lambda: slotopt.Lamb(beta_2=1.0), "beta_2", "1.0"),
    (lambda: slotopt.Ftrl(learning_rate=0.0), "learning_rate", "0.0"),
    (lambda: slotopt.SGD(clipnorm=NAN), "clipnorm", "nan"),
    (lambda: slotopt.SGD(global_clipnorm=math.inf), "global_clipnorm", "inf"),
    (lambda: legacy.SGD(learning_rate=NAN), "learning_rate", "nan"),
    (lambda: legacy.SGD(lr=NAN), "lr", "nan"),
    (lambda: legacy.Adam(beta_1=NAN), "beta_1", "nan"),
    (lambda: legacy.Adam(beta_1=1.0), "beta_1", "1.0"),
    (lambda: legacy.RMSprop(rho=NAN), "rho", "nan"),
    (lambda: legacy.SGD(clipnorm=NAN), "clipnorm", "nan"),
    (lambda: legacy.SGD(decay=NAN), "decay", "nan"),
    (lambda: legacy.SGD(momentum=NAN), "momentum", "nan"),
    (lambda: legacy.Ftrl(learning_rate=0.0), "learning_rate", "0.0"),
    (lambda: v1.AdamOptimizer(beta1=1.0), "beta1", "1.0"),
    (lambda: v1.GradientDescentOptimizer(NAN), "learning_rate", "nan"),
    (lambda: v1.MomentumOptimizer(0.1, momentum=math.inf), "momentum", "inf"),
])
def test_3_settings_that_break_the_first_step_are_refused(build: Any, argument: str, shown: str) -> None:
    with pytest.raises(ValueError, match=rf"`{argument}` must be .*Received: {argument}={shown}"):
        build()


@pytest.mark.parametrize("build, argument", [
    (lambda: S.ExponentialDecay(0.1, NAN, 0.5), "decay_steps"),
    (lambda: S.InverseTimeDecay(0.1, 10, -0.5), "decay_rate"),
    (lambda: S.ExponentialDecay(-0.1, 10, 0.5), "initial_learning_rate"),
    (lambda: S.PolynomialDecay(0.1, 10, power=-1.0), "power"),
    (lambda: S.PolynomialDecay(0.1, 10, end_learning_rate=NAN), "end_learning_rate"),
    (lambda: S.CosineDecay(0.1, 10, alpha=-0.5), "alpha"),
    (lambda: S.CosineDecayRestarts(0.1, 10, t_mul=0.0), "t_mul"),
    (lambda: S.CosineDecayRestarts(0.1, 10, t_mul=-2.0), "t_mul"),
    (lambda: S.CosineDecayRestarts(0.1, 10, m_mul=-1.0), "m_mul"),
    (lambda: S.PiecewiseConstantDecay([10, 5], [1.0, 1.1, 1.2]), "boundaries"),
    (lambda: S.PiecewiseConstantDecay([10, 10], [1.0, 1.1, 1.2]), "boundaries"),
    (lambda: S.PiecewiseConstantDecay([NAN], [1.0, 1.1]), r"boundaries\[0\]"),
])
def test_3_schedules_refuse_nan_negative_and_unsorted_arguments(build: Any, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"`{argument}` must be"):
        build()


def test_3_sorted_piecewise_boundaries_still_select_one_of_the_values() -> None:
    s = S.PiecewiseConstantDecay([5, 10], [1.0, 1.1, 1.2])
    assert [round(float(s(k)), 6) for k in (0, 7, 11)] == [1.0, 1.1, 1.2]


@pytest.mark.parametrize("make", [
    lambda lr: slotopt.SGD(learning_rate=lr),
    lambda lr: legacy.SGD(learning_rate=lr),
])
@pytest.mark.parametrize("bad", [-5.0, NAN, math.inf])
def test_3_a_callable_learning_rate_is_checked_at_use_and_nothing_changes(make: Any, bad: float) -> None:
    w = param(1.0, 2.0)
    opt = make(lambda: bad)
    opt.build([w])
    before = snapshot(opt, w)
    with pytest.raises(ValueError, match=rf"`learning_rate` must evaluate to a finite number >= 0.*returned {bad}"):
        opt.apply_gradients([(torch.ones(2), w)])
    assert same(snapshot(opt, w), before)


def test_3_a_v1_callable_returning_nan_is_refused_before_any_change() -> None:
    w = param(1.0, 2.0)
    opt = v1.MomentumOptimizer(lambda: NAN, momentum=0.9)
    with pytest.raises(ValueError, match="`learning_rate` must evaluate to a finite number"):
        opt.apply_gradients([(torch.ones(2), w)])
    assert w.tolist() == [1.0, 2.0] and opt.variables() == []


def test_3_a_schedule_returning_nan_is_refused_at_use() -> None:
    class Broken(S.LearningRateSchedule):
        def __call__(self, step: Any) -> torch.Tensor:
            return torch.tensor(NAN)

    for opt in (slotopt.SGD(learning_rate=Broken()), legacy.SGD(learning_rate=Broken())):
        w = param(1.0)
        opt.build([w])
        with pytest.raises(ValueError, match="`learning_rate` must evaluate"):
            opt.apply_gradients([(torch.ones(1), w)])
        assert w.tolist() == [1.0]


@pytest.mark.parametrize("opt", [slotopt.SGD(momentum=0.5), legacy.SGD(momentum=0.5)], ids=["keras3", "legacy"])
def test_3_attribute_and_param_group_writes_are_checked(opt: Any) -> None:
    w = param(1.0)
    opt.build([w])
    with pytest.raises(ValueError, match="`momentum` must be a finite number in \\[0, 1\\]"):
        opt.momentum = NAN
    opt.param_groups[0]["momentum"] = 1.5
    before_w = w.detach().clone()
    w.grad = torch.ones(1)
    with pytest.raises(ValueError, match="momentum"):
        opt.step()
    assert torch.equal(w.detach(), before_w)
    opt.param_groups[0]["momentum"] = 0.5
    opt.step()
    assert w.item() == pytest.approx(1.0 - 0.01)


def test_3_legitimate_edge_values_still_train() -> None:
    # beta_2 = 1 keeps Adamax's running maximum; momentum 0 and 1, clipnorm 0 (disabled in Keras 3) are legal.
    for opt in (slotopt.Adamax(learning_rate=0.1, beta_2=1.0), slotopt.SGD(momentum=1.0, clipnorm=0.0),
                legacy.SGD(momentum=0.0), slotopt.Ftrl(learning_rate=0.5, initial_accumulator_value=0.0)):
        w = param(1.0)
        opt.apply_gradients([(torch.ones(1), w)])
        assert w.item() < 1.0 and math.isfinite(w.item())


# ---------------------------------------------------------------------------------------------------------- 14
GENERATIONS = {
    "keras3": lambda: slotopt.SGD(learning_rate=0.1, momentum=0.5),
    "legacy": lambda: legacy.SGD(learning_rate=0.1, momentum=0.5),
    "v1": lambda: v1.MomentumOptimizer(0.1, momentum=0.5),
    "composite": lambda: slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.1, momentum=0.5), ["*"])]),
}


def trained(kind: str) -> tuple[Any, torch.Tensor]:
    opt, w = GENERATIONS[kind](), param(1.0, 2.0)
    w.grad = torch.ones(2)
    if kind == "composite":
        opt.build([("w", w)])
    else:
        opt.build([w])
    opt.step()
    return opt, w


@pytest.mark.parametrize("kind", sorted(GENERATIONS))
def test_14_a_list_as_a_variable_or_a_three_tuple_is_named(kind: str) -> None:
    opt, w = trained(kind)
    before = snapshot(opt, w)
    with pytest.raises((TypeError, NotImplementedError), match=r"\[1\.0, 2\.0\]"):
        opt.apply_gradients([(torch.ones(2), [1.0, 2.0])])
    with pytest.raises(TypeError, match="pairs. Received at (index|position) 0"):
        opt.apply_gradients([(torch.ones(2), w, 1)])
    assert same(snapshot(opt, w), before)


@pytest.mark.parametrize("kind", sorted(GENERATIONS))
def test_14_load_state_dict_of_an_empty_dict_names_what_is_missing(kind: str) -> None:
    opt, w = trained(kind)
    before = snapshot(opt, w)
    with pytest.raises(ValueError, match="must be a dict with 'state'.*Received: a dict with keys \\[\\]"):
        opt.load_state_dict({})
    assert same(snapshot(opt, w), before)


@pytest.mark.parametrize("build, argument", [
    (lambda: slotopt.SGD(clipnorm="1"), "clipnorm"),
    (lambda: slotopt.SGD(loss_scale_factor="2"), "loss_scale_factor"),
    (lambda: slotopt.SGD(momentum=0.5, nesterov="no"), "nesterov"),
    (lambda: slotopt.Adam(amsgrad="yes"), "amsgrad"),
    (lambda: legacy.SGD(momentum=0.5, nesterov="no"), "nesterov"),
    (lambda: legacy.RMSprop(centered="no"), "centered"),
    (lambda: legacy.SGD(clipnorm="1"), "clipnorm"),
    (lambda: S.ExponentialDecay(0.1, decay_steps="10", decay_rate=0.5), "decay_steps"),
    (lambda: S.ExponentialDecay(0.1, 10, 0.5, staircase="no"), "staircase"),
    (lambda: slotopt.Adam.from_config(None), "config"),
    (lambda: legacy.Adam.from_config(None), "config"),
    (lambda: slotopt.Adam.from_config([1]), "config"),
])
def test_14_wrong_types_raise_an_error_naming_the_argument(build: Any, argument: str) -> None:
    with pytest.raises(TypeError, match=rf"`{argument}` must be"):
        build()


def test_14_stateless_apply_refuses_wrong_shapes_instead_of_broadcasting() -> None:
    opt, w = slotopt.Adam(learning_rate=0.1), param(1.0, 2.0)
    opt.build([w])
    good = [v.detach().clone() for v in opt.variables]
    before = snapshot(opt, w)
    with pytest.raises(ValueError, match=r"`trainable_variables` entry 0 has shape \(1,\).*\(2,\)"):
        opt.stateless_apply(good, [torch.ones(2)], [torch.ones(1)])
    with pytest.raises(ValueError, match=r"`optimizer_variables` entry 2 has shape \(3,\)"):
        opt.stateless_apply(good[:2] + [torch.zeros(3)] + good[3:], [torch.ones(2)], [torch.ones(2)])
    with pytest.raises(TypeError, match="`trainable_variables` entry 0 must be a tensor"):
        opt.stateless_apply(good, [torch.ones(2)], ["ab"])
    assert same(snapshot(opt, w), before)
    new_model, _ = opt.stateless_apply(good, [torch.ones(2)], [torch.ones(2)])
    assert new_model[0].tolist() == pytest.approx([0.9, 0.9], abs=1e-5) and w.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------------------------------------- 15
@pytest.mark.parametrize("argv, message", [
    (["demo", "--optimizer", '{"class_name": "adam", "config": [1]}'], "--optimizer JSON value must look like"),
    (["demo", "--optimizer", '{"class_name": "adam", "config": {"clipnorm": "1"}}'],
     "Argument `clipnorm` must be a number. Received: clipnorm='1'"),
    (["demo", "--optimizer", "adam", "--out", "{file}/x.png"], "--out .* cannot be written: .* is a file"),
    (["demo", "--optimizer", "adam", "--out", "{dir}"], "--out .* is a directory"),
    (["bench", "--quick", "--png", "{file}/sub/x.png"], "cannot be written|matplotlib"),
])
def test_15_cli_checks_arguments_and_output_paths_first(tmp_path: Any, capsys: Any, argv: list[str],
                                                        message: str) -> None:
    from slotopt.cli.command import EXIT_USAGE, main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    argv = [a.replace("{file}", str(blocker)).replace("{dir}", str(tmp_path)) for a in argv]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert re.search(message, captured.err), captured.err
    assert "epoch" not in captured.out.lower() and "ms per step" not in captured.out  # nothing ran


# ---------------------------------------------------------------------------------------------------------- 16
def _composite_config(optimizer: dict[str, Any]) -> dict[str, Any]:
    return {"name": "c", "optimizers_and_vars": [{"optimizer": optimizer, "variables": ["*"]}]}


def test_16_from_config_imports_nothing_a_config_names(tmp_path: Any, monkeypatch: Any) -> None:
    import sys

    (tmp_path / "slotopt_probe_plugin.py").write_text(
        "import builtins\nbuiltins.SLOTOPT_PROBE_RAN = True\n"
        "class Probe:\n    @classmethod\n    def from_config(cls, config):\n        return cls()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _composite_config({"module": "slotopt_probe_plugin", "class_name": "Probe", "config": {}})
    with pytest.raises(ValueError, match="Unknown optimizer: 'Probe'.*custom_objects"):
        slotopt.CompositeOptimizer.from_config(config)
    assert "slotopt_probe_plugin" not in sys.modules
    assert not hasattr(__import__("builtins"), "SLOTOPT_PROBE_RAN")


@pytest.mark.parametrize("class_name, module", [
    ("ExponentialDecay", "slotopt.schedules"),  # has a from_config, but is not an optimizer
    ("Variable", "slotopt"),
    ("Optimizer", "slotopt.legacy.optimizer"),  # a base class is not in the registry
    ("Lamb", "slotopt.keras3.lamb"),  # exported but not registered, as in slotopt.deserialize
])
def test_16_only_registered_optimizers_are_resolved(class_name: str, module: str) -> None:
    config = _composite_config({"module": module, "class_name": class_name, "config": {}})
    with pytest.raises(ValueError, match=f"Unknown optimizer: '{class_name}'"):
        slotopt.CompositeOptimizer.from_config(config)


def test_16_custom_objects_must_give_an_optimizer() -> None:
    class NotAnOptimizer:
        @classmethod
        def from_config(cls, config: Any) -> Any:
            return cls()

    config = _composite_config({"module": "anything", "class_name": "X", "config": {}})
    with pytest.raises(ValueError, match="not a slotopt optimizer"):
        slotopt.CompositeOptimizer.from_config(config, custom_objects={"X": NotAnOptimizer})
    lamb = _composite_config({"module": "slotopt.keras3.lamb", "class_name": "Lamb",
                              "config": {"learning_rate": 0.5}})
    restored = slotopt.CompositeOptimizer.from_config(lamb, custom_objects={"Lamb": slotopt.Lamb})
    assert type(restored.optimizers[0]) is slotopt.Lamb


@pytest.mark.parametrize("bad", [None, [1], {"optimizers_and_vars": []}, {"optimizers_and_vars": [{"x": 1}]},
                                 {"optimizers_and_vars": [{"optimizer": {"class_name": "adam"}, "variables": 3}]}])
def test_16_malformed_composite_configs_are_named(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="config|optimizers_and_vars"):
        slotopt.CompositeOptimizer.from_config(bad)


def test_16_every_generation_round_trips_through_the_registry() -> None:
    opt = slotopt.CompositeOptimizer([(legacy.Adam(learning_rate=0.5), ["a*"]), (slotopt.Adagrad(), ["b*"]),
                                      (legacy.SGD(momentum=0.5), ["c*"])])
    clone = slotopt.CompositeOptimizer.from_config(opt.get_config())
    assert [type(o) for o in clone.optimizers] == [legacy.Adam, slotopt.Adagrad, legacy.SGD]
    assert float(clone.optimizers[0].learning_rate) == 0.5


# ---------------------------------------------------------------------------------------------------------- 8
def _saved_sgd_momentum_state() -> dict[str, Any]:
    src, w = slotopt.SGD(momentum=0.5), param(1.0, 2.0)
    src.apply_gradients([(torch.ones(2), w)])
    return src.state_dict()


@pytest.mark.parametrize("make", [lambda: slotopt.Adam(learning_rate=0.1), lambda: legacy.Adam(learning_rate=0.1),
                                  lambda: v1.AdamOptimizer(0.1)], ids=["keras3", "legacy", "v1"])
def test_8_a_checkpoint_loaded_before_build_that_does_not_fit_leaves_the_optimizer_unbuilt(make: Any) -> None:
    opt, w = make(), param(1.0, 2.0)
    opt.load_state_dict(_saved_sgd_momentum_state())  # another class: checked once the variables exist
    with pytest.raises(ValueError, match="state dict was saved by another optimizer class"):
        opt.apply_gradients([(torch.ones(2), w)])
    assert w.tolist() == [1.0, 2.0] and opt.param_groups == [] and "_pending_torch_state" in opt.__dict__
    assert sorted(opt.state_dict()["state"][0]) == ["momentum", "step"]  # still pending: still the state
    if isinstance(opt, legacy.Optimizer):
        assert opt.weights == [] and opt._iterations is None
    if isinstance(opt, slotopt.Optimizer):
        assert not opt.built and int(opt.iterations) == 0
    with pytest.raises(ValueError, match="another optimizer class"):  # still pending: the retry fails the same way
        opt.apply_gradients([(torch.ones(2), w)])


def test_8_keras3_weights_of_the_wrong_length_stay_pending_and_unbuilt() -> None:
    opt, w = slotopt.Adam(learning_rate=0.1), param(1.0, 2.0)
    opt.load_own_variables({"0": torch.tensor(3), "1": torch.tensor(0.1)})  # (set_weights needs the build)
    with pytest.raises(ValueError, match="weight list of length 2, but the optimizer was expecting 4 weights"):
        opt.apply_gradients([(torch.ones(2), w)])
    assert not opt.built and opt.param_groups == [] and w.tolist() == [1.0, 2.0]
    # A fitting checkpoint then trains from it (iteration 3 → the step is the 4th).
    donor, d = slotopt.Adam(learning_rate=0.1), param(1.0, 2.0)
    for _ in range(3):
        donor.apply_gradients([(torch.ones(2), d)])
    opt.load_own_variables({str(i): x for i, x in enumerate(donor.get_weights())})
    opt.apply_gradients([(torch.ones(2), w)])
    assert int(opt.iterations) == 4
    assert same([v.detach() for v in opt.variables][2:], [v.detach() for v in donor.variables][2:]) is False


# ---------------------------------------------------------------------------------------------------------- 9
def test_9_an_error_on_the_update_call_keeps_the_accumulated_gradients() -> None:
    calls = {"n": 0}

    def learning_rate() -> float:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("schedule service unavailable")
        return 0.5

    opt, w = slotopt.SGD(learning_rate=learning_rate, gradient_accumulation_steps=2), param(1.0)
    opt.apply_gradients([(torch.tensor([1.0]), w)])  # accumulate only
    before = snapshot(opt, w)
    with pytest.raises(RuntimeError, match="unavailable"):
        opt.apply_gradients([(torch.tensor([3.0]), w)])
    assert same(snapshot(opt, w), before)
    assert opt._accumulated_gradients[0].tolist() == [1.0]
    opt.apply_gradients([(torch.tensor([3.0]), w)])  # the retry averages (1 + 3) / 2
    assert w.tolist() == [0.0] and opt._accumulated_gradients[0].tolist() == [0.0] and int(opt.iterations) == 1


# ---------------------------------------------------------------------------------------------------------- 10
def _composites() -> tuple[Any, Any, list[torch.Tensor]]:
    def make() -> tuple[Any, list[torch.Tensor]]:
        a, b = param(1.0), param(2.0)
        return slotopt.CompositeOptimizer([(slotopt.SGD(momentum=0.5), [a]), (slotopt.Adam(), [b])]), [a, b]

    (target, tv), (source, sv) = make(), make()
    for _ in range(2):
        target.apply_gradients([(torch.ones(1), v) for v in tv])
    for _ in range(5):
        source.apply_gradients([(torch.ones(1), v) for v in sv])
    return target, source, tv


def test_10_composite_loads_are_all_or_nothing() -> None:
    target, source, tv = _composites()
    before = snapshot(target, *tv)
    weights = source.get_weights()
    weights[-1] = torch.zeros(3).numpy()  # the second optimizer's last slot does not fit
    with pytest.raises(ValueError, match="not compatible"):
        target.set_weights(weights)
    with pytest.raises(ValueError, match="not compatible"):
        target.load_state_dict({"weights": weights})
    state = source.state_dict()
    state["state"][1] = {k: v if k == "step" else torch.zeros(3) for k, v in state["state"][1].items()}
    with pytest.raises(ValueError, match="has shape \\(3,\\)"):
        target.load_state_dict(state)
    assert same(snapshot(target, *tv), before)
    assert [int(o.iterations) for o in target.optimizers] == [2, 2]
    target.set_weights(source.get_weights())
    assert [int(o.iterations) for o in target.optimizers] == [5, 5]


def test_10_multi_optimizer_set_weights_is_all_or_nothing() -> None:
    a = slotopt.Variable(torch.ones(1), name="kernel")
    b = slotopt.Variable(torch.ones(1), name="bias")
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(momentum=0.5), {"kern.*": slotopt.Adam()}))
    opt.apply_gradients([(torch.ones(1), a), (torch.ones(1), b)])
    before = snapshot(opt, a, b)
    weights = opt.get_weights()
    weights[-1] = "not a number"
    with pytest.raises((TypeError, ValueError)):
        opt.set_weights(weights)
    assert same(snapshot(opt, a, b), before)


# ---------------------------------------------------------------------------------------------------------- 11
def test_11_a_legacy_callable_learning_rate_that_raises_creates_nothing() -> None:
    def learning_rate() -> float:
        raise RuntimeError("no learning rate today")

    opt, w = legacy.Adam(learning_rate=learning_rate), param(1.0)
    with pytest.raises(RuntimeError, match="no learning rate today"):
        opt.apply_gradients([(torch.ones(1), w)])
    assert opt._iterations is None and opt.weights == [] and opt.param_groups == [] and w.tolist() == [1.0]


# ---------------------------------------------------------------------------------------------------------- 13
def _v1_composite() -> tuple[Any, torch.Tensor, torch.Tensor]:
    a, b = param(1.0, 2.0), param(3.0)
    opt = slotopt.CompositeOptimizer([(v1.AdamOptimizer(0.1), ["a"]), (slotopt.SGD(momentum=0.5), ["b"])],
                                     params=[("a", a), ("b", b)])
    return opt, a, b


def _train(opt: Any, a: torch.Tensor, b: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        a.grad, b.grad = torch.ones(2), torch.ones(1)
        opt.step()


@pytest.mark.parametrize("how", ["state_dict", "weights"])
def test_13_a_composite_with_a_v1_sub_optimizer_resumes_in_a_fresh_one(how: str) -> None:
    opt, a, b = _v1_composite()
    _train(opt, a, b, 3)
    fresh, a2, b2 = _v1_composite()
    with torch.no_grad():
        a2.copy_(a)
        b2.copy_(b)
    if how == "state_dict":
        fresh.load_state_dict(opt.state_dict())
    else:
        fresh.set_weights(opt.get_weights())
    _train(opt, a, b, 2)
    _train(fresh, a2, b2, 2)
    assert torch.equal(a, a2) and torch.equal(b, b2)


def test_13_a_composite_load_before_build_is_kept_until_the_build() -> None:
    src_a, src_b = param(1.0, 2.0), param(3.0)
    source = slotopt.CompositeOptimizer([(slotopt.Adam(0.1), ["a"]), (slotopt.SGD(momentum=0.5), ["b"])],
                                        params=[("a", src_a), ("b", src_b)])
    _train(source, src_a, src_b, 3)
    for load in ("set_weights", "load_state_dict"):
        opt = slotopt.CompositeOptimizer([(slotopt.Adam(0.1), ["a"]), (slotopt.SGD(momentum=0.5), ["b"])])
        if load == "set_weights":
            opt.set_weights(source.get_weights())
        else:
            opt.load_state_dict(source.state_dict())
        a, b = param(1.0, 2.0), param(3.0)
        opt.build([("a", a), ("b", b)])
        assert [int(o.iterations) for o in opt.optimizers] == [3, 3]
        assert same(opt.get_weights() and [torch.as_tensor(x) for x in opt.get_weights()],
                    [torch.as_tensor(x) for x in source.get_weights()])


def test_13_a_composite_checkpoint_that_does_not_fit_stays_pending_and_changes_nothing() -> None:
    opt = slotopt.CompositeOptimizer([(slotopt.Adam(0.1), ["a"]), (slotopt.SGD(momentum=0.5), ["b"])])
    opt.set_weights([torch.zeros(())] * 3)
    a, b = param(1.0, 2.0), param(3.0)
    with pytest.raises(ValueError, match="weight list of length 3"):
        opt.build([("a", a), ("b", b)])
    assert not opt.built and opt._pending_weights is not None
    assert [o.built for o in opt.optimizers] == [False, False] and opt.param_groups == []


# ---------------------------------------------------------------------------------------------------------- 4
def _stepped(opt: Any, n: int = 1) -> tuple[Any, list[torch.Tensor]]:
    ws = [param(1.0) for _ in range(n)]
    opt.apply_gradients([(torch.ones(1), w) for w in ws])
    return opt, ws


@pytest.mark.parametrize("source, target, message", [
    (lambda: _stepped(slotopt.Adam()), lambda: _stepped(slotopt.RMSprop(momentum=0.5)), "another optimizer class"),
    (lambda: _stepped(slotopt.SGD(), 4), lambda: _stepped(slotopt.Adam(), 2), "another optimizer class"),
    (lambda: _stepped(slotopt.SGD(), 4), lambda: _stepped(slotopt.SGD(), 2), "has 4 parameters"),
    (lambda: _stepped(legacy.Adam()), lambda: _stepped(legacy.RMSprop(momentum=0.5)), "another optimizer class"),
    (lambda: _stepped(v1.MomentumOptimizer(0.1, 0.9)), lambda: _stepped(v1.AdamOptimizer(0.1)),
     "another optimizer class"),
])
def test_4_another_class_or_other_variables_are_refused(source: Any, target: Any, message: str) -> None:
    (src, _), (opt, ws) = source(), target()
    before = snapshot(opt, *ws)
    with pytest.raises(ValueError, match=message):
        opt.load_state_dict(src.state_dict())
    assert same(snapshot(opt, *ws), before)


def test_4_a_v1_checkpoint_whose_names_match_nothing_is_refused() -> None:
    opt, ws = _stepped(v1.AdamOptimizer(0.1))
    before = snapshot(opt, *ws)
    with pytest.raises(ValueError, match=r"variables \['other/Adam'\] that AdamOptimizer 'Adam' does not have"):
        opt.load_state_dict({"name": "Adam", "variables": {"other/Adam": torch.ones(1)}})
    assert same(snapshot(opt, *ws), before)


# ---------------------------------------------------------------------------------------------------------- 12
def test_12_legacy_loss_scale_optimizer_state_dict_resumes_bit_for_bit() -> None:
    def make() -> tuple[Any, torch.Tensor]:
        return legacy.LossScaleOptimizer(legacy.Adam(learning_rate=0.1), initial_scale=8.0), param(1.0, -2.0)

    def train(opt: Any, w: torch.Tensor, steps: int) -> None:
        for _ in range(steps):
            opt.minimize(lambda: (w * w).sum(), [w])

    opt, w = make()
    train(opt, w, 3)
    fresh, w2 = make()
    with torch.no_grad():
        w2.copy_(w)
    fresh.build([w2])
    saved = opt.state_dict()
    assert {"current_loss_scale", "good_steps", "step", "m", "v"} <= set(saved["state"][0])
    fresh.load_state_dict(saved)
    train(opt, w, 2)
    train(fresh, w2, 2)
    assert torch.equal(w, w2) and float(fresh.loss_scale) == float(opt.loss_scale)
    with pytest.raises(ValueError, match="another optimizer class"):
        legacy.LossScaleOptimizer(legacy.SGD(momentum=0.5), params=[param(1.0, 2.0)]).load_state_dict(saved)


# ---------------------------------------------------------------------------------------------------------- 6
COPYABLE = {
    "keras3": lambda model: slotopt.AdamW(learning_rate=0.1, weight_decay=0.5, params=model),
    "legacy": lambda model: legacy.Adam(learning_rate=0.1, params=model),
    "v1": lambda model: v1.AdamOptimizer(0.1, params=model),
    "composite": lambda model: slotopt.CompositeOptimizer(
        [(slotopt.Adam(learning_rate=0.1), ["0.*"]), (legacy.SGD(momentum=0.5), ["1.*"])], params=model),
    "multi": lambda model: slotopt.MultiOptimizer(
        slotopt.OptimizerMap(slotopt.SGD(momentum=0.5), {"0.*": slotopt.Adam(learning_rate=0.1)}), params=model),
    "keras3-loss-scale": lambda model: slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.1), params=model),
    "legacy-loss-scale": lambda model: legacy.LossScaleOptimizer(legacy.Adam(learning_rate=0.1), params=model),
}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def _step(model: torch.nn.Module, opt: Any, x: torch.Tensor) -> None:
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("kind", sorted(COPYABLE))
def test_6_a_copy_of_model_and_optimizer_trains_exactly_like_the_original(kind: str, how: str) -> None:
    import io

    model = _model()
    opt = COPYABLE[kind](model)
    x = torch.tensor([[1.0, -2.0, 0.5]])
    for _ in range(2):
        _step(model, opt, x)
    if how == "deepcopy":
        model2, opt2 = copy.deepcopy((model, opt))
    else:
        buffer = io.BytesIO()
        torch.save((model, opt), buffer)
        buffer.seek(0)
        model2, opt2 = torch.load(buffer, weights_only=False)
    for _ in range(2):
        _step(model, opt, x)
        _step(model2, opt2, x)
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q) and p is not q
    assert same(opt.state_dict()["state"], opt2.state_dict()["state"])


def test_6_after_a_copy_only_the_copied_variables_are_known() -> None:
    model = _model()
    opt = slotopt.Adam(learning_rate=0.1, params=model)
    _step(model, opt, torch.ones(1, 3))
    _, opt2 = copy.deepcopy((model, opt))
    stranger = param(1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="Unknown variable"):
        opt2.apply_gradients([(torch.ones(3), stranger)])
    with pytest.raises(ValueError, match="Unknown variable"):  # the original's parameters are not the copy's
        opt2.apply_gradients([(torch.ones_like(p), p) for p in model.parameters()])


def test_6_exclude_from_weight_decay_follows_the_variables_not_their_ids() -> None:
    model = _model()
    bias = model[0].bias
    opt = slotopt.AdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[bias])
    opt.build(model)
    model2, opt2 = copy.deepcopy((model, opt))
    assert not opt2._use_weight_decay(model2[0].bias) and opt2._use_weight_decay(model2[0].weight)
    assert opt2._use_weight_decay(bias) or opt2._position(bias) is None  # the original bias is not the copy's
    with torch.no_grad():
        before = model2[0].bias.clone()
    model2.zero_grad()
    for p in model2.parameters():
        p.grad = torch.zeros_like(p)
    opt2.step()
    assert torch.equal(model2[0].bias, before)  # zero gradient, no decay: unchanged


# ---------------------------------------------------------------------------------------------------------- 5
@pytest.mark.parametrize("make", [
    lambda: slotopt.Adam(learning_rate=0.01), lambda: slotopt.Nadam(learning_rate=0.01),
    lambda: slotopt.Lamb(learning_rate=0.01), lambda: legacy.Adam(learning_rate=0.01),
    lambda: legacy.Nadam(learning_rate=0.01), lambda: v1.AdamOptimizer(0.01),
], ids=["keras3-adam", "keras3-nadam", "keras3-lamb", "legacy-adam", "legacy-nadam", "v1-adam"])
def test_5_bfloat16_variables_train_with_the_default_betas(make: Any) -> None:
    w = param(1.0, -1.0, dtype=torch.bfloat16)
    opt = make()
    previous = w.detach().clone()
    for _ in range(3):
        opt.apply_gradients([(torch.tensor([0.5, -0.5], dtype=torch.bfloat16), w)])
        assert torch.isfinite(w).all() and (w.detach().abs() < previous.abs()).all()  # moves towards 0 each step
        previous = w.detach().clone()
    assert w.dtype == torch.bfloat16 and w.tolist()[0] == pytest.approx(0.97, abs=0.01)


@pytest.mark.parametrize("make", [
    lambda: legacy.SGD(learning_rate=0.1, decay=1e-6),
    lambda: legacy.SGD(learning_rate=S.ExponentialDecay(0.1, 1_000_000, 0.5)),
], ids=["decay", "schedule"])
def test_5_float16_variables_keep_training_past_iteration_65504(make: Any) -> None:
    w = param(1.0, dtype=torch.float16)
    opt = make()
    opt.build([w])
    opt.iterations.fill_(65_530)
    opt.apply_gradients([(torch.tensor([1.0], dtype=torch.float16), w)])
    assert 0.85 < w.item() < 0.95


def test_5_float16_follows_the_reference_rounding_below_the_limit() -> None:
    # decay * iterations in float16, as tf.keras computes it: lr / (1 + f16(0.001) * f16(1000)).
    w = param(1.0, dtype=torch.float16)
    opt = legacy.SGD(learning_rate=0.5, decay=0.001)
    opt.build([w])
    opt.iterations.fill_(1000)
    opt.apply_gradients([(torch.tensor([1.0], dtype=torch.float16), w)])
    lr = torch.tensor(0.5, dtype=torch.float16) / (1 + torch.tensor(0.001, dtype=torch.float16) *
                                                   torch.tensor(1000.0, dtype=torch.float16))
    assert w.item() == (torch.tensor(1.0, dtype=torch.float16) - lr * 1).item()


@pytest.mark.parametrize("build, argument", [
    (lambda: legacy.Adagrad(initial_accumulator_value=NAN), "initial_accumulator_value"),
    (lambda: v1.AdagradOptimizer(0.1, initial_accumulator_value=NAN), "initial_accumulator_value"),
    (lambda: v1.FtrlOptimizer(0.1, initial_accumulator_value=math.inf), "initial_accumulator_value"),
    (lambda: v1.MomentumOptimizer(0.1, 0.9, use_nesterov="no"), "use_nesterov"),
])
def test_3_constants_kept_outside_the_hyperparameter_table_are_checked_too(build: Any, argument: str) -> None:
    with pytest.raises((TypeError, ValueError), match=f"`{argument}` must be"):
        build()


# ---------------------------------------------------------------------------------------------------------- 7
@pytest.mark.parametrize("make", [lambda: slotopt.Adafactor(learning_rate=0.1), lambda: slotopt.Lamb(learning_rate=0.1)],
                         ids=["adafactor", "lamb"])
def test_7_whole_tensor_reductions_do_not_depend_on_the_memory_layout(make: Any) -> None:
    torch.manual_seed(1)
    values, grad = torch.randn(64, 48), torch.randn(64, 48)
    contiguous = torch.nn.Parameter(values.clone())
    transposed = torch.nn.Parameter(values.t().contiguous().t())  # the same values, stored column-major
    assert not transposed.is_contiguous()
    a, b = make(), make()
    for _ in range(5):
        a.apply_gradients([(grad.clone(), contiguous)])
        b.apply_gradients([(grad.t().contiguous().t(), transposed)])
    assert torch.equal(contiguous, transposed)


# ---------------------------------------------------------------------------------------------- 8-10 properties
# Rejected-call atomicity over many (optimizer, corruption) pairs, drawn with a fixed seed: a load that raises
# leaves the state dict and the variables exactly as they were, and the next valid step trains as if it never
# happened. (The project's hypothesis properties live with the correctness issue; this is the same law.)
FACTORIES = [
    lambda: slotopt.Adam(learning_rate=0.1), lambda: slotopt.SGD(momentum=0.9),
    lambda: slotopt.RMSprop(momentum=0.5, centered=True), lambda: legacy.Adam(learning_rate=0.1),
    lambda: legacy.Adagrad(), lambda: v1.AdamOptimizer(0.1), lambda: v1.RMSPropOptimizer(0.1, momentum=0.5),
]


def _corruptions(state: dict[str, Any], rng: Any) -> list[Any]:
    bad = []
    wrong_shape = copy.deepcopy(state)
    key = sorted(wrong_shape["state"])[rng.randrange(len(wrong_shape["state"]))]
    slot = sorted(k for k in wrong_shape["state"][key] if wrong_shape["state"][key][k].dim() > 0)
    if slot:
        wrong_shape["state"][key][slot[0]] = torch.zeros(7)
        bad.append(wrong_shape)
    missing = copy.deepcopy(state)
    missing["state"].pop(sorted(missing["state"])[-1])
    bad.append(missing)
    extra_group = copy.deepcopy(state)
    extra_group["param_groups"].append(dict(extra_group["param_groups"][0], params=[99]))
    bad.append(extra_group)
    nan_lr = copy.deepcopy(state)
    nan_lr["param_groups"][0]["lr"] = NAN
    bad.append(nan_lr)
    bad.append({"state": state["state"]})
    return bad


@pytest.mark.parametrize("seed", range(4))
def test_rejected_loads_change_nothing_and_training_continues(seed: int) -> None:
    import random

    rng = random.Random(seed)
    make = FACTORIES[rng.randrange(len(FACTORIES))]
    ws = [param(*[rng.uniform(-1, 1) for _ in range(3)]) for _ in range(2)]
    opt = make()
    grads = [torch.tensor([rng.uniform(-1, 1) for _ in range(3)]) for _ in ws]
    for _ in range(rng.randrange(1, 4)):
        opt.apply_gradients(list(zip(grads, ws)))
    reference = copy.deepcopy((ws, opt))
    good = opt.state_dict()
    for bad in _corruptions(good, rng):
        before = snapshot(opt, *ws)
        with pytest.raises((ValueError, TypeError)):
            opt.load_state_dict(bad)
        assert same(snapshot(opt, *ws), before)
    opt.apply_gradients(list(zip(grads, ws)))
    ref_ws, ref_opt = reference
    ref_opt.apply_gradients(list(zip(grads, ref_ws)))
    assert all(torch.equal(a, b) for a, b in zip(ws, ref_ws))


@pytest.mark.parametrize("steps", [2, 3])
def test_a_rejected_accumulation_step_changes_nothing(steps: int) -> None:
    opt, w = slotopt.Adam(learning_rate=0.1, gradient_accumulation_steps=steps), param(1.0, 2.0)
    for i in range(2 * steps - 1):
        opt.apply_gradients([(torch.full((2,), float(i + 1)), w)])
    before = snapshot(opt, w)
    with pytest.raises(ValueError, match="shape"):
        opt.apply_gradients([(torch.ones(3), w)])  # the update call, rejected
    assert same(snapshot(opt, w), before)
    opt.learning_rate = lambda: NAN  # type: ignore[assignment]
    before = snapshot(opt, w)
    with pytest.raises(ValueError, match="learning_rate"):
        opt.apply_gradients([(torch.ones(2), w)])  # the update call, rejected after accumulation
    assert same(snapshot(opt, w), before)
    assert opt._accumulated_gradients[0].tolist() != [0.0, 0.0]
