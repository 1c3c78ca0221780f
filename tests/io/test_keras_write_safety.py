"""Writing a Keras file back is safe (issue 47): every refusal comes before a byte is written, naming the entry; an
exception at any write call, a Ctrl-C or a truncated temporary file leaves the target as it was and no temporary
file; a fuzzer over the writer's inputs finds nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slotopt
from slotopt.io import CheckpointFormatError, keras_write, region, staging

pytest.importorskip("h5py")

DATA = Path(__file__).parents[1] / "data"
KERAS = DATA / "keras_checkpoints" / "keras3_adam_float32.keras"
LEGACY = DATA / "keras_checkpoints" / "legacy_adam_float32.h5"
WEIGHTS = DATA / "way_back_keras" / "k3_sgd_accumulate_weights"
OLD = b"the file that was there before"


def _trained(path: Path, **kwargs):
    ckpt = slotopt.load_keras_checkpoint(path, **kwargs)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    opt.apply_gradients(zip([torch.full_like(p, 0.01) for p in params], params))
    return ckpt, params, opt


def _sources():
    return [(KERAS, {}, ".keras"), (LEGACY, {}, ".h5"),
            (WEIGHTS / "original.weights.h5", {"config": WEIGHTS / "config.json"}, ".weights.h5")]


def _left(folder: Path, target: Path) -> None:
    """The target holds what it held, and nothing else is in its folder."""
    assert sorted(os.listdir(folder)) == [target.name]
    assert target.read_bytes() == OLD


# -------------------------------------------------------------------------------------------------- faults
@pytest.mark.parametrize("source, kwargs, suffix", _sources(), ids=[s[2] for s in _sources()])
def test_an_exception_at_every_write_call_leaves_the_target(source, kwargs, suffix, tmp_path, monkeypatch):
    ckpt, params, opt = _trained(source, **kwargs)
    target = tmp_path / f"model{suffix}"
    target.write_bytes(OLD)
    calls = []
    original = region.Region.write
    monkeypatch.setattr(region.Region, "write", lambda self, b: (calls.append(1), original(self, b))[1])
    ckpt.save(tmp_path / f"count{suffix}", params, opt)
    n = len(calls)
    os.unlink(tmp_path / f"count{suffix}")
    assert n >= 3
    for k in range(n):
        seen = []

        def failing(self, b, k=k, seen=seen):
            seen.append(1)
            if len(seen) == k + 1:
                raise (KeyboardInterrupt if k == n // 2 else OSError(28, "No space left on device"))
            return original(self, b)

        monkeypatch.setattr(region.Region, "write", failing)
        with pytest.raises((OSError, KeyboardInterrupt, RuntimeError)):
            ckpt.save(target, params, opt)
        _left(tmp_path, target)
    monkeypatch.setattr(region.Region, "write", original)
    ckpt.save(target, params, opt)  # and then it writes
    assert target.read_bytes() != OLD and sorted(os.listdir(tmp_path)) == [target.name]


@pytest.mark.parametrize("source, kwargs, suffix", _sources(), ids=[s[2] for s in _sources()])
def test_a_truncated_temporary_file_is_refused_before_the_rename(source, kwargs, suffix, tmp_path, monkeypatch):
    ckpt, params, opt = _trained(source, **kwargs)
    target = tmp_path / f"model{suffix}"
    target.write_bytes(OLD)
    real = staging._fsync

    def truncate_then_sync(path):
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - max(1, size // 3))
        real(path)

    monkeypatch.setattr(staging, "_fsync", truncate_then_sync)
    with pytest.raises((CheckpointFormatError, OSError, RuntimeError, ValueError)):
        ckpt.save(target, params, opt)
    _left(tmp_path, target)


def test_a_flipped_byte_in_the_zip_fails_its_crc(tmp_path, monkeypatch):
    ckpt, params, opt = _trained(KERAS)
    target = tmp_path / "model.keras"
    target.write_bytes(OLD)
    real = staging._fsync

    def flip_then_sync(path):
        with open(path, "r+b") as f:
            f.seek(200)  # inside model.weights.h5, after the two JSON members
            byte = f.read(1)
            f.seek(200)
            f.write(bytes([byte[0] ^ 1]))
        real(path)

    monkeypatch.setattr(staging, "_fsync", flip_then_sync)
    with pytest.raises(CheckpointFormatError):
        ckpt.save(target, params, opt)
    _left(tmp_path, target)


# -------------------------------------------------------------------------------------------------- refusals
def _no_write(monkeypatch):
    def refuse(self, target):
        raise AssertionError("a file was staged before every check had run")

    monkeypatch.setattr(staging.Staging, "path", refuse)


def _refusals():
    def other_class(ckpt, params, opt):
        sgd = slotopt.SGD(0.1)
        sgd.build(params)
        return params, sgd

    def other_layout(ckpt, params, opt):
        adam = slotopt.Adam(1e-3, amsgrad=True)
        adam.build(params)
        return params, adam

    def fewer_params(ckpt, params, opt):
        return params[:-1], opt

    def other_shape(ckpt, params, opt):
        return {**dict(zip(ckpt.variable_names, params)), "out/bias": torch.zeros(5)}, opt

    def other_dtype(ckpt, params, opt):
        return {**dict(zip(ckpt.variable_names, params)), "hidden/bias": params[1].double()}, opt

    def other_tensors(ckpt, params, opt):
        return [p.detach().clone() for p in params], opt

    return [("other_class", other_class, "SGD"), ("other_layout", other_layout, "amsgrad"),
            ("fewer_params", fewer_params, "4 tensors"), ("other_shape", other_shape, "out/bias"),
            ("other_dtype", other_dtype, "hidden/bias"), ("other_tensors", other_tensors, "hidden/kernel")]


@pytest.mark.parametrize("name, change, named", _refusals(), ids=[r[0] for r in _refusals()])
def test_refusals_come_before_any_byte_and_name_the_entry(name, change, named, tmp_path, monkeypatch):
    ckpt, params, opt = _trained(KERAS)
    given, optimizer = change(ckpt, params, opt)
    _no_write(monkeypatch)
    with pytest.raises((ValueError, TypeError)) as info:
        ckpt.save(tmp_path / "model.keras", given, optimizer)
    assert named in str(info.value)
    assert os.listdir(tmp_path) == []


def test_legacy_refuses_a_keras3_optimizer_and_a_changed_slot_dtype(tmp_path, monkeypatch):
    ckpt, params, opt = _trained(LEGACY)
    keras3 = slotopt.Adam(1e-3)
    keras3.build(params)
    _no_write(monkeypatch)
    with pytest.raises(ValueError, match="legacy"):
        ckpt.save(tmp_path / "m.h5", params, keras3)
    with torch.no_grad():
        opt.weights[1].data = opt.weights[1].data.double()
    with pytest.raises(ValueError, match="optimizer variable 1"):
        ckpt.save(tmp_path / "m.h5", params, opt)
    assert os.listdir(tmp_path) == []


def test_a_module_needs_its_mapped_parameters_and_metadata_only_cannot_save(tmp_path, monkeypatch):
    ckpt = slotopt.load_keras_checkpoint(KERAS)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    opt = ckpt.load_module(model)
    _no_write(monkeypatch)
    with pytest.raises(ValueError, match="was not built on"):
        ckpt.save(tmp_path / "m.keras", torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                                            torch.nn.Linear(16, 4)), opt)
    meta = slotopt.load_keras_checkpoint(KERAS, metadata_only=True)
    with pytest.raises(ValueError, match="metadata_only"):
        meta.save(tmp_path / "m.keras", [torch.zeros(1)], opt)
    assert os.listdir(tmp_path) == []


def test_an_iteration_count_past_the_files_dtype_is_refused(tmp_path, monkeypatch):
    ckpt, params, opt = _trained(KERAS)
    layout = ckpt._layout
    layout.dtypes["optimizer/vars/0"] = np.dtype(np.int8)  # a file whose count is int8: 300 does not fit
    opt.iterations = 300
    _no_write(monkeypatch)
    with pytest.raises(CheckpointFormatError, match="optimizer/vars/0"):
        keras_write.plan(ckpt, params, opt)


# -------------------------------------------------------------------------------------------------- fuzzer
_TWEAKS = ["none", "drop", "swap", "dtype", "shape", "extra", "values", "optimizer", "steps"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tweak=st.sampled_from(_TWEAKS), which=st.integers(0, 3), steps=st.integers(0, 3),
       value=st.sampled_from([0.0, -1.5, float("inf"), float("nan"), 1e30]), as_dict=st.booleans())
def test_the_writer_either_writes_what_it_was_given_or_refuses_and_writes_nothing(
        tweak, which, steps, value, as_dict, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    ckpt = slotopt.load_keras_checkpoint(KERAS)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    for _ in range(steps if tweak == "steps" else 1):
        opt.apply_gradients(zip([torch.full_like(p, 0.1) for p in params], params))
    given = list(params)
    if tweak == "drop":
        given.pop(which)
    elif tweak == "swap":
        given[which], given[(which + 1) % 4] = given[(which + 1) % 4], given[which]
    elif tweak == "dtype":
        given[which] = given[which].double()
    elif tweak == "shape":
        given[which] = given[which].reshape(-1)[:-1]
    elif tweak == "values":
        with torch.no_grad():
            given[which].view(-1)[0] = value
    elif tweak == "optimizer":
        opt = slotopt.RMSprop(1e-3)
        opt.build(params)
    payload = dict(zip(ckpt.variable_names, given)) if as_dict and len(given) == 4 else given
    if tweak == "extra" and isinstance(payload, dict):
        payload["nothing/here"] = torch.zeros(1)
    target = folder / "m.keras"
    target.write_bytes(OLD)
    try:
        ckpt.save(target, payload, opt)
    except (ValueError, TypeError):
        _left(folder, target)
        return
    assert sorted(os.listdir(folder)) == ["m.keras"]
    again = slotopt.load_keras_checkpoint(target)
    for n, p in zip(ckpt.variable_names, params):
        assert again.weights[n].numpy().tobytes() == p.detach().numpy().tobytes()
    for a, v in zip(again.optimizer_state, opt.variables):
        assert np.asarray(a).tobytes() == v.detach().numpy().tobytes()


# -------------------------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("kind, shape", [("dense_kernel", (3, 5)), ("conv1d_kernel", (3, 2, 4)),
                                         ("conv2d_kernel", (3, 3, 2, 4)), ("depthwise_kernel", (3, 3, 2, 2)),
                                         ("einsum_kernel:1", (6, 2, 3)), ("einsum_kernel:2", (2, 3, 6)),
                                         ("gru_kernel", (4, 9)), ("gru_bias", (2, 9)), ("gru_bias", (9,)),
                                         ("prelu", (1, 1, 5)), ("flatten", (2, 3)), ("as_is", (4,))])
def test_every_torch_layout_goes_back_to_keras_exactly(kind, shape):
    from slotopt.io.keras_layers import to_torch

    keras = torch.randn(shape)
    back = keras_write.to_keras(to_torch(keras, kind), kind, shape)
    assert back is not None and torch.equal(back, keras)


def test_an_int32_iteration_count_is_written_as_int32(tmp_path):
    """A torch-backend Keras file stores its iteration count as int32: it goes back in the file's dtype."""
    import h5py

    ckpt, params, opt = _trained(LEGACY)
    ckpt._layout.dtypes["optimizer_weights/Adam/iter:0"] = np.dtype(np.int32)
    target = ckpt.save(tmp_path / "m.h5", params, opt)
    with h5py.File(target) as f:
        stored = f["optimizer_weights/Adam/iter:0"]
        assert stored.dtype == np.int32 and int(stored[()]) == 6


def test_a_learning_rate_the_reader_would_refuse_is_not_written(tmp_path, monkeypatch):
    ckpt, params, opt = _trained(KERAS)
    with torch.no_grad():
        opt.variables[1].fill_(float("nan"))
    _no_write(monkeypatch)
    with pytest.raises(CheckpointFormatError, match="optimizer/vars/1"):
        ckpt.save(tmp_path / "m.keras", params, opt)


def test_a_converted_tensor_written_in_slabs_gives_the_same_file(tmp_path, monkeypatch):
    """Past ``_WHOLE`` a transposed kernel is written a slab of rows at a time (``_CHUNK``): the same bytes."""
    ckpt = slotopt.load_keras_checkpoint(KERAS)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    opt = ckpt.load_module(model)
    opt.apply_gradients(zip([torch.full_like(p, 0.1) for p in model.parameters()], model.parameters()))
    whole = Path(ckpt.save(tmp_path / "whole.keras", model, opt)).read_bytes()
    monkeypatch.setattr(keras_write, "_WHOLE", 0)
    monkeypatch.setattr(keras_write, "_CHUNK", 48)  # a few rows of the (8, 16) kernel per slab
    slabs = Path(ckpt.save(tmp_path / "slabs.keras", model, opt)).read_bytes()
    assert slabs == whole
    again = slotopt.load_keras_checkpoint(tmp_path / "slabs.keras")
    assert torch.equal(again.weights["hidden/kernel"], model[0].weight.detach().T)
