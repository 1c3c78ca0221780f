"""``slotopt bench``'s report: the dense and sparse tables and the bar chart (``cli/bench.py`` measures)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

from .bench_setup import IMPLEMENTATIONS, SPARSE_DIM, SPARSE_TOUCHED, WORKLOADS, Measurement, Shapes

__all__ = ["COLORS", "format_dense", "format_sparse", "plot", "describe_workload"]

#: One colour per contender of the dense panels (slotopt's two in reds, torch's three in grey, blue, green).
COLORS = {"slotopt": "#d62728", "slotopt foreach": "#ff9896", "torch loop": "#7f7f7f", "torch foreach": "#1f77b4",
          "torch fused": "#2ca02c"}


def _fmt_ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def _ratio(a: float, b: float) -> str:
    return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 2) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def format_dense(results: list[Measurement]) -> str:
    """ms per step for each implementation and the copy floor, peak extra memory per step, and the ratios of
    slotopt to torch fused (torch foreach where torch has no fused kernel) and to the floor."""
    by_key = {(m.workload, m.optimizer, m.implementation): m for m in results}
    shown = [i for i in IMPLEMENTATIONS if any(m.implementation == i for m in results)]
    rows = []
    for workload in dict.fromkeys(m.workload for m in results):
        for opt in dict.fromkeys(m.optimizer for m in results if m.workload == workload):
            def get(impl: str, what: str = "ms", key: tuple[str, str] = (workload, opt)) -> float:
                m = by_key.get((*key, impl))
                return getattr(m, what) if m is not None else math.nan

            fused = get("torch fused")
            best_torch, best_name = (fused, "fused") if not math.isnan(fused) else (get("torch foreach"), "foreach")
            rows.append((workload, opt, *(_fmt_ms(get(i)) for i in shown), _fmt_ms(get("copy floor")),
                         _ratio(get("slotopt"), best_torch) + f" ({best_name})",
                         _ratio(get("slotopt"), get("copy floor")),
                         *("-" if math.isnan(get(i, "peak_mb")) else f"{get(i, 'peak_mb'):.0f}"
                           for i in ("slotopt", "torch fused" if best_name == "fused" else "torch foreach"))))
    header = ("workload", "optimizer", *(f"{i} ms" for i in shown), "copy floor ms", "slotopt/torch best",
              "slotopt/floor", "slotopt MB", "torch best MB")
    notes = sorted({f"{m.optimizer} {m.implementation}: {m.note}" for m in results if m.note and m.note != "n/a"})
    return _table(header, rows) + "".join(f"\n  note: {n}" for n in notes)


def format_sparse(results: list[Measurement], rows: int) -> str:
    header = ("optimizer", "ms/step", "peak extra MB", "what a step updates")
    body = [(m.optimizer, _fmt_ms(m.ms), "-" if math.isnan(m.peak_mb) else f"{m.peak_mb:.0f}", m.note)
            for m in results]
    title = (f"Sparse: {rows:,} x {SPARSE_DIM} float32 embedding table, {SPARSE_TOUCHED} touched rows per step "
             f"(torch sparse COO gradients)")
    return title + "\n" + _table(header, body, left=1).replace("\n", "\n", 1)


def plot(dense: list[Measurement], sparse: list[Measurement], path: str, title: str, sparse_rows: int,
         shapes: Optional[Mapping[str, Shapes]] = None) -> None:
    """Grouped bar chart: one panel per workload, one bar per implementation, log-scale ms per step.
    ``shapes``: the shapes each dense workload had (``--quick`` runs smaller ones), for the panel titles."""
    from .demo import require

    matplotlib = require("matplotlib", "the benchmark chart")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "the benchmark chart")
    ticker = require("matplotlib.ticker", "the benchmark chart")
    workloads = list(dict.fromkeys(m.workload for m in dense))
    panels = max(len(workloads) + (1 if sparse else 0), 1)
    ncols = 1 if panels == 1 else 2
    nrows = math.ceil(panels / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(6.8 * ncols, 4.6 * nrows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)

    def readable_log_axis(ax: Any) -> None:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())

    for ax, workload in zip(axes, workloads):
        opts = list(dict.fromkeys(m.optimizer for m in dense if m.workload == workload))
        by_key = {(m.optimizer, m.implementation): m.ms for m in dense if m.workload == workload}
        width = 0.8 / len(IMPLEMENTATIONS)
        for k, impl in enumerate(IMPLEMENTATIONS):
            xs = [i + (k - (len(IMPLEMENTATIONS) - 1) / 2) * width for i in range(len(opts))]
            ys = [by_key.get((o, impl), math.nan) for o in opts]
            ax.bar(xs, [0 if math.isnan(y) else y for y in ys], width, label=impl, color=COLORS[impl])
            for x, y in zip(xs, ys):
                if math.isnan(y):
                    ax.annotate("n/a", (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                                textcoords="offset points", ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_xticks(range(len(opts)))
        ax.set_xticklabels(opts)
        readable_log_axis(ax)
        ax.set_ylabel("ms per step (median, log scale)")
        ax.set_title(f"{workload}: {describe_workload((shapes or WORKLOADS)[workload])}", fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if sparse:
        ax = axes[len(workloads)]
        shown = [m for m in sparse if not math.isnan(m.ms)]
        names = [m.optimizer for m in shown]
        bars = ax.bar(range(len(shown)), [m.ms for m in shown],
                      color=["#1f77b4" if n.startswith("torch") else "#d62728" for n in names])
        for bar, m in zip(bars, shown):
            ax.annotate(f"{m.peak_mb:.0f} MB", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels([n.replace(".optim", "").replace("slotopt.", "slotopt\n").replace("torch.", "torch\n")
                            for n in names], fontsize=8)
        readable_log_axis(ax)
        ax.set_ylabel("ms per step (median, log scale)")
        ax.set_title(f"sparse: {sparse_rows:,} x {SPARSE_DIM} embedding, {SPARSE_TOUCHED} rows/step "
                     "(bar label: peak extra memory)", fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def describe_workload(shapes: Shapes) -> str:
    total = sum(math.prod(s) for s in shapes)
    return f"{len(shapes)} tensor{'s' if len(shapes) > 1 else ''}, {total / 1e6:.1f}M params"
