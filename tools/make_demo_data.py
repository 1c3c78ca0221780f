"""Writes ``src/slotopt/data/demo_long.npz``: the inputs and Keras's recorded trajectories of a few 1000-step
reference cases (``../shared/reference/long``), for ``slotopt demo``. Arrays stay in the reference's packed form
(lzma-compressed byte planes; trajectories XORed with the previous step), which ``slotopt.cli.showcase`` unpacks.

Run from the repository root: ``python tools/make_demo_data.py [path/to/shared/reference/long]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

CASES = ["keras3/rmsprop/default/float32", "keras3/nadam/default/float32", "keras3/adam/default/float32",
         "keras3/adagrad/default/float32"]


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    long_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else root.parent / "shared" / "reference" / "long"
    manifest = json.loads((long_dir / "manifest.json").read_text())
    streams = np.load(long_dir / "streams.npz")
    arrays: dict[str, np.ndarray] = {}
    index = []
    for case in (c for c in manifest["cases"] if c["id"] in CASES):
        recorded = np.load(long_dir / case["file"])
        key = case["id"].replace("/", "__")
        for part in ("init0", "init1", "g0", "g1"):  # inputs are shared by the cases of one stream
            arrays[f"{case['stream']}/{part}"] = streams[f"{case['stream']}/{part}"]
            meta = json.loads(str(streams[f"{case['stream']}/{part}.meta"]))
            arrays[f"{case['stream']}/{part}.meta"] = np.array(json.dumps(
                {"dtype": meta["dtype"], "shape": meta["shape"], "delta": False}))
        for i, part in enumerate(("traj0", "traj1")):
            arrays[f"{key}/{part}"] = recorded[part]
            arrays[f"{key}/{part}.meta"] = np.array(json.dumps(
                {"dtype": case["dtype"], "shape": [manifest["steps"], *case["shapes"][i]], "delta": True}))
        index.append({"key": key, "stream": case["stream"], "id": case["id"], "optimizer": case["optimizer"], "kwargs": case["kwargs"],
                      "shapes": case["shapes"], "steps": manifest["steps"]})
    arrays["index"] = np.array(json.dumps({"recorded_with": manifest["recorded_with"], "cases": index}))
    out = root / "src" / "slotopt" / "data" / "demo_long.npz"
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(index)} cases)")


if __name__ == "__main__":
    main()
