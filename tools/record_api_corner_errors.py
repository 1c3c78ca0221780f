"""Records the errors the real libraries raise for the Keras API corners of issue 50 item 10 (run in the
TensorFlow venv, never by the tests): Keras 3.15 ``OptimizerMap``/``MultiOptimizer`` nesting, the loss-scale
optimizers' invalid arguments and tf.keras's ``DynamicLossScale`` multiplier, and applying gradients to a tensor
that is not a variable (TF1 ``tf.compat.v1.train`` and tf.keras legacy optimizers).

Writes ``tests/data/issue50/api_corner_errors.json``: ``{case: {"type": exception class name, "message": str(e)}}``,
or ``{"type": null}`` where the real library accepts the input; ``_multi_optimizer_orders``: the order of
``MultiOptimizer.optimizers`` when the map's default is also one of its values.

    /work/tfvenv/bin/python tools/record_api_corner_errors.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from tf_keras.optimizers.legacy import SGD as LegacySGD  # noqa: E402
from tf_keras.src.mixed_precision.loss_scale_optimizer import LossScaleOptimizer as LegacyLossScaleOptimizer  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "issue50" / "api_corner_errors.json"


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        fn()
    except Exception as error:  # the recorded error, whatever it is
        return {"type": type(error).__name__, "message": str(error)}
    return {"type": None}


def keras3_cases() -> dict[str, Callable[[], Any]]:
    opt = keras.optimizers
    sgd = opt.SGD(0.1)

    def variable(scope: str) -> Any:
        with keras.name_scope(scope):
            return keras.Variable([[1.0]], name="kernel")

    def build_with(value: Any) -> None:  # an entry that bypassed ``map[key] =`` (Keras checks again at build)
        opt_map = opt.OptimizerMap(default_optimizer=opt.SGD(0.1))
        opt_map._optimizer_map = {".*dense_1/.*": value}
        opt.MultiOptimizer(opt_map).build([variable("dense_1")])

    def default_is(value: Any) -> None:
        opt.MultiOptimizer(opt.OptimizerMap(default_optimizer=value)).build([variable("dense_1")])

    def map_set(value: Any) -> None:
        opt.OptimizerMap(default_optimizer=sgd)[".*"] = value

    return {
        "keras3_map_set_loss_scale_optimizer": lambda: map_set(opt.LossScaleOptimizer(opt.SGD(0.1))),
        "keras3_map_set_multi_optimizer": lambda: map_set(opt.MultiOptimizer(opt.SGD(0.1))),
        "keras3_map_set_optimizer_map": lambda: map_set(opt.OptimizerMap(opt.SGD(0.1))),
        "keras3_map_set_non_string_key": lambda: opt.OptimizerMap(default_optimizer=sgd).__setitem__(3, sgd),
        "keras3_map_set_duplicate_key": lambda: (lambda m: (m.__setitem__("a", sgd), m.__setitem__("a", sgd)))(
            opt.OptimizerMap(default_optimizer=sgd)),
        "keras3_map_default_optimizer_map": lambda: opt.OptimizerMap(default_optimizer=opt.OptimizerMap(sgd)),
        "keras3_map_not_a_dict": lambda: opt.OptimizerMap(sgd, [("a", sgd)]),
        "keras3_build_loss_scale_optimizer": lambda: build_with(opt.LossScaleOptimizer(opt.SGD(0.1))),
        "keras3_build_multi_optimizer": lambda: build_with(opt.MultiOptimizer(opt.SGD(0.1))),
        "keras3_build_default_loss_scale_optimizer": lambda: default_is(opt.LossScaleOptimizer(opt.SGD(0.1))),
        "keras3_build_default_multi_optimizer": lambda: default_is(opt.MultiOptimizer(opt.SGD(0.1))),
        "keras3_build_selector_returns_map": lambda: opt.MultiOptimizer(
            lambda v: opt.OptimizerMap(opt.SGD(0.1))).build([variable("dense_1")]),
        "keras3_lso_initial_scale_negative": lambda: opt.LossScaleOptimizer(opt.SGD(0.1), initial_scale=-1.0),
        "keras3_lso_growth_steps_zero": lambda: opt.LossScaleOptimizer(opt.SGD(0.1), dynamic_growth_steps=0),
        "keras3_lso_dynamic_false": lambda: opt.LossScaleOptimizer(opt.SGD(0.1), dynamic=False),
        "keras3_lso_clipnorm": lambda: opt.LossScaleOptimizer(opt.SGD(0.1), clipnorm=1.0),
        "keras3_lso_unknown_argument": lambda: opt.LossScaleOptimizer(opt.SGD(0.1), foo=1),
    }


def legacy_cases() -> dict[str, Callable[[], Any]]:
    def tf2_3_config(multiplier: float) -> dict[str, Any]:
        return {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 2.0}},
                "loss_scale": {"class_name": "DynamicLossScale",
                               "config": {"initial_loss_scale": 2.0, "increment_period": 3,
                                          "multiplier": multiplier}}}

    return {
        "legacy_lso_multiplier_4": lambda: LegacyLossScaleOptimizer.from_config(tf2_3_config(4.0)),
        "legacy_lso_not_an_optimizer": lambda: LegacyLossScaleOptimizer(1),
        "legacy_lso_wraps_new_optimizer": lambda: LegacyLossScaleOptimizer(tf_keras.optimizers.SGD(0.1)),
        "legacy_lso_dynamic_not_bool": lambda: LegacyLossScaleOptimizer(LegacySGD(), "dynamic"),
        "legacy_lso_fixed_without_scale": lambda: LegacyLossScaleOptimizer(LegacySGD(), dynamic=False),
        "legacy_lso_fixed_with_growth": lambda: LegacyLossScaleOptimizer(
            LegacySGD(), dynamic=False, initial_scale=1, dynamic_growth_steps=2),
        "legacy_lso_nested": lambda: LegacyLossScaleOptimizer(LegacyLossScaleOptimizer(LegacySGD())),
        "legacy_lso_initial_scale_string": lambda: LegacyLossScaleOptimizer(LegacySGD(), initial_scale="big"),
    }


def tensor_cases() -> dict[str, Callable[[], Any]]:
    grad = tf.constant([0.5, 0.5])
    constant = tf.convert_to_tensor([1.0, 2.0])
    computed = tf.Variable([1.0, 2.0]) * 2.0
    return {
        "v1_apply_to_constant": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1).apply_gradients(
            [(grad, constant)]),
        "v1_apply_to_computed": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1).apply_gradients(
            [(grad, computed)]),
        "legacy_apply_to_constant": lambda: LegacySGD(0.1).apply_gradients([(grad, constant)]),
        "legacy_apply_to_computed": lambda: LegacySGD(0.1).apply_gradients([(grad, computed)]),
    }


def main() -> None:
    recorded = {name: outcome(fn) for cases in (keras3_cases(), legacy_cases(), tensor_cases())
                for name, fn in cases.items()}
    opt = keras.optimizers
    orders = {}
    for label, keys in (("default_first_value", ("d", "a")), ("default_last_value", ("a", "d")),
                        ("default_not_a_value", ("a", "b"))):
        made = {"d": opt.SGD(0.1, name="d"), "a": opt.Adam(0.1, name="a"), "b": opt.RMSprop(0.1, name="b")}
        opt_map = opt.OptimizerMap(made["d"], {f"{k}/.*": made[k] for k in keys})
        orders[label] = {"map": list(keys), "optimizers": [o.name for o in opt.MultiOptimizer(opt_map).optimizers]}
    recorded["_multi_optimizer_orders"] = orders  # MultiOptimizer.optimizers for a map whose default is "d"
    recorded["_versions"] = {"tensorflow": tf.__version__, "keras": keras.__version__}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    for name, value in sorted(recorded.items()):
        print(name, value)


if __name__ == "__main__":
    main()
