"""Random sequences of step kinds: every gradient is checked on every step, planned or not.

A step like the last one takes the step plan's shortcut (engine/plan.py). The shortcut must recognise exactly the
ordinary steps: a sparse COO gradient (in range, past the table, repeated rows), a CSR one, a missing one, one of
another dtype, a strided view or one of the wrong shape after dense steps must take the full path and get the
full path's answer. Each example steps two copies of one optimizer through the same random sequence, one with
its plans on and one with them off (the full path on every step), and checks after every step that both
accepted it with the same bits, or both refused it and nothing changed (variables, slots, iterations).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _strategies import FAST, SEED, factories, make_variables, optimizer_state, same_bits
from hypothesis import given
from hypothesis import strategies as st

import slotopt

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch's beta-sparse and invariant notices

KINDS = ["dense", "dense", "dense", "coo", "coo_repeated", "coo_past_end", "coo_negative", "csr", "missing",
         "float64", "transposed", "strided", "wrong_shape"]


def _gradient(kind: str, var: torch.Tensor, gen: torch.Generator) -> object:
    rows, width = var.shape
    dense = torch.randn((rows, width), generator=gen, dtype=torch.float64).to(var.dtype)
    if kind == "dense":
        return dense
    if kind.startswith("coo"):
        index = {"coo": [rows - 1, 0], "coo_repeated": [1 % rows, 1 % rows, 0], "coo_past_end": [0, rows + 3],
                 "coo_negative": [-1]}[kind]
        values = torch.randn((len(index), width), generator=gen, dtype=torch.float64).to(var.dtype)
        return torch.sparse_coo_tensor(torch.tensor([index]), values, (rows, width))  # invariants unchecked
    if kind == "csr":
        return dense.to_sparse_csr()
    if kind == "missing":
        return None
    if kind == "float64":
        return dense.to(torch.float64) if var.dtype != torch.float64 else dense.to(torch.float32)
    if kind == "transposed":
        return dense.t().contiguous().t()  # same values, column-major
    if kind == "strided":
        return torch.randn((rows, 2 * width), generator=gen, dtype=torch.float64).to(var.dtype)[:, ::2]
    return torch.randn((rows + 1, width), generator=gen, dtype=torch.float64).to(var.dtype)  # wrong_shape


def _without_plans(opt: object) -> object:
    """``opt`` with its step plans off (and its sub-optimizers'): every step takes the full path."""
    opt.__dict__["_plans_steps"] = False
    for entry in getattr(opt, "_entries", ()):
        entry[0].__dict__["_plans_steps"] = False
    return opt


def _state(opt, variables, steps) -> list:
    state = [v.detach().clone() for v in variables] + optimizer_state(opt)
    if steps.get(id(opt)) is not None:
        state.append(steps[id(opt)].clone())
    iterations = getattr(opt, "iterations", None)
    if isinstance(iterations, torch.Tensor):
        state.append(iterations.detach().clone())
    return state


def _outcome(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except (ValueError, TypeError, NotImplementedError, RuntimeError) as error:
            return type(error)
    return None


def _run(make, apply, kinds, dtype, seed, steps=None, parameters=False):
    """Steps ``make(variables)`` with plans and without through ``kinds`` (see the module docstring)."""
    shapes = [(4, 3), (5,), (2, 2)]
    planned_vars, full_vars = (make_variables(shapes, dtype, seed) for _ in range(2))
    if parameters:
        planned_vars, full_vars = ([torch.nn.Parameter(v.detach().clone()) for v in vs]
                                   for vs in (planned_vars, full_vars))
    steps = {} if steps is None else steps
    planned, full = make(planned_vars), _without_plans(make(full_vars))
    for step, kind in enumerate(kinds):
        pending = []
        for variables in (planned_vars, full_vars):
            gen = torch.Generator().manual_seed(seed * 31 + step)
            grads = [_gradient(kind, variables[0].detach(), gen)]
            grads += [torch.randn(v.shape, generator=gen, dtype=torch.float64).to(dtype) for v in variables[1:]]
            pending.append(list(zip(grads, variables)))
        before = _state(planned, planned_vars, steps)
        outcome = _outcome(lambda pairs=pending[0]: apply(planned, pairs))
        expected = _outcome(lambda pairs=pending[1]: apply(full, pairs))
        assert outcome == expected, f"step {step} ({kind}): planned {outcome}, full path {expected}"
        after = _state(planned, planned_vars, steps)
        if outcome is not None:
            assert len(before) == len(after)
            assert all(same_bits(a, b) for a, b in zip(before, after)), f"refused step {step} ({kind}) changed state"
        reference = _state(full, full_vars, steps)
        assert len(after) == len(reference)
        for i, (a, b) in enumerate(zip(after, reference)):
            assert same_bits(a, b), f"step {step} ({kind}): tensor {i} differs from the full path"


@FAST
@given(factory=factories(), kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=7),
       dtype=st.sampled_from([torch.float32, torch.float64]), seed=SEED)
def test_random_step_sequences_match_the_full_path(factory, kinds, dtype, seed):
    steps = {}  # each copy's own global step (TF1's AdagradDA takes one)

    def make(variables):
        opt = factory()
        steps[id(opt)] = factory.global_step
        return opt

    def apply(opt, pairs):
        factory.global_step = steps[id(opt)]
        factory.apply(opt, pairs)

    _run(make, apply, ["dense", "dense"] + kinds, dtype, seed, steps=steps)


@FAST
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=6), seed=SEED,
       names=st.sampled_from([("legacy", "Adagrad", "keras3", "Adam"), ("keras3", "SGD", "legacy", "RMSprop"),
                              ("keras3", "Adadelta", "keras3", "Adafactor")]))
def test_random_step_sequences_through_a_composite_match_the_full_path(kinds, seed, names):
    def make(variables):
        first = getattr(slotopt if names[0] == "keras3" else slotopt.legacy, names[1])(learning_rate=0.1)
        second = getattr(slotopt if names[2] == "keras3" else slotopt.legacy, names[3])(learning_rate=0.1)
        return slotopt.CompositeOptimizer([(first, lambda: variables[:1]), (second, lambda: variables[1:])])

    _run(make, lambda opt, pairs: opt.apply_gradients(pairs), ["dense", "dense"] + kinds, torch.float32, seed)


def _torch_step(opt, pairs):
    for grad, var in pairs:
        var.grad = grad
    opt.step()


@FAST
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=6), seed=SEED,
       name=st.sampled_from(["Adam", "Adagrad", "Muon", "Adafactor", "Adadelta", "SGD"]))
def test_random_torch_style_steps_match_the_full_path(kinds, seed, name):
    # ``step()`` over ``.grad``, the path of the reproducer (the torch face of Keras 3).
    _run(lambda params: getattr(slotopt, name)(learning_rate=0.1, params=params), _torch_step,
         ["dense", "dense"] + kinds, torch.float32, seed, parameters=True)
