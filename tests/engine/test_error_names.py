"""Issue 50 item 9: errors that named neither the argument nor the file. A config nested 50,000 deep ended in a
bare ``RecursionError`` (from the ``repr`` of a later message) or named no argument; an integer trainable variable
of a TensorFlow checkpoint failed in ``parameters()`` with torch's "only Tensors of floating point dtype can
require gradients". Each now names the argument, the config entry, or the file and entry, and the limit."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import _tf_bundle_writer as writer
import pytest
import torch

import slotopt
from slotopt import legacy, v1
from slotopt.io.errors import CheckpointFormatError


def _deep(levels: int = 50_000) -> dict:
    value: dict = {"a": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


DEEP = _deep()
LIMIT = "nests deeper than 64 levels, slotopt's limit for a config"

CONSTRUCTORS = {
    "keras3 Adam(learning_rate=)": (lambda: slotopt.Adam(learning_rate=DEEP), "Argument `learning_rate` of Adam()"),
    "keras3 Adam(beta_1=)": (lambda: slotopt.Adam(beta_1=DEEP), "Argument `beta_1` of Adam()"),
    "keras3 Adam(positional)": (lambda: slotopt.Adam(DEEP), "Positional argument 0 of Adam()"),
    "legacy Adam(learning_rate=)": (lambda: legacy.Adam(learning_rate=DEEP), "Argument `learning_rate` of Adam()"),
    "v1 Momentum(momentum=)": (lambda: v1.MomentumOptimizer(0.1, momentum=DEEP),
                               "Argument `momentum` of MomentumOptimizer()"),
}
FROM_CONFIG = {
    "keras3 Adam": (lambda: slotopt.Adam.from_config({"learning_rate": DEEP}), "learning_rate"),
    "keras3 Adam other": (lambda: slotopt.Adam.from_config({"learning_rate": 0.1, "beta_1": DEEP}), "beta_1"),
    "legacy Adam": (lambda: legacy.Adam.from_config({"learning_rate": 0.1, "beta_1": DEEP}), "beta_1"),
    "v1 Adam": (lambda: v1.AdamOptimizer.from_config({"learning_rate": DEEP}), "learning_rate"),
    "keras3 LossScaleOptimizer": (lambda: slotopt.LossScaleOptimizer.from_config({"inner_optimizer": DEEP}),
                                  "inner_optimizer"),
    "legacy LossScaleOptimizer": (lambda: legacy.LossScaleOptimizer.from_config({"inner_optimizer": DEEP}),
                                  "inner_optimizer"),
    "MultiOptimizer": (lambda: slotopt.MultiOptimizer.from_config({"optimizer_map": DEEP}), "optimizer_map"),
    "OptimizerMap": (lambda: slotopt.OptimizerMap.from_config({"default_optimizer": DEEP, "optimizer_map": {}}),
                     "default_optimizer"),
    "CompositeOptimizer": (lambda: slotopt.CompositeOptimizer.from_config({"optimizers_and_vars": DEEP}),
                           "optimizers_and_vars"),
}


@pytest.mark.parametrize("case", list(CONSTRUCTORS))
def test_a_deep_constructor_argument_is_refused_by_name(case):
    make, named = CONSTRUCTORS[case]
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(f"{named} {LIMIT}"), str(info.value)


@pytest.mark.parametrize("case", list(FROM_CONFIG))
def test_a_deep_config_entry_is_refused_by_name(case):
    make, entry = FROM_CONFIG[case]
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(f"Argument `config` of `from_config`, entry {entry!r}, {LIMIT}"), \
        str(info.value)


def test_a_config_at_the_limit_still_builds():
    schedule = {"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 10,
                                                             "decay_rate": 0.5}}
    assert float(slotopt.Adam.from_config({"learning_rate": schedule}).learning_rate) == pytest.approx(0.1)


def test_a_keras_file_whose_config_is_too_deep_names_file_entry_and_limit(tmp_path):
    source = Path(__file__).parents[1] / "data" / "issue50" / "nested_keras3_adam.keras"
    with zipfile.ZipFile(source) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    config["deep"] = "DEEP"
    text = json.dumps(config).replace('"DEEP"', "[" * 50_000 + "]" * 50_000)
    out = tmp_path / "deep.keras"
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, text.encode() if name == "config.json" else data)
    with pytest.raises(CheckpointFormatError) as info:
        slotopt.load_keras_checkpoint(out)
    assert info.value.path == str(out) and info.value.entry == "config.json"
    assert info.value.reason.startswith(f"its JSON {LIMIT}"), info.value.reason


# ------------------------------------------------------------------------------------------ integer weights
@pytest.mark.parametrize("generation", ["keras3", "legacy"])
def test_an_integer_trainable_variable_names_file_and_entry(tmp_path, monkeypatch, generation):
    w, b = torch.nn.Parameter(torch.ones(2, 3)), torch.nn.Parameter(torch.zeros(3))
    opt = slotopt.Adam(0.1) if generation == "keras3" else legacy.Adam(0.1)
    opt.apply_gradients([(torch.ones(2, 3), w), (torch.ones(3), b)])
    entry = ("optimizer/_trainable_variables/1" if generation == "keras3" else "model/dense/bias") + writer.SUFFIX
    real = writer.write_bundle

    def with_an_integer_bias(prefix, tensors, **options):  # a hostile copy: the bias stored as int32
        tensors[entry] = tensors[entry].to(torch.int32)
        return real(prefix, tensors, **options)

    monkeypatch.setattr(writer, "write_bundle", with_an_integer_bias)
    prefix = str(tmp_path / "ckpt")
    if generation == "keras3":
        writer.write_keras3_checkpoint(prefix, opt, ["dense/kernel", "dense/bias"])
    else:
        writer.write_legacy_checkpoint(prefix, opt, ["dense/kernel", "dense/bias"], [w, b])
    ck = slotopt.load_tf_checkpoint(prefix)
    for attempt in (ck.parameters, lambda: ck.optimizer(ck.parameters(), optimizer=type(opt)(0.1))):
        with pytest.raises(CheckpointFormatError) as info:
            attempt()
        assert info.value.path == prefix and info.value.entry == entry
        assert "'dense/bias' holds int32 values" in info.value.reason
    # nothing was handed out: the file's float weight is as written, and still the reader's to lend
    assert torch.equal(ck.weights["dense/kernel"], w.detach())

