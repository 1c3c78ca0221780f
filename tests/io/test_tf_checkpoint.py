"""TensorFlow checkpoints (``tf.train.Checkpoint`` and TF1 ``Saver``) continue in slotopt with the same numbers.

The two reference runs in tests/data/migration were written by TensorFlow 2.21 (Keras 3 Adam in a
``CheckpointManager``; TF1 ``AdamOptimizer`` with a ``Saver``), with the gradients and weights of 5 steps after the
restore: fed those gradients, the imported optimizer must give the recorded weights bit for bit. The other
checkpoints are written by tests/_tf_bundle_writer.py (every dtype, several shards, small and snappy blocks,
big-endian data, each generation's naming): slotopt state → checkpoint → ``load_tf_checkpoint`` → the
continuation must equal the one that never left memory. Corrupted files must raise only ``TFCheckpointError``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import slotopt
from slotopt.cli import command as cli
from slotopt.io import protowire
from slotopt.io.crc32c import crc32c, crc32c_python, mask, unmask
from slotopt.io.tensor_bundle import TensorBundle, TFCheckpointError, _snappy_decompress
from slotopt.io.tf_checkpoint import latest_checkpoint

sys.path.insert(0, str(Path(__file__).parents[1]))
import _tf_bundle_writer as writer  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "migration"
RUNS = ["k_tf_ckpt_keras3_mlp_bn_adam", "m_tf1_saver_adam"]


def _record(run):
    return json.loads((DATA / f"{run}.json").read_text())


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _replay(run, optimizer, to_torch_layout=None):
    """Loads the run's checkpoint, continues it with the recorded gradients; returns (max |difference|, steps)."""
    record = _record(run)
    ck = slotopt.load_tf_checkpoint(DATA / record["load"])
    names = [t["name"] for t in record["trainable"]]
    params = dict(zip(ck.variable_names, ck.parameters()))
    opt = ck.optimizer(params, optimizer=optimizer)
    global_step = slotopt.Variable(ck.weights["global_step"].clone(), name="global_step") \
        if "global_step" in ck.weights else None
    worst = 0.0
    for step in record["steps"]:
        pairs = [(torch.from_numpy(_f32(g["dense"])), params[n]) for g, n in zip(step["grads"], names)]
        if global_step is None:
            opt.apply_gradients(pairs)
        else:
            opt.apply_gradients(pairs, global_step=global_step)
        for n, w in zip(names, step["weights_after"]):
            worst = max(worst, float(np.max(np.abs(params[n].detach().numpy() - _f32(w)))))
    count = int(global_step) if global_step is not None else int(opt.iterations)
    return worst, count, record


# ------------------------------------------------------------------------------------------- reference runs
def test_keras3_checkpoint_continues_bit_for_bit():
    worst, iterations, record = _replay("k_tf_ckpt_keras3_mlp_bn_adam", slotopt.Adam(0.01))
    assert worst == 0.0
    assert iterations == record["iterations_after"] == 10


def test_tf1_saver_checkpoint_continues_bit_for_bit_with_hyperparameters_from_the_meta_graph():
    worst, global_step, record = _replay("m_tf1_saver_adam", None)
    assert worst == 0.0
    assert global_step == record["iterations_after"] == 10


def test_tf1_saver_checkpoint_continues_with_an_optimizer_given_by_the_caller():
    worst, _, _ = _replay("m_tf1_saver_adam", slotopt.v1.AdamOptimizer(0.01))
    assert worst == 0.0


@pytest.mark.parametrize("run", RUNS)
def test_every_recorded_value_is_read(run):
    record = _record(run)
    ck = slotopt.load_tf_checkpoint(DATA / record["load"])
    assert ck.variable_names == [t["name"] for t in record["trainable"]]
    for t, value in zip(record["trainable"], record["saved_weights"]):
        assert ck.keys[t["name"]] == t["file_key"]
        assert np.array_equal(ck.weights[t["name"]].numpy(), _f32(value))
    for t in record["non_trainable"]:
        stored = ck.weights[t["name"]]
        assert str(stored.dtype).endswith(t["dtype"])
        assert np.array_equal(stored.numpy(), np.asarray(t["value"], dtype=stored.numpy().dtype))
    by_key = {v.key: v for v in ck.optimizer_variables}
    assert len(by_key) == len(record["optimizer_variables"])
    for v in record["optimizer_variables"]:
        saved = by_key[v["file_key"]]
        assert saved.owner == v["owner"]
        assert np.array_equal(saved.value.numpy(), np.asarray(v["value"], dtype=saved.value.numpy().dtype))
    listed = sorted([k, list(e.shape), e.dtype] for k, e in TensorBundle(ck.path).entries.items())
    assert listed == sorted(record["checkpoint_keys"])
    assert ck.iterations == record["optimizer"]["iterations"]


def test_object_graph_names_every_key_as_recorded():
    record = _record("k_tf_ckpt_keras3_mlp_bn_adam")
    ck = slotopt.load_tf_checkpoint(DATA / record["load"])
    names = {v.key: v.name for v in ck.optimizer_variables} | {k: n for n, k in ck.keys.items()}
    for item in record["object_graph"]:
        if item["full_name"] != "save_counter":
            assert names[item["key"]] == item["full_name"]
    slots = ck.slots
    assert list(slots["mlp/out/kernel"]) == ["momentum", "velocity"]


def test_keras3_optimizer_class_and_options_must_fit_the_slots_and_a_refusal_changes_nothing():
    ck = slotopt.load_tf_checkpoint(DATA / "k_tf_ckpt_keras3_mlp_bn_adam")
    params = ck.parameters()
    before = [p.detach().clone() for p in params]
    for wrong in (slotopt.SGD(0.1, momentum=0.9), slotopt.Adam(0.01, amsgrad=True), slotopt.RMSprop(0.01)):
        with pytest.raises(ValueError, match="optimizer variables"):
            ck.optimizer(params, optimizer=wrong)
        assert not wrong.built
    with pytest.raises(ValueError, match="pass the optimizer you trained with"):
        ck.optimizer(params)
    with pytest.raises(TypeError, match="slotopt.keras3"):
        ck.optimizer(params, optimizer=slotopt.legacy.Adam(0.01))
    built = slotopt.Adam(0.01)
    built.build([torch.zeros(2)])
    with pytest.raises(ValueError, match="not built yet"):
        ck.optimizer(params, optimizer=built)
    with pytest.raises(ValueError, match="shape"):
        ck.optimizer([torch.zeros(3)] + params[1:], optimizer=slotopt.Adam(0.01))
    assert all(torch.equal(a, b) for a, b in zip(params, before))


def test_keras3_checkpoint_loads_into_a_torch_module_and_continues_in_torch_layout():
    record = _record("k_tf_ckpt_keras3_mlp_bn_adam")
    ck = slotopt.load_tf_checkpoint(DATA / record["load"])
    module = nn.ModuleDict({"hidden": nn.Linear(8, 16), "bn": nn.BatchNorm1d(16), "out": nn.Linear(16, 4)})
    mapping = {"mlp/hidden/kernel": "hidden.weight", "mlp/hidden/bias": "hidden.bias", "mlp/bn/gamma": "bn.weight",
               "mlp/bn/beta": "bn.bias", "mlp/out/kernel": "out.weight", "mlp/out/bias": "out.bias"}
    opt = ck.load_module(module, mapping, optimizer=slotopt.Adam(0.01))
    params = dict(module.named_parameters())
    assert torch.equal(params["hidden.weight"], ck.weights["mlp/hidden/kernel"].T)
    names = [t["name"] for t in record["trainable"]]
    for step in record["steps"]:
        grads = [torch.from_numpy(_f32(g["dense"])) for g in step["grads"]]
        for n, g in zip(names, grads):
            params[mapping[n]].grad = g.T.contiguous() if ck.layouts[n] == "dense_kernel" else g
        opt.step()
    for n, w in zip(names, record["steps"][-1]["weights_after"]):
        expected = torch.from_numpy(_f32(w))
        expected = expected.T if ck.layouts[n] == "dense_kernel" else expected
        assert torch.equal(params[mapping[n]].detach(), expected), n
    assert int(opt.iterations) == 10


# ------------------------------------------------------------------------------------------- finding the checkpoint
def test_a_directory_means_its_latest_checkpoint_and_paths_stay_inside_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "m_tf1_saver_adam", run)
    os.chmod(run / "checkpoint", 0o644)
    assert latest_checkpoint(run) == str(run.resolve() / "model.ckpt-5")
    assert slotopt.load_tf_checkpoint(run / "model.ckpt-5.index").path == str(run / "model.ckpt-5")
    # written with an absolute path, then the directory moved: the file name is looked up inside it
    writer.write_state_file(str(run), "/elsewhere/old/model.ckpt-5")
    assert latest_checkpoint(run) == str(run.resolve() / "model.ckpt-5")
    writer.write_state_file(str(run), "../outside/model.ckpt-5")
    with pytest.raises(TFCheckpointError, match="outside"):
        slotopt.load_tf_checkpoint(run)
    (run / "checkpoint").write_text("nothing useful\n")
    with pytest.raises(TFCheckpointError, match="model_checkpoint_path"):
        slotopt.load_tf_checkpoint(run)
    (run / "checkpoint").unlink()
    with pytest.raises(FileNotFoundError, match="prefix_or_directory"):
        slotopt.load_tf_checkpoint(run)
    with pytest.raises(FileNotFoundError, match="prefix_or_directory"):
        slotopt.load_tf_checkpoint(tmp_path / "missing" / "ckpt-1")


# ------------------------------------------------------------------------------------------- the format
ALL_DTYPES = {
    "f32": torch.randn(3, 4), "f64": torch.randn(5, dtype=torch.float64), "f16": torch.randn(2, 3).half(),
    "bf16": torch.randn(7).to(torch.bfloat16), "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
    "i16": torch.tensor([-(2**15), 2**15 - 1], dtype=torch.int16), "i32": torch.tensor([-(2**31), 7], dtype=torch.int32),
    "i64": torch.tensor([[-(2**63), 2**63 - 1]], dtype=torch.int64), "u8": torch.tensor([0, 255], dtype=torch.uint8),
    "u16": torch.tensor([65535, 1]).to(torch.uint16), "u32": torch.tensor([2**32 - 1]).to(torch.uint32),
    "u64": torch.tensor([2**63 + 5], dtype=torch.uint64), "bool": torch.tensor([True, False, True]),
    "c64": torch.randn(2, dtype=torch.complex64), "c128": torch.randn(2, 2, dtype=torch.complex128),
    "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 4), "strings": [b"ab", b"", b"\x00\xff" * 40],
}


@pytest.mark.parametrize("options", [
    {},
    {"num_shards": 3, "block_size": 16, "align": 8},
    {"num_shards": 2, "snappy": True, "block_size": 64},
    {"big_endian": True},
])
def test_every_dtype_reads_back_exactly(tmp_path, options):
    writer.write_bundle(str(tmp_path / "b"), ALL_DTYPES, **options)
    bundle = TensorBundle(tmp_path / "b")
    assert sorted(bundle.entries) == sorted(ALL_DTYPES)
    for key, value in ALL_DTYPES.items():
        if key == "strings":
            assert bundle.read_strings(key) == value
            continue
        got = bundle.read(key)
        assert got.dtype == value.dtype and got.shape == value.shape
        # bit for bit (NaN payloads and signed zeros included): compare the bytes
        assert got.reshape(-1).view(torch.uint8).tolist() == value.reshape(-1).view(torch.uint8).tolist()


@pytest.mark.parametrize("prefix", ["k_tf_ckpt_keras3_mlp_bn_adam/ckpt-1", "m_tf1_saver_adam/model.ckpt-5"])
def test_the_test_writer_lays_out_an_index_byte_for_byte_as_tensorflow(prefix):
    """The reader's view of the format agrees with TensorFlow's: the entries it decodes, encoded again by the test
    writer, give TensorFlow's `.index` file byte for byte (blocks, restarts, separators, CRCs, footer)."""
    real = (DATA / f"{prefix}.index").read_bytes()
    bundle = TensorBundle(DATA / prefix)
    entries = [(b"", writer.header_proto(1))] + [
        (key.encode(), writer.entry_proto(e.dtype_code, e.shape, e.shard_id, e.offset, e.size, e.crc32c))
        for key, e in bundle.entries.items()]
    assert writer.table(entries) == real


def test_the_error_is_the_readers_one_documented_type(tmp_path):
    import pickle

    writer.write_bundle(str(tmp_path / "e"), {"w": torch.ones(2)})
    (tmp_path / "e.data-00000-of-00001").write_bytes(b"\x00" * 8)
    with pytest.raises(slotopt.io.CheckpointFormatError) as caught:
        slotopt.load_tf_checkpoint(tmp_path / "e")
    err = caught.value
    assert isinstance(err, TFCheckpointError) and isinstance(err, ValueError)
    assert err.path == str(tmp_path / "e.data-00000-of-00001") and "'w'" in str(err)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_crc32c_and_its_mask():
    data = bytes(range(256)) * 700 + b"tail"
    assert crc32c(b"123456789") == crc32c_python(b"123456789") == 0xE3069283
    assert crc32c_python(data) == crc32c_python(data, lanes=64) == crc32c(data)
    assert crc32c_python(b"") == 0
    assert all(unmask(mask(v)) == v for v in (0, 1, 0xFFFFFFFF, 0xE3069283))


def test_snappy_blocks_with_copies_decompress():
    # "abcd" then a copy of 8 bytes from 4 back (a repeated pattern overlapping its source), then a literal.
    stream = bytes([14, (4 - 1) << 2]) + b"abcd" + bytes([0b001 | ((8 - 4) << 2), 4]) + bytes([(2 - 1) << 2]) + b"ef"
    assert _snappy_decompress(stream, "t") == b"abcdabcdabcdef"
    for bad in (stream[:-1], bytes([14, (4 - 1) << 2]) + b"abcd" + bytes([0b001 | (4 << 2), 9]), bytes([200, 1])):
        with pytest.raises(TFCheckpointError):
            _snappy_decompress(bad, "t")


def test_protowire_decodes_and_refuses_bad_input():
    fields = protowire.decode(writer.f_varint(1, 2**64 - 1) + writer.f_bytes(2, "x") + writer.f_fixed32(3, 7))
    assert protowire.get_int(fields, 1) == -1 and protowire.get_str(fields, 2) == "x"
    assert protowire.get_fixed32(fields, 3) == 7
    for bad in (b"\x08" + b"\xff" * 10 + b"\x01", b"\x12\x05ab", b"\x0b", b"\x00", b"\x08"):
        with pytest.raises(protowire.WireFormatError):
            protowire.decode(bad)
    with pytest.raises(protowire.WireFormatError):
        protowire.get_str(protowire.decode(writer.f_varint(1, 5)), 1)


def test_partitioned_and_huge_and_inconsistent_entries_are_refused(tmp_path):
    prefix = str(tmp_path / "p")
    writer.write_bundle(prefix, {"w": torch.ones(4)})
    data = open(prefix + ".data-00000-of-00001", "rb").read()

    def index_with(entry):
        with open(prefix + ".index", "wb") as f:
            f.write(writer.table([(b"", writer.header_proto(1)), (b"w", entry)]))

    cases = [
        (writer.entry_proto(1, [4], 0, 0, 16, mask(crc32c(data)), slices=[[(0, 2)]]), "partitioned"),
        (writer.entry_proto(1, [2**40, 2**40], 0, 0, 16, 0), "needs"),
        (writer.entry_proto(1, [4], 0, 2**62, 16, 0), "past the end"),
        (writer.entry_proto(1, [4], 0, 0, 2**62, 0), "past the end"),
        (writer.entry_proto(1, [4], 3, 0, 16, 0), "shard 3"),
        (writer.entry_proto(1, [4], 0, 0, 16, 12345), "CRC"),
        (writer.entry_proto(20, [], 0, 0, 0, 0), "dtype resource"),
        (writer.f_bytes(2, b"\x10" + b"\xff" * 11), "BundleEntryProto"),
    ]
    for entry, message in cases:
        index_with(entry)
        with pytest.raises(TFCheckpointError, match=message):
            slotopt.load_tf_checkpoint(prefix)
    with open(prefix + ".index", "wb") as f:
        f.write(writer.table([(b"", writer.header_proto(1, min_consumer=7))]))
    with pytest.raises(TFCheckpointError, match="version 7"):
        TensorBundle(prefix)


# ------------------------------------------------------------------------------------------- generations
def _train(opt, params, steps, seed, **apply_kwargs):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.apply_gradients([(torch.randn(p.shape, generator=generator, dtype=p.dtype), p) for p in params],
                            **apply_kwargs)


def _same(a, b):
    return all(torch.equal(x.detach(), y.detach()) for x, y in zip(a, b))


@pytest.mark.parametrize("make", [
    lambda: slotopt.Adam(0.01),
    lambda: slotopt.SGD(0.1, momentum=0.9, nesterov=True),
    lambda: slotopt.RMSprop(0.01, momentum=0.5, centered=True),
    lambda: slotopt.Adagrad(0.1),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keras3_state_round_trips_through_a_written_checkpoint(tmp_path, make, dtype):
    torch.manual_seed(1)
    names = ["net/dense/kernel", "net/dense/bias", "net/emb/embeddings"]
    params = [torch.randn(4, 3, dtype=dtype), torch.randn(3, dtype=dtype), torch.randn(5, 2, dtype=dtype)]
    opt = make()
    opt.build(list(zip(names, params)))
    _train(opt, params, 3, seed=0)
    writer.write_keras3_checkpoint(str(tmp_path / "ckpt-1"), opt, names, {"net/bn/moving_mean": torch.ones(3)},
                                   num_shards=2, block_size=32)
    writer.write_state_file(str(tmp_path), "ckpt-1")
    ck = slotopt.load_tf_checkpoint(tmp_path)
    assert ck.kind == "keras3" and ck.variable_names == names and ck.iterations == 3
    restored = ck.parameters()
    assert _same(restored, params)
    resumed = ck.optimizer(restored, optimizer=make())
    _train(opt, params, 3, seed=5)
    _train(resumed, restored, 3, seed=5)
    assert _same(restored, params)
    assert _same(resumed.variables, opt.variables)


def test_legacy_state_round_trips_and_restores_the_saved_hyperparameters(tmp_path):
    torch.manual_seed(2)
    names = ["dense/kernel", "dense/bias"]
    params = [torch.randn(4, 3), torch.randn(3)]
    opt = slotopt.legacy.Adam(0.02, beta_1=0.8)
    opt.build(list(zip(names, params)))
    _train(opt, params, 4, seed=0)
    writer.write_legacy_checkpoint(str(tmp_path / "ckpt-1"), opt, names, params)
    ck = slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")
    assert ck.kind == "legacy" and ck.variable_names == names and ck.iterations == 4
    assert set(ck.slots["dense/kernel"]) == {"m", "v"}
    restored = ck.parameters()
    resumed = ck.optimizer(restored, optimizer=slotopt.legacy.Adam(0.5))  # the file's 0.02 and 0.8 win, as in TF
    assert float(resumed.learning_rate) == pytest.approx(0.02) and float(resumed.beta_1) == pytest.approx(0.8)
    _train(opt, params, 3, seed=9)
    _train(resumed, restored, 3, seed=9)
    assert _same(restored, params)
    with pytest.raises(ValueError, match="slot"):  # (the weights were handed over and trained: fresh tensors)
        ck.optimizer([torch.zeros_like(p) for p in params], optimizer=slotopt.legacy.SGD(0.1, momentum=0.9))


@pytest.mark.parametrize("make, consts", [
    (lambda: slotopt.v1.MomentumOptimizer(0.1, 0.9), {"Momentum/learning_rate": 0.1, "Momentum/momentum": 0.9}),
    (lambda: slotopt.v1.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
     {"RMSProp/learning_rate": 0.01, "RMSProp/decay": 0.9, "RMSProp/momentum": 0.5, "RMSProp/epsilon": 1e-10}),
    (lambda: slotopt.v1.AdamOptimizer(0.003), {"Adam/learning_rate": 0.003, "Adam/beta1": 0.9, "Adam/beta2": 0.999,
                                               "Adam/epsilon": 1e-8}),
    (lambda: slotopt.v1.AdagradOptimizer(0.1), {"Adagrad/learning_rate": 0.1}),
])
def test_tf1_state_round_trips_with_and_without_a_meta_graph(tmp_path, make, consts):
    torch.manual_seed(3)
    names = ["layer/w", "layer/b"]
    params = [slotopt.Variable(torch.randn(4, 3), name=names[0]), slotopt.Variable(torch.randn(3), name=names[1])]
    step = slotopt.Variable(torch.tensor(0, dtype=torch.int64), name="global_step")
    opt = make()
    _train(opt, params, 3, seed=0, global_step=step)
    tensors = {v.name: v.detach().clone() for v in opt.variables()}
    tensors |= {n: p.detach().clone() for n, p in zip(names, params)} | {"global_step": step.detach().clone()}
    prefix = str(tmp_path / "model.ckpt-3")
    writer.write_bundle(prefix, tensors)
    ck = slotopt.load_tf_checkpoint(prefix)
    assert ck.kind == "v1" and sorted(ck.variable_names) == sorted(names) and ck.iterations == 3
    with pytest.raises(ValueError, match="pass the optimizer"):
        ck.optimizer(ck.parameters())
    writer.write_meta_graph(prefix + ".meta", consts, names)
    ck = slotopt.load_tf_checkpoint(prefix)
    assert ck.variable_names == names
    for passed in (None, make()):
        ck = slotopt.load_tf_checkpoint(prefix)  # (one read per model: the optimizer takes the file's slots)
        restored = [slotopt.Variable(t, name=n) for n, t in zip(names, ck.parameters())]
        resumed = ck.optimizer(restored, optimizer=passed)
        assert type(resumed) is type(opt)
        steps = (slotopt.Variable(ck.weights["global_step"].clone(), name="global_step"),
                 slotopt.Variable(step.detach().clone(), name="global_step"))
        reference = copy.deepcopy((opt, params))
        _train(reference[0], reference[1], 3, seed=4, global_step=steps[1])
        _train(resumed, restored, 3, seed=4, global_step=steps[0])
        assert _same(restored, reference[1]) and int(steps[0]) == 6
        assert [v.name for v in resumed.variables()] == [v.name for v in reference[0].variables()]
        assert _same(resumed.variables(), reference[0].variables())


def test_tf1_checkpoint_with_two_optimizers_needs_the_one_to_continue(tmp_path):
    names = ["w"]
    first, second = slotopt.v1.AdamOptimizer(0.01), slotopt.v1.MomentumOptimizer(0.1, 0.9)
    params = [slotopt.Variable(torch.randn(3), name="w")]
    _train(first, params, 2, seed=0)
    _train(second, params, 2, seed=1)
    tensors = {v.name: v.detach().clone() for v in first.variables() + second.variables()} | {"w": params[0].detach()}
    writer.write_bundle(str(tmp_path / "c"), tensors)
    ck = slotopt.load_tf_checkpoint(tmp_path / "c")
    assert any("several" in note for note in ck.notes) and ck.optimizer_class is None
    resumed = ck.optimizer(ck.parameters(), optimizer=slotopt.v1.MomentumOptimizer(0.1, 0.9))
    assert torch.equal(resumed.get_slot(resumed._vars[0], "momentum"), second.get_slot(params[0], "momentum"))
    with pytest.raises(ValueError, match="does not hold"):
        ck.optimizer(ck.parameters(), optimizer=slotopt.v1.RMSPropOptimizer(0.1))
    del names


def test_a_checkpoint_of_variables_only_has_no_optimizer(tmp_path):
    writer.write_bundle(str(tmp_path / "v"), {"a": torch.ones(2), "b": torch.zeros(3, dtype=torch.int32),
                                              "a/w": torch.ones(3, 2)})  # named like a slot, shaped otherwise
    ck = slotopt.load_tf_checkpoint(tmp_path / "v")
    assert ck.kind == "none" and set(ck.weights) == {"a", "b", "a/w"} and ck.variable_names == []
    with pytest.raises(ValueError, match="no optimizer state"):
        ck.optimizer([], optimizer=slotopt.v1.AdamOptimizer())


# ------------------------------------------------------------------------------------------- corrupt files
def _load_everything(path, must_fail=False):
    try:
        ck = slotopt.load_tf_checkpoint(path)
    except TFCheckpointError as err:
        assert str(path) in str(err) or "checkpoint" in str(err)
        return
    assert not must_fail, "a corrupted data file was read without an error"
    for name in ck.variable_names:  # whatever loads must be usable
        assert name in ck.weights


def _mutated_copy(tmp_path, run, file_name, mutate):
    target = tmp_path / run
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(DATA / run, target)
    for f in target.iterdir():
        os.chmod(f, 0o644)
    path = target / file_name
    path.write_bytes(mutate(path.read_bytes()))
    return target


@pytest.mark.parametrize("run, file_name", [
    ("k_tf_ckpt_keras3_mlp_bn_adam", "ckpt-1.index"), ("k_tf_ckpt_keras3_mlp_bn_adam", "ckpt-1.data-00000-of-00001"),
    ("m_tf1_saver_adam", "model.ckpt-5.index"), ("m_tf1_saver_adam", "model.ckpt-5.data-00000-of-00001"),
    ("m_tf1_saver_adam", "model.ckpt-5.meta"),
])
def test_byte_mutations_of_the_real_files_raise_only_the_documented_error(tmp_path, run, file_name):
    rng = random.Random(f"{run}/{file_name}")
    size = (DATA / run / file_name).stat().st_size
    mutations = [lambda b, n=n: b[:n] for n in (0, 1, size // 2, size - 1)]
    for _ in range(40):
        at, value = rng.randrange(size), rng.randrange(256)
        mutations.append(lambda b, at=at, value=value: b[:at] + bytes([b[at] ^ (value or 1)]) + b[at + 1:])
    mutations.append(lambda b: b + b"\x00" * 9)
    for i, mutate in enumerate(mutations):
        # Every byte of a data shard is under a CRC-32C, and a shorter shard misses bytes its entries declare.
        must_fail = ".data-" in file_name and i != len(mutations) - 1
        _load_everything(_mutated_copy(tmp_path, run, file_name, mutate), must_fail=must_fail)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=st.binary(max_size=200), entry=st.binary(max_size=40), header=st.binary(max_size=20))
def test_garbage_with_valid_checksums_raises_only_the_documented_error(tmp_path, graph, entry, header):
    """Structure fuzzing: the CRCs are right, the protobufs inside are garbage."""
    prefix = str(tmp_path / "g")
    writer.write_bundle(prefix, {"_CHECKPOINTABLE_OBJECT_GRAPH": graph, "x": torch.ones(2)})
    _load_everything(prefix)
    with open(prefix + ".index", "wb") as f:
        f.write(writer.table([(b"", header), (b"x", entry)]))
    _load_everything(prefix)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(
    ["_iterations", "_variables", "_trainable_variables", "0", "1", "iter", "learning_rate", "x"])), max_size=4),
    st.booleans(), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=2)), min_size=1, max_size=7))
def test_odd_object_graphs_raise_only_the_documented_error(tmp_path, nodes):
    graph = writer.Graph()
    graph.nodes = []
    for children, has_value, slots in nodes:
        graph.nodes.append({"children": list(children), "attributes": [("VARIABLE_VALUE", "n", "x")] if has_value
                            else [], "slots": [(a, "m", b) for a, b in slots]})
    prefix = str(tmp_path / "o")
    writer.write_bundle(prefix, {"_CHECKPOINTABLE_OBJECT_GRAPH": graph.serialize(), "x": torch.ones(2)})
    try:
        ck = slotopt.load_tf_checkpoint(prefix)
    except TFCheckpointError:
        return
    try:
        ck.optimizer(ck.parameters(), optimizer=slotopt.Adam() if ck.kind == "keras3" else slotopt.legacy.Adam())
    except (ValueError, TypeError):  # the file does not fit the optimizer: a clear refusal, nothing else
        pass


# ------------------------------------------------------------------------------------------- slotopt inspect
@pytest.mark.parametrize("path, expected", [
    (DATA / "k_tf_ckpt_keras3_mlp_bn_adam", ["Keras 3, name 'adam'", "iterations: 5", "mlp/bn/moving_mean",
                                              "momentum (8, 16) float32"]),
    (DATA / "m_tf1_saver_adam" / "model.ckpt-5", ["slotopt.v1.AdamOptimizer", "beta1_power", "Adam_1 (8, 16)"]),
    (Path(__file__).parents[1] / "data" / "keras_checkpoints" / "keras3_adam_float32.keras",
     ["slotopt.keras3.Adam", "iterations: 5", "adam/out_bias_velocity (4,) float32"]),
    (Path(__file__).parents[1] / "data" / "keras_checkpoints" / "legacy_adam_float32.h5",
     ["slotopt.legacy.Adam", "Adam/out/kernel/m (16, 4) float32"]),
])
def test_inspect_lists_variables_optimizer_slots_and_iterations(path, expected, capsys):
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    for text in expected:
        assert text in out


def test_inspect_reports_bad_and_missing_files(tmp_path, capsys):
    bad = _mutated_copy(tmp_path, "m_tf1_saver_adam", "model.ckpt-5.index", lambda b: b[:-3])
    assert cli.main(["inspect", str(bad)]) == 1
    assert "magic number" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- the documentation
def test_every_code_block_of_the_guide_runs_on_its_own(capsys, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the guide's paths are relative to the repository
    text = (root / "docs" / "tf_checkpoints.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    for block in blocks:
        exec(compile(block, "docs/tf_checkpoints.md", "exec"), {})
    out = capsys.readouterr().out
    assert "10 0.0" in out and "10 ['beta1_power', 'beta2_power', 'layer1/b/Adam', 'layer1/b/Adam_1']" in out
