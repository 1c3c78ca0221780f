"""A call that is refused changes nothing: not the variables, not the optimizer's state, not its counters.

Each example builds a random optimizer of a random generation on random variables, trains it a few steps, takes a
bit-level snapshot, makes one invalid call (among valid pairs, so that a half-applied call would show), checks
that it raises, and compares the snapshot.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _strategies import (
    DTYPE,
    FAST,
    SEED,
    SHAPES,
    factories,
    gradient_steps,
    make_variables,
    optimizer_state,
    same_bits,
    trained,
)
from hypothesis import assume, given
from hypothesis import strategies as st

import slotopt

BAD_CALLS = ["shape", "dtype", "index_high", "index_negative", "slice_rows"]


def _bad_gradient(kind: str, var: torch.Tensor) -> object:
    if kind == "shape":
        return torch.ones(tuple(var.shape) + (2,), dtype=var.dtype)
    if kind == "dtype":
        return torch.ones(var.shape, dtype=torch.int64)
    rows = var.shape[0]
    if kind == "index_high":
        return slotopt.IndexedSlices(torch.ones((1,) + tuple(var.shape[1:]), dtype=var.dtype),
                                     torch.tensor([rows]), tuple(var.shape))
    if kind == "index_negative":
        return slotopt.IndexedSlices(torch.ones((1,) + tuple(var.shape[1:]), dtype=var.dtype),
                                     torch.tensor([-1]), tuple(var.shape))
    # slice_rows: rows of the wrong width
    return slotopt.IndexedSlices(torch.ones((1,) + tuple(var.shape[1:]) + (3,), dtype=var.dtype),
                                 torch.tensor([0]), tuple(var.shape))


def _snapshot(opt, variables, factory):
    state = [v.detach().clone() for v in variables] + optimizer_state(opt)
    if factory.global_step is not None:
        state.append(factory.global_step.clone())
    return state


def _assert_unchanged(before, opt, variables, factory):
    after = _snapshot(opt, variables, factory)
    assert len(before) == len(after)
    for i, (a, b) in enumerate(zip(before, after)):
        assert same_bits(a, b), f"state tensor {i} changed by a refused call"


@FAST
@given(factory=factories(), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(0, 3),
       kind=st.sampled_from(BAD_CALLS), victim=st.integers(0, 2))
def test_bad_gradient_changes_nothing(factory, shapes, dtype, seed, steps, kind, victim):
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    victim %= len(variables)
    grads = gradient_steps(variables, 1, seed + 7)[0]
    grads[victim] = _bad_gradient(kind, variables[victim])
    before = _snapshot(opt, variables, factory)
    with pytest.raises((ValueError, TypeError)):
        factory.apply(opt, list(zip(grads, variables)))
    _assert_unchanged(before, opt, variables, factory)


@FAST
@given(factory=factories(apis=("keras3",)), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(1, 3))
def test_unknown_variable_changes_nothing(factory, shapes, dtype, seed, steps):
    # Keras 3 refuses a variable the optimizer was not built with (the legacy and TF1 lines add it instead).
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    stranger = make_variables([shapes[0]], dtype, seed + 3, prefix="stranger")[0]
    pairs = list(zip(gradient_steps(variables, 1, seed + 9)[0], variables)) + [(torch.ones_like(stranger), stranger)]
    before = _snapshot(opt, variables, factory)
    with pytest.raises(ValueError, match="Unknown variable"):
        factory.apply(opt, pairs)
    _assert_unchanged(before, opt, variables, factory)


def _corrupt(weights, how):
    weights = [np.array(w) for w in weights]
    if how == "short":
        return weights[:-1]
    if how == "long":
        return weights + [weights[-1]]
    shaped = [i for i, w in enumerate(weights) if w.ndim > 0]
    assume(shaped)
    i = shaped[-1]
    weights[i] = np.zeros(weights[i].shape + (2,), dtype=weights[i].dtype)
    return weights


@FAST
@given(factory=factories(apis=("keras3", "legacy")), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(1, 3),
       how=st.sampled_from(["short", "long", "shape"]), via=st.sampled_from(["set_weights", "load_state_dict"]))
def test_bad_weights_change_nothing(factory, shapes, dtype, seed, steps, how, via):
    # A state dict entry the optimizer does not keep is a torch client's (timm's Lookahead buffer): kept, not
    # refused (issue 38; tests/pytorch/test_copies_and_groups.py). One too many is bad for ``set_weights`` only.
    assume(not (via == "load_state_dict" and how == "long"))
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    bad = _corrupt(opt.get_weights(), how)
    before = _snapshot(opt, variables, factory)
    with pytest.raises(ValueError):
        if via == "set_weights":
            opt.set_weights(bad)
        else:
            opt.load_state_dict(_corrupt_state_dict(opt.state_dict(), how))
    _assert_unchanged(before, opt, variables, factory)


def _corrupt_state_dict(state, how):
    """A torch-format state dict with one entry missing ("short"), one too many ("long") or a wrong shape."""
    entry = state["state"][max(state["state"])]
    name = sorted(entry)[-1]
    if how == "short":
        del entry[name]
    elif how == "long":
        entry["unexpected"] = entry[name]
    elif how == "empty":
        return {"state": "not a dict", "param_groups": state["param_groups"]}
    else:
        entry[name] = torch.zeros(tuple(entry[name].shape) + (2,), dtype=entry[name].dtype)
    return state


@FAST
@given(factory=factories(apis=("v1",)), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(1, 3),
       how=st.sampled_from(["shape", "empty"]))
def test_v1_bad_state_dict_changes_nothing(factory, shapes, dtype, seed, steps, how):
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    state = opt.state_dict()
    assume(state["state"])
    bad = _corrupt_state_dict(state, how)
    before = _snapshot(opt, variables, factory)
    with pytest.raises((ValueError, TypeError)):
        opt.load_state_dict(bad)
    _assert_unchanged(before, opt, variables, factory)


@FAST
@given(factory=factories(apis=("keras3",), base=False), accumulate=st.sampled_from([2, 3]), shapes=SHAPES,
       dtype=DTYPE, seed=SEED, steps=st.integers(0, 5), kind=st.sampled_from(BAD_CALLS))
def test_failed_step_during_accumulation_changes_nothing(factory, accumulate, shapes, dtype, seed, steps, kind):
    # Accumulated gradients are state too: a refused call, on an accumulating call or on the update call, keeps them.
    factory.kwargs["gradient_accumulation_steps"] = accumulate
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    grads = gradient_steps(variables, 1, seed + 5)[0]
    grads[-1] = _bad_gradient(kind, variables[-1])
    before = _snapshot(opt, variables, factory)
    with pytest.raises((ValueError, TypeError)):
        factory.apply(opt, list(zip(grads, variables)))
    _assert_unchanged(before, opt, variables, factory)
    # ... and training goes on exactly as for a twin that never saw the call.
    twin, twin_vars = trained(factory, shapes, dtype, seed, steps)
    for grads in gradient_steps(variables, accumulate, seed + 11):
        factory.apply(opt, list(zip(grads, variables)))
        factory.apply(twin, list(zip(grads, twin_vars)))
    for a, b in zip(_snapshot(opt, variables, factory), _snapshot(twin, twin_vars, factory)):
        assert same_bits(a, b)


@FAST
@given(factory=factories(apis=("keras3",), base=False), accumulate=st.sampled_from([2, 3]), shapes=SHAPES,
       dtype=DTYPE, seed=SEED, cycles=st.integers(0, 2))
def test_failing_update_call_during_accumulation_changes_nothing(factory, accumulate, shapes, dtype, seed, cycles):
    failing = {"now": False}
    rate = factory.kwargs.get("learning_rate", 0.01)

    def learning_rate():
        if failing["now"]:
            raise RuntimeError("learning rate unavailable")
        return rate

    factory.kwargs.update(learning_rate=learning_rate, gradient_accumulation_steps=accumulate)
    # stop right before an update call: cycles full cycles, then accumulate - 1 accumulating calls
    opt, variables = trained(factory, shapes, dtype, seed, cycles * accumulate + accumulate - 1)
    before = _snapshot(opt, variables, factory)
    failing["now"] = True
    with pytest.raises(RuntimeError, match="learning rate unavailable"):
        factory.apply(opt, list(zip(gradient_steps(variables, 1, seed + 5)[0], variables)))
    _assert_unchanged(before, opt, variables, factory)


@FAST
@given(rules=st.lists(st.sampled_from([("legacy", "SGD"), ("legacy", "Adam"), ("keras3", "Adagrad"),
                                       ("keras3", "RMSprop")]), min_size=2, max_size=2),
       shapes=st.lists(SHAPES.map(lambda s: s[0]), min_size=2, max_size=4), dtype=DTYPE, seed=SEED,
       steps=st.integers(1, 3), kind=st.sampled_from(["orphan", "shared", "shape", "dtype", "index_high"]))
def test_composite_refused_call_changes_nothing(rules, shapes, dtype, seed, steps, kind):
    # TFRS CompositeOptimizer: a variable no sub-optimizer owns, one two of them claim, or a bad gradient for one
    # sub-optimizer's variable: refused before any sub-optimizer moves.
    variables = make_variables(shapes, dtype, seed)
    subs = [getattr(slotopt if api == "keras3" else slotopt.legacy, name)(learning_rate=0.1) for api, name in rules]
    first, rest = variables[:1], variables[1:]
    opt = slotopt.CompositeOptimizer([(subs[0], lambda: first), (subs[1], lambda: rest)])
    for grads in gradient_steps(variables, steps, seed):
        opt.apply_gradients(list(zip(grads, variables)))
    pairs = list(zip(gradient_steps(variables, 1, seed + 2)[0], variables))
    if kind == "orphan":
        stranger = make_variables([shapes[0]], dtype, seed + 4, prefix="stranger")[0]
        pairs.append((torch.ones_like(stranger), stranger))
    elif kind == "shared":
        opt = slotopt.CompositeOptimizer([(subs[0], lambda: first + rest[:1]), (subs[1], lambda: rest)])
    else:
        pairs[-1] = (_bad_gradient(kind, variables[-1]), variables[-1])
    before = [v.detach().clone() for v in variables] + [t.detach().clone() for t in opt.variables()]
    with pytest.raises((ValueError, TypeError)):
        opt.apply_gradients(pairs)
    after = [v.detach().clone() for v in variables] + [t.detach().clone() for t in opt.variables()]
    assert len(before) == len(after)
    for i, (a, b) in enumerate(zip(before, after)):
        assert same_bits(a, b), f"state tensor {i} changed by a refused composite call"
