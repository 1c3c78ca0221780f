"""Configs and weights round-trip: an optimizer rebuilt from them continues bit for bit like the original.

Keras 3 and legacy: ``from_config(get_config())`` plus ``set_weights(get_weights())``, and the same weights into a
fresh optimizer built from the same arguments. TF1 has no config; its ``state_dict``/``load_state_dict`` round trip
is checked instead. TFRS ``CompositeOptimizer``: weights into a fresh composite of the same optimizers. And a
``get_weights()`` list is a snapshot: training on does not change it.
"""

from __future__ import annotations

import torch
from _strategies import (
    DTYPE,
    FAST,
    SEED,
    SHAPES,
    Factory,
    clone_variables,
    factories,
    gradient_steps,
    make_variables,
    optimizer_state,
    same_bits,
    trained,
)
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import slotopt
from slotopt import legacy


def _continue_both(factory_a, opt_a, vars_a, factory_b, opt_b, vars_b, seed, steps):
    for grads in gradient_steps(vars_a, steps, seed + 100):
        factory_a.apply(opt_a, list(zip(grads, vars_a)))
        factory_b.apply(opt_b, [(g.clone(), v) for g, v in zip(grads, vars_b)])
    for i, (a, b) in enumerate(zip(vars_a, vars_b)):
        assert same_bits(a, b), f"variable {i} diverged after the round trip"
    state_a, state_b = optimizer_state(opt_a), optimizer_state(opt_b)
    assert len(state_a) == len(state_b)
    for i, (a, b) in enumerate(zip(state_a, state_b)):
        assert same_bits(a, b), f"optimizer state tensor {i} diverged after the round trip"


@FAST
@given(factory=factories(apis=("keras3", "legacy")), shapes=SHAPES, dtype=DTYPE, seed=SEED,
       steps=st.integers(1, 4), more=st.integers(1, 4), via_config=st.booleans())
def test_config_and_weights_round_trip_continue_identically(factory, shapes, dtype, seed, steps, more, via_config):
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    twin_vars = clone_variables(variables)
    if via_config:
        twin = type(opt).from_config(opt.get_config())
        assert twin.get_config() == opt.get_config()
    else:
        twin = factory()
    twin.build(twin_vars)
    twin.set_weights(opt.get_weights())
    _continue_both(factory, opt, variables, factory, twin, twin_vars, seed, more)


@FAST
@given(factory=factories(apis=("keras3", "legacy", "v1")), shapes=SHAPES, dtype=DTYPE, seed=SEED,
       steps=st.integers(1, 4), more=st.integers(1, 4))
def test_state_dict_round_trip_continues_identically(factory, shapes, dtype, seed, steps, more):
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    twin_factory = Factory(factory.api, factory.name, factory.kwargs)
    twin = twin_factory()
    if twin_factory.global_step is not None:
        twin_factory.global_step.copy_(factory.global_step)
    twin_vars = clone_variables(variables, prefix="v")   # TF1 state is keyed by variable name
    if factory.api != "v1":
        twin.build(twin_vars)
    twin.load_state_dict(opt.state_dict())
    _continue_both(factory, opt, variables, twin_factory, twin, twin_vars, seed, more)


@FAST
@given(rules=st.lists(st.sampled_from(["SGD", "Adam", "Adagrad", "RMSprop"]), min_size=2, max_size=2),
       shapes=st.lists(st.sampled_from([(3,), (2, 2), (4, 1)]), min_size=2, max_size=3), seed=SEED,
       steps=st.integers(1, 3), more=st.integers(1, 3))
def test_composite_round_trip_continues_identically(rules, shapes, seed, steps, more):
    def build(variables):
        return slotopt.CompositeOptimizer([
            (getattr(legacy, rules[0])(learning_rate=0.1), variables[:1]),
            (getattr(legacy, rules[1])(learning_rate=0.05), variables[1:]),
        ])

    class _Apply:
        global_step = None

        @staticmethod
        def apply(opt, pairs):
            opt.apply_gradients(pairs)

    variables = make_variables(shapes, torch.float32, seed)
    opt = build(variables)
    for grads in gradient_steps(variables, steps, seed):
        opt.apply_gradients(list(zip(grads, variables)))
    twin_vars = clone_variables(variables, prefix="v")
    twin = build(twin_vars)
    twin.build(twin_vars)
    twin.set_weights(opt.get_weights())
    _continue_both(_Apply, opt, variables, _Apply, twin, twin_vars, seed, more)



def _snapshot_survives_training(factory, shapes, dtype, seed, steps, more):
    opt, variables = trained(factory, shapes, dtype, seed, steps)
    snapshot = opt.get_weights()
    kept = [w.copy() for w in snapshot]
    for grads in gradient_steps(variables, more, seed + 50):
        factory.apply(opt, list(zip(grads, variables)))
    for i, (a, b) in enumerate(zip(snapshot, kept)):
        assert a.tobytes() == b.tobytes(), f"weight {i} of an earlier get_weights() changed with training"


@FAST
@given(factory=factories(apis=("keras3",)), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(1, 3),
       more=st.integers(1, 3))
def test_keras3_get_weights_is_a_snapshot(factory, shapes, dtype, seed, steps, more):
    _snapshot_survives_training(factory, shapes, dtype, seed, steps, more)


@settings(FAST, phases=[Phase.generate])
@given(factory=factories(apis=("legacy",)), shapes=SHAPES, dtype=DTYPE, seed=SEED, steps=st.integers(1, 3),
       more=st.integers(1, 3))
def test_legacy_get_weights_is_a_snapshot(factory, shapes, dtype, seed, steps, more):
    _snapshot_survives_training(factory, shapes, dtype, seed, steps, more)
