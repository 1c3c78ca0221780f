"""The way back for TensorFlow checkpoints (issue 47): ``TFCheckpoint.save`` writes what slotopt continued as a
checkpoint of the format read, which TensorFlow restores and continues bit for bit.

* ``tests/data/way_back`` (``tools/record_way_back_tf.py``, TensorFlow 2.21): for each format, TensorFlow restored
  the file slotopt wrote after N steps and continued M more; here the same N steps write the same bytes (sha256)
  and slotopt's own continuation of that file gives TensorFlow's final state, entry for entry, bit for bit;
* every TensorFlow fixture of ``tests/data`` round-trips: read → write → read is the identity (every entry's
  key, dtype, shape and CRC-32C), and a file written mid-run continues exactly as the recorded TensorFlow run;
* refusals come before any byte is written; a failure at any write call, or a truncated temporary file, leaves
  the target as it was and no temporary file; a fuzzer over the bundle writer's inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import slotopt
from slotopt import cli
from slotopt.io import bundle_writer, staging, tf_write
from slotopt.io.tensor_bundle import TensorBundle, TFCheckpointError

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_recorded_migrations import RUNS, _case, _constructed, _load  # noqa: E402

DATA = Path(__file__).parents[1] / "data"
WAY_BACK = DATA / "way_back"
CASES = sorted(p.name for p in WAY_BACK.iterdir() if (p / "case.json").is_file())
TF_RUNS = [r for r in RUNS if not (_case(r)[0]["format"].startswith("keras3") or _case(r)[0]["format"] == "tfkeras_file")]


def _sha(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _optimizer(ck: Any, params: list, spec: dict) -> Any:
    if spec["api"] == "v1":
        return ck.optimizer(params)
    generation = slotopt if spec["api"] == "keras3" else slotopt.legacy

    def make(c: str, k: dict) -> Any:  # a [class, kwargs] argument is an optimizer too (a LossScaleOptimizer's)
        return getattr(generation, c)(**{a: make(*v) if isinstance(v, list) else v for a, v in k.items()})
    made = [make(c, k) for c, k in spec["optimizer"]]
    return ck.optimizer(params, optimizer=made if spec["api"] == "composite" else made[0])


def _steps(ck: Any, load: Path, grads: list[dict], spec: dict, out: Path) -> str:
    """What the recording did on the slotopt side: load, take the steps, save."""
    params = ck.parameters()
    opt = _optimizer(ck, params, spec)
    step = slotopt.Variable(ck.weights["global_step"].clone(), name="global_step") if spec["api"] == "v1" else None
    for g in grads:
        pairs = [(torch.from_numpy(g[n].copy()), p) for n, p in zip(ck.variable_names, params)]
        opt.apply_gradients(pairs, **({"global_step": step} if step is not None else {}))
    return ck.save(str(out) + os.sep, params, opt, **({"global_step": step} if step is not None else {}))


def _grads(arrays: Any, group: str, count: int, names: list[str]) -> list[dict]:
    return [{n: arrays[f"{group}/{s}/{n}"] for n in names} for s in range(count)]


def _bundle_prefix(written: str) -> str:
    return written if os.path.isfile(written + ".index") else os.path.join(written, "variables", "variables")


# ------------------------------------------------------------------------------------------------ TensorFlow replays
@pytest.mark.parametrize("case_id", CASES)
def test_tensorflow_continues_the_written_file_bit_for_bit(case_id, tmp_path):
    folder = WAY_BACK / case_id
    case = json.loads((folder / "case.json").read_text())
    arrays = np.load(folder / "arrays.npz")
    # What TensorFlow saw when it restored slotopt's file: no warning, objects matched as for the original, and its
    # continuation equal to TensorFlow running every step itself.
    assert case["tf_ran_every_step_equal"] is True
    assert case["warnings_restoring_written"] == case["warnings_restoring_original"] == []
    assert case.get("objects_matched_written") == case.get("objects_matched_original")
    assert case.get("after_restore_written") == case.get("after_restore_original")
    # The same N steps write the same bytes TensorFlow restored.
    ck = slotopt.load_tf_checkpoint(folder / case["load"])
    written = _steps(ck, folder / case["load"], _grads(arrays, "g1", case["N"], case["names"]), case["slotopt"],
                     tmp_path / "written")
    prefix = _bundle_prefix(written)
    assert os.path.relpath(prefix, tmp_path) == case["written"]
    assert {ext: _sha(prefix + ext) for ext in case["written_sha256"]} == case["written_sha256"]
    # slotopt continues its own file M steps: TensorFlow's final state, entry for entry.
    again = slotopt.load_tf_checkpoint(written)
    final = _bundle_prefix(_steps(again, Path(written), _grads(arrays, "g2", case["M"], case["names"]),
                                  case["slotopt"], tmp_path / "final"))
    bundle = TensorBundle(final)
    keys = [k[len("final/"):] for k in arrays.files if k.startswith("final/")]
    assert keys and set(keys) <= set(bundle.entries)
    for key in keys:
        ours = bundle.read(key)
        theirs = torch.from_numpy(np.array(arrays[f"final/{key}"]))
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), key


# ------------------------------------------------------------------------------------------------ round trips
def _fixtures() -> list[str]:
    out = ["migration/k_tf_ckpt_keras3_mlp_bn_adam", "migration/m_tf1_saver_adam", *TF_RUNS]
    return out


def _loaded(run: str) -> tuple[Any, list, Any]:
    if run.startswith("migration/"):
        ck = slotopt.load_tf_checkpoint(DATA / run)
        params = ck.parameters()
        return ck, params, ck.optimizer(params, optimizer=slotopt.Adam(0.01) if ck.kind == "keras3" else None)
    case, _ = _case(run)
    ck, _, build = _load(case)
    params = ck.parameters()
    return ck, params, build(params)


@pytest.mark.parametrize("run", _fixtures())
def test_read_write_read_is_the_identity(run, tmp_path, capsys):
    ck, params, opt = _loaded(run)
    if any(entry.slices for entry in TensorBundle(ck.path).entries.values()):
        # A limit kept (partitioned variables are read, not written): refused naming it, with nothing written.
        with pytest.raises(ValueError, match=r"partitioned variable 'emb'.*does not write partitioned"):
            ck.save(tmp_path, params, opt)
        assert os.listdir(tmp_path) == []
        return
    written = ck.save(tmp_path, params, opt)
    original, ours = TensorBundle(ck.path), TensorBundle(_bundle_prefix(written))
    assert sorted(original.entries) == sorted(ours.entries)
    for key, entry in original.entries.items():  # the same bytes: dtype, shape and CRC-32C of every entry
        mine = ours.entries[key]
        assert (mine.dtype, mine.shape, mine.size, mine.crc32c) == (entry.dtype, entry.shape, entry.size,
                                                                    entry.crc32c), key
    back = slotopt.load_tf_checkpoint(written)
    assert back.kind == ck.kind and back.variable_names == ck.variable_names and back.skipped == ck.skipped
    assert all(torch.equal(back.weights[n], ck.weights[n]) for n in ck.weights)
    capsys.readouterr()  # `slotopt inspect` shows it as the original, but for its path
    assert cli.main(["inspect", written]) == 0
    ours_shown = capsys.readouterr().out
    assert cli.main(["inspect", ck.path]) == 0
    assert ours_shown.splitlines()[1:] == capsys.readouterr().out.splitlines()[1:]


def _partitioned(run: str) -> bool:
    return "partitioned" in run  # (written back by TensorFlow only: test_read_write_read_is_the_identity)


@pytest.mark.parametrize("run", [r for r in TF_RUNS if not _partitioned(r)])
def test_a_file_written_mid_run_continues_as_tensorflow_did(run, tmp_path):
    """Two of the recorded TensorFlow steps in slotopt, write, read the written file, the other four: every weight
    after the last step is TensorFlow's."""
    case, arrays = _case(run)
    steps = len(case["steps"])

    def grads(s: int, params: list) -> list:
        out = []
        for i, p in enumerate(params):
            if f"step{s}/g/{i}/values" in arrays:
                out.append(slotopt.IndexedSlices(torch.from_numpy(arrays[f"step{s}/g/{i}/values"]),
                                                 torch.from_numpy(arrays[f"step{s}/g/{i}/indices"]), tuple(p.shape)))
            else:
                out.append(torch.from_numpy(arrays[f"step{s}/g/{i}"]))
        return out

    def run_steps(ck: Any, opt: Any, params: list, todo: range, step: Any) -> None:
        by_name = dict(zip(ck.variable_names, params))
        ordered = [by_name[t["name"].split(":")[0]] if t["name"].split(":")[0] in by_name else params[i]
                   for i, t in enumerate(case["trainable"])]
        for s in todo:
            one = step is not None and not isinstance(opt, slotopt.CompositeOptimizer)
            opt.apply_gradients(list(zip(grads(s, ordered), ordered)), **({"global_step": step} if one else {}))
            if step is not None and isinstance(opt, slotopt.CompositeOptimizer):
                step.add_(1)  # one global_step for the graph's several optimizers
        return ordered

    ck, _, build = _load(case)
    params = ck.parameters()
    opt = build(params)
    v1 = case["optimizer"]["api"].startswith("v1")
    step = slotopt.Variable(ck.weights["global_step"].clone(), name="global_step") if v1 else None
    run_steps(ck, opt, params, range(2), step)
    written = ck.save(str(tmp_path / "out") + os.sep, params, opt, **({"global_step": step} if v1 else {}))
    if v1:
        assert os.path.basename(written) == f"model.ckpt-{int(step)}"
    again = slotopt.load_tf_checkpoint(written)
    params2 = again.parameters()
    opt2 = _rebuild(again, params2, case)
    step2 = slotopt.Variable(again.weights["global_step"].clone(), name="global_step") if v1 else None
    ordered = run_steps(again, opt2, params2, range(2, steps), step2)
    for i, p in enumerate(ordered):
        assert torch.equal(p.detach(), torch.from_numpy(arrays[f"step{steps - 1}/w/{i}"])), (run, i)


def _rebuild(ck: Any, params: list, case: dict) -> Any:
    """The optimizer of ``case`` built on ``ck`` (the written file) as ``_load`` builds it on the original."""
    api = case["optimizer"]["api"]
    if api.startswith("v1"):
        return ck.optimizer(params)
    built = case["optimizer"]["constructed_with"]
    optimizer = [_constructed(p, slotopt.legacy) for p in built["parts"]] if api == "composite" else \
        _constructed(built, slotopt)
    return ck.optimizer(params, optimizer=optimizer)


def test_module_written_through_the_load_module_mapping(tmp_path):
    ck = slotopt.load_tf_checkpoint(DATA / "migration" / "k_tf_ckpt_keras3_mlp_bn_adam")
    module = torch.nn.ModuleDict({"hidden": torch.nn.Linear(8, 16), "bn": torch.nn.BatchNorm1d(16),
                                  "out": torch.nn.Linear(16, 4)})
    mapping = {"mlp/hidden/kernel": "hidden.weight", "mlp/hidden/bias": "hidden.bias", "mlp/bn/gamma": "bn.weight",
               "mlp/bn/beta": "bn.bias", "mlp/out/kernel": "out.weight", "mlp/out/bias": "out.bias"}
    opt = ck.load_module(module, mapping, optimizer=slotopt.Adam(0.01))
    torch.manual_seed(0)
    for _ in range(2):
        module.zero_grad()
        module["out"](module["bn"](module["hidden"](torch.randn(5, 8)))).square().sum().backward()
        opt.step()
    moving = torch.full((16,), 0.25)
    written = ck.save(tmp_path, module, opt, weights={"mlp/bn/moving_mean": moving})
    back = slotopt.load_tf_checkpoint(written)
    assert back.iterations == 7
    assert torch.equal(back.weights["mlp/hidden/kernel"], module["hidden"].weight.detach().T)
    assert torch.equal(back.weights["mlp/bn/moving_mean"], moving)
    momentum = next(v.value for v in back.optimizer_variables if v.name.endswith("mlp_hidden_kernel_momentum"))
    assert torch.equal(momentum, opt.variables[2].detach().T)  # slots back in Keras layout


def test_checkpoint_state_file_continues_the_numbering(tmp_path):
    shutil.copytree(DATA / "migration" / "k_tf_ckpt_keras3_mlp_bn_adam", tmp_path / "run")
    ck = slotopt.load_tf_checkpoint(tmp_path / "run")
    params = ck.parameters()
    opt = ck.optimizer(params, optimizer=slotopt.Adam(0.01))
    first = ck.save(tmp_path / "run", params, opt)
    again = slotopt.load_tf_checkpoint(tmp_path / "run")  # the state file names the new prefix
    assert os.path.basename(first) == "ckpt-2" and again.path == first
    p2 = again.parameters()
    second = again.save(tmp_path / "run", p2, again.optimizer(p2, optimizer=slotopt.Adam(0.01)))
    state = (tmp_path / "run" / "checkpoint").read_text()
    assert os.path.basename(second) == "ckpt-3"
    assert state.splitlines()[0] == 'model_checkpoint_path: "ckpt-3"'
    assert [line.split('"')[1] for line in state.splitlines() if line.startswith("all_model_checkpoint_paths")] == [
        "ckpt-1", "ckpt-2", "ckpt-3"]
    assert state.count("all_model_checkpoint_timestamps") == 3
    assert not [n for n in os.listdir(tmp_path / "run") if n.endswith(".tmp")]
    # Saved again from the same checkpoint: the next number, never a checkpoint replaced.
    assert os.path.basename(ck.save(tmp_path / "run", params, opt)) == "ckpt-4"


def test_a_tf1_name_taken_is_refused(tmp_path):
    shutil.copytree(DATA / "migration" / "m_tf1_saver_adam", tmp_path / "run")
    ck = slotopt.load_tf_checkpoint(tmp_path / "run")
    params = ck.parameters()
    opt = ck.optimizer(params)
    before = _tree(tmp_path / "run")
    with pytest.raises(ValueError, match="model.ckpt-5 already exists"):  # global_step not passed: the file read's
        ck.save(tmp_path / "run", params, opt)
    assert _tree(tmp_path / "run") == before
    assert os.path.basename(ck.save(tmp_path / "run", params, opt, global_step=9)) == "model.ckpt-9"


# ------------------------------------------------------------------------------------------------ refusals
def _k() -> tuple[Any, list, Any]:
    ck = slotopt.load_tf_checkpoint(DATA / "migration" / "k_tf_ckpt_keras3_mlp_bn_adam")
    params = ck.parameters()
    return ck, params, ck.optimizer(params, optimizer=slotopt.Adam(0.01))


def test_refusals_come_before_any_byte_is_written(tmp_path):
    target = tmp_path / "out"
    ck, params, opt = _k()
    refused = [
        (lambda: ck.save(target, params[:-1], opt), ValueError, "must hold 6 tensors"),
        (lambda: ck.save(target, [torch.zeros(3), *params[1:]], opt), ValueError, "'mlp/hidden/kernel'"),
        (lambda: ck.save(target, [params[0].double(), *params[1:]], opt), ValueError, "dtype"),
        (lambda: ck.save(target, params, slotopt.SGD(0.1)), TypeError, "slotopt.keras3.adam.Adam"),
        (lambda: ck.save(target, torch.nn.Linear(2, 2), opt), ValueError, "load_module"),
        (lambda: ck.save(target, params, opt, weights={"nope": torch.zeros(1)}), ValueError, "'nope'"),
        (lambda: ck.save(target, params, opt, weights={"mlp/bn/moving_mean": torch.zeros(3)}), ValueError,
         "moving_mean"),
        (lambda: ck.save(target, params, opt, global_step=3), ValueError, "global_step"),
    ]
    for call, kind, words in refused:
        with pytest.raises(kind, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            call()
        assert not target.exists()
    # An optimizer whose slot layout changed since its build (a slot replaced by one of another shape).
    opt.variables[2].data = torch.zeros(3)
    with pytest.raises(ValueError, match="mlp_hidden_kernel_momentum"):
        ck.save(target, params, opt)
    assert not target.exists()


def test_a_part_missing_refuses(tmp_path):
    shutil.copytree(DATA / "migration" / "m_tf1_saver_adam", tmp_path / "run")
    ck = slotopt.load_tf_checkpoint(tmp_path / "run")
    params = ck.parameters()
    opt = ck.optimizer(params)
    os.remove(ck.path + ".data-00000-of-00001")  # the file read lost its data: its other entries cannot be copied
    with pytest.raises(TFCheckpointError, match="data shard missing"):
        ck.save(tmp_path / "out", params, opt)
    assert not (tmp_path / "out").exists()
    tfrs = slotopt.load_tf_checkpoint(DATA / "migration2" / "c11_tfrs_ranking_composite" / "ckpts")
    p = tfrs.parameters()
    composite = tfrs.optimizer(p, optimizer=[slotopt.legacy.Adagrad(0.1), slotopt.legacy.Adam(0.01)])
    with pytest.raises(TypeError, match="2 optimizers"):
        tfrs.save(tmp_path / "out", p, composite.optimizers[0])
    with pytest.raises(ValueError, match="no optimizer was built"):
        slotopt.load_tf_checkpoint(DATA / "migration" / "m_tf1_saver_adam").save(tmp_path / "out", params, opt)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ faults
def _tree(folder: Path) -> dict[Path, bytes]:
    """Every file under ``folder`` (temporary ones included) with its bytes."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("source", ["migration2/c09a_tfckpt_keras3_guide_step_iterator", "migration/m_tf1_saver_adam",
                                    "migration3/f3_savedmodel_directory_keras3_adam"])
def test_a_failure_at_any_write_call_leaves_the_target_unchanged(source, tmp_path, monkeypatch):
    run = tmp_path / "run"
    if source.startswith("migration/"):
        shutil.copytree(DATA / source, run)
        ck = slotopt.load_tf_checkpoint(run)
        params = ck.parameters()
        opt = ck.optimizer(params)
    else:
        case, _ = _case(source)
        shutil.copytree(DATA / source / case["load"], run)
        ck = slotopt.load_tf_checkpoint(run)
        params = ck.parameters()
        opt = _rebuild(ck, params, case)
    extra = {"global_step": 9} if ck.kind == "v1" else {}  # a new name (model.ckpt-5 is the file read's)
    saved_model = ck.path.endswith(os.path.join("variables", "variables"))
    target = run if not saved_model else tmp_path / "served"
    if saved_model:  # an earlier version at the target, to be kept whole
        ck.save(target, params, opt, **extra)
    calls = {"n": 0, "fail_at": None}
    real = {name: getattr(bundle_writer, name) for name in ("_write_tensor", "_copy_entry")}
    real_emit, real_copy, real_fsync = bundle_writer._Table._emit, tf_write._copy_file, staging._fsync

    def counted(fn):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == calls["fail_at"]:  # an exception, or Ctrl-C, every other call
                raise (KeyboardInterrupt if calls["n"] % 2 else _Boom)(f"injected at call {calls['n']}")
            return fn(*args, **kwargs)
        return wrapper

    for name, fn in real.items():
        monkeypatch.setattr(bundle_writer, name, counted(fn))
    monkeypatch.setattr(bundle_writer._Table, "_emit", counted(real_emit))
    monkeypatch.setattr(tf_write, "_copy_file", counted(real_copy))
    monkeypatch.setattr(staging, "_fsync", counted(real_fsync))
    before = _tree(target)
    ck.save(tmp_path / "probe" if not saved_model else tmp_path / "probe_sm", params, opt, **extra)  # count the calls
    total = calls["n"]
    assert total > 5
    for k in range(1, total + 1):
        calls["n"], calls["fail_at"] = 0, k
        with pytest.raises((_Boom, KeyboardInterrupt)):
            ck.save(target, params, opt, **extra)
        assert _tree(target) == before, k
    # A temporary file cut short after it was written: the read-back check refuses it, nothing is renamed.
    calls["fail_at"] = None
    real_write = bundle_writer.write_bundle

    def truncated(index, data, entries):
        out = real_write(index, data, entries)
        data.flush()
        data.truncate(max(0, data.tell() - 3))
        return out

    monkeypatch.setattr(tf_write, "write_bundle", truncated)
    with pytest.raises(TFCheckpointError, match="does not read back as written"):
        ck.save(target, params, opt, **extra)
    assert _tree(target) == before


# ------------------------------------------------------------------------------------------------ the writer
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8, torch.bool, torch.complex64]


@st.composite
def _tensors(draw: Any) -> dict[str, torch.Tensor]:
    count = draw(st.integers(0, 12))
    keys = draw(st.lists(st.text(min_size=0, max_size=40).filter(lambda k: k != "" and "\x00" not in k),
                         min_size=count, max_size=count, unique=True))
    out = {}
    for key in keys:
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        dtype = draw(st.sampled_from(_DTYPES))
        seed = draw(st.integers(0, 2**31))
        gen = torch.Generator().manual_seed(seed)
        value = (torch.randn(shape, generator=gen) * 50).to(dtype) if dtype != torch.bool else \
            torch.rand(shape, generator=gen) > 0.5
        view = draw(st.sampled_from(["as_is", "transposed", "strided"]))
        if view == "transposed" and value.dim() >= 2:
            value = value.transpose(0, 1).contiguous().transpose(0, 1)
        elif view == "strided" and value.dim() >= 1:
            value = torch.cat([value, value], dim=0)[::2]
        out[key] = value
    return out


@settings(max_examples=40, deadline=None)
@given(tensors=_tensors(), chunk_log=st.integers(6, 16))
def test_the_bundle_writer_reads_back_whatever_it_is_given(tensors, chunk_log, tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("fuzz") / "ckpt")
    old = bundle_writer._CHUNK
    bundle_writer._CHUNK = 1 << chunk_log  # small chunks: views are cut into many blocks of rows
    try:
        with open(prefix + ".data-00000-of-00001", "wb") as data, open(prefix + ".index", "wb") as index:
            entries = bundle_writer.write_bundle(index, data, list(tensors.items()))
    finally:
        bundle_writer._CHUNK = old
    bundle_writer.verify_bundle(prefix + ".index", prefix + ".data-00000-of-00001", entries)
    if not tensors:
        return
    bundle = TensorBundle(prefix)
    assert sorted(bundle.entries) == sorted(tensors)
    for key, value in tensors.items():
        got = bundle.read(key)
        assert got.dtype == value.dtype and tuple(got.shape) == tuple(value.shape)
        assert torch.equal(got.view(torch.uint8) if got.dtype == torch.bool else got,
                           value.contiguous().view(torch.uint8) if value.dtype == torch.bool else value), key
