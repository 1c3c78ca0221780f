"""The six migration2 runs (tests/data/migration2, recorded by TensorFlow 2.21 / Keras 3.15.1 / tf-keras 2.21 /
TFRS 0.7.7; the folder's README is the format): each file loads without TensorFlow, nothing of the training state
dropped, and continues bit for bit: every trainable variable and every optimizer variable after every step, then
the iteration count.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import slotopt
from slotopt.engine.naming import snake_case

pytest.importorskip("h5py", reason="the `keras` extra (h5py) is not installed")

DATA = Path(__file__).parents[1] / "data"
# migration2: recorded for the issue; migration3: this repository's own (tools/record_migration_fixtures.py).
RUNS = sorted(f"{d}/{p.name}" for d in ("migration2", "migration3", "migration4") for p in (DATA / d).iterdir()
              if (p / "case.json").is_file())
# tf-keras 2.11+ names its slots ``m``/``v``/``vhat``; the Keras 3 optimizer slotopt continues it with names them
# ``momentum``/``velocity``/``velocity_hat``.
_ALIASES = {"m": "momentum", "v": "velocity", "vhat": "velocity_hat", "u": "norm"}


def _case(run: str) -> tuple[dict, Any]:
    folder = DATA / run
    case = json.loads((folder / "case.json").read_text())
    case["folder"] = folder
    return case, np.load(folder / "arrays.npz")


def _constructed(spec: dict, generation: Any) -> Any:
    kwargs = dict(spec["kwargs"])
    if isinstance(kwargs.get("inner_optimizer"), dict):  # a LossScaleOptimizer around a constructed optimizer
        kwargs["inner_optimizer"] = _constructed(kwargs["inner_optimizer"], generation)
    if generation is slotopt:
        # Named as in the recorded run's fresh process (an unnamed Keras 3 optimizer is ``adam_<n>`` once others
        # exist): a LossScaleOptimizer's and its inner optimizer's own variables are told apart by these names.
        kwargs.setdefault("name", snake_case(spec["class_name"]))
    return getattr(generation, spec["class_name"])(**kwargs)


def _load(case: dict):
    """What a user does: load the file, then build the optimizer (passing it where the file does not hold it)."""
    path = case["folder"] / case["load"]
    if case["format"].startswith("keras3") or case["format"] == "tfkeras_file":
        paths = {k: case["folder"] / v for k, v in case.get("load_kwargs_paths", {}).items()}  # (config=...)
        ck = slotopt.load_keras_checkpoint(path, **case["load_kwargs"], **paths)
        return ck, ck.entries, lambda params: ck.optimizer(params)
    ck = slotopt.load_tf_checkpoint(path, **case["load_kwargs"])
    built = case["optimizer"]["constructed_with"]
    if case["optimizer"]["api"].startswith("v1"):
        # The .meta graph names each optimizer's class and hyperparameters (several: a CompositeOptimizer).
        return ck, ck.keys, lambda params: ck.optimizer(params)
    if case["optimizer"]["api"] == "composite":  # TFRS: tf.keras legacy parts
        optimizer: Any = [_constructed(p, slotopt.legacy) for p in built["parts"]]
    else:  # a Keras 3 optimizer, or tf-keras 2.11+'s, which slotopt continues with the Keras 3 class
        optimizer = _constructed(built, slotopt)
    return ck, ck.keys, lambda params: ck.optimizer(params, optimizer=optimizer)


def _live(opt: Any, names: list[str], parts: int, params: list[torch.Tensor]) -> dict[tuple, torch.Tensor]:
    """The built optimizer's variables keyed ``(part, owner index or None, slot or own name)``."""
    out: dict[tuple, torch.Tensor] = {}
    subs = opt.optimizers if parts else [opt]
    flat = sorted(((n.replace("/", "_"), i) for i, n in enumerate(names)), key=lambda x: -len(x[0]))
    for part, sub in enumerate(subs):
        if isinstance(sub, slotopt.v1.Optimizer):
            for slot in sub.get_slot_names():
                for i, p in enumerate(params):
                    if sub.get_slot(p, slot) is not None:
                        out[(part if parts else None, i, slot)] = sub.get_slot(p, slot)
            for v in sub._non_slot_variables():
                out[(part if parts else None, None, v.name)] = v
            continue
        if isinstance(sub, slotopt.legacy.Optimizer):
            for w in sub.weights:
                rest = str(w.path).split("/", 1)[1]
                owner, _, slot = rest.rpartition("/")
                out[(part if parts else None, names.index(owner) if owner else None, slot)] = w
            continue
        for v in sub.variables:
            rest = str(v.path).split("/", 1)[1]
            hit = next(((i, rest[len(f) + 1:]) for f, i in flat if rest.startswith(f + "_")), (None, rest))
            out[(None, *hit)] = v
            if hit[0] is None:  # a LossScaleOptimizer's and its inner optimizer's own variables, told apart
                out[(None, None, str(v.path))] = v
    return out


@pytest.mark.parametrize("run", RUNS)
def test_run_loads_everything_and_continues_bit_for_bit(run):
    case, arrays = _case(run)
    ck, keys, build = _load(case)
    trainable = case["trainable"]
    assert len(ck.variable_names) == len(trainable)
    for i, (name, t) in enumerate(zip(ck.variable_names, trainable)):
        assert "file_keys" not in t or keys[name] in t["file_keys"], (name, t)
        assert torch.equal(ck.weights[name], torch.from_numpy(arrays[f"saved/w/{i}"]))
    for i, t in enumerate(case["non_trainable"]):
        name = next(n for n, k in keys.items() if k in t["file_keys"]) if "file_keys" in t else t["name"]
        assert torch.equal(ck.weights[name], torch.from_numpy(arrays[f"saved/nt/{i}"]))
    params = ck.parameters()
    opt = build(params)
    parts = len(case["optimizer"].get("parts") or []) or (
        len(case["optimizer"]["constructed_with"]) if case["optimizer"]["api"] == "v1_composite" else 0)
    live = _live(opt, ck.variable_names, parts, params)
    v1 = case["optimizer"]["api"].startswith("v1")
    global_step = slotopt.Variable(ck.weights["global_step"].clone(), name="global_step") if v1 else None
    expected_keys = []
    for v in case["optimizer_variables"]:
        local = v["local"] if parts or case["optimizer"]["api"] != "tfkeras_new" else _ALIASES.get(v["local"],
                                                                                                   v["local"])
        expected_keys.append((v.get("part") if parts else None, v["owner"], local))
    # An optimizer's own variables are keyed by their path where the file names them (a LossScaleOptimizer's and its
    # inner optimizer's), else by their name in the optimizer (a constructed optimizer's scope is its own).
    expected_keys = [k if k in live or k[1] is not None else (k[0], None, k[2].split("/", 1)[-1])
                     for k in expected_keys]
    assert all(k in live for k in expected_keys), (sorted(live, key=str), expected_keys)
    for j, key in enumerate(expected_keys):  # the state as loaded
        assert torch.equal(live[key].detach().cpu(), torch.from_numpy(arrays[f"saved/opt/{j}"])), key

    for s, step in enumerate(case["steps"]):
        grads = []
        for i, kind in enumerate(step["grads"]):
            if kind == "sparse":
                grads.append(slotopt.IndexedSlices(torch.from_numpy(arrays[f"step{s}/g/{i}/values"]),
                                                   torch.from_numpy(arrays[f"step{s}/g/{i}/indices"]),
                                                   tuple(params[i].shape)))
            else:
                grads.append(None if kind is None else torch.from_numpy(arrays[f"step{s}/g/{i}"]))
        pairs = [(g, p) for g, p in zip(grads, params) if g is not None]
        if v1 and parts:  # the graph's one global_step: counted by the caller (a composite has no global_step)
            opt.apply_gradients(pairs)
            global_step.add_(1)
        elif v1:
            opt.apply_gradients(pairs, global_step=global_step)
        else:
            opt.apply_gradients(pairs)
        for i, p in enumerate(params):
            assert torch.equal(p.detach(), torch.from_numpy(arrays[f"step{s}/w/{i}"])), (s, ck.variable_names[i])
        for j, key in enumerate(expected_keys):
            assert torch.equal(live[key].detach(), torch.from_numpy(arrays[f"step{s}/opt/{j}"])), (s, key)
        iterations = step["iterations"]
        if v1:
            assert int(global_step) == iterations
        elif parts:
            assert [int(o.iterations) for o in opt.optimizers] == iterations
        else:
            assert int(opt.iterations) == iterations


# ------------------------------------------------------------------------------------------- beyond the replays
def _subclassed(path: Path, groups: dict[str, list[np.ndarray]], names: dict[str, str]) -> Path:
    """A Keras 3 ``.keras`` file of a subclassed model (config without layers) holding ``groups`` (HDF5 group →
    its variables), trained one step of Adam on those variables in ``names`` order (the model's)."""
    import io
    import zipfile

    import h5py

    order = list(names)
    opt = slotopt.Adam(0.01)
    tensors = [torch.tensor(a) for g in order for a in groups[g]]  # copies: the file keeps the values before
    opt.build(tensors)
    opt.apply_gradients(zip([torch.full_like(t, float(i + 1)) for i, t in enumerate(tensors)], tensors))
    blob = io.BytesIO()
    with h5py.File(blob, "w") as f:
        for group, arrays in groups.items():
            f.create_group(f"{group}/vars").attrs["name"] = names[group]
            for i, a in enumerate(arrays):
                f[f"{group}/vars/{i}"] = a
        f.create_group("vars").attrs["name"] = "net"
        for i, value in enumerate(opt.get_weights()):
            f[f"optimizer/vars/{i}"] = value
    config = {"module": "mine", "class_name": "Net", "registered_name": "mine>Net", "config": {"name": "net"},
              "compile_config": {"optimizer": slotopt.serialize(opt)}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("model.weights.h5", blob.getvalue())
    return path


def test_a_subclassed_models_order_comes_from_the_optimizer_state_and_the_files_numbering(tmp_path):
    w = np.ones((3, 2), np.float32)
    # Attribute ``zeta`` (written first, sorted by name) is the model's second layer: its slots say so.
    path = _subclassed(tmp_path / "a.keras", {"zeta": [np.ones((4,), np.float32)], "layers/dense": [w, w[0]]},
                       {"layers/dense": "first", "zeta": "second"})
    ck = slotopt.load_keras_checkpoint(path)
    assert ck.variable_names == ["first/kernel", "first/bias", "second/vars/0"]
    assert ck.layouts["first/kernel"] == "dense_kernel" and ck.layouts["second/vars/0"] == "as_is"
    # Two Dense layers of one shape: ``dense`` comes before ``dense_1`` in the model's layers list.
    path = _subclassed(tmp_path / "b.keras", {"layers/dense": [w, w[0]], "layers/dense_1": [w * 2, w[0] * 2]},
                       {"layers/dense": "a", "layers/dense_1": "b"})
    ck = slotopt.load_keras_checkpoint(path)
    assert ck.variable_names == ["a/kernel", "a/bias", "b/kernel", "b/bias"]
    assert torch.equal(ck.weights["b/kernel"], torch.full((3, 2), 2.0))
    # Adam's first moment after one step of gradient j + 1: the slots of ``b`` are those of gradients 3 and 4.
    assert np.array_equal(ck.optimizer_state[6], np.full((3, 2), np.float32(0.1) * 3, np.float32))


def test_a_subclassed_model_whose_layer_order_is_ambiguous_is_refused_naming_the_layers(tmp_path):
    v = np.ones((3,), np.float32)
    path = _subclassed(tmp_path / "c.keras", {"left": [v], "right": [v * 2]}, {"left": "left", "right": "right"})
    with pytest.raises(slotopt.io.CheckpointFormatError, match=r"layers \['left', 'right'\] fit the saved "
                                                                r"optimizer state in more than one order"):
        slotopt.load_keras_checkpoint(path)


def test_what_is_not_training_state_is_listed_and_the_composite_checks_every_part_first(capsys):
    from slotopt.cli import command as cli

    folder = DATA / "migration2" / "c09a_tfckpt_keras3_guide_step_iterator" / "ckpts"
    ck = slotopt.load_tf_checkpoint(folder)
    assert "variant" in ck.skipped["iterator/.ATTRIBUTES/ITERATOR_STATE"]
    assert "save count" in ck.skipped["save_counter/.ATTRIBUTES/VARIABLE_VALUE"]
    assert int(ck.weights["step"]) == 7 and ck.iterations == 6  # the guide's step counter: a variable like any
    assert cli.main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "skipped (2):" in out and "iterator/.ATTRIBUTES/ITERATOR_STATE" in out
    assert re.search(r"optimizer/_variables/2/\S+ +-> +adam/enc_kernel_momentum +slot momentum of enc/kernel", out)

    tfrs = slotopt.load_tf_checkpoint(DATA / "migration2" / "c11_tfrs_ranking_composite" / "ckpts")
    params = tfrs.parameters()
    adagrad, wrong = slotopt.legacy.Adagrad(0.1), slotopt.legacy.SGD(0.01)
    with pytest.raises(ValueError, match="holds 2 optimizers"):
        tfrs.optimizer(params, optimizer=[adagrad])
    with pytest.raises(ValueError, match="holds 8 slots, a SGD has 0"):
        tfrs.optimizer(params, optimizer=[adagrad, wrong])
    assert not adagrad.weights  # the first part was checked, not built


def test_inspect_names_every_part_of_a_graph_with_several_optimizers(capsys):
    from slotopt.cli import command as cli

    assert cli.main(["inspect", str(DATA / "migration3" / "f4_tf1_wide_deep_adagrad_adam")]) == 0
    out = capsys.readouterr().out
    assert "2 optimizers, the parts below" in out
    assert "part 0: TF1 train.Optimizer, name 'Adagrad' (slotopt.v1.AdagradOptimizer" in out
    assert "part 1: TF1 train.Optimizer, name 'Adam' (slotopt.v1.AdamOptimizer" in out
    assert re.search(r"deep/w1/Adam_1 +-> +deep/w1/Adam_1 +slot Adam_1 of deep/w1", out)
