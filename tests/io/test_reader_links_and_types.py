"""Issue 50: readers bounded by the file's bytes whatever its links, the HDF5 type read as HDF5 says, no
directory-level symbolic link followed out of a SavedModel, a nested ``.keras`` refused cleanly however it is
corrupted. Files are built here with h5py and tests/_tf_bundle_writer.py; where a reader could hang, it runs in a
subprocess with a time limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slotopt
from slotopt.io import _h5safe
from slotopt.io.errors import CheckpointFormatError

h5py = pytest.importorskip("h5py")
SRC = str(Path(slotopt.__file__).parents[1])  # the slotopt under test, for the subprocesses


def _non_ieee_file(path) -> np.ndarray:
    """A float32 dataset whose HDF5 type has no implied mantissa bit (normalization NONE): h5py reports `<f4`,
    the HDF5 library converts it on reading (what Keras gets); returns what h5py reads."""
    kind = h5py.h5t.IEEE_F32LE.copy()
    kind.set_norm(h5py.h5t.NORM_NONE)
    with h5py.File(path, "w") as f:
        dataset = h5py.h5d.create(f.id, b"w", kind, h5py.h5s.create_simple((3,)))
        dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([0.1, 1.0, -2.5], dtype="<f4"), mtype=kind)
    with h5py.File(path, "r") as f:
        assert f["w"].dtype == np.dtype("<f4")
        return f["w"][()]


@pytest.mark.parametrize("isolate", [False, True])
def test_a_non_ieee_float_is_read_as_its_hdf5_type_says(tmp_path, isolate):
    expected = _non_ieee_file(tmp_path / "w.h5")
    assert expected[0] == np.float32(0.075)  # not 0.1: the stored bits mean another number
    got = _h5safe.snapshot(str(tmp_path / "w.h5"), str(tmp_path / "w.h5"), 1 << 30, isolate=isolate)
    assert got.datasets["w"].dtype == np.float32
    assert np.array_equal(got.datasets["w"], expected)


def test_a_standard_float_is_still_read_in_place(tmp_path):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["w"] = np.arange(5, dtype=">f4")
    got = _h5safe.snapshot(str(tmp_path / "w.h5"), str(tmp_path / "w.h5"), 1 << 30, isolate=False)
    assert np.array_equal(got.datasets["w"], np.arange(5, dtype=np.float32))
    assert got.datasets["w"].dtype == np.dtype("=f4")


# ------------------------------------------------------------------------------------------ 2: links
def _run_bounded(code: str, seconds: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (slotopt from this tree), killed past ``seconds``: where a reader could
    hang, the test fails instead of hanging."""
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=seconds, env=env)


def _inspect(target) -> subprocess.CompletedProcess:
    """``slotopt inspect target``, bounded in time."""
    return subprocess.run([sys.executable, "-c", "import slotopt_cli; raise SystemExit(slotopt_cli.main())",
                           "inspect", str(target)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


def test_one_dataset_under_many_hard_links_is_read_once_and_refused(tmp_path):
    target = tmp_path / "links.h5"
    with h5py.File(target, "w") as f:
        f.create_dataset("w", data=np.zeros(1 << 20, np.float32), chunks=(1 << 16,))  # read by the child
        for i in range(100):
            f[f"alias{i:03d}"] = f["w"]
    with pytest.raises(CheckpointFormatError, match="is the HDF5 object 'alias000' again .*second hard link"):
        _h5safe.snapshot(str(target), str(target), 1 << 40, isolate=False)


def test_groups_linking_the_next_twice_are_refused_in_time(tmp_path):
    target = tmp_path / "dag.h5"
    with h5py.File(target, "w") as f:
        groups = [f.create_group(f"g{i}") for i in range(25)]
        for here, below in zip(groups, groups[1:]):
            here["left"], here["right"] = below, below  # 2**24 paths, 25 objects
        groups[-1]["w"] = np.zeros(4, np.float32)
    code = ("import sys\nfrom slotopt.io import _h5safe\nfrom slotopt.io.errors import CheckpointFormatError\n"
            f"try:\n    _h5safe.snapshot({str(target)!r}, {str(target)!r}, 1 << 40)\n"
            "except CheckpointFormatError as err:\n    print('refused:', err)\n")
    done = _run_bounded(code)
    assert "refused:" in done.stdout and "second hard link" in done.stdout, done.stderr[-2000:]
    inspected = _inspect(target)
    assert inspected.returncode != 0 and "second hard link" in inspected.stdout + inspected.stderr


def _keras3_graph_with_one_slot_referenced(prefix: str, references: int) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1]))
    import _tf_bundle_writer as writer

    graph, tensors = writer.Graph(), {}
    optimizer = graph.add(0, "optimizer")
    variables, trainable = graph.add(optimizer, "_variables"), graph.add(optimizer, "_trainable_variables")
    weight = graph.add(trainable, "0")
    graph.variable(weight, "dense/kernel", "w" + writer.SUFFIX)
    iterations = graph.add(optimizer, "_iterations")
    graph.variable(iterations, "adam/iteration", "it" + writer.SUFFIX)
    graph.link(variables, "0", iterations)
    slot = graph.add(variables, "1")
    graph.variable(slot, "adam/dense_kernel_momentum", "m" + writer.SUFFIX)
    for i in range(2, references + 1):
        graph.link(variables, str(i), slot)  # the same 4 MiB node, again and again
    tensors["w" + writer.SUFFIX] = torch.zeros(1 << 20)
    tensors["m" + writer.SUFFIX] = torch.zeros(1 << 20)
    tensors["it" + writer.SUFFIX] = torch.tensor(3, dtype=torch.int64)
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    writer.write_bundle(prefix, tensors)


def test_an_object_graph_node_referenced_many_times_is_read_once_and_refused(tmp_path):
    from slotopt.io.tensor_bundle import TFCheckpointError

    _keras3_graph_with_one_slot_referenced(str(tmp_path / "ckpt-1"), 200)
    with pytest.raises(TFCheckpointError, match="node .*'adam/dense_kernel_momentum'.* referenced twice"):
        slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")
    _keras3_graph_with_one_slot_referenced(str(tmp_path / "ok-1"), 1)  # once: read as before
    assert slotopt.load_tf_checkpoint(tmp_path / "ok-1").iterations == 3


def test_a_legacy_slot_node_behind_many_slot_references_is_refused(tmp_path):
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1]))
    import _tf_bundle_writer as writer

    from slotopt.io.tensor_bundle import TFCheckpointError

    graph, tensors = writer.Graph(), {}
    model, optimizer = graph.add(0, "model"), graph.add(0, "optimizer")
    weights = [graph.add(model, f"w{i}") for i in range(50)]
    for i, node in enumerate(weights):
        graph.variable(node, f"w{i}", f"w{i}" + writer.SUFFIX)
        tensors[f"w{i}" + writer.SUFFIX] = torch.zeros(4)
    it = graph.add(optimizer, "iter")
    graph.variable(it, "Adam/iter", "iter" + writer.SUFFIX)
    tensors["iter" + writer.SUFFIX] = torch.tensor(3, dtype=torch.int64)
    lr = graph.add(optimizer, "learning_rate")
    graph.variable(lr, "Adam/learning_rate", "lr" + writer.SUFFIX)
    tensors["lr" + writer.SUFFIX] = torch.tensor(0.01)
    slot = graph.add(0, "slot")
    graph.variable(slot, "w0/m", "slot" + writer.SUFFIX)
    tensors["slot" + writer.SUFFIX] = torch.zeros(4)
    graph.nodes[optimizer]["slots"] = [(node, "m", slot) for node in weights]
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    writer.write_bundle(str(tmp_path / "ckpt-1"), tensors)
    with pytest.raises(TFCheckpointError, match="referenced twice"):
        slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")


# ------------------------------------------------------------------------------------------ 3: symlinked dirs
def test_a_saved_model_whose_variables_directory_links_out_of_it_is_refused(tmp_path):
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1]))
    import _tf_bundle_writer as writer

    from slotopt.io.tensor_bundle import TFCheckpointError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    writer.write_bundle(str(elsewhere / "variables"), {"w": torch.ones(3)})
    model = tmp_path / "saved_model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"")
    (model / "variables").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(TFCheckpointError, match="outside the SavedModel directory"):
        slotopt.load_tf_checkpoint(model)
    inspected = _inspect(model)
    assert inspected.returncode != 0 and "outside the SavedModel directory" in inspected.stdout + inspected.stderr
    inner = tmp_path / "inner"  # a link that stays inside the SavedModel is its own business
    inner.mkdir()
    (inner / "real").mkdir()
    writer.write_bundle(str(inner / "real" / "variables"), {"w": torch.ones(3)})
    (inner / "variables").symlink_to(inner / "real", target_is_directory=True)
    assert torch.equal(slotopt.load_tf_checkpoint(inner).weights["w"], torch.ones(3))


# ------------------------------------------------------------------------------------------ 4: .keras configs
NESTED = Path(__file__).parents[1] / "data" / "issue50" / "nested_keras3_adam.keras"


def _with_config(tmp_path, change) -> Path:
    import json
    import zipfile

    with zipfile.ZipFile(NESTED) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    change(config)
    members["config.json"] = json.dumps(config).encode()
    out = tmp_path / "changed.keras"
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out


def _inner_dense(config):
    block = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Sequential")
    return next(layer for layer in block["config"]["layers"] if layer["config"]["name"] == "inner_dense")


def test_the_recorded_nested_model_reads_as_keras_wrote_it():
    import json

    ck = slotopt.load_keras_checkpoint(NESTED)
    recorded = json.loads(NESTED.with_suffix(".json").read_text())
    assert sorted(ck.variable_names) == sorted(recorded["weights"])
    for name, first in recorded["weights"].items():  # the file's layout, as Keras holds them
        assert ck.weights[name].reshape(-1)[:3].tolist() == pytest.approx(first, abs=0, rel=0)
    opt = ck.optimizer(ck.parameters())
    assert int(opt.iterations) == recorded["iterations"] == 3


@pytest.mark.parametrize("module, registered", [("evil.layers", "evil>Dense"), ("keras.layers", "evil>Dense"),
                                                ("my_pkg.layers", None)])
def test_a_known_class_name_under_another_module_or_registered_name_is_refused(tmp_path, module, registered):
    def change(config):
        layer = _inner_dense(config)
        layer["module"], layer["registered_name"] = module, registered

    with pytest.raises(CheckpointFormatError, match="'inner_dense' has class_name 'Dense' but module"):
        slotopt.load_keras_checkpoint(_with_config(tmp_path, change))


def _corrupted(seed: int) -> bytes:
    """The nested file with ``model.weights.h5`` changed at a few seeded bytes (mostly its metadata, the first
    6000 bytes), zipped again (a valid zip: the HDF5 reader meets the corruption)."""
    import io
    import random
    import zipfile

    with zipfile.ZipFile(NESTED) as z:
        members = {n: z.read(n) for n in z.namelist()}
    rng = random.Random(seed)
    data = bytearray(members["model.weights.h5"])
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        i = rng.randrange(len(data)) if rng.random() < 0.3 else rng.randrange(min(len(data), 6000))
        data[i] = rng.randrange(256) if rng.random() < 0.7 else data[i] ^ (1 << rng.randrange(8))
    members["model.weights.h5"] = bytes(data)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
    return out.getvalue()


# 1492: a float type h5py maps to numpy's longdouble (torch has none: a bare TypeError before); the others are a
# few of the same loop's refusals and loads, kept quick.
@pytest.mark.parametrize("seed", [1492, 1000, 1001, 1002, 1003])
def test_a_seeded_corruption_of_a_nested_file_loads_or_is_refused_cleanly(tmp_path, seed, monkeypatch):
    monkeypatch.setattr(_h5safe, "TIMEOUT_SECONDS", 5.0)
    target = tmp_path / "c.keras"
    target.write_bytes(_corrupted(seed))
    try:
        ck = slotopt.load_keras_checkpoint(target)
        ck.optimizer(ck.parameters())
    except CheckpointFormatError as err:
        assert str(target) in str(err)
        if seed == 1492:
            assert "float" in str(err)


def test_an_extended_precision_float_is_refused_by_name(tmp_path):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["w"] = np.zeros(3, np.longdouble)
    with pytest.raises(CheckpointFormatError, match="128-bit float|96-bit float"):
        _h5safe.snapshot(str(tmp_path / "w.h5"), str(tmp_path / "w.h5"), 1 << 30, isolate=False)
