"""The registry's table: one row per registered class (``engine/registry.py``, the one registration point), each
with its reference and the option sets that reference covers. A new class appears here by registering it: its row
fails until it has a reference.

A row's reference is, first, what the real library recorded: the short cases of ``keras_reference.json``
(replayed here, within the recording's tolerance: ``slotopt parity`` runs the same cases) and the 1000-step
trajectories of tests/data/long (replayed bit for bit at every step by tests/numerics/test_long_reference.py; the
row lists them). A class no library has (AdaBelief, slotopt's own) takes a formula written out here in NumPy,
the same bits in float32 and float64. A wrapper takes the row of what it wraps: a loss-scale wrapper's step on
scaled gradients is its inner optimizer's step on the unscaled ones, bit for bit (a power-of-two scale divides
exactly). ``OptimizerMap`` is MultiOptimizer's routing table: its reference is MultiOptimizer's recorded case.

``python tests/engine/test_registry_table.py`` prints the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch

import slotopt
from slotopt.cli.reference import load_cases, replay
from slotopt.engine import registry

SHORT = load_cases()
LONG = json.loads((Path(__file__).parents[1] / "data" / "long" / "manifest.json").read_text())["cases"]
#: The recordings' name of a generation where it differs from the registry's.
RECORDED_API = {"tfrs": "composite"}

# Recorded cases whose implementation is in progress on its own branch; each branch removes its ids from here.
PENDING: dict[str, str] = {
}


# ---------------------------------------------------------------------------------------------------- formulas
# AdaBelief (Zhuang et al. 2020, Algorithm 2), operation by operation. The hyperparameters are exact in float32 so
# that every generation's rounding of them is the same number.
LR, B1, B2, EPS = 0.125, 0.75, 0.875, 2.0 ** -20
GRADS = [np.array([0.5, -1.25, 3.0, 0.0]), np.array([-0.75, 2.0, 0.125, 1.5]), np.array([1.0, 1.0, -2.5, 0.25])]
START = np.array([1.0, -0.5, 0.25, 2.0])


def adabelief_paper(dtype: type, lr: float = LR, b1: float = B1, b2: float = B2, eps: float = EPS) -> list[np.ndarray]:
    """The weights after each step of ``GRADS`` from ``START``, in ``dtype``."""
    f = dtype
    w, m, s = START.astype(f), np.zeros(4, f), np.zeros(4, f)
    out = []
    for t, g in enumerate(GRADS, start=1):
        g = g.astype(f)
        m = f(b1) * m + f(1 - b1) * g
        s = (f(b2) * s + f(1 - b2) * ((g - m) * (g - m))) + f(eps)
        m_hat, s_hat = m / (f(1) - f(b1) ** t), s / (f(1) - f(b2) ** t)
        w = w - f(lr) * (m_hat / (np.sqrt(s_hat) + f(eps)))
        out.append(w.copy())
    return out


@dataclass(frozen=True)
class Formula:
    """A NumPy reference: ``expected(dtype, **options)`` gives the weights after each step of ``GRADS``;
    ``build(**options)`` the optimizer; ``options`` the option sets checked (each a dict of the formula's
    arguments)."""

    expected: Callable[..., list[np.ndarray]]
    build: Callable[..., Any]
    options: tuple[dict[str, float], ...]


_ADABELIEF_OPTIONS = ({}, {"lr": 0.25, "b1": 0.5, "b2": 0.75, "eps": 2.0 ** -10})
FORMULAS: dict[str, Formula] = {
    "keras3/AdaBelief": Formula(adabelief_paper, lambda lr=LR, b1=B1, b2=B2, eps=EPS: slotopt.AdaBelief(
        learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps), _ADABELIEF_OPTIONS),
    "legacy/AdaBelief": Formula(adabelief_paper, lambda lr=LR, b1=B1, b2=B2, eps=EPS: slotopt.legacy.AdaBelief(
        learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps), _ADABELIEF_OPTIONS),
    "v1/AdaBeliefOptimizer": Formula(adabelief_paper, lambda lr=LR, b1=B1, b2=B2, eps=EPS: slotopt.v1.AdaBeliefOptimizer(
        lr, beta1=b1, beta2=b2, epsilon=eps), _ADABELIEF_OPTIONS),
}

# ---------------------------------------------------------------------------------------------------- wrappers
#: A wrapper's reference is the row of what it wraps: ``{row: (inner row, option sets)}``.
WRAPS: dict[str, tuple[str, tuple[dict[str, Any], ...]]] = {
    "keras3/LossScaleOptimizer": ("keras3/Adam", ({"initial_scale": 8.0}, {"initial_scale": 2.0 ** 10,
                                                                            "dynamic_growth_steps": 2})),
    "legacy/LossScaleOptimizer": ("legacy/Adam", ({"initial_scale": 8.0, "dynamic": False},
                                                  {"initial_scale": 2.0 ** 10, "dynamic_growth_steps": 2})),
    "keras3/OptimizerMap": ("keras3/MultiOptimizer", ()),  # a routing table, not an optimizer of its own
}


# ---------------------------------------------------------------------------------------------------- the rows
@dataclass
class Row:
    entry: registry.Registration
    short: list[dict[str, Any]] = field(default_factory=list)
    long: list[dict[str, Any]] = field(default_factory=list)
    formula: Optional[Formula] = None
    wraps: Optional[tuple[str, tuple[dict[str, Any], ...]]] = None

    @property
    def key(self) -> str:
        return f"{self.entry.generation}/{self.entry.cls.__name__}"

    def option_sets(self) -> list[str]:
        """Every option set a reference of this row covers, as written (recorded kwargs, formula arguments); a
        routing table's are those of the row it routes for."""
        if self.wraps is not None and not self.wraps[1]:
            return ROWS[self.wraps[0]].option_sets()
        sets = [json.dumps(c["kwargs"], sort_keys=True) for c in self.short + self.long]
        sets += [json.dumps(o, sort_keys=True) for o in (self.formula.options if self.formula else ())]
        sets += [json.dumps(o, sort_keys=True) for o in (self.wraps[1] if self.wraps else ())]
        return sorted(set(sets))


def _recorded(entry: registry.Registration, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    api = RECORDED_API.get(entry.generation, entry.generation)
    names = {entry.cls.__name__, *entry.aliases, *entry.old_names}
    return [c for c in cases if c["api"] == api and c["optimizer"] in names]


ROWS = {row.key: row for row in (
    Row(e, _recorded(e, SHORT), _recorded(e, LONG), FORMULAS.get(f"{e.generation}/{e.cls.__name__}"),
        WRAPS.get(f"{e.generation}/{e.cls.__name__}")) for e in registry.registered())}
ALL = [pytest.param(row, id=key) for key, row in ROWS.items()]


@pytest.mark.parametrize("row", ALL)
def test_every_registered_class_has_a_reference(row: Row) -> None:
    assert row.short or row.long or row.formula or row.wraps, (
        f"{row.key} has no reference: record a case (tools/, into keras_reference.json or tests/data/long) or, "
        "for a class no library has, add its formula to FORMULAS here")
    if row.wraps is not None:
        inner = ROWS[row.wraps[0]]
        assert inner.short or inner.long, f"{row.key} wraps {inner.key}, which has no recorded reference"
    assert row.option_sets(), row.key


def test_every_reference_belongs_to_a_registered_row() -> None:
    placed = {c["id"] for row in ROWS.values() for c in row.short + row.long}
    assert sorted(c["id"] for c in SHORT + LONG if c["id"] not in placed) == []
    assert set(FORMULAS) | set(WRAPS) <= set(ROWS)
    # a formula stands in only where nothing was recorded: a recording wins over a formula written here
    assert [key for key in FORMULAS if ROWS[key].short or ROWS[key].long] == []


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{row.key}:{c['id']}") for row in ROWS.values()
                                  for c in row.short])
def test_recorded_case_replays_within_tolerance(case: dict[str, Any]) -> None:
    if case["id"] in PENDING:
        pytest.xfail(PENDING[case["id"]])
    result = replay(case)
    assert result.ok, "\n".join(result.failures)


_FORMULA_CASES = [pytest.param(key, options, id=f"{key}:{json.dumps(options, sort_keys=True)}")
                  for key, formula in FORMULAS.items() for options in formula.options]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("key,options", _FORMULA_CASES)
def test_formula_row_computes_its_formula_bit_for_bit(key: str, options: dict[str, float], dtype: torch.dtype) -> None:
    formula = FORMULAS[key]
    expected = formula.expected(np.float32 if dtype == torch.float32 else np.float64, **options)
    w = slotopt.Variable(torch.tensor(START, dtype=dtype), name="w")
    opt = formula.build(**options)
    for g, want in zip(GRADS, expected):
        opt.apply_gradients([(torch.tensor(g, dtype=dtype), w)])
        assert w.detach().numpy().tobytes() == want.tobytes(), (w.tolist(), want.tolist())


@pytest.mark.parametrize("key", sorted(FORMULAS))
def test_formula_row_takes_a_sparse_gradient_as_the_dense_rule_on_its_densified_gradient(key: str) -> None:
    table = slotopt.Variable(torch.linspace(-1.0, 1.0, 10).reshape(5, 2), name="table")
    dense = slotopt.Variable(table.detach().clone(), name="table")
    sparse_opt, dense_opt = FORMULAS[key].build(), FORMULAS[key].build()
    values, indices = torch.tensor([[0.5, -1.0], [2.0, 0.25], [1.0, 1.0]]), torch.tensor([3, 0, 3])
    for _ in range(2):
        sparse_opt.apply_gradients([(slotopt.IndexedSlices(values, indices, (5, 2)), table)])
        dense_opt.apply_gradients([(torch.zeros(5, 2).index_add_(0, indices, values), dense)])
    assert torch.equal(table, dense)
    assert not torch.equal(table[3], torch.linspace(-1.0, 1.0, 10).reshape(5, 2)[3])


def test_a_formula_row_is_slotopts_own_in_every_generation() -> None:
    written = {key.split("/")[0]: registry.serialized_module(ROWS[key].entry.cls) for key in FORMULAS}
    assert written == {"keras3": "slotopt.keras3", "legacy": "slotopt.legacy", "v1": "slotopt.v1"}
    assert all(not ROWS[key].entry.keras for key in FORMULAS)
    assert slotopt.get("adabelief").__class__ is slotopt.AdaBelief
    assert slotopt.AdaBelief._sparse_one_pass is False  # foreach only: found from its kernel


_WRAPPER_CASES = [pytest.param(key, options, id=f"{key}:{json.dumps(options, sort_keys=True)}")
                  for key, (_, sets) in WRAPS.items() for options in sets]


@pytest.mark.parametrize("key,options", _WRAPPER_CASES)
def test_wrapper_row_steps_as_its_inner_row_on_the_unscaled_gradients(key: str, options: dict[str, Any]) -> None:
    generation = key.split("/")[0]
    inner_cls = ROWS[WRAPS[key][0]].entry.cls
    wrapper_cls = ROWS[key].entry.cls
    start = [torch.linspace(-1.0, 1.0, 6).reshape(3, 2), torch.tensor([0.5, -0.25])]
    wrapped = [slotopt.Variable(t.clone(), name=n) for t, n in zip(start, ("kernel", "bias"))]
    alone = [slotopt.Variable(t.clone(), name=n) for t, n in zip(start, ("kernel", "bias"))]
    opt = wrapper_cls(inner_cls(learning_rate=0.125), **options)
    reference = inner_cls(learning_rate=0.125)
    scales = []
    for step in range(4):
        grads = [torch.full_like(t, 0.25 * (step + 1)) * torch.linspace(-2.0, 3.0, t.numel()).reshape(t.shape)
                 for t in start]
        scale = float(opt.dynamic_scale if generation == "keras3" else opt.loss_scale)
        scales.append(scale)
        scaled = [g * scale for g in grads]
        if generation == "legacy":  # tf.keras: the caller unscales (get_unscaled_gradients), then applies
            scaled = opt.get_unscaled_gradients(scaled)
        opt.apply_gradients(list(zip(scaled, wrapped)))
        reference.apply_gradients(list(zip(grads, alone)))
        for a, b in zip(wrapped, alone):
            assert a.detach().numpy().tobytes() == b.detach().numpy().tobytes(), (key, step)
    growth = options.get("dynamic_growth_steps")
    if growth is not None and options.get("dynamic", True):
        assert scales[growth] == 2 * scales[0]  # the scale grew after its good steps, and the bits held


def _markdown() -> str:
    lines = ["| row | recorded (short) | recorded (1000 steps) | formula / wraps | option sets |", "|---|---|---|---|---|"]
    for key, row in ROWS.items():
        other = "formula" if row.formula else (f"wraps {row.wraps[0]}" if row.wraps else "")
        lines.append(f"| {key} | {len(row.short)} | {len(row.long)} | {other} | {len(row.option_sets())} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_markdown())
