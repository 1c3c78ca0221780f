"""``slotopt demo``: why slotopt exists, in one screen and one picture (about ten seconds on two CPU cores).

1. **Same gradients, 1000 steps.** Keras's own weight trajectories, recorded from Keras 3.15 on TensorFlow 2.21
   (``data/demo_long.npz``, a subset of the project's 1000-step references), are replayed twice from the same
   initial weights and the same recorded gradients: once by slotopt's Keras optimizer and once by its nearest
   ``torch.optim`` look-alike given the same hyperparameters. slotopt stays on Keras's trajectory (same bits,
   step after step); the look-alike drifts away from it, because the formulas differ (epsilon placement, bias
   correction, momentum form).
2. **A Keras run continued in PyTorch.** A Keras 3 Conv2D + BatchNormalization network trained with Adam for 5
   steps and saved with ``model.save`` (``data/demo_keras3_convnet.keras``, from the project's migration
   references) is loaded by ``slotopt.load_keras_checkpoint`` with its Adam state and given the gradients Keras
   recorded for the next 5 steps; the weights are compared with what Keras itself computed after restoring the
   same file. ``torch.optim.Adam`` given the same weights and gradients (its optimizer state cannot come along) is
   shown beside it.

It prints a table per part and writes a PNG (``--out``). matplotlib draws the picture and h5py reads the Keras
file (``pip install 'slotopt[demo]'``); tqdm shows progress bars when it is installed.
"""

from __future__ import annotations

import json
import lzma
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Optional, TextIO

import numpy as np
import torch

__all__ = ["LongRun", "Continuation", "run_showcase", "replay_long_cases", "continue_keras_run", "unpack"]

_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def unpack(blob: np.ndarray, dtype: str, shape: Sequence[int], delta: bool) -> np.ndarray:
    """The array stored in ``blob`` by the reference recorder: lzma-compressed byte planes of the values' bit
    patterns (most significant bytes first), each step XORed with the previous one when ``delta``."""
    kind = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    steps = shape[0] if shape else 1
    per_step = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    raw = np.frombuffer(lzma.decompress(np.asarray(blob, dtype=np.uint8).tobytes()), dtype=np.uint8)
    planes = raw.reshape(kind.itemsize, per_step, steps).transpose(2, 1, 0)
    bits = np.ascontiguousarray(planes).view(_UNSIGNED[kind.itemsize]).reshape(steps, per_step)
    if delta:
        bits = np.bitwise_xor.accumulate(bits, axis=0)
    return bits.view(kind).reshape(shape)


# ------------------------------------------------------------------------------------------- part 1
#: For each recorded Keras 3 optimizer (default hyperparameters): the torch.optim class a porter would reach for,
#: with Keras's hyperparameters carried over, and how it is configured (for the table).
def _look_alikes() -> dict[str, tuple[Callable[[list[torch.Tensor]], Any], str]]:
    return {
        "RMSprop": (lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, eps=1e-7), "RMSprop(lr=1e-3, alpha=0.9, eps=1e-7)"),
        "Nadam": (lambda p: torch.optim.NAdam(p, lr=1e-3, eps=1e-7), "NAdam(lr=1e-3, eps=1e-7)"),
        "Adam": (lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-7), "Adam(lr=1e-3, eps=1e-7)"),
        "Adagrad": (lambda p: torch.optim.Adagrad(p, lr=1e-3, initial_accumulator_value=0.1, eps=1e-7),
                    "Adagrad(lr=1e-3, initial_accumulator_value=0.1, eps=1e-7)"),
    }


@dataclass
class LongRun:
    """One optimizer's 1000 steps: distance from Keras's recorded weights after each step."""

    optimizer: str
    torch_config: str
    slotopt_relative: list[float] = field(default_factory=list)  # max |w - w_keras| / max |w_keras|, per step
    torch_relative: list[float] = field(default_factory=list)
    slotopt_identical_steps: int = 0  # steps after which every weight has Keras's bits

    @property
    def steps(self) -> int:
        return len(self.slotopt_relative)


def _load_long() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with resources.files("slotopt").joinpath("data").joinpath("demo_long.npz").open("rb") as handle:
        archive = np.load(handle)
        arrays = {name: archive[name] for name in archive.files}
    return json.loads(str(arrays.pop("index"))), arrays


def _part(arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
    meta = json.loads(str(arrays[f"{name}.meta"]))
    return unpack(arrays[name], meta["dtype"], meta["shape"], meta["delta"])


def _relative(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(actual.astype(np.float64) - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def _replay(opt_factory: Callable[[list[torch.Tensor]], Any], init: list[np.ndarray],
            grads: list[np.ndarray]) -> list[list[np.ndarray]]:
    weights = [torch.nn.Parameter(torch.tensor(value)) for value in init]
    optimizer = opt_factory(weights)
    trajectory = []
    for step in range(grads[0].shape[0]):
        for weight, stream in zip(weights, grads):
            weight.grad = torch.from_numpy(np.ascontiguousarray(stream[step]))
        optimizer.step()
        trajectory.append([w.detach().numpy().copy() for w in weights])
    return trajectory


def replay_long_cases(progress: Optional[Callable[[str], None]] = None) -> list[LongRun]:
    """Part 1: every bundled case replayed by slotopt and by its torch.optim look-alike."""
    import slotopt

    index, arrays = _load_long()
    look_alikes = _look_alikes()
    runs = []
    for case in index["cases"]:
        name = case["optimizer"]
        init = [_part(arrays, f"{case['stream']}/init{i}").reshape(case["shapes"][i]) for i in range(2)]
        grads = [_part(arrays, f"{case['stream']}/g{i}") for i in range(2)]
        grads = [g.reshape(g.shape[0], *case["shapes"][i]) for i, g in enumerate(grads)]
        keras = [_part(arrays, f"{case['key']}/traj{i}") for i in range(2)]
        make_torch, described = look_alikes[name]
        mine = _replay(lambda p, n=name, kw=case["kwargs"]: getattr(slotopt, n)(params=p, **kw), init, grads)
        theirs = _replay(make_torch, init, grads)
        run = LongRun(name, described)
        for step, (a, b) in enumerate(zip(mine, theirs)):
            expected = [keras[0][step], keras[1][step]]
            run.slotopt_relative.append(max(_relative(x, e) for x, e in zip(a, expected)))
            run.torch_relative.append(max(_relative(x, e) for x, e in zip(b, expected)))
            run.slotopt_identical_steps += all(
                x.tobytes() == e.tobytes() for x, e in zip(a, expected))
        runs.append(run)
        if progress is not None:
            progress(name)
    return runs


# ------------------------------------------------------------------------------------------- part 2
@dataclass
class Continuation:
    """Part 2: a Keras run continued in PyTorch, against what Keras computed after restoring the same file."""

    model: str
    iterations_loaded: int
    keras_losses: list[float]  # the loss Keras computed before each continued step
    slotopt_distance: list[float]  # after each continued step: max |w - w_keras| / max |w_keras|, whole model
    torch_distance: list[float]
    slotopt_identical_steps: int = 0

    @property
    def slotopt_weight_error(self) -> float:
        return max(self.slotopt_distance)

    @property
    def torch_weight_error(self) -> float:
        return max(self.torch_distance)


def continue_keras_run() -> Continuation:
    """Loads the bundled ``.keras`` file (a Conv2D + BatchNormalization network that Keras 3 trained with Adam for
    5 steps and saved with ``model.save``), and applies the gradients Keras recorded for the next 5 steps: with
    slotopt's Adam restored from the file, and with ``torch.optim.Adam`` on the same weights (its state cannot
    come along). Both are compared with the weights Keras computed after restoring the same file."""
    import slotopt

    data_dir = resources.files("slotopt").joinpath("data")
    record = json.loads(data_dir.joinpath("demo_keras3_convnet.json").read_text())
    with resources.as_file(data_dir.joinpath("demo_keras3_convnet.keras")) as path:
        checkpoint = slotopt.load_keras_checkpoint(str(path))
    params = checkpoint.parameters()
    optimizer = checkpoint.optimizer(params)
    iterations = int(optimizer.iterations)
    config = record["optimizer"]["config"]["config"]
    look_alike_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    look_alike = torch.optim.Adam(look_alike_params, lr=config["learning_rate"], betas=(config["beta_1"],
                                  config["beta_2"]), eps=config["epsilon"])

    result = Continuation(record["model"], iterations, [s["loss"] for s in record["steps"]], [], [])
    for step in record["steps"]:
        grads = [torch.tensor(np.asarray(g["dense"], dtype=np.float32)) for g in step["grads"]]
        optimizer.apply_gradients(zip(grads, params))
        for weight, grad in zip(look_alike_params, grads):
            weight.grad = grad.clone()
        look_alike.step()
        expected = [np.asarray(w, dtype=np.float32) for w in step["weights_after"]]
        flat_expected = np.concatenate([e.ravel() for e in expected])
        mine = [p.detach().numpy() for p in params]
        result.slotopt_distance.append(_relative(np.concatenate([m.ravel() for m in mine]), flat_expected))
        result.torch_distance.append(_relative(
            np.concatenate([p.detach().numpy().ravel() for p in look_alike_params]), flat_expected))
        result.slotopt_identical_steps += all(m.tobytes() == x.tobytes() for m, x in zip(mine, expected))
    return result


# ------------------------------------------------------------------------------------------- output
def _format_ratio(value: float) -> str:
    return "0 (same bits)" if value == 0 else f"{value:.1e}"


def format_long_table(runs: Sequence[LongRun]) -> str:
    width = max([len("torch.optim look-alike"), *(len(run.torch_config) for run in runs)])  # the longest label
    lines = ["Same recorded gradients, 1000 steps: relative distance from Keras's weights "
             "(max |w - w_keras| / max |w_keras|)",
             f"{'Keras 3 optimizer':<18} {'slotopt: steps with Keras bits':>31} {'slotopt @1000':>14}   "
             f"{'torch.optim look-alike':<{width}} {'@10':>8} {'@100':>8} {'@1000':>8}"]
    for run in runs:
        lines.append(f"{run.optimizer:<18} {run.slotopt_identical_steps:>25}/{run.steps:<5} "
                     f"{_format_ratio(run.slotopt_relative[-1]):>14}   {run.torch_config:<{width}} "
                     f"{run.torch_relative[9]:>8.1e} {run.torch_relative[99]:>8.1e} {run.torch_relative[-1]:>8.1e}")
    return "\n".join(lines)


def format_continuation_table(result: Continuation) -> str:
    lines = [f"A Keras 3 run continued in PyTorch: {result.model}",
             f"saved by model.save after {result.iterations_loaded} Adam steps; the next 5 steps take the gradients "
             "Keras recorded. Relative distance from the weights Keras computed:",
             f"{'step':>4} {'slotopt (state from the file)':>30} {'torch.optim.Adam (state lost)':>30}"]
    for i, (s, t) in enumerate(zip(result.slotopt_distance, result.torch_distance)):
        lines.append(f"{result.iterations_loaded + i + 1:>4} {_format_ratio(s):>30} {t:>30.1e}")
    lines.append(f"slotopt: Keras's bits after {result.slotopt_identical_steps} of {len(result.slotopt_distance)} "
                 "steps")
    return "\n".join(lines)


def plot(runs: Sequence[LongRun], result: Continuation, path: str) -> None:
    import matplotlib.pyplot as plt

    figure = draw(runs, result)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw(runs: Sequence[LongRun], result: Continuation) -> Any:
    """The demo picture as a matplotlib figure (left: the 1000-step replays; right: the Keras file continued)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(14, 5.6), gridspec_kw={"width_ratios": [1.35, 1]})
    floor = 1e-9  # where "same bits" is drawn on the log axis
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    left.axhline(floor, color="black", lw=1.0, zorder=1)
    dash = 6.0  # slotopt's lines lie on the floor together: each draws a dash in turn, so every colour shows
    for k, (run, color) in enumerate(zip(runs, colors)):
        steps = np.arange(1, run.steps + 1)
        left.plot(steps, np.maximum(run.torch_relative, floor), color=color, lw=1.6,
                  label=f"torch.optim.{run.torch_config.split('(')[0]} vs Keras {run.optimizer}")
        mine = np.maximum(run.slotopt_relative, floor)
        left.plot(steps, mine, color=color, lw=3.0, zorder=3,
                  ls=(k * dash, (dash, dash * (len(runs) - 1))))
    left.text(1.2, floor * 1.8, "same bits as Keras: slotopt (dashed, each optimizer's colour)", fontsize=10,
              weight="bold")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_ylim(floor / 3, 1.0)
    left.set_xlabel("step (same recorded gradients for every optimizer)")
    left.set_ylabel("distance from Keras's weights\nmax |w − w_keras| / max |w_keras|")
    left.set_title("1000 steps replayed against Keras 3.15's recorded weights")
    # (in the empty band between the look-alikes that drift and the close ones, off every curve)
    left.legend(loc="upper left", bbox_to_anchor=(0.01, 0.70), fontsize=8.5,
                title="nearest torch.optim, same hyperparameters", title_fontsize=8.5)
    left.grid(True, which="major", alpha=0.3)

    after = np.arange(result.iterations_loaded + 1, result.iterations_loaded + len(result.slotopt_distance) + 1)
    right.plot(after, np.maximum(result.torch_distance, floor), "^-", color=colors[1], ms=7, lw=1.8,
               label="torch.optim.Adam: same weights, optimizer state lost")
    right.plot(after, np.maximum(result.slotopt_distance, floor), "o-", color=colors[0], ms=7, lw=2.2,
               label="slotopt: load_keras_checkpoint, Adam state included")
    right.axhline(floor, color="black", lw=2.5)
    right.text(after[0], floor * 1.8, "same bits as Keras", fontsize=10, weight="bold")
    right.set_yscale("log")
    right.set_ylim(floor / 3, 1.0)
    right.set_xticks(after)
    right.set_xlabel(f"training step (Keras saved after step {result.iterations_loaded}; recorded gradients)")
    right.set_ylabel("distance from the weights Keras computed\nmax |w − w_keras| / max |w_keras|")
    right.set_title("A Keras Conv2D + BatchNorm run continued in PyTorch\nfrom its .keras file (model.save)")
    right.legend(loc="center right", fontsize=8.5)
    right.grid(True, which="major", alpha=0.3)
    figure.suptitle("slotopt trains exactly like Keras; torch.optim's look-alikes do not", fontsize=14, weight="bold")
    figure.tight_layout()
    return figure


def run_showcase(out: str = "slotopt-demo.png", stream: TextIO = sys.stdout) -> int:
    """Runs both parts, prints their tables and writes the picture to ``out``; returns 0."""
    from .demo import check_writable, require

    out = check_writable(out, "--out")
    require("matplotlib")
    require("h5py", "reading the bundled Keras file")
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress bars are optional
        tqdm = None
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest and immune to a busy second core
    try:
        bar = tqdm(total=5, desc="slotopt demo", unit="run", file=stream) if tqdm else None

        def advance(name: str) -> None:
            if bar is not None:
                bar.set_postfix_str(name)
                bar.update(1)

        runs = replay_long_cases(advance)
        result = continue_keras_run()
        advance("Keras file continued")
        if bar is not None:
            bar.close()
    finally:
        torch.set_num_threads(threads)
    print("", file=stream)
    print(format_long_table(runs), file=stream)
    print("", file=stream)
    print(format_continuation_table(result), file=stream)
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    plot(runs, result, out)
    seconds = time.perf_counter() - started
    print(f"\nPicture written to {out} ({seconds:.1f} s). What it shows: left, slotopt stays on Keras's trajectory "
          "while each torch.optim look-alike drifts; right, a Keras run continues in PyTorch exactly.", file=stream)
    return 0
