#!/usr/bin/env python3
"""Checkpoint reading at scale: time and peak memory of slotopt's readers against a plain read of the same bytes.

Writes, with slotopt's own test writer (tests/_tf_bundle_writer.py, no TensorFlow) and h5py, one large checkpoint
of each format: a model of Dense layers (``--gb`` of float32 weights) after Adam steps, so three times that on
disk (weights, m, v):

* ``tf2``: a ``tf.train.Checkpoint`` of a Keras 3 Adam (object graph, TensorBundle);
* ``tf1``: a TF1 ``Saver`` checkpoint of an ``AdamOptimizer`` with its ``.meta`` graph;
* ``keras``: a Keras 3 ``.keras`` file (``model.weights.h5`` stored in the zip, as ``model.save`` writes it).

Each measurement runs in a fresh process (imports excluded from the time, the process's memory after imports
subtracted from its peak): ``load`` (the reader), ``+ optimizer`` (load, ``parameters()`` and the optimizer
built with its state: the slots are the file's tensors), ``module`` (``load_module`` into ``nn.Linear`` layers:
the weights copied into the module, the kernels' slots converted to torch's layout), ``inspect`` (``slotopt
inspect``), and ``plain read`` (the file's bytes read into one buffer: what the disk and page cache allow). The machine's load (``os.getloadavg``) is printed with the figures.

With ``--tensorflow PYTHON`` (a Python that has TensorFlow, e.g. a venv of its own), TensorFlow's restore of the
same files is measured too (``benchmarks/io_tensorflow.py``, each run in a fresh process) and shown in the same
table. The last thing printed is a markdown table of the best runs.

    python benchmarks/io_bench.py --gb 1 --dir /tmp/io_bench
    python benchmarks/io_bench.py --gb 0.05 --formats tf1 --keep
    python benchmarks/io_bench.py --gb 1 --repeat 3 --tensorflow /work/tfvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

WIDTH = 4096  # a Dense kernel of WIDTH x WIDTH float32 is 64 MiB


def _layers(gb: float) -> int:
    return max(1, round(gb * 2 ** 30 / (4 * (WIDTH * WIDTH + WIDTH))))


def _tensors(layers: int, seed: int = 0) -> Any:
    """(layer, weight name, weight, m, v) per variable, made one at a time (never all in memory)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    for i in range(layers):
        for name, shape in (("kernel", (WIDTH, WIDTH)), ("bias", (WIDTH,))):
            weight = torch.randn(shape, generator=generator)
            m = torch.randn(shape, generator=generator) * 1e-3
            v = torch.rand(shape, generator=generator) * 1e-6
            yield i, name, weight, m, v


def _layer_name(i: int) -> str:
    return "dense" if i == 0 else f"dense_{i}"


# ------------------------------------------------------------------------------------------------ writers
class _BundleWriter:
    """A TensorBundle written tensor by tensor (the test writer's entries and table, the data streamed)."""

    def __init__(self, prefix: str) -> None:
        import _tf_bundle_writer as writer

        self.w, self.prefix = writer, prefix
        self.entries = [(b"", writer.header_proto(1))]
        self.data = open(f"{prefix}.data-00000-of-00001", "wb")  # noqa: SIM115 - closed in close()
        self.offset = 0

    def add(self, key: str, value: Any) -> None:
        from slotopt.io.crc32c import crc32c

        code, shape, data = self.w._tensor_bytes(value, False)
        crc = self.w.string_crc(data, 1) if code == self.w.STRING else crc32c(data)
        self.entries.append((key.encode(), self.w.entry_proto(code, shape, 0, self.offset, len(data),
                                                              self.w.mask(crc))))
        self.data.write(data)
        self.offset += len(data)

    def close(self) -> None:
        self.data.close()
        with open(f"{self.prefix}.index", "wb") as f:
            f.write(self.w.table(self.entries))


def _adam_paths(names: list[str]) -> list[str]:
    """The variable paths a slotopt (Keras 3) Adam gives variables ``names`` (built on one-element stand-ins)."""
    import torch

    import slotopt

    opt = slotopt.Adam(0.001)
    opt.build([(n, torch.zeros(1)) for n in names])
    return [str(v.path) for v in opt.variables]


def write_tf2(directory: Path, layers: int) -> str:
    import torch
    from _tf_bundle_writer import SUFFIX, Graph

    prefix = str(directory / "ckpt-1")
    names = [f"{_layer_name(i)}/{n}" for i in range(layers) for n in ("kernel", "bias")]
    paths = _adam_paths(names)
    graph, out = Graph(), _BundleWriter(prefix)
    optimizer = graph.add(0, "optimizer")
    variables, trainable = graph.add(optimizer, "_variables"), graph.add(optimizer, "_trainable_variables")
    for n, special, value in ((0, "_iterations", torch.tensor(2, dtype=torch.int64)),
                              (1, "_learning_rate", torch.tensor(0.001))):
        node = graph.add(optimizer, special)
        graph.link(variables, str(n), node)
        graph.variable(node, paths[n], f"optimizer/{special}{SUFFIX}")
        out.add(f"optimizer/{special}{SUFFIX}", value)
    for j, (_, _, weight, m, v) in enumerate(_tensors(layers)):
        key = f"optimizer/_trainable_variables/{j}{SUFFIX}"
        graph.variable(graph.add(trainable, str(j)), names[j], key)
        out.add(key, weight)
        for n, value in ((2 + 2 * j, m), (3 + 2 * j, v)):
            key = f"optimizer/_variables/{n}{SUFFIX}"
            graph.variable(graph.add(variables, str(n)), paths[n], key)
            out.add(key, value)
    out.add("_CHECKPOINTABLE_OBJECT_GRAPH", graph.serialize())
    out.close()
    return prefix


def write_tf1(directory: Path, layers: int) -> str:
    import torch
    from _tf_bundle_writer import write_meta_graph

    prefix = str(directory / "model.ckpt-2")
    out = _BundleWriter(prefix)
    names = []
    for i, name, weight, m, v in _tensors(layers):
        key = f"{_layer_name(i)}/{name}"
        names.append(key)
        out.add(key, weight)
        out.add(f"{key}/Adam", m)
        out.add(f"{key}/Adam_1", v)
    out.add("beta1_power", torch.tensor(0.9 ** 3))
    out.add("beta2_power", torch.tensor(0.999 ** 3))
    out.add("global_step", torch.tensor(2, dtype=torch.int64))
    out.close()
    write_meta_graph(prefix + ".meta", {"Adam/learning_rate": 0.001, "Adam/beta1": 0.9, "Adam/beta2": 0.999,
                                        "Adam/epsilon": 1e-8}, names)
    return prefix


def write_keras(directory: Path, layers: int) -> str:
    import h5py
    import numpy as np

    layer_configs = [{"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
                      "config": {"batch_shape": [None, WIDTH], "dtype": "float32", "name": "input_layer"}}]
    for i in range(layers):
        layer_configs.append({"module": "keras.layers", "class_name": "Dense", "registered_name": None,
                              "build_config": {"input_shape": [None, WIDTH]},
                              "config": {"name": _layer_name(i), "trainable": True, "dtype": "float32",
                                         "units": WIDTH, "activation": "linear", "use_bias": True}})
    config = {"module": "keras", "class_name": "Sequential", "registered_name": None,
              "config": {"name": "sequential", "trainable": True, "layers": layer_configs},
              "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": "Adam",
                                               "registered_name": None,
                                               "config": {"name": "adam", "learning_rate": 0.001}}}}
    h5_path = directory / "model.weights.h5"
    with h5py.File(h5_path, "w") as f:
        opt = f.create_group("optimizer/vars")
        opt["0"] = np.int64(2)
        opt["1"] = np.float32(0.001)
        for j, (i, name, weight, m, v) in enumerate(_tensors(layers)):
            f[f"layers/{_layer_name(i)}/vars/{0 if name == 'kernel' else 1}"] = weight.numpy()
            opt[str(2 + 2 * j)] = m.numpy()
            opt[str(3 + 2 * j)] = v.numpy()
    path = directory / "model.keras"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(config))
        z.write(h5_path, "model.weights.h5")
    os.remove(h5_path)
    return str(path)


WRITERS = {"tf2": write_tf2, "tf1": write_tf1, "keras": write_keras}


# ------------------------------------------------------------------------------------------------ measuring
_CHILD = r"""
import json, os, resource, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
what, kind, path, files = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
import torch, slotopt, slotopt.io, slotopt.cli.inspect, io as _io
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
try:  # the peak from here on, not the imports' (Linux: "5" resets VmHWM)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
base = rss()
start = time.perf_counter()
out = {}
if what == "plain":
    for name in files:
        size = os.path.getsize(name)
        buffer = bytearray(size)
        with open(name, "rb", buffering=0) as f:
            view, done = memoryview(buffer), 0
            while done < size:
                done += f.readinto(view[done:done + (1 << 24)])
        del view, buffer
elif what == "inspect":
    slotopt.cli.inspect.inspect_checkpoint(path, _io.StringIO())
elif what in ("floor", "save", "save_module"):  # the way back (issue 47): what is in memory first, untimed
    target = os.path.join(os.path.dirname(path), "written" + os.path.basename(path))
    if what == "floor":  # the same bytes from memory to a new file in the folder, fsynced: what the disk allows
        buffer = bytearray(os.path.getsize(path))
    elif what == "save":
        ck = slotopt.load_keras_checkpoint(path)
        params = ck.parameters()
        opt = ck.optimizer(params)
    else:  # after load_module: the kernels and their slots transposed back as they are written
        ck = slotopt.load_keras_checkpoint(path)
        width = next(iter(ck.weights.values())).shape[0]
        params = torch.nn.Sequential(*[torch.nn.Linear(width, width, device="meta")
                                       for _ in range(len(ck.variable_names) // 2)]).to_empty(device="cpu")
        opt = ck.load_module(params, dict(zip(ck.variable_names, dict(params.named_parameters()))))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    base = rss()
    start = time.perf_counter()
    if what == "floor":
        with open(target, "wb", buffering=0) as f:
            view, done = memoryview(buffer), 0
            while done < len(buffer):
                done += f.write(view[done:done + (1 << 24)])
            os.fsync(f.fileno())
    else:
        ck.save(target, params, opt)  # staged, fsynced, CRC-32 and structure verified, renamed
    os.remove(target)
else:
    ck = slotopt.load_keras_checkpoint(path) if kind == "keras" else slotopt.load_tf_checkpoint(path)
    out["load_s"] = time.perf_counter() - start
    if what == "optimizer":
        optimizer = slotopt.Adam(0.001) if kind == "tf2" else None
        opt = ck.optimizer(ck.parameters(), optimizer=optimizer) if optimizer is not None else \
            ck.optimizer(ck.parameters())
    elif what == "module":  # nn.Linear layers made without initializing them (load_module writes every weight)
        width = next(iter(ck.weights.values())).shape[0]
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width, device="meta")
                                      for _ in range(len(ck.variable_names) // 2)]).to_empty(device="cpu")
        if kind == "keras":
            opt = ck.load_module(model, dict(zip(ck.variable_names, dict(model.named_parameters()))))
        else:
            opt = ck.load_module(model, optimizer=slotopt.Adam(0.001) if kind == "tf2" else None)
out["total_s"] = time.perf_counter() - start
try:
    out["peak_bytes"] = hwm() - base
except (OSError, StopIteration):
    out["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps(out))
"""


def _measure(what: str, kind: str, path: str, files: list[str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, what, kind, path, json.dumps(files)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tensorflow(python: str, kind: str, path: str, repeat: int) -> dict[str, float]:
    """TensorFlow's restore of the same file (benchmarks/io_tensorflow.py under ``python``): the best of ``repeat``
    fresh processes. TF1's importable ``.meta`` is exported once first (untimed, next to the checkpoint)."""
    script = str(HERE / "io_tensorflow.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    if kind == "tf1":
        done = subprocess.run([python, script, "--prepare", kind, path], capture_output=True, text=True, env=env,
                              check=False)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    runs = []
    for _ in range(repeat):
        done = subprocess.run([python, script, kind, path], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["total_s"])


def _markdown(results: dict[str, Any], load: tuple[float, float, float]) -> str:
    """The best runs as a markdown table (the figures io_bench printed above, one row per format)."""
    gib = 2 ** 30

    def cell(row: dict[str, Any], what: str, key: str = "total_s") -> str:
        r = row.get(what) or {}
        return "error" if "error" in r else f"{r[key]:.2f} s" if key in r else "-"

    def peak(row: dict[str, Any], what: str) -> str:
        r = row.get(what) or {}
        return "-" if "peak_bytes" not in r else f"{r['peak_bytes'] / gib:.2f}"

    lines = ["| file | size | plain read | slotopt load | + optimizer | load_module | inspect "
             "| slotopt peak GiB (load / + opt / module) | TensorFlow/Keras restore | TF peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, row in results.items():
        tf = row.get("tensorflow") or {}
        restore = cell(row, "tensorflow")
        if "build_s" in tf:
            restore = f"{tf['restore_s']:.2f} s (+{tf['build_s']:.2f} s build)"
        lines.append(f"| {kind} | {row['bytes'] / gib:.2f} GiB | {cell(row, 'plain')} | {cell(row, 'load')} | "
                     f"{cell(row, 'optimizer')} | {cell(row, 'module')} | {cell(row, 'inspect')} | "
                     f"{peak(row, 'load')} / {peak(row, 'optimizer')} / {peak(row, 'module')} | "
                     f"{restore if tf else '-'} | {peak(row, 'tensorflow')} |")
    lines.append(f"\nload average before / after: {load[0]:.2f} / {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    return "\n".join(lines)


def _keras_save(python: str, path: str, repeat: int) -> dict[str, float]:
    """Keras's own ``model.save`` of the same model (benchmarks/io_tensorflow.py ``--save``), best of ``repeat``."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    runs = []
    for _ in range(repeat):
        done = subprocess.run([python, str(HERE / "io_tensorflow.py"), "--save", "keras", path], capture_output=True,
                              text=True, env=env, check=False)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["total_s"])


def _write_markdown(results: dict[str, Any]) -> str:
    """The way back's table: slotopt's save against the byte floor and Keras's own save, same run."""
    gib = 2 ** 30
    lines = ["| file | size | floor (write + fsync) | slotopt save | ratio to floor | slotopt save peak GiB "
             "| Keras model.save (+ fsync) | ratio to Keras + fsync | Keras peak GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, row in results.items():
        floor, keras = row.get("floor") or {}, row.get("keras_save") or {}
        for what, label in (("save", "params"), ("save_module", "module")):
            save = row.get(what) or {}
            if "total_s" not in save:
                continue
            ratio = f"{save['total_s'] / floor['total_s']:.2f}" if "total_s" in floor else "-"
            durable = keras.get("total_s", 0.0) + keras.get("fsync_s", 0.0)
            kratio = f"{save['total_s'] / durable:.2f}" if "total_s" in keras else "-"
            lines.append(f"| {kind} ({label}) | {row['bytes'] / gib:.2f} GiB | "
                         + (f"{floor['total_s']:.2f} s" if floor else "-") + f" | {save['total_s']:.2f} s | {ratio} | "
                         f"{save['peak_bytes'] / gib:.3f} | "
                         + (f"{keras['total_s']:.2f} s (+{keras.get('fsync_s', 0.0):.2f} s) | {kratio} | "
                            f"{keras['peak_bytes'] / gib:.2f} |"
                            if "total_s" in keras else "- | - | - |"))
    return "\n".join(lines)


def _files(kind: str, path: str) -> list[str]:
    if kind == "keras":
        return [path]
    return [f"{path}.index", f"{path}.data-00000-of-00001"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GiB of float32 weights (files are 3x that)")
    parser.add_argument("--dir", default="/tmp/slotopt_io_bench", help="where the files are written")
    parser.add_argument("--formats", default="tf1,tf2,keras", help="comma-separated: tf1, tf2, keras")
    parser.add_argument("--measure", default="plain,load,optimizer,module,inspect",
                        help="comma-separated: plain, load, optimizer, module, inspect (e.g. leave out optimizer "
                        "and module where the machine lacks the memory for them); floor, save: the way back "
                        "(keras: the same bytes written and fsynced, against ckpt.save of params or, save_module, of a module after "
                        "load_module, and Keras's model.save)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement (the best is shown)")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument("--tensorflow", metavar="PYTHON", help="also time TensorFlow's restore of the same files "
                        "with this Python (one that has tensorflow, keras; see benchmarks/io_tensorflow.py)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    layers = _layers(args.gb)
    print(f"model: {layers} Dense layers of {WIDTH}x{WIDTH} + bias, {layers * (WIDTH * WIDTH + WIDTH) * 4 / 2 ** 30:.2f}"
          f" GiB of float32 weights, Adam (m, v); load average {os.getloadavg()}, {os.cpu_count()} CPUs")
    try:
        from slotopt.io.crc32c import implementation
    except ImportError:  # a slotopt before issue 40 (a baseline run)
        print("CRC-32C: google-crc32c or numpy (a slotopt before issue 40)")
    else:
        print(f"CRC-32C: {implementation()}")
    results = {}
    for kind in args.formats.split(","):
        directory = Path(args.dir) / kind
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        start = time.perf_counter()
        path = WRITERS[kind](directory, layers)
        files = _files(kind, path)
        size = sum(os.path.getsize(f) for f in files)
        print(f"\n{kind}: wrote {size / 2 ** 30:.2f} GiB in {time.perf_counter() - start:.1f} s ({path})")
        row = {}
        measures = args.measure.split(",")
        writes = [w for w in measures if w in ("floor", "save", "save_module")]
        keras_save = bool(args.tensorflow and kind == "keras" and {"save", "save_module"} & set(writes))
        all_runs: dict[str, list] = {w: [] for w in measures + (["keras_save"] if keras_save else [])}
        for _ in range(args.repeat):  # the writes interleaved, so that a busy disk slows each of them alike
            for what in writes + (["keras_save"] if keras_save else []):
                all_runs[what].append(_keras_save(args.tensorflow, path, 1) if what == "keras_save" else
                                      _measure(what, kind, path, files))
        for what in measures:
            runs = all_runs[what] or [_measure(what, kind, path, files) for _ in range(args.repeat)]
            good = [r for r in runs if "error" not in r]
            row[what] = min(good, key=lambda r: r["total_s"]) if good else runs[0]
            r = row[what]
            if "error" in r:
                print(f"  {what:10s} error: {r['error']}")
                continue
            print(f"  {what:10s} {r['total_s']:7.2f} s   peak {r['peak_bytes'] / 2 ** 30:6.2f} GiB "
                  f"({r['peak_bytes'] / size:5.2f}x the file)   load average {os.getloadavg()[0]:.2f}")
        if keras_save:
            good = [r for r in all_runs["keras_save"] if "error" not in r]
            r = row["keras_save"] = min(good, key=lambda r: r["total_s"]) if good else all_runs["keras_save"][0]
            print(f"  {'keras save':10s} error: {r['error']}" if "error" in r else
                  f"  {'keras save':10s} {r['total_s']:7.2f} s   peak {r['peak_bytes'] / 2 ** 30:6.2f} GiB")
        if args.tensorflow and set(args.measure.split(",")) - {"floor", "save", "save_module"}:
            r = row["tensorflow"] = _tensorflow(args.tensorflow, kind, path, args.repeat)
            print(f"  {'tensorflow':10s} error: {r['error']}" if "error" in r else
                  f"  {'tensorflow':10s} {r['total_s']:7.2f} s   peak {r['peak_bytes'] / 2 ** 30:6.2f} GiB "
                  f"({r['peak_bytes'] / size:5.2f}x the file)   load average {os.getloadavg()[0]:.2f}")
        results[kind] = {"bytes": size, **row}
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print("\n" + json.dumps(results))
    if set(args.measure.split(",")) - {"floor", "save", "save_module"}:
        print("\n" + _markdown(results, load_before))
    else:
        print(f"\nload average before / after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    if any("save" in row or "save_module" in row for row in results.values()):
        print("\n" + _write_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
