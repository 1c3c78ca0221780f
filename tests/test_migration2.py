"""The six migration2 runs (tests/data/migration2, recorded by TensorFlow 2.21 / Keras 3.15.1 / tf-keras 2.21 /
TFRS 0.7.7; the folder's README is the format): each file loads without TensorFlow, nothing of the training state
dropped, and continues bit for bit: every trainable variable and every optimizer variable after every step, then
the iteration count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import slotopt

pytest.importorskip("h5py", reason="the `keras` extra (h5py) is not installed")

DATA = Path(__file__).parent / "data"
# migration2: recorded for the issue; migration3: this repository's own (tools/record_migration_fixtures.py).
RUNS = sorted(f"{d}/{p.name}" for d in ("migration2", "migration3") for p in (DATA / d).iterdir()
              if (p / "case.json").is_file())
# tf-keras 2.11+ names its slots ``m``/``v``/``vhat``; the Keras 3 optimizer slotopt continues it with names them
# ``momentum``/``velocity``/``velocity_hat``.
_ALIASES = {"m": "momentum", "v": "velocity", "vhat": "velocity_hat"}


def _case(run: str) -> tuple[dict, Any]:
    folder = DATA / run
    case = json.loads((folder / "case.json").read_text())
    case["folder"] = folder
    return case, np.load(folder / "arrays.npz")


def _constructed(spec: dict, generation: Any) -> Any:
    return getattr(generation, spec["class_name"])(**spec["kwargs"])


def _load(case: dict):
    """What a user does: load the file, then build the optimizer (passing it where the file does not hold it)."""
    path = case["folder"] / case["load"]
    if case["format"].startswith("keras3") or case["format"] == "tfkeras_file":
        ck = slotopt.load_keras_checkpoint(path, **case["load_kwargs"])
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
