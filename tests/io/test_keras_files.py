"""Keras checkpoints (``.keras`` / tf.keras ``.h5``) continue in slotopt with the same numbers.

The two sample files were written by Keras 3.15 and tf.keras 2.21 (tests/data/keras_checkpoints, described by the
``expected_*.json`` files next to them). Keras cannot run here, so the other files are written by the helpers below
in the exact layout Keras uses (groups, dataset names and attributes as in the sample files): slotopt state → file
→ ``load_keras_checkpoint`` → the continuation must be identical to the one that never left memory.
"""

from __future__ import annotations

import io
import json
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import slotopt
from slotopt.engine.naming import snake_case as _snake_case

h5py = pytest.importorskip("h5py", reason="the `keras` extra (h5py) is not installed: make setup installs it")

DATA = Path(__file__).parents[1] / "data" / "keras_checkpoints"
SAMPLES = [("keras3_adam_float32.keras", "expected_keras3.json"), ("legacy_adam_float32.h5", "expected_legacy.json")]


# ------------------------------------------------------------------------------------------- the sample files
def _case(expected):
    return json.loads((DATA / expected).read_text())[0]


def _mlp_loss(ws, x, y):
    k1, b1, k2, b2 = ws
    return ((torch.tanh(x @ k1 + b1) @ k2 + b2 - y) ** 2).mean()


def _close(actual, expected, rtol):
    expected = torch.tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual.detach(), expected, rtol=rtol, atol=rtol * 1e-2)


@pytest.mark.parametrize("filename,expected", SAMPLES)
def test_sample_file_reads_weights_names_and_optimizer(filename, expected):
    case = _case(expected)
    ckpt = slotopt.load_keras_checkpoint(DATA / filename)
    assert ckpt.kind == case["api"]
    # Keras paths (``sequential/hidden/kernel``, ``hidden/kernel:0``) become "<layer>/<variable>".
    assert ckpt.variable_names == [n.removeprefix("sequential/").split(":")[0] for n in case["variable_names"]]
    for name, saved in zip(ckpt.variable_names, case["saved_weights"]):
        assert torch.equal(ckpt.weights[name], torch.tensor(saved, dtype=torch.float32))
    assert ckpt.optimizer_config["class_name"] == case["optimizer"]
    opt = ckpt.optimizer(ckpt.parameters())
    expected_class = slotopt.Adam if case["api"] == "keras3" else slotopt.legacy.Adam
    assert type(opt) is expected_class
    assert int(opt.iterations) == 5
    assert float(opt.learning_rate) == pytest.approx(case["kwargs"]["learning_rate"], rel=1e-7)


@pytest.mark.parametrize("filename,expected", SAMPLES)
def test_sample_file_continues_through_the_variable_list_api(filename, expected):
    case = _case(expected)
    ckpt = slotopt.load_keras_checkpoint(DATA / filename)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    for step, (x, y) in enumerate(case["batches"][5:]):
        loss = _mlp_loss(params, torch.tensor(x), torch.tensor(y))
        _close(loss, case["losses_after_restore"][step], 2e-4)
        opt.apply_gradients(zip(torch.autograd.grad(loss, params), params))
        for p, w in zip(params, case["weights_after_each_step"][step]):
            _close(p, w, 2e-4)
    assert int(opt.iterations) == 10


@pytest.mark.parametrize("filename,expected", SAMPLES)
def test_sample_file_continues_through_the_module_api(filename, expected):
    case = _case(expected)
    ckpt = slotopt.load_keras_checkpoint(DATA / filename)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    opt = ckpt.load_module(model, {"hidden/kernel": "0.weight", "hidden/bias": "0.bias",
                                   "out/kernel": "2.weight", "out/bias": "2.bias"})
    assert torch.equal(model[0].weight, ckpt.weights["hidden/kernel"].T)
    for step, (x, y) in enumerate(case["batches"][5:]):
        opt.zero_grad()
        loss = ((model(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        _close(loss, case["losses_after_restore"][step], 2e-4)
        loss.backward()
        opt.step()
        got = [model[0].weight.T, model[0].bias, model[2].weight.T, model[2].bias]
        for p, w in zip(got, case["weights_after_each_step"][step]):
            _close(p, w, 2e-4)


def test_module_api_converts_the_slots_like_their_variables():
    ckpt = slotopt.load_keras_checkpoint(DATA / "keras3_adam_float32.keras")
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    opt = ckpt.load_module(model)  # no mapping: the module's parameters in order
    state = opt.get_weights()
    assert len(state) == len(ckpt.optimizer_state) == 10
    assert int(state[0]) == 5
    # Keras 3 order: iteration, learning_rate, then (momentum, velocity) per variable.
    for i, saved in enumerate(ckpt.optimizer_state[2:], start=2):
        expected = saved.T if saved.ndim == 2 else saved
        np.testing.assert_array_equal(state[i], expected)


# ------------------------------------------------------------------------------------------- Keras-layout writers
def _json(obj):
    return json.dumps(obj, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))


def _layer_config(cls, name, use_bias=True, trainable=True):
    config = {"name": name, "trainable": trainable, "dtype": "float32"}
    if cls != "Embedding":
        config["use_bias"] = use_bias
    return {"module": "keras.layers", "class_name": cls, "config": config, "registered_name": None}


def write_keras3(path, layers, optimizer=None, state=None, optimizer_config=None, floatx=None, named_groups=True,
                 keras_version="3.15.1"):
    """A ``.keras`` file as Keras 3 writes it. ``layers``: ``[(class, name, [arrays], config extras)]``;
    ``state`` defaults to ``optimizer.get_weights()``, its learning rate stored in ``floatx``."""
    if optimizer_config is None and optimizer is not None:
        optimizer_config = slotopt.serialize(optimizer)
    if state is None and optimizer is not None:
        state = optimizer.get_weights()
        if floatx is not None and not isinstance(optimizer_config["config"]["learning_rate"], dict):
            state[1] = state[1].astype(floatx)
    config = {
        "module": "keras", "class_name": "Sequential",
        "config": {"name": "sequential", "trainable": True, "layers": [
            {"module": "keras.layers", "class_name": "InputLayer", "config": {"name": "input_layer"}}]
            + [_layer_config(cls, name, **extras) for cls, name, _, extras in layers]},
        "registered_name": None,
    }
    if optimizer_config is not None:
        config["compile_config"] = {"optimizer": optimizer_config, "loss": "mse"}
    blob = io.BytesIO()
    with h5py.File(blob, "w") as f:
        used = {}
        for cls, name, arrays, _ in layers:
            key = _snake_case(cls)
            used[key] = used.get(key, -1) + 1
            key = key if used[key] == 0 else f"{key}_{used[key]}"
            group = f.create_group(f"layers/{key}").create_group("vars")
            if named_groups:
                group.attrs["name"] = name
            for i, a in enumerate(arrays):
                group[str(i)] = np.asarray(a)
        if state is not None:
            group = f.create_group("optimizer").create_group("vars")
            group.attrs["name"] = optimizer.name if optimizer is not None else "optimizer"
            for i, a in enumerate(state):
                group[str(i)] = np.asarray(a)
        f.create_group("vars").attrs["name"] = "sequential"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", _json({"keras_version": keras_version, "date_saved": "2026-11-23@00:00:00"}))
        z.writestr("config.json", _json(config))
        z.writestr("model.weights.h5", blob.getvalue())
    return path


def write_legacy(path, layers, optimizer=None, optimizer_config=None, weights=None, weight_names=None):
    """A tf.keras ``model.save(..., save_format="h5")`` file. ``weights``/``weight_names`` default to the
    optimizer's ``get_weights()`` and its weights' names (``Adam/hidden/kernel/m:0``)."""
    if optimizer_config is None and optimizer is not None:
        optimizer_config = {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}
    if optimizer is not None:
        weights = optimizer.get_weights() if weights is None else weights
        weight_names = [f"{w.path}:0" for w in optimizer.weights] if weight_names is None else weight_names
    model_config = {"class_name": "Sequential", "config": {"name": "sequential", "layers": [
        {"class_name": "InputLayer", "config": {"name": "input_1"}}]
        + [{k: v for k, v in _layer_config(cls, name, **extras).items() if k in ("class_name", "config")}
           for cls, name, _, extras in layers]}}
    with h5py.File(path, "w") as f:
        f.attrs["backend"] = "tensorflow"
        f.attrs["keras_version"] = "2.21.0"
        f.attrs["model_config"] = _json(model_config)
        if optimizer_config is not None:
            f.attrs["training_config"] = _json({"loss": "mse", "optimizer_config": optimizer_config})
        mw = f.create_group("model_weights")
        mw.attrs["layer_names"] = np.array([name.encode() for _, name, _, _ in layers])
        for cls, name, arrays, extras in layers:
            g = mw.create_group(name)
            var_names = [v for v, _ in slotopt.io.keras.SUPPORTED_LAYERS[cls]
                         if v != "bias" or extras.get("use_bias", True)]
            g.attrs["weight_names"] = np.array([f"{name}/{v}:0".encode() for v in var_names])
            for v, a in zip(var_names, arrays):
                g[f"{name}/{v}:0"] = np.asarray(a)
        mw.create_group("top_level_model_weights").attrs["weight_names"] = np.array([], dtype="S1")
        if weights is not None:
            og = f.create_group("optimizer_weights")
            og.attrs["weight_names"] = np.array([n.encode() for n in weight_names])
            for n, a in zip(weight_names, weights):
                og[n] = np.asarray(a)
    return path


# ------------------------------------------------------------------------------------------- round trips
KERAS3 = {
    "SGD": lambda: slotopt.SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
    "Adam": lambda: slotopt.Adam(learning_rate=0.05, amsgrad=True),
    "AdamW": lambda: slotopt.AdamW(learning_rate=0.05, weight_decay=0.1),
    "Adamax": lambda: slotopt.Adamax(learning_rate=0.05),
    "Nadam": lambda: slotopt.Nadam(learning_rate=0.05),
    "RMSprop": lambda: slotopt.RMSprop(learning_rate=0.05, momentum=0.5, centered=True),
    "Adagrad": lambda: slotopt.Adagrad(learning_rate=0.1),
    "Adadelta": lambda: slotopt.Adadelta(learning_rate=1.0),
    "Ftrl": lambda: slotopt.Ftrl(learning_rate=0.1, l1_regularization_strength=0.01, beta=0.1),
    "Lion": lambda: slotopt.Lion(learning_rate=0.01),
    "Adafactor": lambda: slotopt.Adafactor(learning_rate=0.1),
    "Lamb": lambda: slotopt.Lamb(learning_rate=0.05),
    "Adam+ema+accumulation": lambda: slotopt.Adam(learning_rate=0.05, use_ema=True,
                                                 gradient_accumulation_steps=2),
    "Adam+schedule": lambda: slotopt.Adam(learning_rate=slotopt.schedules.ExponentialDecay(0.1, 2, 0.5)),
    "SGD+cosine": lambda: slotopt.SGD(learning_rate=slotopt.schedules.CosineDecay(0.1, 10, warmup_target=0.2,
                                                                                 warmup_steps=2)),
}
LEGACY = {
    "SGD": lambda: slotopt.legacy.SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
    "Adam": lambda: slotopt.legacy.Adam(learning_rate=0.05, amsgrad=True, decay=0.01),
    "Adamax": lambda: slotopt.legacy.Adamax(learning_rate=0.05),
    "Nadam": lambda: slotopt.legacy.Nadam(learning_rate=0.05),
    "RMSprop": lambda: slotopt.legacy.RMSprop(learning_rate=0.05, momentum=0.5, centered=True),
    "Adagrad": lambda: slotopt.legacy.Adagrad(learning_rate=0.1),
    "Adadelta": lambda: slotopt.legacy.Adadelta(learning_rate=1.0),
    "Ftrl": lambda: slotopt.legacy.Ftrl(learning_rate=0.1, l2_shrinkage_regularization_strength=0.01),
    "SGD+schedule": lambda: slotopt.legacy.SGD(
        learning_rate=slotopt.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01])),
    "Adam+schedule": lambda: slotopt.legacy.Adam(learning_rate=slotopt.schedules.ExponentialDecay(0.1, 2, 0.5)),
}


def _mlp(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 5), (5,), (5, 2), (2,)]
    return [(torch.rand(s, generator=g, dtype=dtype) - 0.5).requires_grad_(True) for s in shapes]


def _batches(dtype, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, generator=g, dtype=dtype), torch.randn(4, 2, generator=g, dtype=dtype))
            for _ in range(n)]


def _train(opt, params, batches):
    trajectory = []
    for x, y in batches:
        loss = _mlp_loss(params, x, y)
        opt.apply_gradients(zip(torch.autograd.grad(loss, params), params))
        trajectory.append([p.detach().clone() for p in params])
    return trajectory


def _mlp_layers(params):
    return [("Dense", "hidden", [p.detach().numpy() for p in params[:2]], {}),
            ("Dense", "out", [p.detach().numpy() for p in params[2:]], {})]


def _round_trip(tmp_path, make, generation, dtype):
    """Trains 3 steps, saves, and returns (checkpoint, the 3 steps that followed in memory, batches)."""
    params, batches = _mlp(dtype), _batches(dtype, 6)
    opt = make()
    _train(opt, params, batches[:3])
    if generation == "keras3":
        path = write_keras3(tmp_path / "model.keras", _mlp_layers(params), opt,
                            floatx=np.float64 if dtype == torch.float64 else None)
    else:
        path = write_legacy(tmp_path / "model.h5", _mlp_layers(params), opt)
    expected = _train(opt, params, batches[3:])
    return slotopt.load_keras_checkpoint(path), expected, batches[3:]


def _module(dtype):
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(dtype)


def _module_trajectory(opt, model, batches):
    trajectory = []
    for x, y in batches:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        trajectory.append([t.detach().clone() for t in (model[0].weight.T, model[0].bias, model[2].weight.T,
                                                          model[2].bias)])
    return trajectory


@pytest.mark.parametrize("generation,name", [("keras3", n) for n in KERAS3] + [("legacy", n) for n in LEGACY])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_round_trip_continues_identically(tmp_path, generation, name, dtype):
    make = (KERAS3 if generation == "keras3" else LEGACY)[name]
    ckpt, expected, batches = _round_trip(tmp_path, make, generation, dtype)
    assert ckpt.optimizer_class is type(make())
    params = ckpt.parameters()
    assert all(p.dtype == dtype for p in params)
    opt = ckpt.optimizer(params)
    assert int(opt.iterations) == (1 if "accumulation" in name else 3)
    for got, want in zip(_train(opt, params, batches), expected):
        for g, w in zip(got, want):
            assert torch.equal(g, w)  # same optimizer, same state, same operations: bit for bit
    with pytest.raises(ValueError, match="handed over without a copy|cannot be converted"):  # (trained since)
        ckpt.load_module(_module(dtype))
    ckpt = slotopt.load_keras_checkpoint(ckpt.path)  # one read per model (issue 40: no copy of the file's tensors)

    model = _module(dtype)
    if getattr(ckpt.optimizer_class, "_sums_whole_tensors", False):
        # Adafactor's factored moments of a Dense kernel have no torch layout; Lamb's and Muon's whole-tensor sums
        # would run in torch's layout and give other bits than the file's run: refused, the module unwritten.
        before = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(ValueError, match="cannot be converted|sums whole tensors"):
            ckpt.load_module(model)
        assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
        return
    module_opt = ckpt.load_module(model)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    for got, want in zip(_module_trajectory(module_opt, model, batches), expected):
        for g, w in zip(got, want):
            torch.testing.assert_close(g.detach(), w, **tol)


def test_schedule_continues_from_the_saved_iteration(tmp_path):
    ckpt, _, _ = _round_trip(tmp_path, KERAS3["Adam+schedule"], "keras3", torch.float32)
    opt = ckpt.optimizer(ckpt.parameters())
    schedule = opt.get_config()["learning_rate"]
    assert schedule["class_name"] == "ExponentialDecay"
    assert float(opt.learning_rate) == pytest.approx(0.1 * 0.5 ** (3 / 2), rel=1e-6)

    ckpt, _, _ = _round_trip(tmp_path, LEGACY["SGD+schedule"], "legacy", torch.float32)
    opt = ckpt.optimizer(ckpt.parameters())
    assert int(opt.iterations) == 3
    assert float(opt.learning_rate(opt.iterations)) == pytest.approx(0.05)  # the schedule at step 3


def test_float64_file_keeps_dtypes_and_reports_its_floatx(tmp_path):
    ckpt, _, _ = _round_trip(tmp_path, KERAS3["Adam"], "keras3", torch.float64)
    assert ckpt.floatx == torch.float64
    assert all(w.dtype == torch.float64 for w in ckpt.weights.values())
    opt = ckpt.optimizer(ckpt.parameters())
    assert all(v.dtype == torch.float64 for v in opt.variables[2:])


def test_float64_floatx_learning_rate_is_kept_exactly(tmp_path):
    params = _mlp(torch.float64)
    opt = slotopt.Adam(learning_rate=0.01)
    opt.build(params)
    state = opt.get_weights()
    state[1] = np.float64(0.01)  # what Keras with floatx float64 stores
    path = write_keras3(tmp_path / "m.keras", _mlp_layers(params), opt, state=state)
    ckpt = slotopt.load_keras_checkpoint(path)
    loaded = ckpt.optimizer(ckpt.parameters())
    assert loaded.learning_rate.dtype == torch.float64 and float(loaded.learning_rate) == 0.01
    assert torch.get_default_dtype() == torch.float32  # restored after the build
    # The step uses 0.01 itself, as Keras does with floatx float64 (not float32's 0.009999999776...).
    assert loaded._lr_for(loaded.learning_rate, torch.float64) == 0.01
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert slotopt.SGD(learning_rate=0.01).learning_rate.dtype == torch.float64  # floatx follows torch's default
    finally:
        torch.set_default_dtype(previous)


def test_groups_found_by_class_name_when_the_file_has_no_name_attributes(tmp_path):
    params = _mlp(torch.float32)
    opt = slotopt.SGD(momentum=0.5)
    _train(opt, params, _batches(torch.float32, 1))
    path = write_keras3(tmp_path / "m.keras", _mlp_layers(params), opt, named_groups=False)
    ckpt = slotopt.load_keras_checkpoint(path)
    assert torch.equal(ckpt.weights["out/kernel"], params[2].detach())


def test_legacy_state_listed_in_another_order_is_matched_by_name(tmp_path):
    params = _mlp(torch.float32)
    opt = slotopt.legacy.Adam(learning_rate=0.05)
    opt.build(list(zip(["hidden/kernel", "hidden/bias", "out/kernel", "out/bias"], params)))
    _train(opt, params, _batches(torch.float32, 2))
    names = [f"{w.path}:0" for w in opt.weights]
    order = [0] + list(range(len(names) - 1, 0, -1))
    weights = opt.get_weights()
    path = write_legacy(tmp_path / "m.h5", _mlp_layers(params), opt,
                        weights=[weights[i] for i in order], weight_names=[names[i] for i in order])
    loaded = slotopt.load_keras_checkpoint(path).optimizer(params)
    for a, b in zip(loaded.get_weights(), opt.get_weights()):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------- other layers
def _conv_forward(ws, x):
    """Conv2D (channels-first input) → flatten → Dense, written on Keras-layout variables."""
    kc, bc, kd, bd = ws
    h = torch.tanh(F.conv2d(x, kc.permute(3, 2, 0, 1), bc))
    return h.flatten(1) @ kd + bd


def _embed_forward(ws, idx):
    """Embedding → Conv1D (channels-first) → mean → Dense without bias, on Keras-layout variables."""
    emb, kc, bc, kd = ws
    h = F.conv1d(emb[idx].transpose(1, 2), kc.permute(2, 1, 0), bc)
    return torch.tanh(h).mean(-1) @ kd


def test_conv_and_embedding_layers_continue_through_the_module_api(tmp_path):
    g = torch.Generator().manual_seed(3)
    cases = [
        (lambda: [torch.randn(s, generator=g) * 0.3 for s in [(2, 2, 3, 4), (4,), (4 * 3 * 3, 2), (2,)]],
         [("Conv2D", "conv", 2, {}), ("Dense", "head", 2, {})],
         lambda: torch.randn(2, 3, 4, 4, generator=g), _conv_forward,
         lambda: nn.ModuleDict({"conv": nn.Conv2d(3, 4, 2), "head": nn.Linear(36, 2)}),
         lambda m, x: m["head"](torch.tanh(m["conv"](x)).flatten(1)),
         {"conv/kernel": "conv.weight", "conv/bias": "conv.bias", "head/kernel": "head.weight",
          "head/bias": "head.bias"}),
        (lambda: [torch.randn(s, generator=g) * 0.3 for s in [(7, 3), (2, 3, 4), (4,), (4, 2)]],
         [("Embedding", "emb", 1, {}), ("Conv1D", "conv", 2, {}), ("Dense", "head", 1, {"use_bias": False})],
         lambda: torch.randint(0, 7, (3, 5), generator=g), _embed_forward,
         lambda: nn.ModuleDict({"emb": nn.Embedding(7, 3), "conv": nn.Conv1d(3, 4, 2),
                                "head": nn.Linear(4, 2, bias=False)}),
         lambda m, x: m["head"](torch.tanh(m["conv"](m["emb"](x).transpose(1, 2))).mean(-1)),
         {"emb/embeddings": "emb.weight", "conv/kernel": "conv.weight", "conv/bias": "conv.bias",
          "head/kernel": "head.weight"}),
    ]
    for init, spec, inputs, keras_forward, make_module, torch_forward, mapping in cases:
        ws = [w.requires_grad_(True) for w in init()]
        data = [(inputs(), torch.randn(3 if spec[0][0] == "Embedding" else 2, 2, generator=g)) for _ in range(5)]
        opt = slotopt.Adam(learning_rate=0.05)
        for x, y in data[:2]:
            loss = ((keras_forward(ws, x) - y) ** 2).mean()
            opt.apply_gradients(zip(torch.autograd.grad(loss, ws), ws))
        layers, i = [], 0
        for cls, name, n, extras in spec:
            layers.append((cls, name, [w.detach().numpy() for w in ws[i:i + n]], extras))
            i += n
        ckpt = slotopt.load_keras_checkpoint(write_keras3(tmp_path / "m.keras", layers, opt))
        assert ckpt.variable_names == list(mapping)
        model = make_module()
        module_opt = ckpt.load_module(model, mapping)
        for x, y in data[2:]:
            loss = ((keras_forward(ws, x) - y) ** 2).mean()
            opt.apply_gradients(zip(torch.autograd.grad(loss, ws), ws))
            module_opt.zero_grad()
            ((torch_forward(model, x) - y) ** 2).mean().backward()
            module_opt.step()
        params = dict(model.named_parameters())
        for (name, pname), w in zip(mapping.items(), ws):
            kind = ckpt.layouts[name]
            perm = {"dense_kernel": (1, 0), "conv1d_kernel": (2, 1, 0), "conv2d_kernel": (3, 2, 0, 1)}.get(kind)
            want = w.detach().permute(*perm) if perm else w.detach()
            torch.testing.assert_close(params[pname].detach(), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- refusals
def _adam_file(tmp_path, **overrides):
    params = _mlp(torch.float32)
    opt = slotopt.Adam(learning_rate=0.05)
    _train(opt, params, _batches(torch.float32, 1))
    kwargs = {"optimizer": opt}
    kwargs.update(overrides)
    return write_keras3(tmp_path / "m.keras", _mlp_layers(params), **kwargs), params


def test_unknown_optimizer_class_is_refused(tmp_path):
    path, _ = _adam_file(tmp_path, optimizer_config={"class_name": "Muon", "config": {"learning_rate": 0.1}})
    with pytest.raises(ValueError, match=r"Unknown optimizer class 'Muon'"):
        slotopt.load_keras_checkpoint(path)
    params = _mlp(torch.float32)
    opt = slotopt.legacy.SGD()
    opt.build(params)
    path = write_legacy(tmp_path / "m.h5", _mlp_layers(params), opt,
                        optimizer_config={"class_name": "Lion", "config": {}})
    with pytest.raises(ValueError, match=r"Unknown optimizer class .*'Lion'.*tf.keras legacy"):
        slotopt.load_keras_checkpoint(path)


def test_keras2_dot_keras_file_is_refused(tmp_path):
    path, _ = _adam_file(tmp_path, keras_version="2.13.1")
    with pytest.raises(ValueError, match="written by Keras 2.13.1"):
        slotopt.load_keras_checkpoint(path)


def test_tf_keras_new_optimizer_state_that_does_not_fit_keras3s_layout_is_refused(tmp_path):
    """``is_legacy_optimizer: False`` is read as tf-keras 2.11+'s Optimizer (tests/data/migration3 f6, f7 continue
    bit for bit); a legacy Adam's state (all ``m`` then all ``v``) under that flag does not fit its per-variable
    layout and is refused, naming the optimizer variable."""
    params = _mlp(torch.float32)
    opt = slotopt.legacy.Adam()
    opt.build(params)
    config = {"class_name": "Adam", "config": {**opt.get_config(), "is_legacy_optimizer": False}}
    path = write_legacy(tmp_path / "m.h5", _mlp_layers(params), opt, optimizer_config=config)
    with pytest.raises(slotopt.io.CheckpointFormatError, match=r"optimizer variable 3 .*has shape \(5,\) in the file; expected \(3, 5\)"):
        slotopt.load_keras_checkpoint(path)


def test_files_without_optimizer_state_are_refused(tmp_path):
    params = _mlp(torch.float32)
    path = write_keras3(tmp_path / "a.keras", _mlp_layers(params))
    with pytest.raises(ValueError, match="without being compiled"):
        slotopt.load_keras_checkpoint(path)
    path = write_keras3(tmp_path / "b.keras", _mlp_layers(params),
                        optimizer_config=slotopt.serialize(slotopt.Adam()))
    with pytest.raises(ValueError, match="no optimizer state"):
        slotopt.load_keras_checkpoint(path)
    path = write_legacy(tmp_path / "c.h5", _mlp_layers(params),
                        optimizer_config={"class_name": "Adam", "config": {"learning_rate": 0.1}})
    with pytest.raises(ValueError, match="no optimizer state"):
        slotopt.load_keras_checkpoint(path)
    path = write_legacy(tmp_path / "d.h5", _mlp_layers(params))
    with pytest.raises(ValueError, match="without being compiled"):
        slotopt.load_keras_checkpoint(path)
    with h5py.File(tmp_path / "e.weights.h5", "w") as f:
        f.create_group("vars")
    with pytest.raises(ValueError, match="no `model_config`"):
        slotopt.load_keras_checkpoint(tmp_path / "e.weights.h5")
    (tmp_path / "f.txt").write_text("hello")
    with pytest.raises(slotopt.io.CheckpointFormatError, match="neither a Keras 3"):
        slotopt.load_keras_checkpoint(tmp_path / "f.txt")
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        slotopt.load_keras_checkpoint(tmp_path / "missing.keras")


def test_state_that_does_not_fit_the_optimizer_is_refused(tmp_path):
    params = _mlp(torch.float32)
    opt = slotopt.Adam()
    opt.build(params)
    state = opt.get_weights()
    path = write_keras3(tmp_path / "a.keras", _mlp_layers(params), opt, state=state[:-1])
    with pytest.raises(ValueError, match="holds 9 optimizer variables.*has 10"):
        slotopt.load_keras_checkpoint(path)
    state[4] = np.zeros((5, 3), np.float32)
    path = write_keras3(tmp_path / "b.keras", _mlp_layers(params), opt, state=state)
    with pytest.raises(ValueError, match=r"optimizer variable 4 .* has shape \(5, 3\) in the file; expected \(5,\)"):
        slotopt.load_keras_checkpoint(path)


def test_unknown_layer_variables_come_in_the_files_layout_and_the_state_is_checked(tmp_path):
    """A registered custom layer (``add_weight``) no longer refuses the file: its variables come by their place in
    the file, in its layout; the optimizer state must still fit them (else the file is refused, naming it)."""
    params = _mlp(torch.float32)
    custom = [np.full((2,), i, np.float32) for i in range(3)]
    layers = _mlp_layers(params) + [("MyCustomLayer", "custom", custom, {})]
    opt = slotopt.Adam()
    opt.build([torch.tensor(p.detach().numpy()) for p in params] + [torch.tensor(c) for c in custom])
    ckpt = slotopt.load_keras_checkpoint(write_keras3(tmp_path / "m.keras", layers, optimizer=opt))
    assert ckpt.variable_names[-3:] == ["custom/vars/0", "custom/vars/1", "custom/vars/2"]
    assert ckpt.layouts["custom/vars/1"] == "as_is" and torch.equal(ckpt.weights["custom/vars/2"], torch.full((2,), 2.0))
    assert any("MyCustomLayer" in note for note in ckpt.notes)
    assert len(ckpt.optimizer(ckpt.parameters()).variables) == 2 + 2 * 7
    path = write_keras3(tmp_path / "bad.keras", layers, optimizer_config=slotopt.serialize(slotopt.Adam()),
                        state=[np.int64(0)])
    with pytest.raises(slotopt.io.CheckpointFormatError, match="holds 1 optimizer variables"):
        slotopt.load_keras_checkpoint(path)


def test_params_that_do_not_fit_are_refused(tmp_path):
    path, params = _adam_file(tmp_path)
    ckpt = slotopt.load_keras_checkpoint(path)
    with pytest.raises(ValueError, match=r"entry 'hidden/kernel' has shape \(5, 3\)"):
        ckpt.optimizer([params[0].detach().T.clone()] + params[1:])
    with pytest.raises(ValueError, match="dtype torch.float64"):
        ckpt.optimizer([p.double() for p in params])
    with pytest.raises(ValueError, match=r"missing \['out/bias'\]"):
        ckpt.optimizer(dict(zip(ckpt.variable_names[:3], params)))
    with pytest.raises(ValueError, match="must hold 4 tensors"):
        ckpt.optimizer(params[:3])
    opt = ckpt.optimizer(dict(zip(ckpt.variable_names, params)))
    assert int(opt.iterations) == 1


def test_mapping_that_misses_or_misfits_changes_nothing(tmp_path):
    path, _ = _adam_file(tmp_path)
    ckpt = slotopt.load_keras_checkpoint(path)
    model = _module(torch.float32)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    full = {"hidden/kernel": "0.weight", "hidden/bias": "0.bias", "out/kernel": "2.weight", "out/bias": "2.bias"}
    with pytest.raises(ValueError, match=r"missing \['out/bias'\]"):
        ckpt.load_module(model, {k: v for k, v in full.items() if k != "out/bias"})
    with pytest.raises(ValueError, match=r"maps 'out/kernel' .* to '0.weight' of shape \(5, 3\)"):
        ckpt.load_module(model, {**full, "out/kernel": "0.weight"})
    with pytest.raises(ValueError, match="'2.wieght', which is not a parameter"):
        ckpt.load_module(model, {**full, "out/kernel": "2.wieght"})
    with pytest.raises(ValueError, match="No parameter of the module fits 'out/kernel'"):
        ckpt.load_module(nn.Linear(3, 5))
    with pytest.raises(ValueError, match="dtype torch.float64"):
        ckpt.load_module(_module(torch.float64), full)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_missing_h5py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"slotopt\[keras\]"):
        slotopt.load_keras_checkpoint(DATA / "keras3_adam_float32.keras")


def test_no_warning_for_a_float32_file():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt = slotopt.load_keras_checkpoint(DATA / "keras3_adam_float32.keras")
        ckpt.optimizer(ckpt.parameters())


def test_optimizer_saved_by_name_gets_its_defaults(tmp_path):
    params = _mlp(torch.float32)
    opt = slotopt.RMSprop()
    _train(opt, params, _batches(torch.float32, 2))
    path = write_keras3(tmp_path / "m.keras", _mlp_layers(params), opt, optimizer_config="rmsprop")
    loaded = slotopt.load_keras_checkpoint(path).optimizer(params)
    assert type(loaded) is slotopt.RMSprop and int(loaded.iterations) == 2
    for a, b in zip(loaded.get_weights(), opt.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_bfloat16_variables_are_refused(tmp_path):
    path, _ = _adam_file(tmp_path)
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    blob = io.BytesIO(files["model.weights.h5"])
    with h5py.File(blob, "a") as f:
        f["layers/dense/vars/0"].attrs["dtype"] = "bfloat16"
    files["model.weights.h5"] = blob.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    with pytest.raises(ValueError, match="bfloat16"):
        slotopt.load_keras_checkpoint(path)


def test_frozen_layer_is_read_but_not_trained(tmp_path):
    params = _mlp(torch.float32)
    opt = slotopt.Adam(learning_rate=0.05)
    batches = _batches(torch.float32, 4)
    for x, y in batches[:2]:  # only the output layer trains
        loss = _mlp_loss(params, x, y)
        opt.apply_gradients(zip(torch.autograd.grad(loss, params[2:]), params[2:]))
    layers = _mlp_layers(params)
    layers[0] = layers[0][:3] + ({"trainable": False},)
    ckpt = slotopt.load_keras_checkpoint(write_keras3(tmp_path / "m.keras", layers, opt))
    assert ckpt.variable_names == ["out/kernel", "out/bias"]
    assert torch.equal(ckpt.weights["hidden/kernel"], params[0].detach())
    model = _module(torch.float32)
    model[0].requires_grad_(False)
    module_opt = ckpt.load_module(model, {"hidden/kernel": "0.weight", "hidden/bias": "0.bias",
                                          "out/kernel": "2.weight", "out/bias": "2.bias"})
    assert torch.equal(model[0].weight, params[0].detach().T)
    assert len(module_opt.variables) == 2 + 2 * 2
    for x, y in batches[2:]:
        loss = _mlp_loss(params, x, y)
        opt.apply_gradients(zip(torch.autograd.grad(loss, params[2:]), params[2:]))
        module_opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        module_opt.step()
    torch.testing.assert_close(model[2].weight.detach(), params[2].detach().T, rtol=1e-5, atol=1e-6)
    assert torch.equal(model[0].weight, params[0].detach().T)
