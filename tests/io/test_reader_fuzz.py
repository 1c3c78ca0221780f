"""Fuzzers of every reader (TF2 object-graph checkpoints, TF1 Saver checkpoints with their .meta graph, .keras and
.h5 files) that assert the allocation bound of issue 40: whatever a mutated file holds, the reader either reads
it or raises the documented :class:`~slotopt.io.CheckpointFormatError`, and what it allocates is justified by
the file's bytes:

* the tensors it returns hold at most the bytes of the file (no aliasing fan-out);
* its peak of Python and numpy allocations (``tracemalloc``; torch's own allocator is not traced, hence the
  first bound) stays under ``FACTOR`` times the file plus a constant (a few hundred bytes of objects per
  element, each element costing the file at least 8 bytes).

The mutations are seeded (the same cases every run) and each file is small, so the whole module runs in a few
seconds.
"""

from __future__ import annotations

import random
import shutil
import sys
import tracemalloc
from pathlib import Path

import pytest
import torch

import slotopt
from slotopt.io import CheckpointFormatError

sys.path.insert(0, str(Path(__file__).parents[1]))
import _tf_bundle_writer as writer  # noqa: E402

DATA = Path(__file__).parents[1] / "data"
FACTOR, SLACK = 64, 8 << 20
CASES = 24


def _tensor_bytes(ck) -> int:
    tensors = list(ck.weights.values())
    tensors += [v.value for v in getattr(ck, "optimizer_variables", [])]
    tensors += [torch.as_tensor(v) for v in getattr(ck, "optimizer_state", [])]
    return sum(t.numel() * t.element_size() for t in tensors)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice([1, 2, 4, 16])):
        at = rng.randrange(len(out))
        kind = rng.random()
        if kind < 0.5:
            out[at] ^= 1 << rng.randrange(8)
        elif kind < 0.8:  # a varint-ish run of 0xff: huge lengths and counts
            for i in range(at, min(len(out), at + rng.randint(1, 9))):
                out[i] = 0xFF
        else:
            out[at] = rng.randrange(256)
    return bytes(out)


def _bounded(load, files: list[Path]) -> None:
    size = sum(f.stat().st_size for f in files)
    tracemalloc.start()
    try:
        try:
            ck = load()
        except CheckpointFormatError:
            ck = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= FACTOR * size + SLACK, (peak, size)
    if ck is not None:
        assert _tensor_bytes(ck) <= size


def _tf_sources(tmp_path: Path) -> dict[str, tuple[Path, list[str]]]:
    """Small real-layout checkpoints to mutate: a Keras 3 TF2 one, a TF1 one with its .meta, a legacy one."""
    torch.manual_seed(0)
    names = ["dense/kernel", "dense/bias"]
    params = [torch.randn(4, 3), torch.randn(3)]
    keras3 = slotopt.Adam(0.01)
    keras3.build(list(zip(names, params)))
    writer.write_keras3_checkpoint(str(tmp_path / "k3" / "ckpt-1"), keras3, names, block_size=256)
    legacy = slotopt.legacy.Adam(0.01)
    legacy.build(list(zip(names, params)))
    writer.write_legacy_checkpoint(str(tmp_path / "lg" / "ckpt-1"), legacy, names, params, block_size=256)
    shutil.copytree(DATA / "migration" / "m_tf1_saver_adam", tmp_path / "v1")
    suffixes = [".index", ".data-00000-of-00001"]
    return {"keras3": (tmp_path / "k3" / "ckpt-1", suffixes), "legacy": (tmp_path / "lg" / "ckpt-1", suffixes),
            "v1": (tmp_path / "v1" / "model.ckpt-5", suffixes + [".meta"])}


@pytest.mark.parametrize("kind", ["keras3", "legacy", "v1"])
def test_mutated_tensorflow_checkpoints_stay_within_the_allocation_bound(tmp_path, kind):
    prefix, suffixes = _tf_sources(tmp_path)[kind]
    originals = {s: Path(f"{prefix}{s}").read_bytes() for s in suffixes}
    rng = random.Random(f"tf-{kind}")
    for _ in range(CASES):
        for suffix, data in originals.items():
            Path(f"{prefix}{suffix}").write_bytes(data)
        target = rng.choice(suffixes)
        Path(f"{prefix}{target}").write_bytes(_mutate(originals[target], rng))
        _bounded(lambda: slotopt.load_tf_checkpoint(prefix), [Path(f"{prefix}{s}") for s in suffixes])


@pytest.mark.parametrize("source", [DATA / "migration" / "a_keras3_conv_bn_adam.keras",
                                    DATA / "keras_checkpoints" / "legacy_adam_float32.h5"], ids=["keras", "h5"])
def test_mutated_keras_files_stay_within_the_allocation_bound(tmp_path, source):
    original = source.read_bytes()
    rng = random.Random(f"keras-{source.name}")
    path = tmp_path / source.name
    for _ in range(CASES // 2):
        path.write_bytes(_mutate(original, rng))
        _bounded(lambda: slotopt.load_keras_checkpoint(path, isolate=True), [path])


def test_structured_floods_stay_within_the_allocation_bound(tmp_path):
    """The hostile structures of the issue, each at a size that shows the ratio."""
    cases = {}
    graph = writer.Graph()
    for i in range(300):
        graph.variable(graph.add(0, f"v{i}"), f"v{i}", "big" + writer.SUFFIX)
    cases["aliases"] = {"big" + writer.SUFFIX: torch.zeros(1 << 16), "_CHECKPOINTABLE_OBJECT_GRAPH": graph.serialize()}
    cases["empty nodes"] = {"_CHECKPOINTABLE_OBJECT_GRAPH": writer.f_bytes(1, b"") * 100_000}
    children = writer.f_bytes(1, writer.f_varint(1, 0) + writer.f_bytes(2, b"x"))
    cases["tiny children"] = {"_CHECKPOINTABLE_OBJECT_GRAPH": writer.f_bytes(1, children * 20_000)}
    for name, tensors in cases.items():
        prefix = tmp_path / name.replace(" ", "_") / "c"
        writer.write_bundle(str(prefix), tensors)
        _bounded(lambda prefix=prefix: slotopt.load_tf_checkpoint(prefix),
                 [Path(f"{prefix}.index"), Path(f"{prefix}.data-00000-of-00001")])
