"""Malformed Keras files give the one documented error: mutations of the bundled sample files (truncated and
corrupted zips, JSON broken or of the wrong types, HDF5 bytes flipped, datasets deleted or replaced with other
shapes and dtypes) either load (a mutation that keeps the file valid) or raise ``CheckpointFormatError`` naming the
file, never another exception. Derandomized, so the suite is deterministic.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slotopt
from slotopt.io import CheckpointFormatError, _h5safe

h5py = pytest.importorskip("h5py", reason="the `keras` extra (h5py) is not installed")

SAMPLE = Path(__file__).parents[1] / "data" / "migration" / "c_keras3_lstm_rmsprop_clipnorm.keras"
LEGACY = Path(__file__).parents[1] / "data" / "keras_checkpoints" / "legacy_adam_float32.h5"
FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _members():
    with zipfile.ZipFile(SAMPLE) as z:
        return {n: z.read(n) for n in z.namelist()}


MEMBERS = _members()


def _zip(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch):
    """A flipped byte can make the HDF5 library loop: the isolated reader gives up after this."""
    monkeypatch.setattr(_h5safe, "TIMEOUT_SECONDS", 2.0)


def _load_or_refuse(tmp_path, data, name="m.keras"):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        ckpt = slotopt.load_keras_checkpoint(path)
    except CheckpointFormatError as err:
        assert str(path) in str(err)
        return None
    ckpt.optimizer(ckpt.parameters())  # what loads is usable
    return ckpt


@FUZZ
@given(cut=st.integers(0, len(SAMPLE.read_bytes()) - 1))
def test_truncated_zip(tmp_path, cut):
    _load_or_refuse(tmp_path, SAMPLE.read_bytes()[:cut])


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(SAMPLE.read_bytes()) - 1), st.integers(1, 255)),
                      min_size=1, max_size=4))
def test_flipped_bytes_in_the_zip(tmp_path, flips):
    data = bytearray(SAMPLE.read_bytes())
    for at, mask in flips:
        data[at] ^= mask
    _load_or_refuse(tmp_path, bytes(data))


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10 ** 12) | st.floats(allow_nan=True)
                     | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


CONFIG = json.loads(MEMBERS["config.json"])
CONFIG_PATHS = list(_paths(CONFIG))


@FUZZ
@given(where=st.sampled_from(CONFIG_PATHS), value=_JSON)
def test_config_with_a_value_of_the_wrong_kind(tmp_path, where, value):
    config = json.loads(MEMBERS["config.json"])
    if not where:
        config = value
    else:
        node = config
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = value
    _load_or_refuse(tmp_path, _zip({**MEMBERS, "config.json": json.dumps(config).encode()}))


@FUZZ
@given(cut=st.integers(0, len(MEMBERS["config.json"]) - 1), junk=st.binary(max_size=4))
def test_config_that_is_not_json(tmp_path, cut, junk):
    broken = MEMBERS["config.json"][:cut] + junk
    _load_or_refuse(tmp_path, _zip({**MEMBERS, "config.json": broken}))


def _datasets(data):
    with h5py.File(io.BytesIO(data), "r") as f:
        found = []
        f.visititems(lambda n, o: found.append(n) if isinstance(o, h5py.Dataset) else None)
        return sorted(found)


DATASETS = _datasets(MEMBERS["model.weights.h5"])


@FUZZ
@given(target=st.sampled_from(DATASETS), action=st.sampled_from(["delete", "shape", "dtype", "scalar", "int"]))
def test_dataset_deleted_or_of_another_shape_or_dtype(tmp_path, target, action):
    buffer = io.BytesIO(MEMBERS["model.weights.h5"])
    with h5py.File(buffer, "r+") as f:
        old = f[target][()]
        del f[target]
        if action == "shape":
            f[target] = np.zeros(np.shape(old) + (2,), np.float32)
        elif action == "dtype":
            f[target] = np.array(["x"] * max(np.size(old), 1), dtype="S1")
        elif action == "scalar":
            f[target] = np.float64(1.5)
        elif action == "int":
            f[target] = np.asarray(old).astype(np.int8)
    _load_or_refuse(tmp_path, _zip({**MEMBERS, "model.weights.h5": buffer.getvalue()}))


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(MEMBERS["model.weights.h5"]) - 1), st.integers(1, 255)),
                      min_size=1, max_size=3))
def test_flipped_bytes_in_the_weights_file(tmp_path, flips):
    data = bytearray(MEMBERS["model.weights.h5"])
    for at, mask in flips:
        data[at] ^= mask
    _load_or_refuse(tmp_path, _zip({**MEMBERS, "model.weights.h5": bytes(data)}))


@FUZZ
@given(missing=st.sampled_from(sorted(MEMBERS)), extra=st.booleans())
def test_missing_members(tmp_path, missing, extra):
    members = {k: v for k, v in MEMBERS.items() if k != missing}
    if extra:
        members["assets/../../evil"] = b"x"
    _load_or_refuse(tmp_path, _zip(members))


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(LEGACY.read_bytes()) - 1), st.integers(1, 255)),
                      min_size=1, max_size=3))
def test_flipped_bytes_in_an_h5_model_file(tmp_path, flips):
    data = bytearray(LEGACY.read_bytes())
    for at, mask in flips:
        data[at] ^= mask
    _load_or_refuse(tmp_path, bytes(data), "m.h5")


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork")
def test_a_crash_or_a_hang_of_the_hdf5_library_is_a_format_error(tmp_path, monkeypatch):
    import os
    import signal
    import time

    monkeypatch.setattr(_h5safe, "_walk", lambda *a: os.kill(os.getpid(), signal.SIGSEGV))
    with pytest.raises(CheckpointFormatError, match="HDF5 library crashed reading it"):
        slotopt.load_keras_checkpoint(SAMPLE)
    monkeypatch.setattr(_h5safe, "_walk", lambda *a: time.sleep(60))
    monkeypatch.setattr(_h5safe, "TIMEOUT_SECONDS", 0.5)
    with pytest.raises(CheckpointFormatError, match="took over"):
        slotopt.load_keras_checkpoint(SAMPLE)
    monkeypatch.setattr(_h5safe, "_walk", lambda *a: np.zeros(2 ** 40, np.uint8).sum())  # past the memory limit
    with pytest.raises(CheckpointFormatError, match="MemoryError"):
        slotopt.load_keras_checkpoint(SAMPLE)
