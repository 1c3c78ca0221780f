"""Configs are data (issue 22 item 2): every entry point that rebuilds an optimizer from a config resolves names only
through slotopt's registries (``slotopt.engine.registry``) and the caller's ``custom_objects``. A config naming
``os.system``, ``builtins.eval``, ``subprocess.call`` and the like -- as a class, as an inner optimizer, as a
MultiOptimizer routing function -- is refused with an error that names it, and nothing is imported or called.
Round trips keep the generation and the class (issue 24 item 1)."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt import legacy, v1
from slotopt.cli import command as cli
from slotopt.engine import registry

# (module, name): what an attacker would name. The probe module is planted on sys.path by the fixture: importing
# it would set a flag, so "nothing was imported" is observable.
DANGEROUS = [("os", "system"), ("builtins", "eval"), ("builtins", "exec"), ("subprocess", "call"),
             ("subprocess", "Popen"), ("importlib", "import_module"), ("posix", "system"),
             ("slotopt_probe_payload", "Payload"), ("slotopt_probe_payload", "payload")]


@pytest.fixture
def tripwires(tmp_path: Any, monkeypatch: Any) -> list[str]:
    """Records any call of the dangerous callables, and plants a module whose import would be recorded."""
    calls: list[str] = []
    (tmp_path / "slotopt_probe_payload.py").write_text(
        "import builtins\nbuiltins.SLOTOPT_PAYLOAD_IMPORTED = True\n"
        "class Payload:\n    @classmethod\n    def from_config(cls, config, custom_objects=None):\n"
        "        builtins.SLOTOPT_PAYLOAD_RAN = True\n        return cls()\n"
        "def payload(*args, **kwargs):\n    builtins.SLOTOPT_PAYLOAD_RAN = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def recorder(name: str) -> Callable[..., Any]:
        # (eval/exec cannot be tripwired: Python's import machinery and dataclasses run code through them; a
        # config naming them is shown refused by the error and by the planted module never being imported.)
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called with {args!r}")
        return record

    monkeypatch.setattr(os, "system", recorder("os.system"))
    monkeypatch.setattr(subprocess, "call", recorder("subprocess.call"))
    monkeypatch.setattr(subprocess, "Popen", recorder("subprocess.Popen"))
    yield calls
    assert "slotopt_probe_payload" not in sys.modules
    assert not hasattr(builtins, "SLOTOPT_PAYLOAD_IMPORTED") and not hasattr(builtins, "SLOTOPT_PAYLOAD_RAN")
    assert calls == []


def _ref(module: str, name: str, config: Any = None) -> dict[str, Any]:
    return {"module": module, "class_name": name, "config": {} if config is None else config,
            "registered_name": None}


def _selector(module: str, name: str) -> dict[str, Any]:
    return {"module": module, "class_name": "function", "config": name, "registered_name": "function"}


def _variables() -> list[torch.Tensor]:
    return [slotopt.Variable(torch.ones(2), name="kernel"), slotopt.Variable(torch.ones(2), name="bias")]


ENTRY_POINTS: dict[str, Callable[[str, str], Any]] = {
    "slotopt.deserialize": lambda m, n: slotopt.deserialize(_ref(m, n)),
    "slotopt.get": lambda m, n: slotopt.get(_ref(m, n)),
    "keras3 LossScaleOptimizer inner": lambda m, n: slotopt.LossScaleOptimizer.from_config(
        {"inner_optimizer": _ref(m, n), "initial_scale": 2.0, "dynamic_growth_steps": 2}),
    "deserialize -> keras3 LossScaleOptimizer": lambda m, n: slotopt.deserialize(_ref(
        "keras.optimizers", "LossScaleOptimizer", {"inner_optimizer": _ref(m, n)})),
    "legacy LossScaleOptimizer inner": lambda m, n: legacy.LossScaleOptimizer.from_config(
        {"inner_optimizer": _ref(m, n), "dynamic": True, "initial_scale": 2.0, "dynamic_growth_steps": 2}),
    "legacy LossScaleOptimizer old format": lambda m, n: legacy.LossScaleOptimizer.from_config(
        {"optimizer": _ref(m, n), "loss_scale": 4.0}),
    "deserialize -> legacy LossScaleOptimizer": lambda m, n: slotopt.deserialize(_ref(
        "keras.optimizers.legacy", "LossScaleOptimizer", {"inner_optimizer": _ref(m, n), "dynamic": False,
                                                          "initial_scale": 2.0})),
    "MultiOptimizer default": lambda m, n: slotopt.MultiOptimizer.from_config({"optimizer_map": _ref(
        "keras.optimizers", "OptimizerMap", {"default_optimizer": _ref(m, n), "optimizer_map": {}})}),
    "MultiOptimizer map entry": lambda m, n: slotopt.MultiOptimizer.from_config({"optimizer_map": _ref(
        "keras.optimizers", "OptimizerMap", {"default_optimizer": _ref("keras.optimizers", "SGD"),
                                             "optimizer_map": {"k.*": _ref(m, n)}})}),
    "MultiOptimizer map class": lambda m, n: slotopt.MultiOptimizer.from_config({"optimizer_map": _ref(
        m, "OptimizerMap", {"default_optimizer": _ref("keras.optimizers", "SGD"), "optimizer_map": {}})}),
    "MultiOptimizer routing function": lambda m, n: slotopt.MultiOptimizer.from_config(
        {"optimizer_map": _selector(m, n)}).build(_variables()),
    "deserialize -> MultiOptimizer routing function": lambda m, n: slotopt.deserialize(_ref(
        "keras.optimizers", "MultiOptimizer", {"optimizer_map": _selector(m, n)})).build(_variables()),
    "CompositeOptimizer.from_config": lambda m, n: slotopt.CompositeOptimizer.from_config(
        {"name": "c", "optimizers_and_vars": [{"optimizer": _ref(m, n), "variables": ["*"]}]}),
    "deserialize -> CompositeOptimizer": lambda m, n: slotopt.deserialize(_ref("slotopt.tfrs", "CompositeOptimizer", {
        "name": "c", "optimizers_and_vars": [{"optimizer": _ref(m, n), "variables": ["*"]}]})),
    "learning-rate schedule": lambda m, n: slotopt.deserialize(_ref(
        "keras.optimizers", "SGD", {"learning_rate": _ref(m, n)})),
    "legacy learning-rate schedule": lambda m, n: legacy.SGD.from_config({"learning_rate": _ref(m, n)}),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("module, name", DANGEROUS, ids=[f"{m}.{n}" for m, n in DANGEROUS])
def test_a_config_naming_code_is_refused_and_nothing_runs(entry: str, module: str, name: str,
                                                          tripwires: list[str]) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        ENTRY_POINTS[entry](module, name)
    message = str(info.value)
    assert name in message or module in message, message  # the error names what was refused
    assert "custom_objects" in message or "Unknown" in message, message


@pytest.mark.parametrize("module, name", DANGEROUS[:4], ids=[f"{m}.{n}" for m, n in DANGEROUS[:4]])
def test_the_demo_command_refuses_a_config_naming_code(module: str, name: str, tripwires: list[str],
                                                       capsys: Any) -> None:
    for spec in (_ref(module, name), _ref("keras.optimizers", "MultiOptimizer",
                                          {"optimizer_map": _selector(module, name)})):
        code = cli.main(["demo", "--epochs", "1", "--optimizer", json.dumps(spec)])
        captured = capsys.readouterr()
        assert code == cli.EXIT_USAGE, captured
        assert name in captured.err and "Traceback" not in captured.err
        assert "epoch" not in captured.out.lower()  # nothing trained


def test_custom_objects_given_by_the_caller_are_the_only_way_in() -> None:
    class MyAdam(slotopt.Adam):
        pass

    config = slotopt.serialize(MyAdam(learning_rate=0.5))
    assert (config["module"], config["registered_name"]) == (__name__, "MyAdam")
    with pytest.raises(ValueError, match="Unknown optimizer: 'MyAdam'.*custom_objects"):
        slotopt.deserialize(config)
    assert type(slotopt.deserialize(config, custom_objects={"MyAdam": MyAdam})) is MyAdam
    # A routing function comes from custom_objects, never from the module its config names.
    sgd = slotopt.SGD()
    routed = slotopt.deserialize(_ref("keras.optimizers", "MultiOptimizer",
                                      {"optimizer_map": _selector("os", "system")}),
                                 custom_objects={"system": lambda v: sgd})
    routed.build(_variables())
    assert [type(o) for o in routed.optimizers] == [slotopt.SGD]


# ------------------------------------------------------------------------------------ round trips (item 1)
def _round_trip_cases() -> list[Any]:
    class CustomLegacy(legacy.SGD):
        pass

    return [
        (slotopt.Adam(0.1), {}), (slotopt.Lion(0.1), {}), (slotopt.Muon(), {}),
        (slotopt.LossScaleOptimizer(slotopt.SGD(0.1), initial_scale=8.0), {}),
        (slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"k.*": slotopt.Adam()})), {}),
        (legacy.Adam(0.1, decay=0.01), {}), (legacy.RMSprop(0.1), {}), (legacy.Ftrl(0.1), {}),
        (legacy.LossScaleOptimizer(legacy.Adam(0.1)), {}),
        (legacy.LossScaleOptimizer(legacy.SGD(0.1), dynamic=False, initial_scale=4.0), {}),
        (legacy.LossScaleOptimizer(CustomLegacy(0.2)), {"CustomLegacy": CustomLegacy}),
        (v1.AdamOptimizer(0.1, beta1=0.8), {}), (v1.MomentumOptimizer(0.1, 0.9, use_nesterov=True), {}),
        (v1.FtrlOptimizer(0.1, l1_regularization_strength=0.1), {}),
        (slotopt.CompositeOptimizer([(legacy.Adam(0.5), ["a*"]), (slotopt.Adagrad(), ["b*"]),
                                     (v1.GradientDescentOptimizer(0.1), ["c*"])]), {}),
    ]


@pytest.mark.parametrize("index", range(len(_round_trip_cases())))
def test_a_round_trip_returns_the_same_generation_and_class(index: int) -> None:
    # Mirrors keras optimizer_test.py::test_serialization / tf-keras optimizer_v2_test.py::testConfig.
    opt, custom = _round_trip_cases()[index]
    config = slotopt.serialize(opt)
    again = slotopt.deserialize(json.loads(json.dumps(config)), custom_objects=custom or None)
    assert type(again) is type(opt)
    assert again.get_config() == opt.get_config()
    inner = getattr(opt, "inner_optimizer", None)
    if inner is not None:
        assert type(again.inner_optimizer) is type(inner)


def test_a_legacy_adam_round_trip_keeps_decay_without_a_warning() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = slotopt.deserialize(slotopt.serialize(legacy.Adam(0.1, decay=0.5)))
    assert type(again) is legacy.Adam and again.get_config()["decay"] == 0.5


def test_every_module_a_serialized_config_can_contain_resolves() -> None:
    written = set()
    for generation in ("keras3", "legacy", "v1", "tfrs"):
        for name, cls in registry.registered_classes(generation).items():
            module = registry.serialized_module(cls)
            written.add(module)
            assert registry.resolve_class(name, module) is cls
            assert registry.resolve_class(name, cls.__module__) is cls  # slotopt's own module path
    # (AdaBelief, which Keras does not have, is written under slotopt's own Keras 3 and legacy modules)
    assert written == {"keras.optimizers", "keras.optimizers.legacy", "slotopt.v1", "slotopt.tfrs", "slotopt.keras3",
                       "slotopt.legacy"}
    # Paths older configs contain: slotopt before the package moves, tf-keras, TensorFlow.
    for module, name, cls in [("slotopt.optimizers.adam", "Adam", slotopt.Adam),
                              ("slotopt.multi_optimizer", "MultiOptimizer", slotopt.MultiOptimizer),
                              ("slotopt.optimizers.loss_scale", "LossScaleOptimizer", slotopt.LossScaleOptimizer),
                              ("slotopt.composite", "CompositeOptimizer", slotopt.CompositeOptimizer),
                              ("keras.src.optimizers.adam", "Adam", slotopt.Adam),
                              ("tf_keras.optimizers.legacy", "Adam", legacy.Adam),
                              ("keras.optimizers.optimizer_v2.adam", "Adam", legacy.Adam),
                              ("keras.mixed_precision", "LossScaleOptimizerV1", legacy.LossScaleOptimizer),
                              ("tf_keras.src.mixed_precision.loss_scale_optimizer", "LossScaleOptimizer",
                               legacy.LossScaleOptimizer),
                              ("tensorflow.python.training.adam", "AdamOptimizer", v1.AdamOptimizer)]:
        assert registry.resolve_class(name, module) is cls, module


def test_v1_optimizers_whose_arguments_are_not_data_say_so() -> None:
    step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
    with pytest.raises(NotImplementedError, match="global_step"):
        v1.AdagradDAOptimizer(0.1, step).get_config()
    with pytest.raises(NotImplementedError, match="learning_rate"):
        v1.GradientDescentOptimizer(lambda: 0.1).get_config()
    with pytest.raises(ValueError, match="Unknown arguments.*bogus"):
        v1.AdamOptimizer.from_config({"bogus": 1})
