"""``slotopt.get`` / ``serialize`` / ``deserialize`` (spec §1.12)."""

from __future__ import annotations

import pytest
import torch

import slotopt
from slotopt import schedules

#: Keras 3 registered names implemented by slotopt (``lamb`` is deliberately absent, as in Keras).
REGISTERED = ["adadelta", "adafactor", "adagrad", "adam", "adamax", "adamw", "ftrl", "lion", "nadam", "rmsprop",
              "sgd"]
CLASS_NAMES = {"adadelta": "Adadelta", "adafactor": "Adafactor", "adagrad": "Adagrad", "adam": "Adam",
               "adamax": "Adamax", "adamw": "AdamW", "ftrl": "Ftrl", "lion": "Lion", "nadam": "Nadam",
               "rmsprop": "RMSprop", "sgd": "SGD"}


def _class(name):
    cls = getattr(slotopt, CLASS_NAMES[name], None)
    if cls is None:
        pytest.skip(f"slotopt.{CLASS_NAMES[name]} does not exist yet")
    return cls


@pytest.mark.parametrize("name", REGISTERED)
def test_get_by_name_is_case_insensitive(name):
    cls = _class(name)
    for spelling in (name, name.upper(), CLASS_NAMES[name]):
        opt = slotopt.get(spelling)
        assert type(opt) is cls


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_optimizer_round_trips_its_config(name):
    cls = _class(name)
    opt = cls(learning_rate=0.5, name=f"my_{name}")
    config = slotopt.serialize(opt)
    assert config == {"module": "keras.optimizers", "class_name": cls.__name__, "config": opt.get_config(),
                      "registered_name": None}
    again = slotopt.deserialize(config)
    assert type(again) is cls and again.get_config() == opt.get_config()


def test_get_with_default_arguments():
    opt = slotopt.get("adam")
    assert opt.get_config()["learning_rate"] == pytest.approx(0.001) and opt.beta_1 == 0.9


def test_lamb_is_not_registered_and_the_error_lists_valid_names():
    with pytest.raises(ValueError, match=r"Unknown optimizer: 'lamb'. Valid names are \[.*'adam'.*'sgd'.*\]"):
        slotopt.get("lamb")
    if hasattr(slotopt, "Lamb"):
        lamb = slotopt.deserialize({"class_name": "Lamb", "config": {"learning_rate": 0.5}},
                                   custom_objects={"Lamb": slotopt.Lamb})
        assert type(lamb) is slotopt.Lamb


def test_get_dict_with_and_without_module_keys():
    short = slotopt.get({"class_name": "sgd", "config": {"learning_rate": 0.5, "momentum": 0.5}})
    full = slotopt.get({"module": "keras.optimizers", "class_name": "SGD", "registered_name": None,
                        "config": {"learning_rate": 0.5, "momentum": 0.5}})
    assert type(short) is type(full) is slotopt.SGD
    assert short.momentum == full.momentum == 0.5
    assert float(short.learning_rate) == 0.5
    assert type(slotopt.get({"class_name": "Adam"})) is slotopt.Adam  # missing config: defaults


def test_instance_passes_through_and_none_gives_none():
    opt = slotopt.Adam()
    assert slotopt.get(opt) is opt
    assert slotopt.get(None) is None


@pytest.mark.parametrize("identifier", [42, 0.1, [1], slotopt.Adam, torch.tensor(1.0)])
def test_anything_else_is_rejected(identifier):
    with pytest.raises(ValueError, match=r"Could not interpret optimizer identifier: "):
        slotopt.get(identifier)


def test_unknown_name_is_rejected():
    with pytest.raises(ValueError, match=r"Unknown optimizer: 'nope'"):
        slotopt.get("nope")


def test_schedule_learning_rate_survives_the_round_trip():
    opt = slotopt.Adam(learning_rate=schedules.ExponentialDecay(0.5, 10, 0.25), name="sched")
    config = slotopt.serialize(opt)
    assert config["config"]["learning_rate"]["class_name"] == "ExponentialDecay"
    again = slotopt.deserialize(config)
    assert isinstance(again._learning_rate, schedules.ExponentialDecay)
    assert again.get_config() == opt.get_config()


def test_float_learning_rate_is_stored_float32_rounded():
    config = slotopt.serialize(slotopt.SGD(learning_rate=0.001))
    assert config["config"]["learning_rate"] == 0.0010000000474974513


class Halving(slotopt.Optimizer):
    def __init__(self, learning_rate=0.5, factor=0.5, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.factor = factor

    def update_step(self, gradient, variable, learning_rate):
        self.assign_sub(variable, gradient * learning_rate * self.factor)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def test_custom_optimizer_needs_custom_objects():
    opt = Halving(factor=0.25, name="halving")
    config = slotopt.serialize(opt)
    assert config["class_name"] == "Halving" and config["registered_name"] == "Halving"
    assert config["module"] == __name__
    with pytest.raises(ValueError, match=r"Unknown optimizer: 'Halving'.*custom_objects"):
        slotopt.deserialize(config)
    again = slotopt.deserialize(config, custom_objects={"Halving": Halving})
    assert type(again) is Halving and again.factor == 0.25
    w = slotopt.Variable(torch.tensor([1.0]), name="w")
    again.apply_gradients([(torch.tensor([2.0]), w)])
    assert w.item() == 0.75


def test_custom_objects_take_precedence_over_builtins():
    class MySGD(slotopt.SGD):
        pass

    opt = slotopt.deserialize({"class_name": "SGD", "config": {}}, custom_objects={"SGD": MySGD})
    assert type(opt) is MySGD


def test_loss_scale_optimizer_round_trip_with_custom_inner():
    lso = slotopt.LossScaleOptimizer(Halving(name="h"), initial_scale=8.0)
    config = slotopt.serialize(lso)
    assert config["class_name"] == "LossScaleOptimizer" and config["module"] == "keras.optimizers"
    again = slotopt.deserialize(config, custom_objects={"Halving": Halving})
    assert type(again.inner_optimizer) is Halving and again.initial_scale == 8.0
    assert again.get_config() == lso.get_config()


@pytest.mark.parametrize("config, pattern", [
    ("adam", r"Argument `config` must be a dict"),
    ({"config": {}}, r"needs a string `class_name`"),
    ({"class_name": "adam", "config": [1]}, r"`config\['config'\]` must be a dict"),
])
def test_deserialize_rejects_malformed_configs(config, pattern):
    with pytest.raises(ValueError, match=pattern):
        slotopt.deserialize(config)


def test_serialize_rejects_non_optimizers():
    with pytest.raises(TypeError, match=r"Argument `optimizer` must be an optimizer .*Received: optimizer=3"):
        slotopt.serialize(3)


def test_bad_config_values_raise_the_optimizer_error():
    with pytest.raises(ValueError, match=r"learning_rate=1"):
        slotopt.deserialize({"class_name": "adam", "config": {"learning_rate": 1}})


def test_docstring_examples_run():
    import doctest

    from slotopt.keras3 import serialization

    failures, tried = doctest.testmod(serialization)
    assert tried and not failures
