"""Real Keras models brought across: runs a, b, c of tests/data/migration (written by Keras 3.15 through
``model.fit`` + ``model.save``; see the ``.json`` next to each) continue through the public API, every variable of
the file placed; plus files built with h5py in Keras's layout (mixed precision, Keras 3 ``.h5``, ``.weights.h5``)
and hostile/malformed files, which must raise the one documented error.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import slotopt
from slotopt.io import CheckpointFormatError
from slotopt.io.keras_layers import to_torch

h5py = pytest.importorskip("h5py", reason="the `keras` extra (h5py) is not installed")

DATA = Path(__file__).parents[1] / "data" / "migration"
RUNS = ["a_keras3_conv_bn_adam", "b_keras3_transformer_adamw_cosine", "c_keras3_lstm_rmsprop_clipnorm"]


def _run(run):
    return json.loads((DATA / f"{run}.json").read_text())


def _f32(value):
    return torch.from_numpy(np.array(value, dtype=np.float32))


def _grad(g):
    if "dense" in g:
        return _f32(g["dense"])
    return slotopt.IndexedSlices(_f32(g["values"]), torch.tensor(g["indices"]), tuple(g["dense_shape"]))


def _short(name, run):
    """Keras 3 path → the checkpoint's name (a Sequential model's name dropped)."""
    model = run["trainable"][0]["name"].split("/")[0]
    sequential = all(t["name"].startswith(model + "/") for t in run["trainable"] + run["non_trainable"])
    return name.split("/", 1)[1] if sequential and "/" in name else name


def _worst(actual, expected):
    """max |a - e| / (|e| + 0.01), the README's comparison (the tolerance is 1e-6 for float32)."""
    return float(((actual - expected).abs() / (expected.abs() + 0.01)).max())


# ------------------------------------------------------------------------------------------- runs a, b, c
@pytest.mark.parametrize("run_id", RUNS)
def test_every_variable_of_the_file_is_read_and_every_slot_placed_by_name(run_id):
    run = _run(run_id)
    ckpt = slotopt.load_keras_checkpoint(DATA / f"{run_id}.keras")
    assert ckpt.variable_names == [_short(t["name"], run) for t in run["trainable"]]
    assert ckpt.non_trainable_names == [_short(t["name"], run) for t in run["non_trainable"]]
    assert [ckpt.entries[n] for n in ckpt.variable_names] == [t["file_key"] for t in run["trainable"]]
    for name, saved in zip(ckpt.variable_names, run["saved_weights"]):
        assert torch.equal(ckpt.weights[name], _f32(saved))
    for t in run["non_trainable"]:
        assert torch.equal(ckpt.weights[_short(t["name"], run)], _f32(t["value"]))
    # Each slot is named after its variable's path, as Keras names it: the placement is by structure.
    assert ckpt.optimizer_variable_names == [v["name"] for v in run["optimizer_variables"]]
    assert ckpt.optimizer_config["class_name"] == run["optimizer"]["class_name"]
    assert ckpt.dtype_policy == "float32"


@pytest.mark.parametrize("run_id", RUNS)
def test_run_continues_through_the_variable_list_api(run_id):
    run = _run(run_id)
    ckpt = slotopt.load_keras_checkpoint(DATA / f"{run_id}.keras")
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    assert int(opt.iterations) == run["optimizer"]["iterations"]
    worst = 0.0
    for step in run["steps"]:
        assert float(opt.learning_rate) == pytest.approx(step["learning_rate"], rel=1e-7)
        opt.apply_gradients(zip([_grad(g) for g in step["grads"]], params))
        for p, expected in zip(params, step["weights_after"]):
            worst = max(worst, _worst(p.detach(), _f32(expected)))
            assert torch.equal(p.detach(), _f32(expected))  # the same bits as Keras, every step
    assert int(opt.iterations) == run["iterations_after"]
    assert worst == 0.0


class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum=0.01, eps=1e-3)
        self.head = nn.Linear(4, 3)

    def forward(self, x):  # NHWC in, as Keras
        h = torch.relu(self.bn(self.conv(x.permute(0, 3, 1, 2))))
        return self.head(h.mean(dim=(2, 3)))


class _Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.ln = nn.LayerNorm(16, eps=1e-3)
        self.mha = nn.ModuleDict({k: nn.Linear(16, 16) for k in ("query", "key", "value", "attention_output")})
        self.head = nn.Linear(16, 3)


class _LstmNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 8, batch_first=True)
        self.lstm.bias_hh_l0.requires_grad_(False)  # Keras has one bias: torch's second stays zero
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()
        self.head = nn.Linear(8, 2)


MODULES = {RUNS[0]: _ConvNet, RUNS[1]: _Transformer, RUNS[2]: _LstmNet}


@pytest.mark.parametrize("run_id", RUNS)
def test_run_continues_through_the_module_api_with_the_proposed_mapping(run_id):
    run = _run(run_id)
    ckpt = slotopt.load_keras_checkpoint(DATA / f"{run_id}.keras")
    module = MODULES[run_id]()
    mapping = ckpt.mapping_for(module)
    opt = ckpt.load_module(module, mapping)
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for name in mapping:  # weights and BatchNorm statistics, in torch's layout
        assert torch.equal(tensors[mapping[name]], to_torch(ckpt.weights[name], ckpt.layouts[name]))
    params = [tensors[mapping[n]] for n in ckpt.variable_names]
    worst = 0.0
    for step in run["steps"]:
        grads = []
        for name, g in zip(ckpt.variable_names, step["grads"]):
            g = _grad(g)
            grads.append(g if isinstance(g, slotopt.IndexedSlices) else to_torch(g, ckpt.layouts[name]))
        opt.apply_gradients(zip(grads, params))
        for name, p, expected in zip(ckpt.variable_names, params, step["weights_after"]):
            worst = max(worst, _worst(p.detach(), to_torch(_f32(expected), ckpt.layouts[name])))
    assert worst <= 1e-6


def test_batchnorm_statistics_and_options_are_reported_and_copied():
    ckpt = slotopt.load_keras_checkpoint(DATA / f"{RUNS[0]}.keras")
    assert ckpt.torch_options["bn"] == {"momentum": pytest.approx(0.01), "eps": 1e-3}
    assert any("nn.BatchNorm" in note for note in ckpt.notes)
    module = _ConvNet()
    mapping = ckpt.mapping_for(module)
    assert mapping["bn/moving_mean"] == "bn.running_mean" and mapping["bn/moving_variance"] == "bn.running_var"
    assert mapping["conv/bias"] == "conv.bias" and mapping["bn/gamma"] == "bn.weight"  # same shapes, by name
    ckpt.load_module(module)
    assert torch.equal(module.bn.running_var, ckpt.weights["bn/moving_variance"])


# ------------------------------------------------------------------------------------------- files rewritten
def _rewrite(src, dst, config_fn=None, h5_fn=None, members=None):
    """A copy of ``src`` (a ``.keras`` file) with its config and/or weights file changed as Keras would."""
    with zipfile.ZipFile(src) as z:
        config = json.loads(z.read("config.json"))
        blob = z.read("model.weights.h5")
        metadata = z.read("metadata.json")
    if config_fn is not None:
        config = config_fn(config) or config
    if h5_fn is not None:
        buffer = io.BytesIO(blob)
        with h5py.File(buffer, "r+") as f:
            h5_fn(f)
        blob = buffer.getvalue()
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("metadata.json", metadata)
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", blob)
        for name, data in (members or {}).items():
            z.writestr(name, data)
    return dst


def _set_policy(config, policy):
    for layer in config["config"]["layers"]:
        if isinstance(layer["config"].get("dtype"), dict):
            layer["config"]["dtype"]["config"]["name"] = policy
    return config


def test_mixed_float16_file_yields_a_loss_scale_optimizer_with_the_saved_scale(tmp_path):
    """Keras 3 under ``mixed_float16`` compiles a LossScaleOptimizer around the optimizer; its variables are
    ``[iteration, learning_rate, step_counter, dynamic_scale]`` then the inner optimizer's."""
    run = _run(RUNS[0])

    def config_fn(config):
        _set_policy(config, "mixed_float16")
        inner = config["compile_config"]["optimizer"]
        config["compile_config"]["optimizer"] = {
            "module": "keras.optimizers", "class_name": "LossScaleOptimizer", "registered_name": None,
            "config": {"name": "loss_scale_optimizer", "inner_optimizer": inner, "initial_scale": 32768.0,
                       "dynamic_growth_steps": 3}}

    def h5_fn(f):
        inner = [f[f"optimizer/vars/{i}"][()] for i in range(len(f["optimizer/vars"]))]
        del f["optimizer/vars"]
        group = f.create_group("optimizer/vars")
        group.attrs["name"] = "loss_scale_optimizer"
        own = [np.int64(0), np.float32(0.0), np.int64(2), np.float32(4096.0)]
        for i, value in enumerate(own + inner):
            group[str(i)] = value

    path = _rewrite(DATA / f"{RUNS[0]}.keras", tmp_path / "mixed.keras", config_fn, h5_fn)
    ckpt = slotopt.load_keras_checkpoint(path)
    assert ckpt.dtype_policy == "mixed_float16" and ckpt.loss_scale == 4096.0
    assert any("torch.autocast" in note and "float16" in note for note in ckpt.notes)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    assert type(opt) is slotopt.LossScaleOptimizer and type(opt.inner_optimizer) is slotopt.Adam
    assert int(opt.iterations) == 5
    reference = slotopt.load_keras_checkpoint(DATA / f"{RUNS[0]}.keras")
    ref_params = reference.parameters()
    ref_opt = reference.optimizer(ref_params)
    for step in run["steps"]:
        scale = float(opt.dynamic_scale)
        opt.apply_gradients(zip([_grad(g) * scale for g in step["grads"]], params))
        ref_opt.apply_gradients(zip([_grad(g) for g in step["grads"]], ref_params))
        for p, q in zip(params, ref_params):  # the scale is a power of two: unscaling is exact
            assert torch.equal(p, q)
    # Doubled when the saved step_counter 2 reached dynamic_growth_steps - 1, and again 3 steps later.
    assert float(opt.dynamic_scale) == 16384.0 and int(opt.step_counter) == 1


def test_mixed_bfloat16_policy_is_reported(tmp_path):
    path = _rewrite(DATA / f"{RUNS[2]}.keras", tmp_path / "bf16.keras", lambda c: _set_policy(c, "mixed_bfloat16"))
    ckpt = slotopt.load_keras_checkpoint(path)
    assert ckpt.dtype_policy == "mixed_bfloat16" and ckpt.loss_scale is None
    assert any("dtype=torch.bfloat16" in note for note in ckpt.notes)


def _keras3_h5(path, run_id):
    """A Keras 3 ``model.save("x.h5")`` file (legacy HDF5 layout, Keras 3 names), from a ``.keras`` run."""
    run = _run(run_id)
    with zipfile.ZipFile(DATA / f"{run_id}.keras") as z:
        config = json.loads(z.read("config.json"))
    compile_config = config.pop("compile_config")
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "3.15.1"
        f.attrs["backend"] = "tensorflow"
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["training_config"] = json.dumps({"loss": "mean_squared_error",
                                                 "optimizer_config": compile_config["optimizer"]})
        weights = f.create_group("model_weights")
        layers = [entry["config"]["name"] for entry in config["config"]["layers"]]
        weights.attrs["layer_names"] = np.array([n.encode() for n in layers])
        every = list(zip(run["trainable"], run["saved_weights"])) + [(t, t["value"]) for t in run["non_trainable"]]
        for layer in layers:
            group = weights.create_group(layer)
            mine = [(t["name"], v) for t, v in every if t["name"].split("/")[:2][-1] == layer
                    or t["name"].split("/")[0] == layer]
            group.attrs["weight_names"] = np.array([n.encode() for n, _ in mine], dtype="S")
            for name, value in mine:
                group[name] = np.array(value, dtype=np.float32)
        opt = f.create_group("optimizer_weights")
        opt.attrs["weight_names"] = np.array([v["name"].encode() for v in run["optimizer_variables"]])
        for v in run["optimizer_variables"]:
            opt[v["name"]] = np.array(v["value"], dtype=v["dtype"])
    return path


def test_keras3_h5_model_file_is_read_as_keras3_and_continues(tmp_path):
    run = _run(RUNS[0])
    ckpt = slotopt.load_keras_checkpoint(_keras3_h5(tmp_path / "model.h5", RUNS[0]))
    assert ckpt.kind == "keras3" and ckpt.optimizer_class is slotopt.Adam
    assert ckpt.variable_names == [_short(t["name"], run) for t in run["trainable"]]
    assert ckpt.non_trainable_names == ["bn/moving_mean", "bn/moving_variance"]
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    expected = slotopt.load_keras_checkpoint(DATA / f"{RUNS[0]}.keras")
    ref = expected.parameters()
    ref_opt = expected.optimizer(ref)
    for step in run["steps"]:
        opt.apply_gradients(zip([_grad(g) for g in step["grads"]], params))
        ref_opt.apply_gradients(zip([_grad(g) for g in step["grads"]], ref))
    assert all(torch.equal(p, q) for p, q in zip(params, ref))


def test_keras3_h5_with_the_mha_sub_layers(tmp_path):
    ckpt = slotopt.load_keras_checkpoint(_keras3_h5(tmp_path / "model.h5", RUNS[1]))
    assert "mha/attention_output/kernel" in ckpt.variable_names and len(ckpt.variable_names) == 13


def test_weights_h5_with_a_separate_config(tmp_path):
    with zipfile.ZipFile(DATA / f"{RUNS[1]}.keras") as z:
        (tmp_path / "model.weights.h5").write_bytes(z.read("model.weights.h5"))
        (tmp_path / "config.json").write_bytes(z.read("config.json"))
    ckpt = slotopt.load_keras_checkpoint(tmp_path / "model.weights.h5", config=tmp_path / "config.json")
    whole = slotopt.load_keras_checkpoint(DATA / f"{RUNS[1]}.keras")
    assert ckpt.variable_names == whole.variable_names
    assert all(np.array_equal(a, b) for a, b in zip(ckpt.optimizer_state, whole.optimizer_state))
    with pytest.raises(CheckpointFormatError, match="pass `config=`"):
        slotopt.load_keras_checkpoint(tmp_path / "model.weights.h5")


def test_regularizers_and_constraints_are_surfaced(tmp_path):
    def config_fn(config):
        layers = {entry["config"]["name"]: entry["config"] for entry in config["config"]["layers"]}
        layers["head"]["kernel_regularizer"] = {"module": "keras.regularizers", "class_name": "L1L2",
                                                "config": {"l1": 0.001, "l2": 0.01}, "registered_name": None}
        layers["conv"]["kernel_constraint"] = {"module": "keras.constraints", "class_name": "MaxNorm",
                                               "config": {"max_value": 2.0, "axis": 0}, "registered_name": None}

    ckpt = slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[0]}.keras", tmp_path / "r.keras", config_fn))
    assert ckpt.regularizers == {"head/kernel": {"l1": 0.001, "l2": 0.01}}
    assert ckpt.constraints["conv/kernel"]["class_name"] == "MaxNorm"
    assert any("kernel_constraint" in n for n in ckpt.notes) and any("kernel_regularizer" in n for n in ckpt.notes)
    k = ckpt.weights["head/kernel"]
    loss = ckpt.regularization_loss({"head/kernel": k})
    assert torch.allclose(loss, 0.001 * k.abs().sum() + 0.01 * k.square().sum())


# ------------------------------------------------------------------------------------------- structure
def test_mha_variables_are_never_dropped_with_a_slotless_optimizer(tmp_path):
    def config_fn(config):
        config["compile_config"]["optimizer"] = {"module": "keras.optimizers", "class_name": "SGD",
                                                 "config": {"name": "sgd", "learning_rate": 0.01},
                                                 "registered_name": None}

    def h5_fn(f):
        del f["optimizer/vars"]
        f["optimizer/vars/0"] = np.int64(5)
        f["optimizer/vars/1"] = np.float32(0.01)

    ckpt = slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[1]}.keras", tmp_path / "sgd.keras", config_fn, h5_fn))
    assert [n for n in ckpt.variable_names if n.startswith("mha/")] == [
        f"mha/{p}/{v}" for p in ("query", "key", "value", "attention_output") for v in ("kernel", "bias")]


def test_a_variable_that_cannot_be_placed_is_refused_by_name(tmp_path):
    def stray(f):
        f["layers/mystery/vars/0"] = np.zeros(3, np.float32)

    with pytest.raises(CheckpointFormatError, match=r"entry 'layers/mystery/vars/0': cannot be placed"):
        slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[0]}.keras", tmp_path / "a.keras", h5_fn=stray))

    def drop_value(f):
        del f["layers/multi_head_attention/value_dense"]

    with pytest.raises(CheckpointFormatError, match=r"value_dense/vars'.*'mha/value' \(EinsumDense\) has 0"):
        slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[1]}.keras", tmp_path / "b.keras", h5_fn=drop_value))

    def slot_missing(f):
        del f["optimizer/vars/26"]

    with pytest.raises(CheckpointFormatError, match="holds 26 optimizer variables"):
        slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[1]}.keras", tmp_path / "c.keras", h5_fn=slot_missing))


def test_two_layers_with_the_same_name_are_refused(tmp_path):
    def config_fn(config):
        config["config"]["layers"][-1]["config"]["name"] = "conv"

    with pytest.raises(CheckpointFormatError, match="two layers are named 'conv'"):
        slotopt.load_keras_checkpoint(_rewrite(DATA / f"{RUNS[0]}.keras", tmp_path / "d.keras", config_fn))


def _two_dense_file(path):
    """Sequential [Dense dense_1 (4→4), Dense dense_2 (4→4)] with Adam state, in Keras 3's layout."""
    g = torch.Generator().manual_seed(0)
    arrays = [torch.randn(s, generator=g).numpy() for s in ((4, 4), (4,), (4, 4), (4,))]
    layer = {"module": "keras.layers", "class_name": "Dense", "registered_name": None}
    config = {"module": "keras", "class_name": "Sequential", "registered_name": None, "config": {
        "name": "seq", "trainable": True, "layers": [{**layer, "config": {"name": n, "units": 4}}
                                                      for n in ("dense_1", "dense_2")]},
        "compile_config": {"optimizer": slotopt.serialize(slotopt.Adam(0.1))}}
    opt = slotopt.Adam(0.1)
    opt.build([torch.tensor(a) for a in arrays])
    blob = io.BytesIO()
    with h5py.File(blob, "w") as f:
        for key, name, pair in (("dense", "dense_1", arrays[:2]), ("dense_1", "dense_2", arrays[2:])):
            group = f.create_group(f"layers/{key}/vars")
            group.attrs["name"] = name
            for i, a in enumerate(pair):
                group[str(i)] = a
        for i, value in enumerate(opt.get_weights()):
            f[f"optimizer/vars/{i}"] = value
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("model.weights.h5", blob.getvalue())
    return path, arrays


def test_mapping_by_name_puts_each_layer_in_its_place_and_refuses_ambiguity(tmp_path):
    path, arrays = _two_dense_file(tmp_path / "two.keras")
    ckpt = slotopt.load_keras_checkpoint(path)
    module = nn.ModuleDict({"dense_2": nn.Linear(4, 4), "dense_1": nn.Linear(4, 4)})  # registered out of order
    assert ckpt.mapping_for(module) == {"dense_1/kernel": "dense_1.weight", "dense_1/bias": "dense_1.bias",
                                        "dense_2/kernel": "dense_2.weight", "dense_2/bias": "dense_2.bias"}
    ckpt.load_module(module)
    assert torch.equal(module["dense_2"].weight, torch.from_numpy(arrays[2]).T)
    before = [p.detach().clone() for p in nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).parameters()]
    anonymous = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with torch.no_grad():
        for p, b in zip(anonymous.parameters(), before):
            p.copy_(b)
    with pytest.raises(ValueError, match=r"Ambiguous mapping for 'dense_1/kernel': parameters \['0.weight', "
                                         r"'1.weight'\]"):
        ckpt.load_module(anonymous)
    assert all(torch.equal(p, b) for p, b in zip(anonymous.parameters(), before))  # nothing written
    edited = {k: v.replace("dense_1", "0").replace("dense_2", "1") for k, v in ckpt.mapping_for(module).items()}
    ckpt.load_module(anonymous, edited)
    assert torch.equal(anonymous[1].weight, torch.from_numpy(arrays[2]).T)


# ------------------------------------------------------------------------------------------- conversions
def test_documented_conversions_compute_what_keras_computes():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    # Conv1D: Keras y[t, o] = Σ_k,i x[t+k, i] K[k, i, o] (valid) ↔ nn.Conv1d on (N, C, T).
    kernel = torch.randn(3, 3, 4, generator=g, dtype=torch.float64)
    keras = torch.stack([torch.einsum("nki,kio->no", x[:, t:t + 3], kernel) for t in range(3)], dim=1)
    conv = torch.nn.functional.conv1d(x.transpose(1, 2), to_torch(kernel, "conv1d_kernel")).transpose(1, 2)
    torch.testing.assert_close(conv, keras)
    # DepthwiseConv1D: Keras out channel c·mult + m = Σ_k x[t+k, c] K[k, c, m] ↔ nn.Conv1d(groups=in).
    dw = torch.randn(3, 3, 2, generator=g, dtype=torch.float64)
    keras = torch.stack([torch.einsum("nkc,kcm->ncm", x[:, t:t + 3], dw).reshape(2, 6) for t in range(3)], dim=1)
    conv = torch.nn.functional.conv1d(x.transpose(1, 2), to_torch(dw, "depthwise_kernel"), groups=3).transpose(1, 2)
    torch.testing.assert_close(conv, keras)
    # MultiHeadAttention's EinsumDense projections ↔ nn.Linear.
    q_kernel = torch.randn(3, 2, 4, generator=g, dtype=torch.float64)
    q_bias = torch.randn(2, 4, generator=g, dtype=torch.float64)
    keras = torch.einsum("abc,cde->abde", x, q_kernel) + q_bias
    linear = torch.nn.functional.linear(x, to_torch(q_kernel, "einsum_kernel:1"), to_torch(q_bias, "flatten"))
    torch.testing.assert_close(linear, keras.reshape(2, 5, 8))
    o_kernel = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    keras = torch.einsum("abcd,cde->abe", keras, o_kernel)
    torch.testing.assert_close(torch.nn.functional.linear(linear, to_torch(o_kernel, "einsum_kernel:2")), keras)


def test_gru_gate_order_and_reset_after_bias_match_torch():
    """Keras GRU (reset_after=True): z, r, h gates, bias (2, 3u) = input and recurrent biases."""
    g = torch.Generator().manual_seed(1)
    units, x, h = 4, torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(2, 4, generator=g,
                                                                                      dtype=torch.float64)
    kernel = torch.randn(3, 12, generator=g, dtype=torch.float64)
    recurrent = torch.randn(4, 12, generator=g, dtype=torch.float64)
    bias = torch.randn(2, 12, generator=g, dtype=torch.float64)
    xz, xr, xh = torch.split(x @ kernel + bias[0], units, dim=1)
    hz, hr, hh = torch.split(h @ recurrent + bias[1], units, dim=1)
    z, r = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
    keras = z * h + (1 - z) * torch.tanh(xh + r * hh)
    gru = nn.GRUCell(3, units).double()
    torch_bias = to_torch(bias, "gru_bias")
    with torch.no_grad():
        gru.weight_ih.copy_(to_torch(kernel, "gru_kernel"))
        gru.weight_hh.copy_(to_torch(recurrent, "gru_kernel"))
        gru.bias_ih.copy_(torch_bias[0])
        gru.bias_hh.copy_(torch_bias[1])
    torch.testing.assert_close(gru(x, h), keras)


# ------------------------------------------------------------------------------------------- hostile files
def _hostile(tmp_path, name, h5_fn):
    return _rewrite(DATA / f"{RUNS[0]}.keras", tmp_path / f"{name}.keras", h5_fn=h5_fn)


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in_process"])
def test_links_external_storage_and_virtual_datasets_are_refused(tmp_path, isolate):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    cases = {
        "external link": lambda f: f["layers/dense"].__setitem__("evil", h5py.ExternalLink(str(secret), "/x")),
        "soft link": lambda f: f["layers/dense"].__setitem__("alias", h5py.SoftLink("/layers/conv2d/vars/0")),
        "external storage": lambda f: (f["layers/dense/vars"].__delitem__("1"), f["layers/dense/vars"]
                                       .create_dataset("1", shape=(3,), dtype="f4", external=[(str(secret), 0, 12)])),
    }
    for label, h5_fn in cases.items():
        path = _hostile(tmp_path, label.replace(" ", "_"), h5_fn)
        with pytest.raises(CheckpointFormatError, match=r"entry 'layers/dense/") as err:
            slotopt.load_keras_checkpoint(path, isolate=isolate)
        assert str(path) in str(err.value), label

    def virtual(f):
        layout = h5py.VirtualLayout(shape=(3,), dtype="f4")
        layout[:] = h5py.VirtualSource(str(secret), "data", shape=(3,))
        del f["layers/dense/vars/1"]
        f["layers/dense/vars"].create_virtual_dataset("1", layout)

    with pytest.raises(CheckpointFormatError, match="virtual dataset"):
        slotopt.load_keras_checkpoint(_hostile(tmp_path, "virtual", virtual), isolate=isolate)


def test_declared_sizes_are_bounded(tmp_path):
    def huge(f):  # a few bytes on disk declaring 8 GB (never written: the fill value)
        f.create_dataset("layers/dense/vars/9", shape=(10 ** 9,), dtype="f8")

    for isolate in (True, False):
        with pytest.raises(CheckpointFormatError, match="declares 8000000000 bytes"):
            slotopt.load_keras_checkpoint(_hostile(tmp_path, "huge", huge), isolate=isolate)
    with pytest.raises(CheckpointFormatError, match="over max_bytes=1000"):
        slotopt.load_keras_checkpoint(DATA / f"{RUNS[0]}.keras", max_bytes=1000)
    with pytest.raises(ValueError, match="max_bytes"):
        slotopt.load_keras_checkpoint(DATA / f"{RUNS[0]}.keras", max_bytes=0)


def test_wrong_dtypes_and_shapes_in_the_file_are_refused(tmp_path):
    def text(f):
        del f["layers/dense/vars/1"]
        f["layers/dense/vars/1"] = np.array([b"abc"])

    with pytest.raises(CheckpointFormatError, match="'layers/dense/vars/1': has dtype"):
        slotopt.load_keras_checkpoint(_hostile(tmp_path, "text", text))

    def wrong_slot(f):
        del f["optimizer/vars/4"]
        f["optimizer/vars/4"] = np.zeros((2, 2), np.float32)

    with pytest.raises(CheckpointFormatError, match=r"optimizer variable 4 .*has shape \(2, 2\)"):
        slotopt.load_keras_checkpoint(_hostile(tmp_path, "slot", wrong_slot))


# ------------------------------------------------------------------------------------------- the layer zoo
def _layer(cls, name, **config):
    return {"module": "keras.layers", "class_name": cls, "registered_name": None,
            "config": {"name": name, "trainable": True, **config}}


def test_every_supported_layer_is_walked_in_keras_order(tmp_path):
    """A Functional model in Keras 3's file layout: nested model, wrappers, RNN cells, convolution variants, norms.
    The variables come back in ``model.trainable_variables`` order with their layouts, the slots placed on them."""
    g = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(s, generator=g).numpy()  # noqa: E731
    inner = {"module": "keras", "class_name": "Sequential", "registered_name": None,
             "config": {"name": "block", "trainable": True, "layers": [_layer("Dense", "inner_dense", units=3)]}}
    layers = [
        (_layer("InputLayer", "x"), "input_layer", {}),
        (_layer("Conv1D", "c1", filters=4), "conv1d", {"vars": [rand(3, 2, 4), rand(4)]}),
        (_layer("BatchNormalization", "bn"), "batch_normalization", {"vars": [rand(4), rand(4), rand(4), rand(4)]}),
        (_layer("DepthwiseConv2D", "dw", use_bias=False), "depthwise_conv2d", {"vars": [rand(3, 3, 4, 2)]}),
        (_layer("SeparableConv2D", "sep"), "separable_conv2d", {"vars": [rand(3, 3, 4, 1), rand(1, 1, 4, 5),
                                                                         rand(5)]}),
        (_layer("Conv2DTranspose", "up"), "conv2d_transpose", {"vars": [rand(2, 2, 6, 5), rand(6)]}),
        (_layer("GroupNormalization", "gn", groups=2), "group_normalization", {"vars": [rand(6), rand(6)]}),
        (_layer("LayerNormalization", "ln", rms_scaling=True), "layer_normalization", {"vars": [rand(6)]}),
        (_layer("PReLU", "act", shared_axes=[1, 2]), "p_re_lu", {"vars": [rand(1, 1, 6)]}),
        (_layer("EinsumDense", "proj", equation="abc,cd->abd", bias_axes="d"), "einsum_dense",
         {"vars": [rand(6, 3), rand(3)]}),
        (_layer("GRU", "gru", units=2), "gru", {"cell/vars": [rand(3, 6), rand(2, 6), rand(2, 6)]}),
        (_layer("Bidirectional", "bi", layer=_layer("LSTM", "lstm", units=2)), "bidirectional",
         {"forward_layer/cell/vars": [rand(2, 8), rand(2, 8), rand(8)],
          "backward_layer/cell/vars": [rand(2, 8), rand(2, 8), rand(8)]}),
        (_layer("TimeDistributed", "td", layer=_layer("Dense", "per_step", units=3)), "time_distributed",
         {"layer/vars": [rand(4, 3), rand(3)]}),
        (_layer("SimpleRNN", "rnn", units=3), "simple_rnn", {"cell/vars": [rand(3, 3), rand(3, 3), rand(3)]}),
        (inner, "sequential", {"layers/dense/vars": [rand(3, 3), rand(3)]}),
    ]
    sub_names = {"cell/vars": None, "forward_layer/cell/vars": "lstm_cell", "backward_layer/cell/vars": "lstm_cell"}
    config = {"module": "keras", "class_name": "Functional", "registered_name": None,
              "config": {"name": "zoo", "trainable": True, "layers": [entry for entry, _, _ in layers]}}
    blob = io.BytesIO()
    values = []
    with h5py.File(blob, "w") as f:
        for entry, key, groups in layers:
            f.create_group(f"layers/{key}/vars").attrs["name"] = entry["config"]["name"]
            for sub, arrays in groups.items():
                group = f.require_group(f"layers/{key}/{sub}")
                if sub != "vars":
                    group.attrs["name"] = sub_names.get(sub) or {"gru": "gru_cell", "simple_rnn": "simple_rnn_cell",
                                                                 "time_distributed": "per_step",
                                                                 "sequential": "inner_dense"}[key]
                for i, a in enumerate(arrays):
                    group[str(i)] = a.astype(np.float32)
                values += arrays
        f.require_group("layers/bidirectional/forward_layer/vars").attrs["name"] = "forward_lstm"
        f.require_group("layers/bidirectional/backward_layer/vars").attrs["name"] = "backward_lstm"
        opt = slotopt.Adam(0.01)
        keep = [i for i in range(len(values)) if i not in (3, 4)]  # bn moving_mean, moving_variance
        opt.build([torch.tensor(values[i].astype(np.float32)) for i in keep])
        for i, value in enumerate(opt.get_weights()):
            f[f"optimizer/vars/{i}"] = value
    config["compile_config"] = {"optimizer": slotopt.serialize(opt)}
    with zipfile.ZipFile(tmp_path / "zoo.keras", "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("model.weights.h5", blob.getvalue())
    ckpt = slotopt.load_keras_checkpoint(tmp_path / "zoo.keras")
    assert ckpt.variable_names == [
        "c1/kernel", "c1/bias", "bn/gamma", "bn/beta", "dw/kernel", "sep/depthwise_kernel", "sep/pointwise_kernel",
        "sep/bias", "up/kernel", "up/bias", "gn/gamma", "gn/beta", "ln/gamma", "act/alpha", "proj/kernel",
        "proj/bias", "gru/gru_cell/kernel", "gru/gru_cell/recurrent_kernel", "gru/gru_cell/bias",
        "bi/forward_lstm/lstm_cell/kernel", "bi/forward_lstm/lstm_cell/recurrent_kernel",
        "bi/forward_lstm/lstm_cell/bias", "bi/backward_lstm/lstm_cell/kernel",
        "bi/backward_lstm/lstm_cell/recurrent_kernel", "bi/backward_lstm/lstm_cell/bias", "td/per_step/kernel",
        "td/per_step/bias", "rnn/simple_rnn_cell/kernel", "rnn/simple_rnn_cell/recurrent_kernel",
        "rnn/simple_rnn_cell/bias", "block/inner_dense/kernel", "block/inner_dense/bias"]
    assert ckpt.non_trainable_names == ["bn/moving_mean", "bn/moving_variance"]
    torch_shapes = {n: tuple(to_torch(ckpt.weights[n], ckpt.layouts[n]).shape) for n in ckpt.layouts}
    assert torch_shapes["c1/kernel"] == (4, 2, 3) and torch_shapes["dw/kernel"] == (8, 1, 3, 3)
    assert torch_shapes["sep/pointwise_kernel"] == (5, 4, 1, 1) and torch_shapes["up/kernel"] == (5, 6, 2, 2)
    assert torch_shapes["act/alpha"] == (6,) and torch_shapes["proj/kernel"] == (3, 6)
    assert torch_shapes["gru/gru_cell/kernel"] == (6, 3) and torch_shapes["gru/gru_cell/bias"] == (2, 6)
    assert torch_shapes["bi/backward_lstm/lstm_cell/recurrent_kernel"] == (8, 2)
    params = ckpt.parameters()
    ckpt.optimizer(params).apply_gradients(zip([torch.ones_like(p) for p in params], params))


def test_tf_keras_h5_with_batchnorm_is_walked_and_every_weight_placed(tmp_path):
    g = torch.Generator().manual_seed(2)
    values = {"d/kernel": (3, 4), "d/bias": (4,), "bn/gamma": (4,), "bn/beta": (4,), "bn/moving_mean": (4,),
              "bn/moving_variance": (4,)}
    values = {k: torch.rand(s, generator=g).numpy() for k, s in values.items()}
    trainable = ["d/kernel", "d/bias", "bn/gamma", "bn/beta"]
    opt = slotopt.legacy.Adam(0.01)
    opt.build([(n, torch.tensor(values[n])) for n in trainable])
    model_config = {"class_name": "Sequential", "config": {"name": "sequential", "layers": [
        {"class_name": "InputLayer", "config": {"name": "input_1"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 4}},
        {"class_name": "BatchNormalization", "config": {"name": "bn", "momentum": 0.9, "epsilon": 1e-5}}]}}

    def write(path, extra=False):
        with h5py.File(path, "w") as f:
            f.attrs["keras_version"] = "2.21.0"
            f.attrs["model_config"] = json.dumps(model_config)
            f.attrs["training_config"] = json.dumps({"optimizer_config": {
                "class_name": "Adam", "config": {**opt.get_config(), "is_legacy_optimizer": True}}}, default=float)
            for layer in ("d", "bn"):
                names = [n for n in values if n.startswith(layer + "/")]
                group = f.create_group(f"model_weights/{layer}")
                group.attrs["weight_names"] = np.array([f"{n}:0".encode() for n in names])
                for n in names:
                    group[f"{n}:0"] = values[n]
            if extra:
                f["model_weights/bn/bn/renorm_mean:0"] = np.zeros(4, np.float32)
            group = f.create_group("optimizer_weights")
            group.attrs["weight_names"] = np.array([f"{w.path}:0".encode() for w in opt.weights])
            for w, value in zip(opt.weights, opt.get_weights()):
                group[f"{w.path}:0"] = value
        return path

    ckpt = slotopt.load_keras_checkpoint(write(tmp_path / "bn.h5"))
    assert ckpt.kind == "legacy" and ckpt.variable_names == trainable
    assert ckpt.non_trainable_names == ["bn/moving_mean", "bn/moving_variance"]
    assert ckpt.torch_options["bn"] == {"momentum": 0.1, "eps": 1e-5}
    module = nn.ModuleDict({"d": nn.Linear(3, 4), "bn": nn.BatchNorm1d(4)})
    ckpt.load_module(module)
    assert torch.equal(module["bn"].running_var, torch.tensor(values["bn/moving_variance"]))
    with pytest.raises(CheckpointFormatError, match=r"entry 'model_weights/bn/bn/renorm_mean:0': cannot be placed"):
        slotopt.load_keras_checkpoint(write(tmp_path / "extra.h5", extra=True))
