#!/usr/bin/env python3
"""TensorFlow's side of ``benchmarks/io_bench.py``: the TF/Keras restore of the files io_bench writes, timed the
way issue 40 timed them. Runs under a Python that has TensorFlow (a venv of its own: TensorFlow is no dependency
of slotopt or of its tests):

    python3 -m venv /work/tfvenv
    /work/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 keras==3.15.1
    python benchmarks/io_bench.py --gb 1 --tensorflow /work/tfvenv/bin/python   # both, one table

One measurement per process (``io_bench`` starts three and keeps the best): imports and the TensorFlow runtime's
start-up are excluded from the time, the process's memory after them subtracted from its peak (``VmHWM``, reset
after the imports), as io_bench measures slotopt. Prints one JSON line: ``total_s`` (what TensorFlow needs to
hold the model and its optimizer state from the file), ``build_s`` and ``restore_s`` where they are apart,
``peak_bytes``.

* ``keras``: ``keras.saving.load_model(path)`` (the model and its compiled optimizer built from ``config.json``,
  every variable read from ``model.weights.h5``): ``total_s``.
* ``tf2``: a Keras 3 model of the checkpoint's Dense layers (their shapes read from the checkpoint) and a Keras 3
  ``Adam`` built on it (``build_s``), then ``tf.train.Checkpoint(optimizer=...).restore(prefix)``, every object
  of the file matched (``restore_s``).
* ``tf1``: ``tf.compat.v1.train.import_meta_graph`` and ``Saver.restore`` in a session. The ``.meta`` io_bench
  writes (slotopt's test writer) holds what slotopt reads of it (the hyperparameters' ``Const`` nodes and the
  ``trainable_variables`` collection), not a graph TensorFlow can import; ``--prepare`` (run once, untimed, by
  io_bench) builds the same variables and ``AdamOptimizer`` in a TF1 graph and exports its ``MetaGraphDef`` as
  ``<prefix>.tf.meta``. The restore reads the same ``.index`` and ``.data`` bytes slotopt reads.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def _reset_peak() -> None:
    try:  # Linux: "5" resets VmHWM to the current RSS, so the peak is the restore's, not the imports'
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _tf2_layers(prefix: str, tf) -> list[tuple[int, int]]:
    """(inputs, units) of each Dense layer of a ``tf.train.Checkpoint`` of a Keras 3 Adam (its
    ``_trainable_variables``, kernel then bias, in order)."""
    shapes = {}
    for key, shape in tf.train.list_variables(prefix):
        if key.startswith("optimizer/_trainable_variables/"):
            shapes[int(key.split("/")[2])] = tuple(shape)
    ordered = [shapes[i] for i in sorted(shapes)]
    return [(kernel[0], kernel[1]) for kernel in ordered[0::2]]


def prepare_tf1(prefix: str) -> str:
    """Exports the TF1 graph of the checkpoint's variables and their AdamOptimizer as ``<prefix>.tf.meta``."""
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        model = [(key, shape) for key, shape in tf.train.list_variables(prefix)
                 if not key.endswith(("/Adam", "/Adam_1")) and key not in ("beta1_power", "beta2_power",
                                                                            "global_step")]
        variables = [v1.get_variable(key, shape, initializer=v1.zeros_initializer()) for key, shape in model]
        step = v1.train.get_or_create_global_step()
        loss = tf.add_n([tf.reduce_sum(v) for v in variables])
        v1.train.AdamOptimizer(0.001).minimize(loss, global_step=step)
        saver = v1.train.Saver()
        saver.export_meta_graph(prefix + ".tf.meta")
    return prefix + ".tf.meta"


def measure(kind: str, path: str) -> dict[str, float]:
    import tensorflow as tf

    if kind == "tf1":
        tf.compat.v1.disable_eager_execution()
    import keras

    if kind != "tf1":
        tf.constant(0.0)  # the eager runtime started before the clock (not part of a restore)
    _reset_peak()
    base = _rss()
    out: dict[str, float] = {}
    start = time.perf_counter()
    if kind == "keras":
        model = keras.saving.load_model(path)
        assert model.optimizer is not None and int(model.optimizer.iterations.numpy()) > 0
    elif kind == "tf2":
        layers = _tf2_layers(path, tf)
        model = keras.Sequential([keras.Input((layers[0][0],))] +
                                 [keras.layers.Dense(units, name="dense" if i == 0 else f"dense_{i}")
                                  for i, (_, units) in enumerate(layers)])
        optimizer = keras.optimizers.Adam(0.001)
        optimizer.build(model.trainable_variables)
        out["build_s"] = time.perf_counter() - start
        restore = time.perf_counter()
        tf.train.Checkpoint(optimizer=optimizer).read(path).assert_consumed()  # read: no save_counter
        assert int(optimizer.iterations.numpy()) > 0
        out["restore_s"] = time.perf_counter() - restore
    elif kind == "tf1":
        v1 = tf.compat.v1
        saver = v1.train.import_meta_graph(path + ".tf.meta")
        with v1.Session() as session:
            saver.restore(session, path)
            assert int(session.run(v1.train.get_global_step())) > 0
            out["total_s"] = time.perf_counter() - start
            out["peak_bytes"] = _hwm() - base
        return out
    else:
        raise SystemExit(f"unknown kind {kind!r}: keras, tf2 or tf1")
    out["total_s"] = time.perf_counter() - start
    out["peak_bytes"] = _hwm() - base
    return out


def measure_keras_save(path: str, out_path: str) -> dict[str, float]:
    """Keras's own ``model.save`` of the model ``load_model(path)`` built (the load untimed): the way back's
    comparison (``io_bench.py --measure save``). Keras does not fsync; the time includes writing the zip."""
    import keras
    import tensorflow as tf

    tf.constant(0.0)
    model = keras.saving.load_model(path)
    _reset_peak()
    base = _rss()
    start = time.perf_counter()
    model.save(out_path)
    out = {"total_s": time.perf_counter() - start, "peak_bytes": _hwm() - base}
    fd = os.open(out_path, os.O_RDONLY)  # Keras does not fsync: what making its file durable adds, apart
    os.fsync(fd)
    os.close(fd)
    out["fsync_s"] = time.perf_counter() - start - out["total_s"]
    os.remove(out_path)
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--save" and argv[1] == "keras":  # the way back: Keras's own save
        print(json.dumps(measure_keras_save(argv[2], argv[2] + ".keras-save.keras")))
        return 0
    if len(argv) == 3 and argv[0] == "--prepare" and argv[1] == "tf1":
        print(prepare_tf1(argv[2]))
        return 0
    if len(argv) != 2:
        print("usage: io_tensorflow.py {keras,tf2,tf1} PATH | io_tensorflow.py --prepare tf1 PREFIX",
              file=sys.stderr)
        return 2
    print(json.dumps(measure(argv[0], argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
