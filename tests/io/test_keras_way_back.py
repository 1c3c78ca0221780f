"""The way back for Keras files (issue 47): ``KerasCheckpoint.save`` writes ``.keras`` / ``.weights.h5`` / ``.h5`` in the
layout read, and Keras continues what slotopt wrote bit for bit.

``tests/data/way_back_keras`` was recorded by ``tools/record_way_back_keras.py``: Keras trained and saved each model;
slotopt read it, took 3 steps and wrote it back; Keras restored slotopt's file (with no warning) and continued 3
steps. Here slotopt replays its part from the same file and gradients, and its written file must hold exactly
what Keras restored from the recorded one, and slotopt's continuation of its own file exactly what Keras computed.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import slotopt

pytest.importorskip("h5py")

DATA = Path(__file__).parents[1] / "data"
WAY_BACK = DATA / "way_back_keras"
CASES = sorted(p.name for p in WAY_BACK.iterdir() if (p / "case.json").is_file())
FIXTURES = sorted(str(p.relative_to(DATA)) for p in DATA.rglob("*")
                  if p.suffix in (".keras", ".h5") and not {"way_back", "way_back_keras"} & set(p.parts)
                  and not any(p.parent.glob("*.weights.json"))  # (a sharded file's shards are not files of their own)
                  and "registered_schedule" not in str(p))  # (needs the user's schedule: test_readers_round3)
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"  # (the project's shared/, beside the repository)


def _case(name: str) -> tuple[dict, dict, Path]:
    folder = WAY_BACK / name
    case = json.loads((folder / "case.json").read_text())
    with np.load(folder / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return case, arrays, folder


def _load(folder: Path, case: dict, path: Path) -> slotopt.io.keras.KerasCheckpoint:
    kwargs = {k: str(folder / v) for k, v in case["load_kwargs"].items()}
    return slotopt.load_keras_checkpoint(path, **kwargs)


def _grads(arrays: dict, part: str, step: int) -> list[torch.Tensor]:
    out, i = [], 0
    while f"{part}/{step}/{i}" in arrays:
        out.append(torch.from_numpy(arrays[f"{part}/{step}/{i}"]))
        i += 1
    return out


def _recorded(arrays: dict, prefix: str, kind: str) -> list[np.ndarray]:
    out, i = [], 0
    while f"{prefix}/{kind}/{i}" in arrays:
        out.append(arrays[f"{prefix}/{kind}/{i}"])
        i += 1
    return out


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    assert got.tobytes() == want.tobytes(), (what, np.max(np.abs(got.astype(np.float64) - want)))


def _check_against(ckpt, arrays: dict, prefix: str) -> None:
    for i, (n, want) in enumerate(zip(ckpt.variable_names, _recorded(arrays, prefix, "t"), strict=True)):
        _same_bits(ckpt.weights[n].numpy(), want, f"{prefix} trainable {i} {n}")
    for i, (n, want) in enumerate(zip(ckpt.non_trainable_names, _recorded(arrays, prefix, "n"), strict=True)):
        _same_bits(ckpt.weights[n].numpy(), want, f"{prefix} non-trainable {i} {n}")
    for i, (got, want) in enumerate(zip(ckpt.optimizer_state, _recorded(arrays, prefix, "o"), strict=True)):
        _same_bits(np.asarray(got), want, f"{prefix} optimizer variable {i}")


def _slotopt_part(case: dict, arrays: dict, folder: Path, target: Path) -> None:
    ckpt = _load(folder, case, folder / f"original{case['format']}")
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    for s in range(case["steps"]["slotopt"]):
        opt.apply_gradients(zip(_grads(arrays, "slotopt", s), params))
    ckpt.save(target, params, opt)


@pytest.mark.parametrize("name", CASES)
def test_keras_continues_what_slotopt_wrote_bit_for_bit(name, tmp_path):
    case, arrays, folder = _case(name)
    assert case["keras_warnings"] == []  # Keras restored the recorded file without a warning
    target = tmp_path / f"written{case['format']}"
    _slotopt_part(case, arrays, folder, target)
    assert sorted(os.listdir(tmp_path)) == [target.name]
    written = _load(folder, case, target)
    _check_against(written, arrays, "restored")  # what Keras restored from slotopt's file, to the bit
    params = written.parameters()
    opt = written.optimizer(params)
    for s in range(case["steps"]["after"]):
        opt.apply_gradients(zip(_grads(arrays, "keras", s), params))
    fresh = _load(folder, case, target)  # what Keras held after continuing, against slotopt continuing
    fresh.weights.update({n: p.detach() for n, p in zip(written.variable_names, params)})
    fresh.optimizer_state = [v.detach().numpy() for v in written._state_variables(opt)]
    _check_against(fresh, arrays, "final")


def test_a_module_goes_back_through_its_mapping(tmp_path):
    """``save(path, module, opt)`` after ``load_module``: the weights and slots transposed back, the BatchNorm
    statistics (mapped to buffers) written from the module: the same file values Keras restored."""
    case, arrays, folder = _case("k3_dense_bn_adam")
    ckpt = _load(folder, case, folder / "original.keras")
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
    mapping = {"hidden/kernel": "0.weight", "hidden/bias": "0.bias", "bn/gamma": "1.weight", "bn/beta": "1.bias",
               "bn/moving_mean": "1.running_mean", "bn/moving_variance": "1.running_var",
               "out/kernel": "2.weight", "out/bias": "2.bias"}
    opt = ckpt.load_module(model, mapping)
    params = [dict(model.named_parameters())[mapping[n]] for n in ckpt.variable_names]
    for s in range(case["steps"]["slotopt"]):
        grads = _grads(arrays, "slotopt", s)
        grads = [g.T if g.dim() == 2 else g for g in grads]  # nn.Linear's layout
        opt.apply_gradients(zip(grads, params))
    target = ckpt.save(tmp_path / "m.keras", model, opt)
    _check_against(slotopt.load_keras_checkpoint(target), arrays, "restored")


# -------------------------------------------------------------------------------------------------- identity
def _fixtures() -> list[Path]:
    paths = [DATA / f for f in FIXTURES]
    if (REFERENCE / "keras_checkpoints").is_dir():
        paths += sorted((REFERENCE / "keras_checkpoints").glob("*.keras")) + sorted(
            (REFERENCE / "keras_checkpoints").glob("*.h5"))
    return paths


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: str(p).split("/data/")[-1])
def test_read_write_read_is_the_identity(path, tmp_path):
    ckpt = slotopt.load_keras_checkpoint(path)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    suffix = ".keras" if path.suffix == ".keras" else ".h5"
    target = Path(ckpt.save(tmp_path / f"again{suffix}", params, opt))
    again = slotopt.load_keras_checkpoint(target)
    first = slotopt.load_keras_checkpoint(path)
    assert again.variable_names == first.variable_names and again.non_trainable_names == first.non_trainable_names
    for n in first.weights:
        _same_bits(again.weights[n].numpy(), first.weights[n].numpy(), n)
    for i, (a, b) in enumerate(zip(again.optimizer_state, first.optimizer_state, strict=True)):
        _same_bits(np.asarray(a), np.asarray(b), f"optimizer variable {i}")
    assert again.optimizer_config == first.optimizer_config and again.skipped.keys() == first.skipped.keys()
    if suffix == ".keras":  # config.json and metadata.json byte for byte; members stored, as Keras writes them
        with zipfile.ZipFile(path) as a, zipfile.ZipFile(target) as b:
            assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
            assert all(i.compress_type == zipfile.ZIP_STORED for i in b.infolist())
            for name in ("config.json", "metadata.json"):
                if name in a.namelist():
                    assert a.read(name) == b.read(name)
    else:
        import h5py

        with h5py.File(path) as a, h5py.File(target) as b:
            assert dict(a.attrs) == dict(b.attrs)


def test_weights_h5_round_trips_with_its_config(tmp_path):
    case, _, folder = _case("k3_sgd_accumulate_weights")
    ckpt = _load(folder, case, folder / "original.weights.h5")
    params = ckpt.parameters()
    target = ckpt.save(tmp_path / "w.weights.h5", params, ckpt.optimizer(params))
    import h5py

    with h5py.File(target) as f:
        assert dict(f.attrs) == {} and "optimizer/vars/0" in f and f["optimizer/vars/0"].dtype == np.int64
    again = _load(folder, case, Path(target))
    for a, b in zip(again.optimizer_state, _load(folder, case, folder / "original.weights.h5").optimizer_state):
        _same_bits(np.asarray(a), np.asarray(b), "state")


def test_inspect_shows_a_written_file(tmp_path, capsys):
    from slotopt.cli.command import main

    ckpt = slotopt.load_keras_checkpoint(DATA / "keras_checkpoints" / "keras3_adam_float32.keras")
    params = ckpt.parameters()
    target = ckpt.save(tmp_path / "w.keras", params, ckpt.optimizer(params))
    assert main(["inspect", target]) in (0, None)
    out = capsys.readouterr().out
    assert "hidden/kernel" in out and "Adam" in out


def test_a_rollback_overwrites_the_file_it_was_read_from(tmp_path):
    """Read, train, write over the same path, train on, write again: each save replaces the whole file."""
    import shutil

    path = tmp_path / "model.keras"
    shutil.copy(DATA / "keras_checkpoints" / "keras3_adam_float32.keras", path)
    ckpt = slotopt.load_keras_checkpoint(path)
    params = ckpt.parameters()
    opt = ckpt.optimizer(params)
    for expected in (6, 7):
        opt.apply_gradients(zip([torch.full_like(p, 0.5) for p in params], params))
        ckpt.save(path, params, opt)
        again = slotopt.load_keras_checkpoint(path)
        assert int(again.optimizer_state[0]) == expected and sorted(os.listdir(tmp_path)) == ["model.keras"]
        for n, p in zip(ckpt.variable_names, params):
            _same_bits(again.weights[n].numpy(), p.detach().numpy(), n)
