"""Issue 40: a ``.keras`` file's stored weights member is read in one pass with its zip CRC-32 checked on it, and
``slotopt inspect`` (``metadata_only``) reads a ``.keras`` or ``.h5`` file's metadata, not its weights.

Each test failed before: the in-place read of a stored member had dropped the CRC-32 check (a flipped data byte
loaded as a different weight), and inspect read every weight to list their names and shapes.
"""

from __future__ import annotations

import io
import json
import re
import struct
import tracemalloc
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import slotopt
from slotopt.cli import command as cli

DATA = Path(__file__).parents[1] / "data"
KERAS = DATA / "migration" / "a_keras3_conv_bn_adam.keras"  # written by Keras 3.15.1 (model.save)
H5 = DATA / "keras_checkpoints" / "legacy_adam_float32.h5"  # written by tf.keras 2.21 (model.save)
MEMBER = "model.weights.h5"


def _member_start(path: Path) -> int:
    """Where the stored member's bytes start in the zip (after its local header)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(MEMBER)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_length + extra_length


def _flipped(path: Path, out: Path, dataset: str, byte: int = 5) -> Path:
    """A copy of the ``.keras`` file at ``path`` with one byte of ``dataset``'s data flipped in place (the zip's
    directory, CRC-32 included, unchanged)."""
    with zipfile.ZipFile(path) as z:
        assert z.getinfo(MEMBER).compress_type == zipfile.ZIP_STORED
        with h5py.File(io.BytesIO(z.read(MEMBER)), "r") as f:
            offset = f[dataset].id.get_offset()
    data = bytearray(path.read_bytes())
    data[_member_start(path) + offset + byte] ^= 0x40
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in_process"])
def test_a_flipped_byte_in_a_stored_keras_member_is_refused_naming_the_file_and_member(tmp_path, isolate):
    reference = slotopt.load_keras_checkpoint(KERAS, isolate=isolate)  # the sound file reads as always
    assert int(np.asarray(reference.optimizer_state[0])) > 0
    for dataset in ("layers/dense/vars/0", "optimizer/vars/3"):  # a weight and an Adam slot
        bad = _flipped(KERAS, tmp_path / "bad.keras", dataset)
        with pytest.raises(slotopt.io.CheckpointFormatError) as err:
            slotopt.load_keras_checkpoint(bad, isolate=isolate)
        assert err.value.path == str(bad) and err.value.entry == MEMBER and "CRC-32" in str(err.value)
    # metadata_only reads too little to check the CRC: it lists the corrupted file (inspect does not read data)
    listed = slotopt.load_keras_checkpoint(bad, isolate=isolate, metadata_only=True)
    assert listed.weights["head/kernel"].is_meta


def test_a_flipped_byte_in_a_deflated_keras_member_is_refused_naming_the_member(tmp_path):
    with zipfile.ZipFile(KERAS) as z:
        members = {n: z.read(n) for n in z.namelist()}
    good = tmp_path / "deflated.keras"
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    reference = slotopt.load_keras_checkpoint(KERAS)
    ck = slotopt.load_keras_checkpoint(good)  # decompressed while read: same values
    assert all(torch.equal(ck.weights[n], reference.weights[n]) for n in reference.weights)
    with zipfile.ZipFile(good) as z:
        info = z.getinfo(MEMBER)
    data = bytearray(good.read_bytes())
    start = _member_start(good)
    data[start + info.compress_size // 2] ^= 0x01  # inside the deflate stream
    bad = tmp_path / "bad.keras"
    bad.write_bytes(bytes(data))
    with pytest.raises(slotopt.io.CheckpointFormatError) as err:
        slotopt.load_keras_checkpoint(bad)
    assert err.value.path == str(bad) and err.value.entry == MEMBER


def test_the_checked_pass_reads_every_byte_between_and_around_the_datasets(tmp_path):
    from slotopt.io import _h5safe

    head, gap, tail = b"h" * 7, b"g" * ((1 << 24) + 3), b"t" * 5  # a gap over one scratch buffer
    x, y = np.arange(6, dtype="<f4"), np.arange(3, dtype=">f8")
    blob = b"pad" + head + x.tobytes() + gap + y.tobytes() + tail
    (tmp_path / "f").write_bytes(blob)
    region = blob[3:]
    offset_y = len(head) + x.nbytes + len(gap)
    located = {"x": (len(head), (6,), "<f4"), "y": (offset_y, (3,), ">f8")}
    import zlib

    snap = _h5safe._fill("f.keras", _h5safe.H5Snapshot(located=dict(located)), str(tmp_path / "f"), 3, len(region),
                         (MEMBER, zlib.crc32(region)))
    assert snap.datasets["x"].tolist() == x.tolist() and snap.datasets["y"].tolist() == y.tolist()
    with pytest.raises(slotopt.io.CheckpointFormatError, match="CRC-32") as err:  # the last byte counts
        _h5safe._fill("f.keras", _h5safe.H5Snapshot(located=dict(located)), str(tmp_path / "f"), 3, len(region),
                      (MEMBER, zlib.crc32(region[:-1] + b"u")))
    assert err.value.entry == MEMBER


def _dense_keras(path: Path, units: int) -> Path:
    """A Keras 3 ``.keras`` file of one Dense layer (units x units) after Adam steps, as ``model.save`` lays it out."""
    config = {"module": "keras", "class_name": "Sequential", "registered_name": None,
              "config": {"name": "sequential", "trainable": True, "layers": [
                  {"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
                   "config": {"batch_shape": [None, units], "dtype": "float32", "name": "input_layer"}},
                  {"module": "keras.layers", "class_name": "Dense", "registered_name": None,
                   "build_config": {"input_shape": [None, units]},
                   "config": {"name": "dense", "trainable": True, "dtype": "float32", "units": units,
                              "activation": "linear", "use_bias": True}}]},
              "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": "Adam",
                                               "registered_name": None,
                                               "config": {"name": "adam", "learning_rate": 0.001}}}}
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f["optimizer/vars/0"] = np.int64(3)
        f["optimizer/vars/1"] = np.float32(0.001)
        for i, shape in enumerate([(units, units), (units,)]):
            f[f"layers/dense/vars/{i}"] = rng.standard_normal(shape, dtype=np.float32)
            f[f"optimizer/vars/{2 + 2 * i}"] = rng.standard_normal(shape, dtype=np.float32)
            f[f"optimizer/vars/{3 + 2 * i}"] = rng.random(shape, dtype=np.float32)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(config))
        z.writestr(MEMBER, buffer.getvalue())
    return path


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in_process"])
def test_inspect_of_a_keras_file_reads_its_metadata_not_its_weights(tmp_path, capsys, isolate):
    path = _dense_keras(tmp_path / "m.keras", 1024)  # 12 MiB of weights and slots
    full = slotopt.load_keras_checkpoint(path, isolate=isolate)
    tracemalloc.start()
    try:
        ck = slotopt.load_keras_checkpoint(path, isolate=isolate, metadata_only=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20  # no weight (4 MiB each) was read
    assert {n: (tuple(w.shape), w.dtype) for n, w in ck.weights.items()} == \
        {n: (tuple(w.shape), w.dtype) for n, w in full.weights.items()}
    assert all(w.is_meta for w in ck.weights.values())
    assert int(np.asarray(ck.optimizer_state[0])) == 3 and float(np.asarray(ck.optimizer_state[1])) == np.float32(1e-3)
    assert [tuple(s.shape) for s in ck.optimizer_state] == [tuple(np.shape(s)) for s in full.optimizer_state]
    assert ck.entries == full.entries and ck.optimizer_entries == full.optimizer_entries
    with pytest.raises(ValueError, match="metadata_only=True"):  # a listing builds nothing, and says so
        ck.optimizer(ck.parameters())
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "iterations: 3" in out and "dense/kernel  (1024, 1024)  float32  optimized" in out
    assert re.search(r"optimizer/vars/2 +-> +adam/dense_kernel_momentum +optimizer", out)


def test_inspect_of_an_h5_file_reads_its_metadata(capsys):
    ck = slotopt.load_keras_checkpoint(H5, metadata_only=True)
    full = slotopt.load_keras_checkpoint(H5)
    assert all(w.is_meta for w in ck.weights.values()) and ck.variable_names == full.variable_names
    assert [tuple(np.shape(s)) for s in ck.optimizer_state] == [tuple(np.shape(s)) for s in full.optimizer_state]
    assert int(np.asarray(ck.optimizer_state[0])) == 5 and ck.optimizer_entries == full.optimizer_entries
    assert cli.main(["inspect", str(H5)]) == 0
    out = capsys.readouterr().out
    assert "Adam/iter  ()  int64 = 5" in out and "hidden/kernel  Adam/hidden/kernel/m (8, 16) float32" in out


@pytest.mark.parametrize("kind", ["keras", "tf"])
def test_a_metadata_only_result_refuses_to_build_and_names_the_way_out(kind):
    # Read for `slotopt inspect`, a checkpoint holds shapes and dtypes but no values: building parameters, an
    # optimizer or a module from it is refused clearly (it was a TypeError deep in numpy, or meta parameters).
    if kind == "keras":
        from slotopt.io import load_keras_checkpoint

        path = str(DATA / "keras_checkpoints" / "keras3_adam_float32.keras")
        ck = load_keras_checkpoint(path, metadata_only=True)
        full = load_keras_checkpoint(path)
    else:
        from slotopt.io import load_tf_checkpoint

        path = str(DATA / "migration2" / "c09a_tfckpt_keras3_guide_step_iterator" / "ckpts" / "ckpt-2")
        ck = load_tf_checkpoint(path, metadata_only=True)
        full = load_tf_checkpoint(path)
    params = [full.weights[n].clone() for n in full.variable_names]
    given = {} if kind == "keras" else {"optimizer": slotopt.Adam(0.01, amsgrad=True)}  # (TF2 names no class)
    attempts = {"build parameters": lambda: ck.parameters(),
                "build its optimizer": lambda: ck.optimizer(params, **given),
                "load a module": lambda: ck.load_module(torch.nn.Linear(2, 2))}
    for action, attempt in attempts.items():
        with pytest.raises(ValueError, match=f"metadata_only=True .* without metadata_only to {action}"):
            attempt()
    assert full.optimizer(full.parameters(), **given) is not None  # the same file read in full builds
