"""Records the fixtures of ``tests/data/migration3`` with real TensorFlow: small training files of the kinds users
have (a SavedModel directory, a Functional model with a registered custom layer, a Keras 3 ``mixed_float16`` run,
a TF1 graph with two optimizers, a TF1 graph with sparse Adam, tf-keras 2.11+'s optimizer in ``.h5``), each trained
a few steps, saved the way users save, then continued 6 steps through ``apply_gradients`` with the gradients and
every weight and optimizer variable recorded after each step, in the format of ``migration2`` (its README).

TensorFlow is never a dependency of slotopt or of its tests: run this in a separate environment::

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 keras==3.15.1
    /tmp/tfvenv/bin/python tools/record_migration_fixtures.py            # every case, one process each
    /tmp/tfvenv/bin/python tools/record_migration_fixtures.py CASE       # one case

Gradients are drawn from a seeded NumPy generator (what TensorFlow does with them is what is recorded).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "migration3"
STEPS = 6


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _write(case_id: str, case: dict, arrays: dict) -> None:
    folder = OUT / case_id
    case.update({"id": case_id, "load_kwargs": case.get("load_kwargs", {})})
    (folder / "case.json").write_text(json.dumps(case, indent=1, default=float) + "\n")
    np.savez_compressed(folder / "arrays.npz", **arrays)


def _fresh(case_id: str) -> Path:
    folder = OUT / case_id
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# ------------------------------------------------------------------------------------------------ Keras 3
def _keras3_owner(path: str, names: list[str]) -> tuple:
    rest = path.rpartition("/")[2]  # a LossScaleOptimizer's inner slots have a longer scope
    for flat, i in sorted(((n.replace("/", "_"), i) for i, n in enumerate(names)), key=lambda x: -len(x[0])):
        if rest.startswith(flat + "_"):
            return i, rest[len(flat) + 1:]
    return None, path


def _keras3_continue(case: dict, arrays: dict, model, optimizer, seed: int, sparse: tuple = ()) -> None:
    import tensorflow as tf

    variables = model.trainable_variables
    names = [v.path for v in variables]
    case["trainable"] = [{"name": v.path, "shape": list(v.shape), "dtype": v.dtype} for v in variables]
    case["non_trainable"] = [{"name": v.path, "shape": list(v.shape), "dtype": v.dtype}
                             for v in model.non_trainable_variables]
    opt_vars = optimizer.variables
    case["optimizer_variables"] = []
    for v in opt_vars:
        owner, local = _keras3_owner(v.path, names)
        case["optimizer_variables"].append({"name": v.path, "owner": owner, "local": local, "part": None})
    for i, v in enumerate(variables):
        arrays[f"saved/w/{i}"] = v.numpy()
    for i, v in enumerate(model.non_trainable_variables):
        arrays[f"saved/nt/{i}"] = v.numpy()
    for j, v in enumerate(opt_vars):
        arrays[f"saved/opt/{j}"] = np.asarray(v.numpy())
    rng = _rng(seed)
    case["steps"] = []
    scale = case.get("gradient_scale")
    for s in range(STEPS):
        grads, kinds = [], []
        for i, v in enumerate(variables):
            if i in sparse:
                idx = rng.integers(0, v.shape[0], size=5).astype(np.int32)
                vals = rng.standard_normal((5, *v.shape[1:])).astype(np.float32)
                grads.append(tf.IndexedSlices(tf.constant(vals), tf.constant(idx), tf.constant(v.shape)))
                arrays[f"step{s}/g/{i}/indices"], arrays[f"step{s}/g/{i}/values"] = idx, vals
                kinds.append("sparse")
                continue
            g = rng.standard_normal(v.shape).astype(np.float32) * 0.1
            if scale:
                g = g * float(optimizer.dynamic_scale.numpy())
            grads.append(tf.constant(g))
            arrays[f"step{s}/g/{i}"] = g
            kinds.append("dense")
        optimizer.apply_gradients(zip(grads, variables))
        for i, v in enumerate(variables):
            arrays[f"step{s}/w/{i}"] = v.numpy()
        for j, v in enumerate(opt_vars):
            arrays[f"step{s}/opt/{j}"] = np.asarray(v.numpy())
        case["steps"].append({"grads": kinds, "iterations": int(optimizer.iterations.numpy())})
    case["iterations_after"] = int(optimizer.iterations.numpy())


def _fit(model, shape, outputs, seed: int) -> None:
    rng = _rng(seed)
    x = rng.standard_normal((32, *shape)).astype(np.float32)
    y = rng.standard_normal((32, outputs)).astype(np.float32)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)


def case_k3_functional_custom_layer() -> None:
    import keras

    @keras.saving.register_keras_serializable(package="fixtures")
    class Scale(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), name="w")
            self.s = self.add_weight(shape=(self.units,), initializer="ones", name="s")

        def call(self, x):
            return keras.ops.matmul(x, self.w) * self.s

        def get_config(self):
            return {**super().get_config(), "units": self.units}

    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    h = keras.layers.Dense(6, name="pre")(inputs)
    h = Scale(4, name="custom")(h)
    outputs = keras.layers.Dense(2, name="head")(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    _fit(model, (5,), 2, 1)
    folder = _fresh("f1_keras3_functional_custom_layer_adam")
    model.save(folder / "model.keras")
    restored = keras.models.load_model(folder / "model.keras")
    case = {"title": "Functional model with a registered custom layer (add_weight), Adam", "format": "keras3_keras",
            "load": "model.keras", "optimizer": {"api": "keras3", "class_name": "Adam"}}
    arrays: dict = {}
    _keras3_continue(case, arrays, restored, restored.optimizer, 11)
    _write("f1_keras3_functional_custom_layer_adam", case, arrays)


def case_k3_mixed_float16() -> None:
    import keras

    keras.utils.set_random_seed(2)
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu", name="d1"),
                              keras.layers.Dense(2, name="d2", dtype="float32")])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    _fit(model, (4,), 2, 2)
    folder = _fresh("f2_keras3_mixed_float16_loss_scale")
    model.save(folder / "model.keras")
    restored = keras.models.load_model(folder / "model.keras")
    case = {"title": "Keras 3 mixed_float16: LossScaleOptimizer(Adam), inner variables saved apart",
            "format": "keras3_keras", "load": "model.keras", "gradient_scale": True,
            "optimizer": {"api": "keras3", "class_name": type(restored.optimizer).__name__}}
    arrays: dict = {}
    _keras3_continue(case, arrays, restored, restored.optimizer, 12)
    for v in case["optimizer_variables"]:  # the wrapper's and the inner optimizer's ``iteration`` apart
        if v["owner"] is None:
            v["local"] = v["name"]
    _write("f2_keras3_mixed_float16_loss_scale", case, arrays)


def case_savedmodel() -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="a"), keras.layers.Dense(1, name="b")])
    optimizer = keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    _fit(model, (3,), 1, 3)
    folder = _fresh("f3_savedmodel_directory_keras3_adam")
    module = tf.Module()
    module.net, module.optimizer = model, optimizer
    tf.saved_model.save(module, str(folder / "my_saved_model"))
    case = {"title": "tf.saved_model.save of a module holding a Keras 3 model and its Adam: the directory is "
                     "passed", "format": "tf_checkpoint_keras3", "load": "my_saved_model",
            "optimizer": {"api": "keras3", "class_name": "Adam",
                          "constructed_with": {"class_name": "Adam", "kwargs": {"learning_rate": 0.01}}}}
    arrays: dict = {}
    _keras3_continue(case, arrays, model, optimizer, 13)
    _write("f3_savedmodel_directory_keras3_adam", case, arrays)


def case_tfckpt_mixed_float16() -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(9)
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d1"),
                              keras.layers.Dense(2, name="d2", dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01), dynamic_growth_steps=3)
    model.compile(optimizer=optimizer, loss="mse")
    _fit(model, (4,), 2, 9)
    case_id = "f9_tfckpt_keras3_loss_scale"
    folder = _fresh(case_id)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), folder / "ckpts", 2)
    manager.save()
    state = folder / "ckpts" / "checkpoint"
    state.write_text(state.read_text().replace(f"{folder / 'ckpts'}/", ""))
    case = {"title": "tf.train.Checkpoint of a Keras 3 mixed_float16 model: LossScaleOptimizer(Adam)",
            "format": "tf_checkpoint_keras3", "load": "ckpts", "gradient_scale": True,
            "optimizer": {"api": "keras3", "class_name": "LossScaleOptimizer",
                          "constructed_with": {"class_name": "LossScaleOptimizer", "kwargs": {
                              "inner_optimizer": {"class_name": "Adam", "kwargs": {"learning_rate": 0.01}},
                              "dynamic_growth_steps": 3}}}}
    arrays: dict = {}
    _keras3_continue(case, arrays, model, optimizer, 19)
    for v in case["optimizer_variables"]:
        if v["owner"] is None:
            v["local"] = v["name"]
    _write(case_id, case, arrays)


# ------------------------------------------------------------------------------------------------ TF1
def _tf1_record(case: dict, arrays: dict, sess, variables, optimizers, train, placeholders, seed: int,
                sparse: tuple = (), global_step=None) -> None:
    """``optimizers``: [(optimizer, indices of ``variables``)]; ``train``: the apply op fed ``placeholders``."""
    names = [v.op.name for v in variables]
    case["trainable"] = [{"name": n, "shape": v.shape.as_list(), "dtype": v.dtype.base_dtype.name}
                         for n, v in zip(names, variables)]
    case["non_trainable"] = []
    opt_vars = []
    for part, (opt, owned) in enumerate(optimizers):
        own = sorted(opt._non_slot_variables(), key=lambda v: v.op.name) if hasattr(opt, "_non_slot_variables") \
            else []
        for v in own:
            opt_vars.append((v, {"name": v.op.name, "owner": None, "local": v.op.name, "part": part}))
        for slot in sorted(opt.get_slot_names()):
            for i in owned:
                s = opt.get_slot(variables[i], slot)
                if s is not None:
                    opt_vars.append((s, {"name": s.op.name, "owner": i, "local": slot, "part": part}))
    case["optimizer_variables"] = [d for _, d in opt_vars]
    for i, v in enumerate(variables):
        arrays[f"saved/w/{i}"] = sess.run(v)
    for j, (v, _) in enumerate(opt_vars):
        arrays[f"saved/opt/{j}"] = np.asarray(sess.run(v))
    rng = _rng(seed)
    case["steps"] = []
    for s in range(STEPS):
        feed, kinds = {}, []
        for i, (v, ph) in enumerate(zip(variables, placeholders)):
            shape = v.shape.as_list()
            if i in sparse:
                idx = rng.integers(0, shape[0], size=5).astype(np.int32)
                vals = rng.standard_normal((5, *shape[1:])).astype(np.float32)
                feed[ph[0]], feed[ph[1]] = vals, idx
                arrays[f"step{s}/g/{i}/indices"], arrays[f"step{s}/g/{i}/values"] = idx, vals
                kinds.append("sparse")
            else:
                g = rng.standard_normal(shape).astype(np.float32) * 0.1
                feed[ph] = g
                arrays[f"step{s}/g/{i}"] = g
                kinds.append("dense")
        sess.run(train, feed)
        for i, v in enumerate(variables):
            arrays[f"step{s}/w/{i}"] = sess.run(v)
        for j, (v, _) in enumerate(opt_vars):
            arrays[f"step{s}/opt/{j}"] = np.asarray(sess.run(v))
        case["steps"].append({"grads": kinds, "iterations": int(sess.run(global_step))})
    case["iterations_after"] = case["steps"][-1]["iterations"]


def _tf1_graph(case_id: str, title: str, build, seed: int) -> None:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    tf1.set_random_seed(seed)
    variables, optimizers, sparse, constructed = build(tf1)
    global_step = tf1.train.get_or_create_global_step()
    placeholders, pairs = [], []
    for i, v in enumerate(variables):
        if i in sparse:
            vals = tf1.placeholder(tf.float32, [None, *v.shape.as_list()[1:]])
            idx = tf1.placeholder(tf.int32, [None])
            placeholders.append((vals, idx))
            pairs.append(tf.IndexedSlices(vals, idx, tf.constant(v.shape.as_list())))
        else:
            ph = tf1.placeholder(tf.float32, v.shape)
            placeholders.append(ph)
            pairs.append(ph)
    ops = []
    for k, (opt, owned) in enumerate(optimizers):
        ops.append(opt.apply_gradients([(pairs[i], variables[i]) for i in owned],
                                       global_step=global_step if k == len(optimizers) - 1 else None))
    train = tf.group(*ops)
    saver = tf1.train.Saver()
    folder = _fresh(case_id)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        rng = _rng(seed + 100)
        for _ in range(4):  # a few steps before the save
            feed = {}
            for i, (v, ph) in enumerate(zip(variables, placeholders)):
                shape = v.shape.as_list()
                if i in sparse:
                    feed[ph[0]] = rng.standard_normal((3, *shape[1:])).astype(np.float32)
                    feed[ph[1]] = rng.integers(0, shape[0], size=3).astype(np.int32)
                else:
                    feed[ph] = rng.standard_normal(shape).astype(np.float32) * 0.1
            sess.run(train, feed)
        saver.save(sess, str(folder / "model.ckpt"), global_step=global_step)
        state = folder / "checkpoint"  # relative paths, so the folder can move
        state.write_text(state.read_text().replace(f"{folder}/", ""))
        case = {"title": title, "format": "tf_checkpoint_v1", "load": ".",
                "optimizer": {"api": "v1" if len(optimizers) == 1 else "v1_composite",
                              "constructed_with": constructed}}
        arrays: dict = {}
        _tf1_record(case, arrays, sess, variables, optimizers, train, placeholders, seed, sparse, global_step)
    _write(case_id, case, arrays)


def case_tf1_wide_deep() -> None:
    def build(tf1):
        emb = tf1.get_variable("wide/embedding", [20, 3])
        w1 = tf1.get_variable("deep/w1", [3, 5])
        b1 = tf1.get_variable("deep/b1", [5], initializer=tf1.zeros_initializer())
        adagrad = tf1.train.AdagradOptimizer(0.1)
        adam = tf1.train.AdamOptimizer(0.01)
        return [emb, w1, b1], [(adagrad, [0]), (adam, [1, 2])], (0,), [
            {"class_name": "AdagradOptimizer", "kwargs": {"learning_rate": 0.1}},
            {"class_name": "AdamOptimizer", "kwargs": {"learning_rate": 0.01}}]

    _tf1_graph("f4_tf1_wide_deep_adagrad_adam", "TF1 wide & deep: Adagrad on the embedding (sparse), Adam on the "
               "deep part, one global_step", build, 4)


def case_tf1_sparse_adam() -> None:
    def build(tf1):
        emb = tf1.get_variable("emb", [12, 4])
        w = tf1.get_variable("w", [4, 2])
        return [emb, w], [(tf1.train.AdamOptimizer(0.01), [0, 1])], (0,), {
            "class_name": "AdamOptimizer", "kwargs": {"learning_rate": 0.01}}

    _tf1_graph("f5_tf1_sparse_adam", "TF1 AdamOptimizer with sparse gradients (IndexedSlices) on an embedding",
               build, 5)


def _tfkeras_new_continue(case: dict, arrays: dict, model, optimizer, seed: int) -> None:
    """tf-keras 2.11+: the optimizer's ``variables`` are [iterations, slots...], a slot named
    ``<optimizer>/<slot>/<variable name>``."""
    import tensorflow as tf

    variables = model.trainable_variables
    names = [v.name.split(":")[0] for v in variables]
    case["trainable"] = [{"name": n, "shape": v.shape.as_list(), "dtype": v.dtype.name} for n, v in zip(names, variables)]
    case["non_trainable"] = []
    opt_vars = list(optimizer.variables)
    case["optimizer_variables"] = []
    for v in opt_vars:
        full = v.name.split(":")[0]
        owner = next((i for i, n in sorted(enumerate(names), key=lambda x: -len(x[1])) if full.endswith("/" + n)), None)
        local = full[: -len(names[owner]) - 1].rpartition("/")[2] if owner is not None else "iteration"
        case["optimizer_variables"].append({"name": full, "owner": owner, "local": local, "part": None})
    for i, v in enumerate(variables):
        arrays[f"saved/w/{i}"] = v.numpy()
    for j, v in enumerate(opt_vars):
        arrays[f"saved/opt/{j}"] = np.asarray(v.numpy())
    rng = _rng(seed)
    case["steps"] = []
    for s in range(STEPS):
        grads = [rng.standard_normal(v.shape.as_list()).astype(np.float32) * 0.1 for v in variables]
        for i, g in enumerate(grads):
            arrays[f"step{s}/g/{i}"] = g
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
        for i, v in enumerate(variables):
            arrays[f"step{s}/w/{i}"] = v.numpy()
        for j, v in enumerate(opt_vars):
            arrays[f"step{s}/opt/{j}"] = np.asarray(v.numpy())
        case["steps"].append({"grads": ["dense"] * len(variables), "iterations": int(optimizer.iterations.numpy())})
    case["iterations_after"] = case["steps"][-1]["iterations"]


def _case_tfkeras_new(case_id: str, filename: str) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(6)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(4, name="fc"),
                                 tf_keras.layers.Dense(2, name="logits")])
    model.compile(optimizer=tf_keras.optimizers.Adam(0.01), loss="mse")
    _fit(model, (3,), 2, 6)
    folder = _fresh(case_id)
    model.save(folder / filename)
    restored = tf_keras.models.load_model(folder / filename)
    case = {"title": f"tf-keras 2.21 model.save('{filename}') with tf.keras.optimizers.Adam (the 2.11+ Optimizer)",
            "format": "tfkeras_file", "load": filename, "optimizer": {"api": "tfkeras_new", "class_name": "Adam"}}
    arrays: dict = {}
    _tfkeras_new_continue(case, arrays, restored, restored.optimizer, 16)
    _write(case_id, case, arrays)


def case_tfkeras_h5_custom_layer_legacy() -> None:
    """tf-keras Functional model with a registered custom layer, legacy Adam, ``.h5``."""
    import tensorflow as tf
    import tf_keras

    @tf_keras.utils.register_keras_serializable(package="fixtures")
    class Gain(tf_keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(name="w", shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            return x * self.w

    tf_keras.utils.set_random_seed(8)
    inputs = tf_keras.Input((3,))
    h = tf_keras.layers.Dense(4, name="fc")(inputs)
    outputs = tf_keras.layers.Dense(2, name="out")(Gain(name="gain")(h))
    model = tf_keras.Model(inputs, outputs)
    model.compile(optimizer=tf_keras.optimizers.legacy.Adam(0.01), loss="mse")
    _fit(model, (3,), 2, 8)
    case_id = "f8_tfkeras_h5_custom_layer_legacy_adam"
    folder = _fresh(case_id)
    model.save(folder / "model.h5")
    restored = tf_keras.models.load_model(folder / "model.h5")
    optimizer = restored.optimizer
    variables = restored.trainable_variables
    names = [v.name.split(":")[0] for v in variables]
    case = {"title": "tf-keras Functional model with a registered custom layer, legacy Adam, .h5",
            "format": "tfkeras_file", "load": "model.h5", "optimizer": {"api": "legacy", "class_name": "Adam"},
            "trainable": [{"name": n, "shape": v.shape.as_list(), "dtype": v.dtype.name}
                          for n, v in zip(names, variables)], "non_trainable": []}
    arrays: dict = {}

    def legacy_variables(opt) -> list:
        return list(opt.weights)  # [iter, slots in creation order]

    case["optimizer_variables"] = []
    for v in legacy_variables(model.optimizer):  # the state at the save, from the model that was saved
        full = v.name.split(":")[0]
        owner = next((i for i, n in sorted(enumerate(names), key=lambda x: -len(x[1])) if f"/{n}/" in f"/{full}"),
                     None)
        case["optimizer_variables"].append({"name": full, "owner": owner, "local": full.rpartition("/")[2],
                                            "part": None})
    for i, v in enumerate(model.trainable_variables):
        arrays[f"saved/w/{i}"] = v.numpy()
    for j, v in enumerate(legacy_variables(model.optimizer)):
        arrays[f"saved/opt/{j}"] = np.asarray(v.numpy())
    rng = _rng(18)
    case["steps"] = []
    for s in range(STEPS):  # the restored optimizer creates its slots and sets the saved values at its first step
        grads = [rng.standard_normal(v.shape.as_list()).astype(np.float32) * 0.1 for v in variables]
        for i, g in enumerate(grads):
            arrays[f"step{s}/g/{i}"] = g
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
        for i, v in enumerate(variables):
            arrays[f"step{s}/w/{i}"] = v.numpy()
        for j, v in enumerate(legacy_variables(optimizer)):
            arrays[f"step{s}/opt/{j}"] = np.asarray(v.numpy())
        case["steps"].append({"grads": ["dense"] * len(variables), "iterations": int(optimizer.iterations.numpy())})
    case["iterations_after"] = case["steps"][-1]["iterations"]
    _write(case_id, case, arrays)


def case_tfkeras_new_h5() -> None:
    _case_tfkeras_new("f6_tfkeras_new_adam_h5", "model.h5")


def case_tfkeras_new_keras() -> None:
    _case_tfkeras_new("f7_tfkeras_new_adam_keras", "model.keras")


CASES = {"f9": case_tfckpt_mixed_float16, "f8": case_tfkeras_h5_custom_layer_legacy, "f6": case_tfkeras_new_h5, "f7": case_tfkeras_new_keras, "f1": case_k3_functional_custom_layer, "f2": case_k3_mixed_float16, "f3": case_savedmodel,
         "f4": case_tf1_wide_deep, "f5": case_tf1_sparse_adam}


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    if len(sys.argv) > 1:
        for name in sys.argv[1:]:
            CASES[name]()
        return
    for name in CASES:  # one process each: TF1 graph mode and dtype policies are global
        subprocess.run([sys.executable, __file__, name], check=True)


if __name__ == "__main__":
    main()
