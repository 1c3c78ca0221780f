"""Records ``tests/data/way_back_keras``: Keras (3.15.1, and tf-keras 2.21 for the legacy ``.h5``) continuing files that
slotopt wrote, so the suite can check that slotopt's way back gives Keras the same bits as if it had run the steps.

For each case: Keras builds a small model, trains it ``BEFORE`` steps with seeded gradients
(``optimizer.apply``/``apply_gradients``: no forward pass, so the bits are the optimizer's alone) and saves it
(``original.*``). Then, in this process, slotopt (imported from this worktree's ``src``) reads that file, takes
``SLOTOPT`` steps with recorded gradients and writes the file back (``ckpt.save``); Keras restores the written file
the way users restore one (``keras.saving.load_model`` / ``model.load_weights`` / ``tf_keras.models.load_model``)
with every warning recorded (there must be none: a "Skipping variable loading" would mean a fresh optimizer), and
continues ``AFTER`` steps. Recorded in ``arrays.npz``: the gradients of both parts, what Keras restored (trainable
and non-trainable variables, every optimizer variable) and what it held after continuing.

TensorFlow is never a dependency of slotopt or of its tests: run this in the TF environment, with torch there::

    /work/tfvenv/bin/pip install torch==2.13.0
    /work/tfvenv/bin/python tools/record_way_back_keras.py          # every case
    /work/tfvenv/bin/python tools/record_way_back_keras.py CASE     # one case
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "tests" / "data" / "way_back_keras"
BEFORE, SLOTOPT, AFTER = 3, 3, 3

import numpy as np  # noqa: E402


def _grads(rng: np.random.Generator, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [(rng.standard_normal(s) * 0.1).astype(np.float32) for s in shapes]


# ------------------------------------------------------------------------------------------------ models
def _keras3_case(name: str):
    import keras

    keras.utils.set_random_seed(7)
    if name == "k3_dense_bn_adam":
        inputs = keras.Input((6,))
        h = keras.layers.Dense(8, name="hidden")(inputs)
        h = keras.layers.BatchNormalization(name="bn")(h)
        model = keras.Model(inputs, keras.layers.Dense(3, name="out")(h))
        opt = keras.optimizers.Adam(1e-2)
        ext = ".keras"
    elif name == "k3_embedding_lstm_sgd_momentum":
        model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 4, name="emb"),
                                  keras.layers.LSTM(6, name="lstm"), keras.layers.Dense(2, name="out")])
        opt = keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)
        ext = ".keras"
    elif name == "k3_adamw_ema":
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, name="a"), keras.layers.Dense(2, name="b")])
        opt = keras.optimizers.AdamW(3e-3, weight_decay=0.01, use_ema=True, ema_momentum=0.9)
        ext = ".keras"
    elif name == "k3_loss_scale_adam":
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, name="a"), keras.layers.Dense(2, name="b")])
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=1024.0,
                                                  dynamic_growth_steps=2)
        ext = ".keras"
    elif name == "k3_sgd_accumulate_weights":
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, name="a"), keras.layers.Dense(2, name="b")])
        opt = keras.optimizers.SGD(0.1, momentum=0.5, gradient_accumulation_steps=2)
        ext = ".weights.h5"
    else:
        raise KeyError(name)
    model.compile(optimizer=opt, loss="mse")
    return model, opt, ext


def _legacy_case(name: str):
    import tf_keras

    tf_keras.utils.set_random_seed(7)
    model = tf_keras.Sequential([tf_keras.Input((6,)), tf_keras.layers.Dense(8, name="hidden"),
                                 tf_keras.layers.Dense(3, name="out")])
    opt = tf_keras.optimizers.legacy.Adam(1e-2, amsgrad=True)
    model.compile(optimizer=opt, loss="mse")
    return model, opt, ".h5"


KERAS3 = ["k3_dense_bn_adam", "k3_embedding_lstm_sgd_momentum", "k3_adamw_ema", "k3_loss_scale_adam",
          "k3_sgd_accumulate_weights"]
LEGACY = ["legacy_adam_amsgrad"]


def _apply(opt, model, grads, legacy: bool) -> None:
    import tensorflow as tf

    pairs = [(tf.constant(g), v) for g, v in zip(grads, model.trainable_variables)]
    if legacy:
        opt.apply_gradients(pairs)
    else:
        opt.apply([g for g, _ in pairs], [v for _, v in pairs])


def _non_trainable(model) -> list:
    # A SeedGenerator's state (an LSTM's dropout seed) is a variable Keras does not save: not the file's.
    return [v for v in model.non_trainable_variables if "seed_generator" not in str(getattr(v, "path", v.name))]


def _optimizer_values(opt, legacy: bool) -> list[np.ndarray]:
    return [np.array(w) for w in opt.get_weights()] if legacy else [np.array(v.numpy()) for v in opt.variables]


# ------------------------------------------------------------------------------------------------ recording
def record(name: str) -> dict:
    import torch

    import slotopt

    legacy = name in LEGACY
    model, opt, ext = (_legacy_case if legacy else _keras3_case)(name)
    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(sum(map(ord, name)))
    shapes = [tuple(v.shape) for v in model.trainable_variables]
    arrays: dict[str, np.ndarray] = {}
    for _ in range(BEFORE):
        _apply(opt, model, _grads(rng, shapes), legacy)
    original = folder / f"original{ext}"
    load_kwargs = {}
    if ext == ".weights.h5":
        model.save_weights(original)
        config = {"class_name": model.__class__.__name__, "config": model.get_config(),
                  "compile_config": model.get_compile_config()}
        (folder / "config.json").write_text(json.dumps(keras_serializable(config)))
        load_kwargs = {"config": str(folder / "config.json")}
    else:
        model.save(original)

    # slotopt's part: read, train, write back
    ckpt = slotopt.load_keras_checkpoint(original, **load_kwargs)
    params = ckpt.parameters()
    sopt = ckpt.optimizer(params)
    for s in range(SLOTOPT):
        grads = _grads(rng, shapes)
        for i, g in enumerate(grads):
            arrays[f"slotopt/{s}/{i}"] = g
        sopt.apply_gradients(zip([torch.from_numpy(g) for g in grads], params))
    written = folder / f"written{ext}"
    ckpt.save(written, params, sopt)

    # Keras's part: restore the written file, continue
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if legacy:
            import tf_keras
            restored = tf_keras.models.load_model(written)
            ropt = restored.optimizer
        elif ext == ".weights.h5":
            restored, ropt, _ = _keras3_case(name)
            ropt.build(restored.trainable_variables)
            restored.load_weights(written)
        else:
            import keras
            restored = keras.saving.load_model(written)
            ropt = restored.optimizer
    caught = [str(w.message) for w in seen]
    for prefix, model_ in (("restored", restored),):
        for i, v in enumerate(model_.trainable_variables):
            arrays[f"{prefix}/t/{i}"] = np.array(v.numpy())
        for i, v in enumerate(_non_trainable(model_)):
            arrays[f"{prefix}/n/{i}"] = np.array(v.numpy())
    for i, v in enumerate(_optimizer_values(ropt, legacy)):
        arrays[f"restored/o/{i}"] = v
    for s in range(AFTER):
        grads = _grads(rng, shapes)
        for i, g in enumerate(grads):
            arrays[f"keras/{s}/{i}"] = g
        _apply(ropt, restored, grads, legacy)
    for i, v in enumerate(restored.trainable_variables):
        arrays[f"final/t/{i}"] = np.array(v.numpy())
    for i, v in enumerate(_non_trainable(restored)):
        arrays[f"final/n/{i}"] = np.array(v.numpy())
    for i, v in enumerate(_optimizer_values(ropt, legacy)):
        arrays[f"final/o/{i}"] = v
    written.unlink()  # the suite writes its own and compares it with what Keras restored from this one
    case = {"id": name, "format": ext, "legacy": legacy, "load_kwargs": {"config": "config.json"} if load_kwargs
            else {}, "steps": {"before": BEFORE, "slotopt": SLOTOPT, "after": AFTER}, "keras_warnings": caught,
            "optimizer": type(opt).__name__}
    (folder / "case.json").write_text(json.dumps(case, indent=1) + "\n")
    np.savez_compressed(folder / "arrays.npz", **arrays)
    return case


def keras_serializable(value):
    return json.loads(json.dumps(value, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def main(argv: list[str]) -> None:
    names = argv or KERAS3 + LEGACY
    for name in names:
        case = record(name)
        print(name, "warnings:", case["keras_warnings"])


if __name__ == "__main__":
    main(sys.argv[1:])
