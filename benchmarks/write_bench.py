#!/usr/bin/env python3
"""The way back at scale: time and peak memory of ``TFCheckpoint.save`` against writing the same bytes, and
against TensorFlow saving the same model.

Writes, as ``benchmarks/io_bench.py`` does (no TensorFlow), one checkpoint per format of a model of Dense layers
(``--gb`` of float32 weights) after Adam steps, three times that on disk. Each measurement runs in a fresh
process, the setup untimed (the checkpoint read, its parameters and optimizer built: what is in memory when a
user saves), the peak memory the save's own (``VmHWM`` reset after the setup, minus the memory then):

* ``floor``: the file's bytes, already in memory, written to a new file in 4 MiB chunks and fsynced (``cat``
  with the reading taken out: what the disk allows);
* ``cat``: the data file copied to a new one (read and write, 4 MiB at a time) and fsynced;
* ``save``: ``ck.save(folder, params, optimizer)``: every tensor streamed from its memory with its CRC-32C, the
  object graph copied, the bundle fsynced, read back and checked, renamed into place, the state file written;
* with ``--tensorflow PYTHON``: TensorFlow's own save of the same model and Adam state
  (``tf.train.Checkpoint(optimizer=...).write``; TF1 ``Saver.save``), restored from the file first, untimed.

    python benchmarks/write_bench.py --gb 0.25 --dir /tmp/write_bench --tensorflow /work/tfvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

_CHILD = r"""
import json, os, sys, time
what, kind, path, out_dir = sys.argv[1:5]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
def reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
data = path + ".data-00000-of-00001"
if what == "floor":
    size = os.path.getsize(data)
    buffer = bytearray(size)
    with open(data, "rb", buffering=0) as f:
        view, done = memoryview(buffer), 0
        while done < size:
            done += f.readinto(view[done:done + (1 << 24)])
elif what == "save":
    import slotopt
    ck = slotopt.load_tf_checkpoint(path)
    params = ck.parameters()
    opt = ck.optimizer(params, optimizer=slotopt.Adam(0.001) if kind == "tf2" else None)
reset()
base = rss()
start = time.perf_counter()
target = os.path.join(out_dir, "out.data")
if what == "floor":
    with open(target, "wb", buffering=0) as f:
        for i in range(0, size, 1 << 22):
            f.write(view[i:i + (1 << 22)])
        os.fsync(f.fileno())
elif what == "cat":
    with open(data, "rb", buffering=0) as src, open(target, "wb", buffering=0) as f:
        while True:
            chunk = src.read(1 << 22)
            if not chunk:
                break
            f.write(chunk)
        os.fsync(f.fileno())
else:
    ck.save(out_dir + os.sep, params, opt)
out = {"total_s": time.perf_counter() - start, "peak_bytes": hwm() - base}
print(json.dumps(out))
"""

_TF_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
import io_tensorflow as iot
kind, path, out_dir = sys.argv[1:4]
import tensorflow as tf
if kind == "tf1":
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    iot.prepare_tf1(path) if not os.path.isfile(path + ".tf.meta") else None
    saver = v1.train.import_meta_graph(path + ".tf.meta")
    session = v1.Session()
    saver.restore(session, path)
    iot._reset_peak(); base = iot._rss(); start = time.perf_counter()
    saver.save(session, os.path.join(out_dir, "model.ckpt"), global_step=3, write_meta_graph=True)
else:
    import keras
    layers = iot._tf2_layers(path, tf)
    model = keras.Sequential([keras.Input((layers[0][0],))] + [keras.layers.Dense(
        units, name="dense" if i == 0 else f"dense_{i}") for i, (_, units) in enumerate(layers)])
    optimizer = keras.optimizers.Adam(0.001)
    optimizer.build(model.trainable_variables)
    tf.train.Checkpoint(optimizer=optimizer).read(path).assert_consumed()
    iot._reset_peak(); base = iot._rss(); start = time.perf_counter()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(optimizer=optimizer), out_dir, 3)
    manager.save()
print(json.dumps({"total_s": time.perf_counter() - start, "peak_bytes": iot._hwm() - base}))
"""


def _run(command: list[str], env: Any = None) -> dict[str, float]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _best(results: list[dict[str, float]]) -> dict[str, float]:
    ok = [r for r in results if "error" not in r]
    return min(ok, key=lambda r: r["total_s"]) if ok else results[0]


def main(argv: list[str]) -> int:
    import io_bench

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=0.25, help="GiB of float32 weights (the file is 3x)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--formats", default="tf2,tf1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tensorflow", default=None, help="a Python with TensorFlow, to time its save too")
    args = parser.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="write_bench_"))
    root.mkdir(parents=True, exist_ok=True)
    layers = io_bench._layers(args.gb)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    rows = []
    for kind in args.formats.split(","):
        source = root / kind
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir()
        prefix = (io_bench.write_tf2 if kind == "tf2" else io_bench.write_tf1)(source, layers)
        size = sum(os.path.getsize(os.path.join(source, n)) for n in os.listdir(source))
        row: dict[str, Any] = {"kind": kind, "file_bytes": size}
        measures = ["floor", "cat", "save"] + (["tensorflow"] if args.tensorflow else [])
        for what in measures:
            results = []
            for _ in range(args.repeat):
                out = root / f"{kind}_{what}"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                if what == "tensorflow":
                    results.append(_run([args.tensorflow, "-c", _TF_CHILD, kind, prefix, str(out), str(HERE)], env))
                else:
                    results.append(_run([sys.executable, "-c", _CHILD, what, kind, prefix, str(out)], env))
                shutil.rmtree(out, ignore_errors=True)
            row[what] = _best(results)
        rows.append(row)
        print(json.dumps(row), flush=True)
    load = os.getloadavg()
    print(f"\nload average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.gb} GiB of weights, best of {args.repeat}")
    print("| file | size | byte floor | cat | slotopt save | vs floor | TensorFlow save | vs TF | save peak / file |")
    print("|---|---|---|---|---|---|---|---|---|")
    def s(row: dict[str, Any], what: str) -> str:
        return f"{row[what]['total_s']:.2f} s" if what in row and "total_s" in row[what] else "-"

    for row in rows:
        save = row["save"].get("total_s")
        floor, tf = row["floor"].get("total_s"), row.get("tensorflow", {}).get("total_s")
        print(f"| {row['kind']} | {row['file_bytes'] / 2**30:.2f} GiB | {s(row, 'floor')} | {s(row, 'cat')} | {s(row, 'save')} | "
              f"{save / floor:.2f}x | {s(row, 'tensorflow')} | " + (f"{save / tf:.2f}x" if tf and save else "-") +
              f" | {row['save'].get('peak_bytes', 0) / row['file_bytes']:.2f}x |")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
