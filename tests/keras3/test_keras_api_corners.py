"""Issue 50 item 10: the Keras API corners of the upstream suites, against the errors the real libraries raise.

``tests/data/issue50/api_corner_errors.json`` is recorded by ``tools/record_api_corner_errors.py`` with
TensorFlow 2.21, Keras 3.15.1 and tf-keras 2.21. slotopt raises the same exception type with the real text first;
where the real text prints an object (``<... object at 0x...>``, a ``tf.Tensor``) slotopt prints its own object,
and where it names a TensorFlow class to use instead, slotopt names its own (both after the compared part).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt import legacy, v1

RECORDED = json.loads((Path(__file__).parents[1] / "data" / "issue50" / "api_corner_errors.json").read_text())


def _compared_part(message: str) -> str:
    """The real message up to the first object it prints, or to the TensorFlow class it points to."""
    for cut, keep in (("<", False), ("Received: var=", True), (" Please use `loss_scale_optimizer", False)):
        if cut in message:
            message = message[: message.index(cut) + (len(cut) if keep else 0)]
    return message


def _raised(fn: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _var(scope: str) -> slotopt.Variable:
    return slotopt.Variable(torch.ones(1, 1), name=f"{scope}/kernel")


def _map_set(value: Any) -> None:
    slotopt.OptimizerMap(slotopt.SGD(0.1))[".*"] = value


def _build_with(value: Any) -> None:  # an entry that bypassed ``map[key] =``: checked again at build, as Keras does
    opt_map = slotopt.OptimizerMap(slotopt.SGD(0.1))
    opt_map._optimizer_map = {".*dense_1/.*": value}
    slotopt.MultiOptimizer(opt_map).build([_var("dense_1")])


def _tf2_3_config(multiplier: float) -> dict[str, Any]:
    return {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 2.0}},
            "loss_scale": {"class_name": "DynamicLossScale",
                           "config": {"initial_loss_scale": 2.0, "increment_period": 3, "multiplier": multiplier}}}


_SGD = slotopt.SGD(0.1)
CASES: dict[str, Callable[[], Any]] = {
    "keras3_map_set_loss_scale_optimizer": lambda: _map_set(slotopt.LossScaleOptimizer(slotopt.SGD(0.1))),
    "keras3_map_set_multi_optimizer": lambda: _map_set(slotopt.MultiOptimizer(slotopt.SGD(0.1))),
    "keras3_map_set_optimizer_map": lambda: _map_set(slotopt.OptimizerMap(slotopt.SGD(0.1))),
    "keras3_map_set_non_string_key": lambda: slotopt.OptimizerMap(_SGD).__setitem__(3, _SGD),
    "keras3_map_set_duplicate_key": lambda: slotopt.OptimizerMap(_SGD, {"a": _SGD}).__setitem__("a", _SGD),
    "keras3_map_default_optimizer_map": lambda: slotopt.OptimizerMap(slotopt.OptimizerMap(_SGD)),
    "keras3_map_not_a_dict": lambda: slotopt.OptimizerMap(_SGD, [("a", _SGD)]),
    "keras3_build_loss_scale_optimizer": lambda: _build_with(slotopt.LossScaleOptimizer(slotopt.SGD(0.1))),
    "keras3_build_multi_optimizer": lambda: _build_with(slotopt.MultiOptimizer(slotopt.SGD(0.1))),
    # Keras takes these defaults and refuses them at build; slotopt refuses them at once, with the build's text
    "keras3_build_default_loss_scale_optimizer": lambda: slotopt.MultiOptimizer(
        slotopt.OptimizerMap(slotopt.LossScaleOptimizer(slotopt.SGD(0.1)))).build([_var("dense_1")]),
    "keras3_build_default_multi_optimizer": lambda: slotopt.MultiOptimizer(
        slotopt.OptimizerMap(slotopt.MultiOptimizer(slotopt.SGD(0.1)))).build([_var("dense_1")]),
    "keras3_build_selector_returns_map": lambda: slotopt.MultiOptimizer(
        lambda v: slotopt.OptimizerMap(slotopt.SGD(0.1))).build([_var("dense_1")]),
    "keras3_lso_dynamic_false": lambda: slotopt.LossScaleOptimizer(slotopt.SGD(0.1), dynamic=False),
    "keras3_lso_clipnorm": lambda: slotopt.LossScaleOptimizer(slotopt.SGD(0.1), clipnorm=1.0),
    "keras3_lso_unknown_argument": lambda: slotopt.LossScaleOptimizer(slotopt.SGD(0.1), foo=1),
    "legacy_lso_multiplier_4": lambda: legacy.LossScaleOptimizer.from_config(_tf2_3_config(4.0)),
    "legacy_lso_not_an_optimizer": lambda: legacy.LossScaleOptimizer(1),
    "legacy_lso_wraps_new_optimizer": lambda: legacy.LossScaleOptimizer(slotopt.SGD(0.1)),
    "legacy_lso_dynamic_not_bool": lambda: legacy.LossScaleOptimizer(legacy.SGD(), "dynamic"),
    "legacy_lso_fixed_without_scale": lambda: legacy.LossScaleOptimizer(legacy.SGD(), dynamic=False),
    "legacy_lso_fixed_with_growth": lambda: legacy.LossScaleOptimizer(
        legacy.SGD(), dynamic=False, initial_scale=1, dynamic_growth_steps=2),
    "legacy_lso_nested": lambda: legacy.LossScaleOptimizer(legacy.LossScaleOptimizer(legacy.SGD())),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_error_type_and_text_as_the_real_library(case):
    real = RECORDED[case]
    error = _raised(CASES[case])
    assert type(error).__name__ == real["type"], (error, real)
    expected = _compared_part(real["message"])
    assert str(error).startswith(expected), (str(error), real["message"])


def test_the_multiplier_error_prints_the_loss_scale_as_tf_keras_does():
    # tf-keras loss_scale_optimizer_test.py::test_from_config_with_invalid_multiplier matches
    # "... Got DynamicLossScale: DynamicLossScale\(": the repr TF1 gives the loss scale, not the config dict.
    error = _raised(lambda: legacy.LossScaleOptimizer.from_config(_tf2_3_config(4.0)))
    assert str(error) == RECORDED["legacy_lso_multiplier_4"]["message"]


def test_an_invalid_initial_scale_is_a_value_error_as_in_tf_keras():
    # tf-keras converts with float(): a ValueError whose text is Python's; slotopt's names the argument instead
    assert RECORDED["legacy_lso_initial_scale_string"]["type"] == "ValueError"
    error = _raised(lambda: legacy.LossScaleOptimizer(legacy.SGD(), initial_scale="big"))
    assert type(error) is ValueError and "initial_scale" in str(error)


@pytest.mark.parametrize("case", ["keras3_lso_initial_scale_negative", "keras3_lso_growth_steps_zero"])
def test_keras3_takes_what_slotopt_refuses(case):
    # Keras 3.15 checks neither argument (a negative scale or a growth period of 0 then trains wrongly);
    # slotopt refuses both before anything is built, naming the argument.
    assert RECORDED[case]["type"] is None
    kwargs = {"initial_scale": -1.0} if "scale" in case else {"dynamic_growth_steps": 0}
    error = _raised(lambda: slotopt.LossScaleOptimizer(slotopt.SGD(0.1), **kwargs))
    assert type(error) is ValueError and next(iter(kwargs)) in str(error)


@pytest.mark.parametrize("label", sorted(RECORDED["_multi_optimizer_orders"]))
def test_multi_optimizer_lists_its_optimizers_in_keras_order(label):
    # Keras 3.15 appends the map's values in insertion order, each once, then the default if it is not one of
    # them: a default that is also a value keeps that value's place (slotopt put it last).
    recorded = RECORDED["_multi_optimizer_orders"][label]
    made = {"d": slotopt.SGD(0.1, name="d"), "a": slotopt.Adam(0.1, name="a"), "b": slotopt.RMSprop(0.1, name="b")}
    opt_map = slotopt.OptimizerMap(made["d"], {f"{k}/.*": made[k] for k in recorded["map"]})
    multi = slotopt.MultiOptimizer(opt_map)
    assert [o.name for o in multi.optimizers] == recorded["optimizers"]
    # and the variables follow that order
    variables = [slotopt.Variable(torch.ones(2), name=f"{k}/w") for k in ("a", "b", "d")]
    multi.build(variables)
    assert multi.variables[2:] == [v for o in multi.optimizers for v in o.variables]


def test_multi_optimizer_blocks_nested_optimizers_then_builds():
    # Keras 3.15 multi_optimizer_test.py::test_multi_optimizer_blocks_nested_optimizers: the same MultiOptimizer
    # refuses each nested entry at build, and a failed build leaves it unbuilt (no variable registered)
    sgd = slotopt.SGD(0.1)
    opt_map = slotopt.OptimizerMap(sgd)
    opt_map._optimizer_map = {".*dense_1/.*": slotopt.LossScaleOptimizer(slotopt.SGD(0.1)),
                              ".*dense_2/.*": slotopt.MultiOptimizer(slotopt.SGD(0.1))}
    multi = slotopt.MultiOptimizer(opt_map)
    w1, w2, w3 = _var("dense_1"), _var("dense_2"), _var("other")
    with pytest.raises(ValueError, match=r"LossScaleOptimizer cannot be used inside an MultiOptimizer\."):
        multi.build([w1])
    with pytest.raises(ValueError, match=r"MultiOptimizer cannot be used inside an MultiOptimizer\."):
        multi.build([w2])
    assert not multi.built
    multi.build([w3])
    multi.apply_gradients([(torch.ones(1, 1), w3)])
    assert w3.tolist() == [[0.8999999761581421]] and int(multi.iterations) == 1


# ------------------------------------------------------------------------------------------- tensors
@pytest.mark.parametrize("generation", ["v1", "legacy"])
def test_gradients_applied_to_a_computed_tensor_raise_not_implemented_error(generation):
    # TF's eager optimizers refuse a `tf.Tensor` (a computed value, not a `tf.Variable`); the torch analogue is
    # a non-leaf tensor. Nothing is written, nothing counted.
    leaf = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    computed = leaf * 2.0
    before = computed.detach().clone()
    opt = v1.GradientDescentOptimizer(0.1) if generation == "v1" else legacy.SGD(0.1)
    error = _raised(lambda: opt.apply_gradients([(torch.tensor([0.5, 0.5]), computed)]))
    real = RECORDED[f"{generation}_apply_to_computed"]
    assert type(error).__name__ == real["type"] == "NotImplementedError"
    if generation == "v1":  # TF1 raises with two arguments: the text and the tensor
        assert error.args == ("Trying to update a Tensor ", computed)
        assert real["message"].startswith("('Trying to update a Tensor ', ")
    else:
        assert str(error) == f"Updating a `Tensor` is not implemented. Received: var={computed}."
        assert str(error).startswith(_compared_part(real["message"]))
    assert torch.equal(computed.detach(), before)
    assert generation == "v1" or int(opt.iterations) == 0


@pytest.mark.parametrize("face", ["keras3", "legacy", "v1"])
def test_a_computed_tensor_as_a_parameter_is_refused_as_torch_refuses_it(face):
    # torch.optim: ValueError("can't optimize a non-leaf Tensor") at construction and in add_param_group; a
    # non-leaf that retains its gradient is taken, as torch takes it
    make = {"keras3": slotopt.SGD, "legacy": legacy.SGD, "v1": v1.GradientDescentOptimizer}[face]
    leaf = torch.nn.Parameter(torch.ones(2))
    computed = leaf * 2.0
    with pytest.raises(ValueError, match=r"^can't optimize a non-leaf Tensor: params entry 0"):
        make([computed], lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        torch.optim.SGD([computed], lr=0.1)
    opt = make([leaf], lr=0.1)
    with pytest.raises(ValueError, match=r"^can't optimize a non-leaf Tensor: param_group\['params'\] entry 0"):
        opt.add_param_group({"params": [leaf * 3.0]})
    assert [len(g["params"]) for g in opt.param_groups] == [1]
    kept = leaf * 2.0
    kept.retain_grad()
    assert make([kept], lr=0.1).param_groups[0]["params"][0] is kept
