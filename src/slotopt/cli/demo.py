"""``slotopt demo --optimizer ...``: train the optimizers you name on small problems, in under a minute on a CPU.

(``slotopt demo`` without ``--optimizer`` runs ``showcase.py``: slotopt against Keras and torch.optim.)

Two small trainings, both on data that needs no download:

* a multi-layer perceptron on scikit-learn's bundled 8x8 handwritten digits (``load_digits``), once per
  optimizer, with the optimizers given the Keras way (a name such as ``"adam"`` or a serialized
  ``{"class_name": ..., "config": {...}}`` dict, resolved by ``slotopt.get``);
* a two-tower recommender on generated user/item interactions, whose sparse embedding tables are trained by
  Adagrad and whose dense layers by Adam, through one ``slotopt.CompositeOptimizer``.

It prints a results table and writes a PNG of the loss curves. scikit-learn and matplotlib are optional
dependencies (``pip install 'slotopt[demo,digits]'``); tqdm is used for progress bars when it is installed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TextIO, Union

import torch
from torch import nn

from ..engine.limits import check_json_depth

__all__ = [
    "DEFAULT_OPTIMIZERS",
    "DemoError",
    "MissingDependencyError",
    "OptimizerSpecError",
    "RunResult",
    "parse_optimizer_arg",
    "resolve_optimizer",
    "valid_optimizer_names",
    "run_demo",
]

Identifier = Union[str, dict[str, Any]]

#: What ``slotopt demo`` trains when no ``--optimizer`` is given: the Keras way of naming optimizers, with
#: learning rates suited to this small problem (Keras's defaults are tuned for much longer trainings).
DEFAULT_OPTIMIZERS: list[Identifier] = [
    "adam",
    {"class_name": "SGD", "config": {"learning_rate": 0.05, "momentum": 0.9}},
    {"class_name": "RMSprop", "config": {"learning_rate": 0.001}},
    {"class_name": "Adagrad", "config": {"learning_rate": 0.05}},
    {"class_name": "Nadam", "config": {"learning_rate": 0.002}},
    {"class_name": "Lion", "config": {"learning_rate": 0.0003}},
]

DEMO_EXTRA_HINT = "pip install 'slotopt[demo]'"


class DemoError(Exception):
    """Base class of the errors ``slotopt demo`` reports to the user (no traceback)."""


class MissingDependencyError(DemoError):
    """An optional dependency of the demo or the benchmark is not installed."""


class OptimizerSpecError(DemoError, ValueError):
    """An ``--optimizer`` value that does not name a usable optimizer."""


def check_writable(path: str, option: str) -> str:
    """The absolute ``path`` when a file can be written there (its directory may not exist yet: the nearest
    existing one must then be a writable directory); ``DemoError`` otherwise. Runs before any training or
    measurement, so that a bad path does not waste the run."""
    import tempfile

    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise DemoError(f"{option} {path!r} is a directory; give a file path such as {os.path.join(path, 'out.png')!r}.")
    if os.path.exists(full) and not os.path.isfile(full):
        raise DemoError(f"{option} {path!r} exists and is not a regular file.")
    parent = os.path.dirname(full)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise DemoError(f"{option} {path!r} cannot be written: {parent!r} is a file, not a directory.")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".slotopt-write-check-"):
            pass
    except OSError as err:
        raise DemoError(f"{option} {path!r} cannot be written: {err.strerror or err} ({parent!r}).") from None
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise DemoError(f"{option} {path!r} cannot be written: permission denied.")
    return full


def require(module: str, purpose: str = "the demo") -> Any:
    """Imports an optional dependency or raises ``MissingDependencyError`` saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = {"sklearn": "scikit-learn"}.get(module.split(".")[0], module.split(".")[0])
        hint = "pip install 'slotopt[digits]'" if package == "scikit-learn" else DEMO_EXTRA_HINT
        raise MissingDependencyError(
            f"{purpose} needs {package}, which is not installed. Install it with: {hint}"
        ) from err


# ------------------------------------------------------------------------------------------- optimizers
def valid_optimizer_names() -> list[str]:
    """Lower-case names ``slotopt.get`` accepts on their own (wrappers that need an inner optimizer excluded)."""
    from ..keras3.serialization import _builtins

    return sorted(name for name in _builtins() if name != "lossscaleoptimizer")


def parse_optimizer_arg(text: str) -> Identifier:
    """An ``--optimizer`` command-line value: a name (``adam``) or a JSON object (``{"class_name": ...}``)."""
    stripped = text.strip()
    if not stripped:
        raise OptimizerSpecError(
            f"--optimizer needs a name or a JSON object. Received: {text!r}. Valid names: "
            f"{', '.join(valid_optimizer_names())}"
        )
    if stripped.startswith("{"):
        try:
            check_json_depth(stripped, "--optimizer JSON")  # json.loads would end in a bare RecursionError
        except ValueError as err:
            raise OptimizerSpecError(str(err)) from None
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise OptimizerSpecError(f"--optimizer value is not valid JSON ({err.msg}). Received: {text!r}") from err
        if not isinstance(value, dict) or not isinstance(value.get("class_name"), str) or \
                not isinstance(value.get("config", {}) or {}, dict):
            raise OptimizerSpecError(
                'An --optimizer JSON value must look like {"class_name": "Adam", "config": {...}}. '
                f"Received: {text!r}"
            )
        return value
    return stripped


def describe(identifier: Identifier) -> str:
    """A short label: ``adam`` or ``SGD(learning_rate=0.05, momentum=0.9)``."""
    if isinstance(identifier, str):
        return identifier
    config = identifier.get("config") or {}
    if not isinstance(config, dict):  # a nested value given by the user, as it came (it is being reported)
        return f"{identifier.get('class_name')}(config={config!r})"
    args = ", ".join(f"{k}={describe(v) if isinstance(v, dict) and 'class_name' in v else v}"
                     for k, v in config.items())
    return f"{identifier.get('class_name')}({args})"


def resolve_optimizer(identifier: Identifier) -> Any:
    """``slotopt.get(identifier)``, with an ``OptimizerSpecError`` listing the valid names when it fails."""
    import slotopt

    names = ", ".join(valid_optimizer_names())
    try:
        return slotopt.get(identifier)
    except (ValueError, TypeError) as err:
        if _is_unavailable(identifier):
            message = f"unknown optimizer {_class_name(identifier)!r}. Valid optimizer names: {names}"
        else:
            message = f"invalid optimizer {describe(identifier)}: {err}"
        raise OptimizerSpecError(message) from err


def _class_name(identifier: Identifier) -> str:
    return identifier if isinstance(identifier, str) else identifier["class_name"]


def _is_unavailable(identifier: Identifier) -> bool:
    return _class_name(identifier).lower() not in valid_optimizer_names()


# ------------------------------------------------------------------------------------------- progress
class _PlainProgress:
    """What the demo shows when tqdm is not installed: one line per training."""

    def __init__(self, total: int, desc: str, stream: TextIO) -> None:
        self.desc = desc
        self.stream = stream
        self.postfix = ""
        self.start = time.perf_counter()
        print(f"  training {desc} ...", file=stream, flush=True)

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        print(f"  {self.desc}: done in {time.perf_counter() - self.start:.2f} s ({self.postfix})",
              file=self.stream, flush=True)


def _progress(total: int, desc: str, stream: TextIO) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainProgress(total, desc, stream)
    return tqdm(total=total, desc=f"{desc[:28]:<28}", unit="step", leave=True, dynamic_ncols=True,
                file=sys.stderr)


# ------------------------------------------------------------------------------------------- results
@dataclass
class RunResult:
    """One training: its per-step losses, final epoch loss, test accuracy and wall-clock seconds."""

    label: str
    task: str
    losses: list[float] = field(default_factory=list)
    steps_per_epoch: int = 1
    final_loss: float = math.nan
    test_accuracy: float = math.nan
    seconds: float = 0.0
    error: Optional[str] = None


def _train(model: nn.Module, opt: Any, batches: Callable[[int], Any], loss_fn: Callable[..., torch.Tensor],
           epochs: int, steps_per_epoch: int, result: RunResult, stream: TextIO) -> None:
    bar = _progress(epochs * steps_per_epoch, result.label, stream)
    scale_loss = getattr(opt, "scale_loss", None) or (lambda loss: loss)  # loss_scale_factor, LossScaleOptimizer
    start = time.perf_counter()
    try:
        for epoch in range(epochs):
            epoch_total, epoch_count = 0.0, 0
            for inputs, target in batches(epoch):
                loss = loss_fn(model(*inputs), target)
                opt.zero_grad()
                scale_loss(loss).backward()
                opt.step()
                value = float(loss.detach())
                result.losses.append(value)
                epoch_total += value * len(target)
                epoch_count += len(target)
                bar.update(1)
            result.final_loss = epoch_total / max(epoch_count, 1)
            bar.set_postfix_str(f"loss {result.final_loss:.4f}")
    finally:
        bar.close()
        result.seconds = time.perf_counter() - start


def _batches(n: int, batch_size: int, seed: int) -> Callable[[int], list[torch.Tensor]]:
    def order(epoch: int) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed + epoch)
        perm = torch.randperm(n, generator=generator)
        return [perm[i:i + batch_size] for i in range(0, n, batch_size)]

    return order


# ------------------------------------------------------------------------------------------- digits MLP
def load_digits_split(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits (1797 8x8 images), scaled to [0, 1], split 80/20."""
    datasets = require("sklearn.datasets")
    digits = datasets.load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_train = int(0.8 * len(x))
    train, test = perm[:n_train], perm[n_train:]
    return x[train], y[train], x[test], y[test]


def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train_digits(identifier: Identifier, opt: Any, data: tuple[torch.Tensor, ...], epochs: int,
                 batch_size: int = 32, stream: TextIO = sys.stdout) -> RunResult:
    """Trains a fresh MLP (same initial weights for every optimizer) and measures test accuracy."""
    x_train, y_train, x_test, y_test = data
    result = RunResult(describe(identifier), "digits MLP")
    torch.manual_seed(0)
    model = make_mlp()
    opt.build(model)
    order = _batches(len(x_train), batch_size, seed=1)

    def batches(epoch: int) -> Any:
        for idx in order(epoch):
            yield (x_train[idx],), y_train[idx]

    result.steps_per_epoch = math.ceil(len(x_train) / batch_size)
    _train(model, opt, batches, nn.functional.cross_entropy, epochs, result.steps_per_epoch, result, stream)
    with torch.no_grad():
        result.test_accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
    return result


# ------------------------------------------------------------------------------------------- recommender
class TwoTower(nn.Module):
    """User and item towers over sparse embedding tables; the score is the dot product of the two towers."""

    def __init__(self, num_users: int, num_items: int, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.user_embedding = nn.Embedding(num_users, dim, sparse=True)
        self.item_embedding = nn.Embedding(num_items, dim, sparse=True)
        self.user_tower = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.item_tower = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u = self.user_tower(self.user_embedding(users))
        v = self.item_tower(self.item_embedding(items))
        return (u * v).sum(dim=1)


def make_interactions(num_users: int = 500, num_items: int = 200, n: int = 40_000, rank: int = 4,
                      seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Clicks from hidden user/item factors: ``click = (3·<u, v>/√rank + noise) > 0``; 80/20 split."""
    g = torch.Generator().manual_seed(seed)
    user_factors = torch.randn(num_users, rank, generator=g)
    item_factors = torch.randn(num_items, rank, generator=g)
    users = torch.randint(0, num_users, (n,), generator=g)
    items = torch.randint(0, num_items, (n,), generator=g)
    logits = 3.0 * (user_factors[users] * item_factors[items]).sum(1) / math.sqrt(rank)
    clicks = (logits + 0.3 * torch.randn(n, generator=g) > 0).float()
    n_train = int(0.8 * n)
    return (users[:n_train], items[:n_train], clicks[:n_train], users[n_train:], items[n_train:], clicks[n_train:])


def recommender_unavailable() -> Optional[str]:
    """Why the recommender part cannot run with this slotopt build, or None."""
    import slotopt

    missing = [name for name in ("CompositeOptimizer", "Adagrad", "Adam") if not hasattr(slotopt, name)]
    return f"slotopt.{', slotopt.'.join(missing)} not available yet" if missing else None


def train_recommender(epochs: int, batch_size: int = 256, stream: TextIO = sys.stdout) -> RunResult:
    """Adagrad on the two sparse embedding tables, Adam on the dense towers, through one CompositeOptimizer."""
    import slotopt

    users, items, clicks, test_users, test_items, test_clicks = make_interactions()
    torch.manual_seed(0)
    model = TwoTower(num_users=500, num_items=200)
    dense_params = [p for name, p in model.named_parameters() if "embedding" not in name]
    opt = slotopt.CompositeOptimizer(
        [
            (slotopt.Adagrad(learning_rate=1.0), ["*embedding*"]),  # sparse rows: only touched rows change
            (slotopt.Adam(learning_rate=0.01), lambda: dense_params),
        ],
        params=model,
    )
    result = RunResult("Composite: Adagrad(emb) + Adam(dense)", "two-tower recommender")
    order = _batches(len(users), batch_size, seed=1)

    def batches(epoch: int) -> Any:
        for idx in order(epoch):
            yield (users[idx], items[idx]), clicks[idx]

    result.steps_per_epoch = math.ceil(len(users) / batch_size)
    _train(model, opt, batches, nn.functional.binary_cross_entropy_with_logits, epochs, result.steps_per_epoch,
           result, stream)
    with torch.no_grad():
        predicted = (model(test_users, test_items) > 0).float()
        result.test_accuracy = float((predicted == test_clicks).float().mean())
    return result


# ------------------------------------------------------------------------------------------- report
def format_table(results: list[RunResult]) -> str:
    """A plain-text table: task, optimizer, final loss, test accuracy, seconds."""
    header = ("task", "optimizer", "final loss", "test accuracy", "seconds")
    rows = []
    for r in results:
        if r.error is not None:
            rows.append((r.task, r.label, "error", "-", f"{r.seconds:.2f}"))
        else:
            rows.append((r.task, r.label, f"{r.final_loss:.4f}", f"{100 * r.test_accuracy:.1f}%", f"{r.seconds:.2f}"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    right = {2, 3, 4}

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    rule = "  ".join("-" * w for w in widths)
    errors = [f"error in {r.label}: {r.error}" for r in results if r.error is not None]
    return "\n".join([line(header), rule, *(line(r) for r in rows), *errors])


def _smooth(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_losses(results: list[RunResult], path: str) -> None:
    """Loss curves (moving average over about half an epoch), one panel per task, written as a PNG."""
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot")
    tasks = [t for t in dict.fromkeys(r.task for r in results) if any(r.losses for r in results if r.task == t)]
    fig, axes = plt.subplots(1, max(len(tasks), 1), figsize=(6.5 * max(len(tasks), 1), 5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        low, high = math.inf, 0.0
        for r in results:
            if r.task != task or not r.losses:
                continue
            window = max(1, r.steps_per_epoch // 2)
            xs = [(i + 1) / r.steps_per_epoch for i in range(len(r.losses))]
            ys = _smooth(r.losses, window)
            low, high = min(low, min(ys)), max(high, max(ys))
            label = f"{r.label}  ({100 * r.test_accuracy:.1f}% test acc.)"
            ax.plot(xs, ys, label=label, linewidth=1.8)
        log_scale = low > 0 and high / low > 10
        if log_scale:
            ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss (moving average" + (", log scale)" if log_scale else ")"))
        ax.set_title(task)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("slotopt demo: Keras-parity optimizers on PyTorch", fontsize=13)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- entry point
def run_demo(optimizers: Optional[list[Identifier]] = None, epochs: int = 15, out: str = "slotopt-demo.png",
             stream: TextIO = sys.stdout) -> int:
    """Runs the demo; returns 0 when every training ran, 1 when one of them raised.

    Raises ``OptimizerSpecError`` for an unusable optimizer and ``MissingDependencyError`` when scikit-learn or
    matplotlib is missing, before anything is trained.
    """
    if not (isinstance(epochs, int) and epochs >= 1):
        raise DemoError(f"--epochs must be an integer >= 1. Received: {epochs!r}")
    out = check_writable(out, "--out")
    explicit = optimizers is not None
    chosen: list[tuple[Identifier, Any]] = []
    for identifier in (optimizers if explicit else DEFAULT_OPTIMIZERS):
        if not explicit and _is_unavailable(identifier):
            print(f"note: skipping {describe(identifier)} (not implemented in this slotopt build)", file=stream)
            continue
        chosen.append((identifier, resolve_optimizer(identifier)))  # every error before any training
    require("sklearn")
    require("matplotlib")

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and immune to a busy second core
    try:
        results = _run_all(chosen, epochs, stream)
    finally:
        torch.set_num_threads(threads)

    print("", file=stream)
    print(format_table(results), file=stream)
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    plot_losses(results, out)
    print(f"\nLoss curves written to {out}", file=stream, flush=True)
    return 1 if any(r.error is not None for r in results) else 0


def _run_all(chosen: list[tuple[Identifier, Any]], epochs: int, stream: TextIO) -> list[RunResult]:
    data = load_digits_split()
    print(f"Digits: {len(data[0])} training / {len(data[2])} test images, MLP 64-128-10, {epochs} epochs",
          file=stream, flush=True)
    results: list[RunResult] = []
    for identifier, opt in chosen:
        try:
            results.append(train_digits(identifier, opt, data, epochs, stream=stream))
        except Exception as err:  # report and go on with the other optimizers
            results.append(RunResult(describe(identifier), "digits MLP", error=f"{type(err).__name__}: {err}"))

    reason = recommender_unavailable()
    if reason is None:
        print(f"Recommender: 500 users x 200 items, 32000 training clicks, {epochs} epochs", file=stream, flush=True)
        try:
            results.append(train_recommender(epochs, stream=stream))
        except Exception as err:
            results.append(RunResult("Composite: Adagrad(emb) + Adam(dense)", "two-tower recommender",
                                     error=f"{type(err).__name__}: {err}"))
    else:
        print(f"note: skipped the two-tower recommender ({reason})", file=stream)
    return results
