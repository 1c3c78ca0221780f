"""Records ``tests/data/way_back``: TensorFlow continues checkpoints slotopt wrote, bit for bit.

For each case, in one process with real TensorFlow and slotopt (imported from this checkout's ``src``):

1. TensorFlow builds a small model and optimizer, trains ``K`` steps with seeded gradients and saves the way users
   save (``original/``);
2. slotopt loads it, takes ``N`` steps with recorded gradients ``g1`` and writes it back with ``ck.save``
   (``written/``; the sha256 of its ``.index`` and ``.data`` is recorded);
3. TensorFlow restores slotopt's file into a fresh model and optimizer, as it restored the original
   (``assert_existing_objects_matched()``, its log and warnings captured), continues ``M`` steps with gradients
   ``g2`` and writes its final state: ``final/<key>`` of every numeric entry is recorded;
4. as the reference, TensorFlow restores the original and runs the same ``N + M`` steps itself: its final state
   must equal step 3's bit for bit (``"tf_ran_every_step_equal"`` in ``case.json``).

The suite (``tests/io/test_tf_way_back.py``) replays it without TensorFlow: the same ``N`` slotopt steps write the same
bytes, and slotopt's own ``M``-step continuation of that file gives ``final/<key>`` bit for bit.

TensorFlow is never a dependency of slotopt or of its tests: run this in a separate environment with torch::

    /work/tfvenv/bin/pip install torch==2.13.0
    /work/tfvenv/bin/python tools/record_way_back_tf.py          # every case, one process each
    /work/tfvenv/bin/python tools/record_way_back_tf.py CASE     # one case
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "way_back"
K, N, M = 3, 3, 3


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _capture(run):
    """Runs ``run()`` collecting TensorFlow's log warnings and Python warnings (the restore's deleter warns about
    unmatched values when the checkpoint object is collected)."""
    import tensorflow as tf

    handler = _Captured()
    tf.get_logger().addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run()
            gc.collect()
    finally:
        tf.get_logger().removeHandler(handler)
    return result, handler.messages + [str(w.message) for w in caught]


def _grads(rng: np.random.Generator, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    return {n: (rng.standard_normal(s) * 0.1).astype(np.float32) for n, s in shapes.items()}


def _name(v) -> str:
    return (getattr(v, "path", None) or v.name).split(":")[0]


def _hashes(prefix: str) -> dict[str, str]:
    return {ext: hashlib.sha256(open(prefix + ext, "rb").read()).hexdigest()
            for ext in (".index", ".data-00000-of-00001")}


def _numeric(prefix: str, skip: tuple = ("save_counter",)) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for key, dtype in reader.get_variable_to_dtype_map().items():
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH" or dtype in (tf.string, tf.variant) or key.startswith(skip):
            continue
        out[key] = np.asarray(reader.get_tensor(key))
    return out


def _relative_state(folder: Path) -> None:
    state = folder / "checkpoint"
    state.write_text(state.read_text().replace(f"{folder}/", ""))


# ------------------------------------------------------------------------------------------------ the slotopt side
def _slotopt_steps(case: dict, load: str, grads: list[dict], written: Path) -> str:
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    import slotopt

    ck = slotopt.load_tf_checkpoint(load)
    spec = case["slotopt"]
    params = ck.parameters()
    if spec["api"] == "v1":
        opt = ck.optimizer(params)
        step = slotopt.Variable(ck.weights["global_step"].clone(), name="global_step")
    else:
        generation = slotopt if spec["api"] == "keras3" else slotopt.legacy

        def make(c, k):  # a [class, kwargs] argument is an optimizer too (a LossScaleOptimizer's inner one)
            return getattr(generation, c)(**{a: make(*v) if isinstance(v, list) else v for a, v in k.items()})
        made = [make(c, k) for c, k in spec["optimizer"]]
        opt = ck.optimizer(params, optimizer=made if spec["api"] == "composite" else made[0])
    for g in grads:
        pairs = [(torch.from_numpy(g[n].copy()), p) for n, p in zip(ck.variable_names, params)]
        if spec["api"] == "v1":
            opt.apply_gradients(pairs, global_step=step)
        else:
            opt.apply_gradients(pairs)
    return ck.save(str(written) + "/", params, opt, **({"global_step": step} if spec["api"] == "v1" else {}))


def _record(case_id: str, case: dict, arrays: dict) -> None:
    folder = OUT / case_id
    (folder / "case.json").write_text(json.dumps(case, indent=1) + "\n")
    np.savez_compressed(folder / "arrays.npz", **arrays)


# ------------------------------------------------------------------------------------------------ TF2 checkpoints
def _tf2_case(case_id: str, build, slotopt_spec: dict, seed: int, *, saved_model: bool = False) -> None:
    """``build()`` → (objects for tf.train.Checkpoint, apply(grads by name), trainable variables, after_restore())."""
    import tensorflow as tf

    folder = OUT / case_id
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    objects, apply, variables, _ = build()
    shapes = {_name(v): tuple(v.shape) for v in variables}
    for _ in range(K):
        apply(_grads(rng, shapes))
    if saved_model:
        module = tf.Module()
        for k, v in objects.items():
            setattr(module, k, v)
        tf.saved_model.save(module, str(folder / "original"))
        load, restore_prefix = str(folder / "original"), lambda p: p + "/variables/variables"
    else:
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), str(folder / "original"), 3)
        manager.save()
        _relative_state(folder / "original")
        load, restore_prefix = str(folder / "original"), tf.train.latest_checkpoint
    g1 = [_grads(rng, shapes) for _ in range(N)]
    g2 = [_grads(rng, shapes) for _ in range(M)]
    case = {"id": case_id, "load": "original", "K": K, "N": N, "M": M, "slotopt": slotopt_spec,
            "names": list(shapes)}
    written = _slotopt_steps(case, load, g1, folder / "written")
    if saved_model:
        written_prefix = str(folder / "written" / "variables" / "variables")
        loaded = tf.saved_model.load(str(folder / "written"))  # the loader TensorFlow serves it with
        case["saved_model_load"] = sorted(_name(v) for v in loaded.trainable_variables) if hasattr(
            loaded, "trainable_variables") else "loaded"
    else:
        written_prefix = written
        _relative_state(folder / "written")
    case["written"] = os.path.relpath(written_prefix, folder)
    case["written_sha256"] = _hashes(written_prefix)

    def continued(prefix: str, steps: list[dict], out: str):
        def run():
            objs, apply_, _, after = build()
            checkpoint = tf.train.Checkpoint(**objs)
            status = checkpoint.restore(prefix)
            try:  # a SavedModel holds no save_counter: it fails for the original too (recorded, compared)
                status.assert_existing_objects_matched()
                matched = True
            except AssertionError:
                matched = False
            extra = [matched, after(objs) if after else None]
            for g in steps:
                apply_(g)
            if saved_model:  # written as the original was, so that its keys are the SavedModel's
                module = tf.Module()
                for k, v in objs.items():
                    setattr(module, k, v)
                tf.saved_model.save(module, out)
            else:
                checkpoint.write(out)
            return extra
        return _capture(run)

    extra_w, warned_w = continued(restore_prefix(str(folder / "written") if saved_model else str(folder / "written")),
                                  g2, str(folder / "tmp_from_written"))
    extra_o, warned_o = continued(restore_prefix(load), g1 + g2, str(folder / "tmp_from_original"))
    inner = "/variables/variables" if saved_model else ""
    final_w = _numeric(str(folder / "tmp_from_written") + inner)
    final_o = _numeric(str(folder / "tmp_from_original") + inner)
    case["tf_ran_every_step_equal"] = sorted(final_w) == sorted(final_o) and all(
        np.array_equal(final_w[k], final_o[k]) for k in final_w)
    case["warnings_restoring_written"] = warned_w
    case["warnings_restoring_original"] = warned_o
    case["objects_matched_written"], case["after_restore_written"] = extra_w
    case["objects_matched_original"], case["after_restore_original"] = extra_o
    arrays = {f"final/{k}": v for k, v in final_w.items()}
    for s, g in enumerate(g1):
        arrays.update({f"g1/{s}/{n}": a for n, a in g.items()})
    for s, g in enumerate(g2):
        arrays.update({f"g2/{s}/{n}": a for n, a in g.items()})
    for tmp in folder.glob("tmp_from_*"):
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    shutil.rmtree(folder / "written")
    _record(case_id, case, arrays)
    print(case_id, "equal:", case["tf_ran_every_step_equal"], "warnings:", len(warned_w), len(warned_o))


def _keras3(make_optimizer, iterator: bool = False):
    def build():
        import keras
        import tensorflow as tf

        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, name="hidden"),
                                  keras.layers.BatchNormalization(name="bn"), keras.layers.Dense(3, name="out")],
                                 name="mlp")
        optimizer = make_optimizer()
        optimizer.build(model.trainable_variables)
        objects = {"model": model, "optimizer": optimizer}
        after = None
        if iterator:
            objects["step"] = tf.Variable(7, dtype=tf.int64)
            it = iter(tf.data.Dataset.range(50).batch(4))
            next(it)
            objects["iterator"] = it

            def after(objs):
                return [int(x) for x in next(objs["iterator"]).numpy()] + [int(objs["step"].numpy())]

        def apply(grads):
            optimizer.apply_gradients([(tf.constant(grads[_name(v)]), v) for v in model.trainable_variables])
        return objects, apply, model.trainable_variables, after
    return build


def case_keras3_adam() -> None:
    import keras

    _tf2_case("keras3_adam", _keras3(lambda: keras.optimizers.Adam(0.01, name="adam"), iterator=True),
              {"api": "keras3", "optimizer": [["Adam", {"learning_rate": 0.01, "name": "adam"}]]}, 1)


def case_keras3_sgd_momentum() -> None:
    import keras

    _tf2_case("keras3_sgd_nesterov",
              _keras3(lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True, name="sgd")),
              {"api": "keras3", "optimizer": [["SGD", {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True,
                                                       "name": "sgd"}]]}, 2)


def case_keras3_rmsprop_centered() -> None:
    import keras

    _tf2_case("keras3_rmsprop_centered",
              _keras3(lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True, name="rmsprop")),
              {"api": "keras3", "optimizer": [["RMSprop", {"learning_rate": 0.01, "momentum": 0.5,
                                                           "centered": True, "name": "rmsprop"}]]}, 3)


def case_keras3_loss_scale() -> None:
    import keras

    _tf2_case("keras3_loss_scale_adam",
              _keras3(lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01, name="adam"),
                                                                 dynamic_growth_steps=2)),
              {"api": "keras3", "optimizer": [["LossScaleOptimizer", {
                  "inner_optimizer": ["Adam", {"learning_rate": 0.01, "name": "adam"}],
                  "dynamic_growth_steps": 2}]]}, 8)


def case_savedmodel_keras3_adam() -> None:
    import keras

    _tf2_case("savedmodel_keras3_adam", _keras3(lambda: keras.optimizers.Adam(0.01, name="adam")),
              {"api": "keras3", "optimizer": [["Adam", {"learning_rate": 0.01, "name": "adam"}]]}, 4,
              saved_model=True)


def _tf_keras(make_optimizer, legacy: bool):
    def build():
        import tensorflow as tf
        import tf_keras

        tf_keras.utils.set_random_seed(1)
        model = tf_keras.Sequential([tf_keras.Input((5,)), tf_keras.layers.Dense(6, name="hidden"),
                                     tf_keras.layers.Dense(3, name="out")])
        optimizer = make_optimizer(tf_keras)
        if legacy:
            optimizer._create_all_weights(model.trainable_variables)
        else:
            optimizer.build(model.trainable_variables)

        def apply(grads):
            optimizer.apply_gradients([(tf.constant(grads[_name(v)]), v) for v in model.trainable_variables])
        return {"model": model, "optimizer": optimizer}, apply, model.trainable_variables, None
    return build


def case_legacy_adam() -> None:
    _tf2_case("legacy_adam", _tf_keras(lambda k: k.optimizers.legacy.Adam(0.01), legacy=True),
              {"api": "legacy", "optimizer": [["Adam", {"learning_rate": 0.01}]]}, 5)


def case_tfkeras_new_adam() -> None:
    _tf2_case("tfkeras_new_adam", _tf_keras(lambda k: k.optimizers.Adam(0.01), legacy=False),
              {"api": "keras3", "optimizer": [["Adam", {"learning_rate": 0.01}]]}, 6)


def case_tfrs_composite() -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # TFRS 0.7.7 needs tf.keras to be tf-keras

    def build():
        import tensorflow as tf
        import tensorflow_recommenders as tfrs
        import tf_keras

        tf_keras.utils.set_random_seed(1)
        model = tf_keras.Sequential([tf_keras.Input((5,)), tf_keras.layers.Dense(6, name="hidden"),
                                     tf_keras.layers.Dense(3, name="out")])
        variables = model.trainable_variables
        adagrad, adam = tf_keras.optimizers.legacy.Adagrad(0.1), tf_keras.optimizers.legacy.Adam(0.01)
        optimizer = tfrs.experimental.optimizers.CompositeOptimizer(
            [(adagrad, lambda: variables[:2]), (adam, lambda: variables[2:])])
        adagrad._create_all_weights(variables[:2])
        adam._create_all_weights(variables[2:])

        def apply(grads):
            optimizer.apply_gradients([(tf.constant(grads[_name(v)]), v) for v in variables])
        return {"model": model, "optimizer": optimizer}, apply, variables, None

    _tf2_case("tfrs_composite", build, {"api": "composite", "optimizer": [["Adagrad", {"learning_rate": 0.1}],
                                                                          ["Adam", {"learning_rate": 0.01}]]}, 7)


# ------------------------------------------------------------------------------------------------ TF1 Saver
def _tf1_case(case_id: str, make_optimizer, seed: int) -> None:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    folder = OUT / case_id
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)

    def build():
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(seed)
            w1 = tf1.get_variable("layer1/w", [5, 6])
            b1 = tf1.get_variable("layer1/b", [6], initializer=tf1.zeros_initializer())
            w2 = tf1.get_variable("layer2/w", [6, 3])
            variables = [w1, b1, w2]
            step = tf1.train.get_or_create_global_step()
            holders = [tf1.placeholder(tf.float32, v.shape) for v in variables]
            train = make_optimizer(tf1).apply_gradients(list(zip(holders, variables)), global_step=step)
            saver = tf1.train.Saver()
            init = tf1.global_variables_initializer()
        sess = tf1.Session(graph=graph)
        sess.run(init)

        def apply(grads):
            sess.run(train, {h: grads[v.op.name] for h, v in zip(holders, variables)})
        return sess, saver, apply, variables

    rng = np.random.default_rng(seed)
    sess, saver, apply, variables = build()
    shapes = {v.op.name: tuple(v.shape.as_list()) for v in variables}
    for _ in range(K):
        apply(_grads(rng, shapes))
    (folder / "original").mkdir()
    with sess.graph.as_default():
        saver.save(sess, str(folder / "original" / "model.ckpt"), global_step=tf1.train.get_global_step())
    _relative_state(folder / "original")
    g1 = [_grads(rng, shapes) for _ in range(N)]
    g2 = [_grads(rng, shapes) for _ in range(M)]
    case = {"id": case_id, "load": "original", "K": K, "N": N, "M": M, "slotopt": {"api": "v1"},
            "names": list(shapes)}
    written = _slotopt_steps(case, str(folder / "original"), g1, folder / "written")
    _relative_state(folder / "written")
    case["written"] = os.path.relpath(written, folder)
    case["written_sha256"] = _hashes(written)

    def continued(prefix: str, steps: list[dict], out: str) -> None:
        def run():
            sess_, saver_, apply_, _ = build()
            with sess_.graph.as_default():
                saver_.restore(sess_, prefix)
                for g in steps:
                    apply_(g)
                saver_.save(sess_, out, write_meta_graph=False, write_state=False)
        return _capture(run)

    _, warned_w = continued(written, g2, str(folder / "tmp_from_written"))
    _, warned_o = continued(tf.train.latest_checkpoint(str(folder / "original")), g1 + g2,
                            str(folder / "tmp_from_original"))
    final_w, final_o = _numeric(str(folder / "tmp_from_written")), _numeric(str(folder / "tmp_from_original"))
    case["tf_ran_every_step_equal"] = sorted(final_w) == sorted(final_o) and all(
        np.array_equal(final_w[k], final_o[k]) for k in final_w)
    case["warnings_restoring_written"], case["warnings_restoring_original"] = warned_w, warned_o
    arrays = {f"final/{k}": v for k, v in final_w.items()}
    for s, g in enumerate(g1):
        arrays.update({f"g1/{s}/{n}": a for n, a in g.items()})
    for s, g in enumerate(g2):
        arrays.update({f"g2/{s}/{n}": a for n, a in g.items()})
    for tmp in folder.glob("tmp_from_*"):
        tmp.unlink()
    shutil.rmtree(folder / "written")
    _record(case_id, case, arrays)
    print(case_id, "equal:", case["tf_ran_every_step_equal"], "warnings:", len(warned_w), len(warned_o))


def case_tf1_adam() -> None:
    _tf1_case("tf1_adam", lambda tf1: tf1.train.AdamOptimizer(0.01), 11)


def case_tf1_momentum() -> None:
    _tf1_case("tf1_momentum", lambda tf1: tf1.train.MomentumOptimizer(0.05, 0.9), 12)


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    if len(sys.argv) > 1:
        for name in sys.argv[1:]:
            CASES[name]()
        return
    for name in CASES:  # one process each: TF1 graph mode is global
        subprocess.run([sys.executable, __file__, name], check=True)


if __name__ == "__main__":
    main()
