"""Issue 49: the readers' third round, on files recorded by the real libraries (tests/data/migration4, written by
tools/record_round3.py; the bit-for-bit replays of its runs are in test_recorded_migrations.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import slotopt
from slotopt.io.tf1_optimizers import v1_class
from slotopt.io.tf_meta import ApplyNode, MetaGraph, read_meta

DATA = Path(__file__).parents[1] / "data" / "migration4"


# ------------------------------------------------------------------------------------------------ TF1 graphs
def test_a_tf1_nesterov_momentum_is_read_from_its_update_nodes_and_a_plain_momentum_is_refused():
    ck = slotopt.load_tf_checkpoint(DATA / "g1_tf1_momentum_nesterov")
    assert ck.optimizer_config["use_nesterov"] is True
    params = ck.parameters()
    with pytest.raises(ValueError, match="use_nesterov=True; the optimizer passed has use_nesterov=False"):
        ck.optimizer(params, optimizer=slotopt.v1.MomentumOptimizer(0.05, 0.9))
    opt = ck.optimizer(params)
    assert isinstance(opt, slotopt.v1.MomentumOptimizer) and opt._use_nesterov


def test_every_tf1_optimizers_hyperparameters_come_from_the_graph():
    ck = slotopt.load_tf_checkpoint(DATA / "g2_tf1_every_optimizer")
    configs = {p.optimizer_name: p.optimizer_config for p in ck.parts}
    f32 = lambda x: float(torch.tensor(x, dtype=torch.float32))  # noqa: E731  (the graph's Consts are float32)
    assert configs["Ftrl"] == {"learning_rate": f32(0.1), "learning_rate_power": f32(-0.6),
                               "l1_regularization_strength": f32(0.01), "l2_regularization_strength": f32(0.02),
                               "l2_shrinkage_regularization_strength": f32(0.03), "beta": 0.0,
                               "initial_accumulator_value": f32(0.2)}
    assert configs["Adagrad"]["initial_accumulator_value"] == f32(0.3)  # the slot initializer's fill
    assert configs["RMSProp"]["centered"] is True and configs["Adadelta"]["rho"] == f32(0.9)
    assert configs["Adam"]["epsilon"] == f32(1e-6) and configs["ProximalAdagrad"]["l2_regularization_strength"] \
        == f32(0.02)


def _meta(op: str, attrs: dict, inputs: tuple = ()) -> MetaGraph:
    consts = {"Adam/learning_rate": 0.01, "Adam/beta1": 0.9, "Adam/beta2": 0.999, "Adam/epsilon": 1e-8}
    return MetaGraph(consts=consts, applies=[ApplyNode("Adam/update_w/" + op, op, inputs or (
        "w", "w/Adam", "w/Adam_1", "p1", "p2", "Adam/learning_rate", "Adam/beta1", "Adam/beta2", "Adam/epsilon",
        "g"), attrs)], trainable=["w"])


def test_what_a_graph_says_that_slotopt_cannot_honour_is_refused_naming_it():
    slots = {"w/Adam": ("w", "Adam"), "w/Adam_1": ("w", "Adam_1")}
    _, config, unsupported = v1_class("Adam", _meta("ResourceApplyAdam", {"use_nesterov": True}), slots, [])
    assert config is None and "use_nesterov=True" in unsupported and "use_nesterov=False only" in unsupported
    _, _, unsupported = v1_class("Adam", _meta("ResourceApplyAdam", {"some_new_option": 3}), slots, [])
    assert "attribute some_new_option=3" in unsupported
    _, _, unsupported = v1_class("Adam", _meta("ResourceApplyAdaMax", {}), slots, [])
    assert "ResourceApplyAdaMax" in unsupported
    notes: list = []
    decayed = ("w", "w/Adam", "w/Adam_1", "p1", "p2", "ExponentialDecay", "Adam/beta1", "Adam/beta2", "Adam/epsilon",
               "g")
    meta = _meta("ResourceApplyAdam", {"use_nesterov": False}, decayed)
    del meta.consts["Adam/learning_rate"]
    _, config, unsupported = v1_class("Adam", meta, slots, notes)
    assert config is None and unsupported is None
    assert "learning_rate (computed by 'ExponentialDecay')" in notes[0] and "`optimizer=`" in notes[0]


def test_a_refused_graph_refuses_the_continuation_and_changes_nothing(tmp_path):
    ck = slotopt.load_tf_checkpoint(DATA / "g1_tf1_momentum_nesterov")
    ck.unsupported = "the .meta graph's x has attribute y=1"
    params = ck.parameters()
    before = [p.detach().clone() for p in params]
    with pytest.raises(ValueError, match="attribute y=1; slotopt cannot continue it as it ran"):
        ck.optimizer(params, optimizer=slotopt.v1.MomentumOptimizer(0.05, 0.9, use_nesterov=True))
    assert all(torch.equal(a, b) for a, b in zip(params, before))


def test_ema_shadows_are_weights_and_the_optimizer_continues_alone():
    ck = slotopt.load_tf_checkpoint(DATA / "g3_tf1_adam_ema_shadows")
    assert ck.optimizer_name == "Adam" and not ck.parts
    assert {"net/w/ExponentialMovingAverage", "net/b/ExponentialMovingAverage"} <= set(ck.weights)
    assert all(v.owner is None or "Moving" not in v.name for v in ck.optimizer_variables)
    assert any("ExponentialMovingAverage shadow" in n for n in ck.notes)


def test_two_optimizers_on_one_variable_are_refused_naming_the_way_out_which_works():
    ck = slotopt.load_tf_checkpoint(DATA / "x1_tf1_adam_and_momentum_one_variable")
    params = ck.parameters()
    with pytest.raises(ValueError, match=r"variable 'w' is trained by 2 TF1 optimizers \(Adam, Momentum.*"
                                         r"`ck.parts\[i\].optimizer\(params\)`"):
        ck.optimizer(params)
    opt = ck.optimizer(params, optimizer=slotopt.v1.AdamOptimizer(0.01))
    assert sorted(v.name for v in opt.variables())[-2:] == ["w/Adam", "w/Adam_1"]


def test_a_partitioned_variable_is_read_whole_with_its_slots_and_a_damaged_slice_refused(tmp_path):
    ck = slotopt.load_tf_checkpoint(DATA / "g4_tf1_partitioned_embedding")
    assert ck.variable_names == ["emb", "w"] and ck.weights["emb"].shape == (9, 2)
    assert ck.slots["emb"]["Momentum"].shape == (9, 2)
    meta = read_meta(str(DATA / "g4_tf1_partitioned_embedding" / "model.ckpt-3.meta"))
    assert meta.partitions == {"emb/part_0": "emb", "emb/part_1": "emb", "emb/part_2": "emb"}
    # One slice's bytes damaged: its CRC names it.
    import shutil

    folder = tmp_path / "ck"
    shutil.copytree(DATA / "g4_tf1_partitioned_embedding", folder)
    data = folder / "model.ckpt-3.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF  # the first tensor written: a slice of emb
    data.write_bytes(bytes(raw))
    with pytest.raises(slotopt.TFCheckpointError, match="CRC-32C"):
        slotopt.load_tf_checkpoint(folder)


# ------------------------------------------------------------------------------------------------ load_module
def _replay_through_module(run: str, ck) -> None:
    import json

    import numpy as np

    case = json.loads((DATA / run / "case.json").read_text())
    arrays = np.load(DATA / run / "arrays.npz")
    module = torch.nn.ModuleDict({"inner": torch.nn.Linear(5, 7), "head": torch.nn.Linear(7, 3)})
    mapping = {"body/inner/kernel": "inner.weight", "body/inner/bias": "inner.bias",
               "body/head/kernel": "head.weight", "body/head/bias": "head.bias"}
    kwargs = case["optimizer"]["constructed_with"]["kwargs"]
    opt = ck.load_module(module, mapping, optimizer=slotopt.Adam(**kwargs))
    params = [dict(module.named_parameters())[mapping[n]] for n in ck.variable_names]
    for s in range(len(case["steps"])):
        for i, (name, p) in enumerate(zip(ck.variable_names, params)):
            g = torch.from_numpy(arrays[f"step{s}/g/{i}"])
            p.grad = g.T.contiguous() if ck.layouts[name] == "dense_kernel" else g
        opt.step()
        for i, (name, p) in enumerate(zip(ck.variable_names, params)):
            got = p.detach().T if ck.layouts[name] == "dense_kernel" else p.detach()
            assert torch.equal(got, torch.from_numpy(arrays[f"step{s}/w/{i}"])), (run, s, name)


@pytest.mark.parametrize("run", ["k1_tfckpt_keras3_adam_clipnorm", "k1b_tfckpt_keras3_adam_global_clipnorm"])
def test_clipping_through_load_module_gives_the_files_bits_as_parameters_does(run):
    """issue 49 item 3: the norm is taken in TensorFlow's order of the kernel, not over nn.Linear's transpose
    (the parameters() path is test_migration2's replay of the same run)."""
    _replay_through_module(run, slotopt.load_tf_checkpoint(DATA / run / "ckpts"))


def test_keras_order_undoes_every_layout_to_torch_has():
    from slotopt.io.keras_layers import keras_order, to_torch

    for kind, shape in [("dense_kernel", (3, 4)), ("conv1d_kernel", (2, 3, 4)), ("conv2d_kernel", (2, 3, 4, 5)),
                        ("conv3d_kernel", (2, 2, 3, 4, 5)), ("depthwise_kernel", (3, 3, 2, 2)),
                        ("gru_kernel", (4, 6)), ("gru_bias", (2, 6)), ("einsum_kernel:1", (4, 2, 3))]:
        value = torch.arange(float(torch.tensor(shape).prod())).reshape(shape)
        order = keras_order(kind, shape)
        assert torch.equal(order(to_torch(value, kind)).reshape(shape), value), kind
    assert keras_order("as_is", (3, 4)) is None and keras_order("flatten", (2, 3)) is None


# ------------------------------------------------------------------------------------------------ layers
def test_every_built_in_layer_is_known_from_its_recorded_variables():
    from slotopt.io.keras_layers import built_in_variables, layer_spec

    table = built_in_variables()
    assert table["Normalization"] == (("mean", False, "float32"), ("variance", False, "float32"),
                                      ("count", False, "int64"))
    spec = layer_spec("Normalization", {})
    assert spec.known and [(n, t) for n, _, t in spec.own] == [("mean", False), ("variance", False), ("count", False)]
    assert layer_spec("Discretization", {}).own == [("summary", "as_is", False)]  # tf-keras's
    ck = slotopt.load_keras_checkpoint(DATA / "k2_keras3_normalization_efficientnet_stem" / "model.keras")
    assert "normalization/count" in ck.non_trainable_names and ck.weights["normalization/count"].dtype == torch.int64


def test_an_unknown_layers_integer_variables_are_not_trainable(tmp_path):
    import json
    import zipfile

    source = DATA / "k2_keras3_normalization_efficientnet_stem" / "model.keras"
    target = tmp_path / "custom.keras"
    with zipfile.ZipFile(source) as z, zipfile.ZipFile(target, "w") as out:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename == "config.json":  # the same variables, under a class slotopt does not know
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == "Normalization":
                        layer["class_name"], layer["module"] = "MyNormalization", "mine"
                        layer["registered_name"] = "mine>MyNormalization"
                data = json.dumps(config).encode()
            out.writestr(info, data)
    # The int64 count is state, not a trainable variable (it was refused as "holds int64 values"); the unknown
    # layer's two floats are taken as trainable (a custom layer's non-trainable weight is not told apart), which the
    # saved optimizer state then refuses, naming the count: the model's 8 + mean and variance.
    with pytest.raises(slotopt.io.CheckpointFormatError, match="built on the model's 10 trainable variables"):
        slotopt.load_keras_checkpoint(target)


# ------------------------------------------------------------------------------------------------ Keras files
def test_a_torch_backend_files_int32_iteration_keeps_its_dtype_and_the_run_continues():
    import json

    import numpy as np

    folder = DATA / "k3_keras3_torch_backend_adam"
    record = json.loads((folder / "recorded.json").read_text())
    assert record["iteration_dtype"] == "int32"
    ck = slotopt.load_keras_checkpoint(folder / "model.keras")
    assert ck.optimizer_state[0].dtype == np.int32
    params = ck.parameters()
    opt = ck.optimizer(params)
    assert opt.iterations.dtype == torch.int32 and int(opt.iterations) == record["steps"][0]["iterations"] - 1
    arrays = np.load(folder / "arrays.npz")
    for s in range(len(record["steps"])):
        opt.apply_gradients([(torch.from_numpy(arrays[f"step{s}/g/{i}"]), p) for i, p in enumerate(params)])
    assert int(opt.iterations) == record["iterations_after"] and opt.get_weights()[0].dtype == np.int32
    # The torch backend's Adam is torch's arithmetic, not TensorFlow's (which slotopt reproduces): close, not bits.
    last = len(record["steps"]) - 1
    for i, p in enumerate(params):
        assert np.allclose(p.detach().numpy(), arrays[f"step{last}/w/{i}"], rtol=1e-5, atol=1e-6)


def test_a_tfrs_users_composite_optimizer_is_accepted_as_built():
    """issue 49 item 9: ``ck.optimizer(params, optimizer=slotopt.CompositeOptimizer(...))`` as a TFRS user writes
    it (its entries in any order), continuing as the list of parts does (test_migration2 replays the run)."""
    run = Path(__file__).parents[1] / "data" / "migration2" / "c11_tfrs_ranking_composite" / "ckpts"
    ck = slotopt.load_tf_checkpoint(run)
    params = ck.parameters()
    by_name = dict(zip(ck.variable_names, params))
    adam, adagrad = slotopt.legacy.Adam(0.01), slotopt.legacy.Adagrad(0.1)
    embeddings = [by_name[n] for n in ck.parts[0].variable_names]
    rest = [by_name[n] for n in ck.parts[1].variable_names]
    composite = slotopt.CompositeOptimizer([(adam, lambda: rest), (adagrad, lambda: embeddings)])
    opt = ck.optimizer(params, optimizer=composite)
    assert [type(o).__name__ for o in opt.optimizers] == ["Adagrad", "Adam"] and opt.optimizers[1] is adam
    assert [int(o.iterations) for o in opt.optimizers] == [5, 5]
    reference = slotopt.load_tf_checkpoint(run)
    ref_params = reference.parameters()
    ref = reference.optimizer(ref_params, optimizer=[slotopt.legacy.Adagrad(0.1), slotopt.legacy.Adam(0.01)])
    grads = [torch.full_like(p, 0.1) for p in params]
    opt.apply_gradients(zip(grads, params))
    ref.apply_gradients(zip([g.clone() for g in grads], ref_params))
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(params, ref_params))
    wrong = slotopt.CompositeOptimizer([(slotopt.legacy.Adam(0.01), lambda: rest[:1]),
                                        (slotopt.legacy.Adagrad(0.1), lambda: embeddings + rest[1:])])
    with pytest.raises(ValueError, match="give each optimizer the variables of one part"):
        slotopt.load_tf_checkpoint(run).optimizer(params, optimizer=wrong)


def test_a_sharded_weights_manifest_is_read_with_its_config_and_its_shards_stay_inside(tmp_path):
    import json
    import shutil

    folder = DATA / "k4_keras3_sharded_weights_json"
    ck = slotopt.load_keras_checkpoint(folder / "model.weights.json", config=folder / "config.json")
    assert ck.variable_names == ["fc/kernel", "fc/bias", "out/kernel", "out/bias"] and len(ck.optimizer_state) == 10
    with pytest.raises(slotopt.io.CheckpointFormatError, match="pass `config=`"):
        slotopt.load_keras_checkpoint(folder / "model.weights.json")
    copy = tmp_path / "w"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "model.weights.json").read_text())
    manifest["weight_map"]["/optimizer/vars"][1] = "../model_00001.weights.h5"
    (copy / "model.weights.json").write_text(json.dumps(manifest))
    with pytest.raises(slotopt.io.CheckpointFormatError, match="a shard is a file next to the manifest"):
        slotopt.load_keras_checkpoint(copy / "model.weights.json", config=copy / "config.json")
    manifest["weight_map"]["/optimizer/vars"] = ["model_00000.weights.h5"]  # a shard left out: state missing
    (copy / "model.weights.json").write_text(json.dumps(manifest))
    with pytest.raises(slotopt.io.CheckpointFormatError, match="optimizer"):
        slotopt.load_keras_checkpoint(copy / "model.weights.json", config=copy / "config.json")


class Warmup(slotopt.schedules.LearningRateSchedule):
    """The run's registered ``fixtures>Warmup``, written for slotopt: ``peak * min(1, (step + 1) / steps)`` in
    float32, as the Keras one computes it."""

    def __init__(self, peak: float, steps: float) -> None:
        self.peak, self.steps = peak, steps

    def __call__(self, step):
        step = torch.as_tensor(step).to(torch.float32)
        return self.peak * torch.minimum(torch.tensor(1.0), (step + 1.0) / self.steps)

    def get_config(self):
        return {"peak": self.peak, "steps": self.steps}


def test_a_registered_custom_schedule_is_refused_truly_and_continues_when_passed_in():
    import json

    import numpy as np

    folder = DATA / "k5_keras3_registered_schedule"
    with pytest.raises(slotopt.io.CheckpointFormatError, match=r"class 'Warmup' \(registered as 'fixtures>Warmup'\)"
                                                               r".*custom_objects=\{'fixtures>Warmup': MySchedule\}"):
        slotopt.load_keras_checkpoint(folder / "model.keras")
    with pytest.raises(TypeError, match="custom_objects"):
        slotopt.load_keras_checkpoint(folder / "model.keras", custom_objects={"fixtures>Warmup": 3})
    record = json.loads((folder / "recorded.json").read_text())
    arrays = np.load(folder / "arrays.npz")
    for custom in (Warmup, Warmup(0.02, 10.0)):  # the class (built from the file's arguments) or an instance
        ck = slotopt.load_keras_checkpoint(folder / "model.keras", custom_objects={"fixtures>Warmup": custom})
        params = ck.parameters()
        opt = ck.optimizer(params)
        assert isinstance(opt.learning_rate, Warmup) or isinstance(opt._learning_rate, Warmup)
        for s, step in enumerate(record["steps"]):
            opt.apply_gradients([(torch.from_numpy(arrays[f"step{s}/g/{i}"]), p) for i, p in enumerate(params)])
            for i, p in enumerate(params):
                assert torch.equal(p.detach(), torch.from_numpy(arrays[f"step{s}/w/{i}"])), (s, i)
            assert int(opt.iterations) == step["iterations"]


# ------------------------------------------------------------------------------------------------ tf-keras 2.11+
def test_tfkeras_new_sparse_updates_deduplicate_and_what_differs_is_refused():
    """issue 49 item 2: tf-keras 2.11+ sums a sparse gradient's repeated rows before the update (replayed bit for
    bit by test_migration2: t1 Adagrad, t3 SGD momentum; d* dense Adam, AdamW, Adamax, SGD, Nesterov SGD,
    Adagrad). Its sparse Adam scatters in its own order: refused, naming the way forward; its RMSprop (and Ftrl,
    Adadelta, Nadam) differ dense too: refused at load."""
    import json

    import numpy as np

    folder = DATA / "t2_tfkeras_new_adam_sparse_repeated"
    ck = slotopt.load_tf_checkpoint(folder / "ckpts")
    params = ck.parameters()
    opt = ck.optimizer(params, optimizer=slotopt.Adam(0.01))
    assert opt._deduplicate_sparse
    arrays = np.load(folder / "arrays.npz")
    before = [p.detach().clone() for p in params]
    sparse = slotopt.IndexedSlices(torch.from_numpy(arrays["step0/g/0/values"]),
                                   torch.from_numpy(arrays["step0/g/0/indices"]), (10, 3))
    rest = [(torch.from_numpy(arrays[f"step0/g/{i}"]), p) for i, p in enumerate(params) if i]
    with pytest.raises(ValueError, match="whose sparse update") as refused:
        opt.apply_gradients([(sparse, params[0]), *rest])
    assert "`grad.to_dense()`" in str(refused.value)
    assert all(torch.equal(a, b) for a, b in zip(params, before)) and int(opt.iterations) == 3
    record = json.loads((folder / "recorded.json").read_text())
    assert record["optimizer"]["class_name"] == "Adam"
    rmsprop = slotopt.load_tf_checkpoint(DATA / "d4_tfkeras_new_rmsprop_dense" / "ckpts")
    with pytest.raises(ValueError, match="tf-keras 2.11\\+'s RMSprop, whose update .* differs from Keras 3's"):
        rmsprop.optimizer(rmsprop.parameters(), optimizer=slotopt.RMSprop(0.01))
    # A Keras 3 optimizer keeps Keras 3's sparse update (rows one by one, no deduplication).
    assert not slotopt.Adam(0.01)._deduplicate_sparse


def test_an_optimizer_summing_whole_tensors_is_refused_on_a_converted_layout_with_nothing_written():
    """Lamb's trust ratio sums whole tensors in the order it is given them: on nn.Linear's transposed kernel the
    bits would differ from TensorFlow's silently, so load_module refuses it before writing the module."""
    ck = slotopt.load_tf_checkpoint(DATA / "k1_tfckpt_keras3_adam_clipnorm" / "ckpts")
    module = torch.nn.ModuleDict({"inner": torch.nn.Linear(5, 7), "head": torch.nn.Linear(7, 3)})
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    mapping = {"body/inner/kernel": "inner.weight", "body/inner/bias": "inner.bias",
               "body/head/kernel": "head.weight", "body/head/bias": "head.bias"}
    with pytest.raises(ValueError, match="Lamb's update sums whole tensors"):
        ck.load_module(module, mapping, optimizer=slotopt.Lamb(0.01))
    assert all(torch.equal(p, before[n]) for n, p in module.named_parameters())
    opt = ck.optimizer(ck.parameters(), optimizer=slotopt.Lamb(0.01))  # the file's layout: the way out works
    assert type(opt).__name__ == "Lamb"
