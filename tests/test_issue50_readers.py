"""Issue 50: readers bounded by the file's bytes whatever its links, the HDF5 type read as HDF5 says, no
directory-level symbolic link followed out of a SavedModel, a nested ``.keras`` refused cleanly however it is
corrupted. Files are built here with h5py and tests/_tf_bundle_writer.py; where a reader could hang, it runs in a
subprocess with a time limit."""

from __future__ import annotations

import numpy as np
import pytest

from slotopt.io import _h5safe
from slotopt.io.errors import CheckpointFormatError

h5py = pytest.importorskip("h5py")


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


def _unused():  # keeps the import used until the structure tests below use it
    return CheckpointFormatError
