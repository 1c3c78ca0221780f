"""Fuzzers for every parser of a file slotopt reads (issue 50): the protobuf wire reader, the TensorBundle index
and its object graph, the TF1 ``.meta`` walker, the HDF5 layout walk and the Keras zip and config readers.

The oracle is the readers' contract: an input is read or refused with the documented error
(``CheckpointFormatError``, which ``TFCheckpointError`` is; ``WireFormatError`` for the wire reader), within a time
bound (:data:`SECONDS_PER_INPUT`) and an allocation bound (:data:`ALLOCATION_BOUND` bytes past 64x the input, by
``tracemalloc``: the Python heap and numpy arrays); anything else is a finding.

Two engines, one oracle and one set of targets:

* ``atheris`` (coverage-guided, libFuzzer's engine, as OSS-Fuzz runs TensorFlow's own parsers) where it is
  installed: ``python tools/fuzz.py --engine atheris --target bundle --seconds 600`` (``make fuzz`` runs every
  target). Each target runs in its own process (atheris instruments ``slotopt.io`` as it is imported).
* ``mutate`` (no dependency): seeded byte mutations of the seed corpus (bytes flipped, set, dropped, repeated,
  spliced), deterministic for a seed; what ``make test`` runs for a few seconds (tests/io/test_fuzz_targets.py).

Seeds are files recorded by the real libraries (tests/data). Findings are written to ``build/fuzz/<target>/``.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SECONDS_PER_INPUT = 10.0
ALLOCATION_BOUND = 64 << 20

#: target -> (seed files, what one input is written as)
SEEDS: dict[str, list[Path]] = {
    "protowire": [DATA / "migration" / "m_tf1_saver_adam" / "model.ckpt-5.meta"],
    "bundle": [DATA / "migration" / "k_tf_ckpt_keras3_mlp_bn_adam" / "ckpt-1.index"],
    "object_graph": [DATA / "migration" / "k_tf_ckpt_keras3_mlp_bn_adam" / "ckpt-1.index"],
    "meta": [DATA / "migration" / "m_tf1_saver_adam" / "model.ckpt-5.meta"],
    "hdf5": [DATA / "keras_checkpoints" / "legacy_adam_float32.h5"],
    "keras_zip": [DATA / "issue50" / "nested_keras3_adam.keras"],
    "keras_config": [DATA / "issue50" / "nested_keras3_adam.keras"],
}


def _graph_bytes() -> bytes:
    from slotopt.io.tensor_bundle import TensorBundle

    bundle = TensorBundle(str(SEEDS["bundle"][0])[: -len(".index")])
    return bundle.read_strings("_CHECKPOINTABLE_OBJECT_GRAPH")[0]


def seed_inputs(target: str) -> list[bytes]:
    if target == "object_graph":
        return [_graph_bytes()]
    if target == "keras_config":
        with zipfile.ZipFile(SEEDS[target][0]) as z:
            return [z.read("config.json")]
    return [p.read_bytes() for p in SEEDS[target]]


class Finding(Exception):
    """An input the oracle rejects: an undocumented exception, too slow, or too much allocated."""


def _runner(target: str) -> Callable[[bytes, str], None]:
    """The function that reads one input of ``target`` (``data``; ``scratch``: a directory it may write)."""
    from slotopt.io import _h5safe, bounds, tf_files, tf_meta
    from slotopt.io import protowire as pw
    from slotopt.io.keras import load_keras_checkpoint
    from slotopt.io.tensor_bundle import TensorBundle

    bundle_dir = SEEDS["bundle"][0].parent
    with zipfile.ZipFile(SEEDS["keras_zip"][0]) as z:
        keras_members = {n: z.read(n) for n in z.namelist()}

    def protowire(data: bytes, scratch: str) -> None:
        pw.decode(data)
        for _, wire, value in pw.iter_fields(data):  # nested messages, as the readers walk them
            if wire == pw.LENGTH_DELIMITED:
                try:
                    for _ in pw.iter_fields(value):  # type: ignore[arg-type]
                        pass
                except pw.WireFormatError:
                    pass  # (a string or bytes field, not a message)

    def bundle(data: bytes, scratch: str) -> None:
        prefix = os.path.join(scratch, "ckpt-1")
        Path(prefix + ".index").write_bytes(data)
        shard = prefix + ".data-00000-of-00001"
        if not os.path.exists(shard):
            os.symlink(bundle_dir / "ckpt-1.data-00000-of-00001", shard)
        read = TensorBundle(prefix)
        for key in list(read.entries)[:64]:
            if read.entries[key].dtype == "string":
                read.read_strings(key)
            elif not read.entries[key].slices:
                try:
                    read.read(key)
                except Exception as err:  # noqa: BLE001 - only the documented error is allowed through
                    if not isinstance(err, _h5safe.CheckpointFormatError):
                        raise
                    continue

    def object_graph(data: bytes, scratch: str) -> None:
        bounds.check_object_graph(data, "fuzz.index", tf_files.OBJECT_GRAPH_KEY)
        tf_files._object_graph(data, "fuzz.index")

    def meta(data: bytes, scratch: str) -> None:
        path = os.path.join(scratch, "model.ckpt-5.meta")
        Path(path).write_bytes(data)
        tf_meta.read_meta_graph(path)

    def hdf5(data: bytes, scratch: str) -> None:
        path = os.path.join(scratch, "m.h5")
        Path(path).write_bytes(data)
        _h5safe.snapshot(path, path, 1 << 30)

    def keras(members: dict[str, bytes], scratch: str) -> None:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for name, body in members.items():
                z.writestr(name, body)
        path = os.path.join(scratch, "m.keras")
        Path(path).write_bytes(out.getvalue())
        ck = load_keras_checkpoint(path)
        ck.optimizer(ck.parameters())

    def keras_zip(data: bytes, scratch: str) -> None:
        path = os.path.join(scratch, "m.keras")
        Path(path).write_bytes(data)
        ck = load_keras_checkpoint(path)
        ck.optimizer(ck.parameters())

    def keras_config(data: bytes, scratch: str) -> None:
        keras({**keras_members, "config.json": data}, scratch)

    return {"protowire": protowire, "bundle": bundle, "object_graph": object_graph, "meta": meta,
            "hdf5": hdf5, "keras_zip": keras_zip, "keras_config": keras_config}[target]


def _allowed(target: str) -> tuple[type, ...]:
    from slotopt.io import protowire as pw
    from slotopt.io.errors import CheckpointFormatError

    return (pw.WireFormatError,) if target == "protowire" else (CheckpointFormatError,)


def check_one(target: str, run: Callable[[bytes, str], None], data: bytes) -> None:
    """Runs one input under the oracle; raises :class:`Finding` for what the contract does not allow."""
    allowed = _allowed(target)
    with tempfile.TemporaryDirectory(prefix="slotopt-fuzz-") as scratch:
        tracemalloc.start()
        start = time.perf_counter()
        try:
            run(data, scratch)
        except allowed:
            pass
        except Exception as err:  # noqa: BLE001 - the finding itself
            raise Finding(f"{type(err).__name__}: {err}"[:500]) from err
        finally:
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    if elapsed > SECONDS_PER_INPUT:
        raise Finding(f"took {elapsed:.1f} s (bound {SECONDS_PER_INPUT} s)")
    if peak > ALLOCATION_BOUND + 64 * len(data):
        raise Finding(f"allocated {peak} bytes from a {len(data)}-byte input")


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One seeded mutation: a few bytes set or flipped, a span dropped, repeated or spliced from elsewhere."""
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 6))):
        if not out:
            out = bytearray(rng.randbytes(8))
        kind = rng.random()
        i = rng.randrange(len(out))
        if kind < 0.45:
            out[i] = rng.randrange(256)
        elif kind < 0.7:
            out[i] ^= 1 << rng.randrange(8)
        elif kind < 0.8:
            del out[i:i + rng.randrange(1, 64)]
        elif kind < 0.9:
            j = rng.randrange(len(out))
            out[i:i] = out[j:j + rng.randrange(1, 64)]
        else:
            out[i:i + 4] = rng.choice((b"\xff\xff\xff\x7f", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x80\x80\x80\x80"))
    return bytes(out)


def run_mutate(target: str, executions: int, seed: int = 0, seconds: float = float("inf")) -> tuple[int, list[str]]:
    """``executions`` seeded mutations of the target's seeds (or as many as ``seconds`` allow): (run, findings)."""
    run = _runner(target)
    seeds = seed_inputs(target)
    rng = random.Random(seed)
    findings: list[str] = []
    done, deadline = 0, time.monotonic() + seconds
    for data in seeds:  # the seeds themselves are read
        check_one(target, run, data)
    while done < executions and time.monotonic() < deadline:
        data = mutate(rng.choice(seeds), rng)
        try:
            check_one(target, run, data)
        except Finding as finding:
            findings.append(f"{target} #{done}: {finding}")
            _save(target, data, str(finding))
        done += 1
    return done, findings


def _save(target: str, data: bytes, why: str) -> None:
    where = ROOT / "build" / "fuzz" / target
    where.mkdir(parents=True, exist_ok=True)
    name = f"finding-{abs(hash(data)) % 10**10}"
    (where / name).write_bytes(data)
    (where / (name + ".txt")).write_text(why + "\n")


def run_atheris(target: str, seconds: int, corpus: Path) -> None:  # pragma: no cover - the long run
    import atheris

    with atheris.instrument_imports(include=["slotopt.io"]):
        import slotopt.io  # noqa: F401 - instrumented for coverage
        run = _runner(target)
    corpus.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seed_inputs(target)):
        (corpus / f"seed-{i}").write_bytes(data)

    def one(data: bytes) -> None:
        try:
            check_one(target, run, data)
        except Finding as finding:
            _save(target, data, str(finding))
            raise

    atheris.Setup([sys.argv[0], str(corpus), f"-max_total_time={seconds}", "-rss_limit_mb=4096",
                   f"-timeout={int(SECONDS_PER_INPUT) + 5}", "-print_final_stats=1", "-max_len=262144"], one)
    atheris.Fuzz()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(SEEDS) + ["all"], default="all")
    parser.add_argument("--engine", choices=["atheris", "mutate"], default="mutate")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--executions", type=int, default=10**9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    targets = sorted(SEEDS) if args.target == "all" else [args.target]
    if args.engine == "atheris":
        if len(targets) != 1:
            raise SystemExit("--engine atheris runs one target per process: give --target")
        run_atheris(targets[0], int(args.seconds), ROOT / "build" / "fuzz" / targets[0] / "corpus")
        return
    total = 0
    for target in targets:
        done, findings = run_mutate(target, args.executions, args.seed, args.seconds)
        total += len(findings)
        print(f"{target}: {done} executions, {len(findings)} findings")
        for line in findings[:10]:
            print("  " + line)
    raise SystemExit(1 if total else 0)


if __name__ == "__main__":
    main()
