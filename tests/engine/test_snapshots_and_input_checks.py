"""State handed out is a snapshot and state taken in is a copy (every generation); malformed sparse gradients and
variables listed twice are handled before anything changes (every generation)."""

import numpy as np
import pytest
import torch

import slotopt

# ---------------------------------------------------------------------------------------------- helpers


def _var(values=((1.0, 2.0), (3.0, -1.0), (0.5, 0.25)), name="w"):
    return slotopt.Variable(torch.tensor(values), name=name)


def _grad(scale=1.0):
    return torch.tensor([[0.5, -1.0], [0.25, 2.0], [-0.75, 1.0]]) * scale


def _keras3(w):
    return slotopt.Adam(learning_rate=0.1)


def _legacy(w):
    return slotopt.legacy.Adam(learning_rate=0.1)


def _v1(w):
    return slotopt.v1.AdamOptimizer(learning_rate=0.1)


def _composite(w):
    return slotopt.CompositeOptimizer([(slotopt.legacy.Adam(learning_rate=0.1), [w])])


GENERATIONS = {"keras3": _keras3, "legacy": _legacy, "v1": _v1, "composite": _composite}


def _state(opt):
    """Every optimizer variable's current value (copied here, so the comparison is fair)."""
    variables = opt.variables() if callable(opt.variables) else opt.variables
    return [torch.as_tensor(v).detach().clone() for v in variables]


def _unchanged(before, after):
    return len(before) == len(after) and all(torch.equal(x, y) for x, y in zip(before, after))


# ---------------------------------------------------------------------------------------------- snapshots


def _snapshots(opt):
    """Whatever each generation hands out as the optimizer's state."""
    out = []
    if hasattr(opt, "get_weights"):
        out.append(("get_weights", opt.get_weights()))
    if hasattr(opt, "save_own_variables"):
        store = {}
        opt.save_own_variables(store)
        out.append(("save_own_variables", [store[k] for k in sorted(store, key=int)]))
    state = opt.state_dict()
    out.append(("state_dict", [t for entry in state["state"].values() for t in entry.values()]))
    return out


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_saved_state_does_not_change_when_training_goes_on(generation):
    w = _var()
    opt = GENERATIONS[generation](w)
    opt.apply_gradients([(_grad(), w)])
    saved = _snapshots(opt)
    copies = [(name, [np.array(np.asarray(x), copy=True) for x in values]) for name, values in saved]
    assert any(np.any(np.asarray(x) != 0) for _, values in copies for x in values)  # there is state to watch
    for _ in range(3):
        opt.apply_gradients([(_grad(2.0), w)])
    assert not _unchanged(_state(opt), [torch.as_tensor(x) for x in copies[0][1]])  # it did move on
    for (name, values), (_, expected) in zip(saved, copies):
        for x, y in zip(values, expected):
            np.testing.assert_array_equal(np.asarray(x), y, err_msg=name)


def test_variable_numpy_is_a_snapshot():
    w = _var()
    array = w.numpy()
    slotopt.SGD(learning_rate=1.0).apply_gradients([(_grad(), w)])
    np.testing.assert_array_equal(array, [[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]])


def test_keras3_stateless_apply_outputs_do_not_follow_later_steps():
    w = _var()
    opt = slotopt.Adam(learning_rate=0.1)
    opt.apply_gradients([(_grad(), w)])
    new_w, new_state = opt.stateless_apply(opt.variables, [_grad()], [w])
    expected = [t.clone() for t in new_w + new_state]
    for _ in range(2):
        opt.apply_gradients([(_grad(3.0), w)])
    assert _unchanged(expected, new_w + new_state)


def _restore(generation, opt, weights):
    if generation == "v1":
        opt.load_state_dict(weights)
    elif generation == "keras3" and not opt.built:  # (Keras 3's set_weights needs a built optimizer)
        opt.load_own_variables({str(i): w for i, w in enumerate(weights)})
    else:
        opt.set_weights(weights)


# tf.keras's legacy set_weights needs built weights, so the legacy line has no "before build" case.
@pytest.mark.parametrize("generation,built", [(g, b) for g in GENERATIONS for b in (True, False)
                                              if b or g != "legacy"])
def test_restored_state_is_copied_in(generation, built):
    """After ``set_weights`` / ``load_*``, changing the caller's arrays changes nothing in the optimizer."""
    w0 = _var()
    source = GENERATIONS[generation](w0)
    source.apply_gradients([(_grad(), w0)])
    if generation == "v1":
        weights = source.state_dict()
        arrays = [t for entry in weights["state"].values() for t in entry.values()]
    else:
        arrays = [np.array(x, copy=True) for x in source.get_weights()]
        weights = arrays
    w = _var()
    opt = GENERATIONS[generation](w)
    if built and generation == "v1":
        opt.apply_gradients([(torch.zeros(3, 2), w)])  # creates the slots
    elif built:
        opt.build([w]) if generation != "composite" else opt.build()
    _restore(generation, opt, weights)
    for a in arrays:  # the caller reuses its buffers
        a[...] = 123.0 if isinstance(a, np.ndarray) else a.fill_(123.0)
    opt.apply_gradients([(_grad(), w)])
    reference_w = _var()
    reference = GENERATIONS[generation](reference_w)
    if built and generation == "v1":
        reference.apply_gradients([(torch.zeros(3, 2), reference_w)])
    fresh = source.state_dict() if generation == "v1" else [np.array(x, copy=True) for x in source.get_weights()]
    if generation == "legacy" or (generation == "composite" and built):
        reference.build([reference_w]) if generation == "legacy" else reference.build()
    _restore(generation, reference, fresh)
    reference.apply_gradients([(_grad(), reference_w)])
    assert torch.equal(w, reference_w)
    assert _unchanged(_state(opt), _state(reference))


@pytest.mark.parametrize("how", ["load_own_variables", "load_state_dict", "load_own_variables_before_build"])
def test_keras3_loads_copy_in(how):
    w0 = _var()
    source = slotopt.Adam(learning_rate=0.1)
    source.apply_gradients([(_grad(), w0)])
    store = {}
    source.save_own_variables(store)
    w = _var()
    opt = slotopt.Adam(learning_rate=0.1)
    if how != "load_own_variables_before_build":
        opt.build([w])
    if how.startswith("load_own_variables"):
        opt.load_own_variables(store)
    elif how == "load_state_dict":
        state = source.state_dict()
        opt.load_state_dict(state)
        store = {str(i): t for i, t in enumerate(source.get_weights())}
        for entry in state["state"].values():  # the caller reuses the state dict's buffers
            for t in entry.values():
                t.fill_(7.0)
    expected = [np.array(np.asarray(store[str(i)]), copy=True) for i in range(len(store))]
    for value in store.values():  # the caller reuses its buffers
        value[...] = 7.0 if isinstance(value, np.ndarray) else value.fill_(7.0)
    opt.build([w])
    for got, want in zip(opt.get_weights(), expected):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------- sparse input checks


def _sparse(indices, dense_shape, values=None):
    values = torch.ones(len(indices), 2) if values is None else values
    return slotopt.IndexedSlices(values, torch.tensor(indices), dense_shape)


def _trained(generation):
    w = _var()
    opt = GENERATIONS[generation](w)
    opt.apply_gradients([(_grad(), w)])
    return opt, w


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_sparse_gradient_whose_dense_shape_differs_is_refused_before_any_change(generation):
    opt, w = _trained(generation)
    before, w_before = _state(opt), w.detach().clone()
    with pytest.raises(ValueError, match=r"Sparse gradient for variable w has dense_shape \(4, 2\), which does not "
                                         r"match the variable's shape \(3, 2\)"):
        opt.apply_gradients([(_sparse([0, 1], (4, 2)), w)])
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2, 2), (5, 2), check_invariants=True)
    with pytest.raises(ValueError, match=r"dense_shape \(5, 2\)"):
        opt.apply_gradients([(coo, w)])
    assert torch.equal(w, w_before) and _unchanged(before, _state(opt))


@pytest.mark.parametrize("indices", [[1.7], np.array([0.0, 2.0]), torch.tensor([1.0]), [True]],
                         ids=["list", "numpy", "tensor", "bool"])
def test_indexed_slices_refuse_non_integer_indices(indices):
    with pytest.raises(TypeError, match=r"IndexedSlices `indices` must be integers. Received: indices="):
        slotopt.IndexedSlices(torch.ones(len(indices), 2), indices, (3, 2))


def test_indexed_slices_refuse_a_non_integer_dense_shape():
    with pytest.raises(TypeError, match=r"`dense_shape` must be a sequence of integers. Received: "
                                        r"dense_shape=\(3.5, 2\)"):
        slotopt.IndexedSlices(torch.ones(1, 2), [0], (3.5, 2))


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_float_indices_set_after_construction_are_refused_before_any_change(generation):
    opt, w = _trained(generation)
    before, w_before = _state(opt), w.detach().clone()
    grad = _sparse([1], (3, 2))
    grad.indices = torch.tensor([1.7])
    with pytest.raises(TypeError, match=r"Sparse gradient indices for variable w must be integers. Received: "
                                        r"indices=\[1.7"):
        opt.apply_gradients([(grad, w)])
    assert torch.equal(w, w_before) and _unchanged(before, _state(opt))


# ---------------------------------------------------------------------------------------------- a variable twice


def test_keras3_applies_a_variable_listed_twice_in_turn():
    """Keras 3's TensorFlow backend decays every listed variable, then runs ``update_step`` for each pair in
    order: ``ones * (1 - 0.5)`` twice = 0.25, then ``- 1`` and ``- 2``."""
    w = slotopt.Variable(torch.ones(3), name="w")
    opt = slotopt.SGD(learning_rate=1.0, weight_decay=0.5)
    opt.apply_gradients([(torch.full((3,), 1.0), w), (torch.full((3,), 2.0), w)])
    assert w.tolist() == [-2.75] * 3 and int(opt.iterations) == 1


def test_keras3_adam_listed_twice_equals_two_updates_with_the_same_step_count():
    g1, g2 = torch.tensor([0.5, -1.0], dtype=torch.float64), torch.tensor([2.0, 0.25], dtype=torch.float64)
    w = slotopt.Variable(torch.tensor([1.0, -1.0], dtype=torch.float64), name="w")
    opt = slotopt.Adam(learning_rate=0.125, beta_1=0.5, beta_2=0.75, epsilon=2.0**-10)
    opt.apply_gradients([(g1, w), (g2, w)])
    ref, m, v = np.array([1.0, -1.0]), np.zeros(2), np.zeros(2)
    alpha = 0.125 * np.sqrt(1 - 0.75) / (1 - 0.5)  # t = 1 for both
    for g in (g1.numpy(), g2.numpy()):
        m = m + (g - m) * 0.5
        v = v + (g * g - v) * 0.25
        ref = ref - (m * alpha) / (np.sqrt(v) + 2.0**-10)
    np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-15)
    assert int(opt.iterations) == 1


def test_v1_applies_a_variable_listed_twice_in_turn():
    """TF1's ``apply_gradients`` has no check either; eagerly each pair's update runs in order."""
    w = slotopt.Variable(torch.ones(3), name="w")
    opt = slotopt.v1.GradientDescentOptimizer(learning_rate=1.0)
    opt.apply_gradients([(torch.full((3,), 1.0), w), (torch.full((3,), 2.0), w)])
    assert w.tolist() == [-2.0] * 3


def test_legacy_refuses_a_variable_listed_twice_before_any_change():
    opt, w = _trained("legacy")
    before, w_before = _state(opt), w.detach().clone()
    with pytest.raises(ValueError, match="Variable w appears more than once in `grads_and_vars`"):
        opt.apply_gradients([(_grad(), w), (_grad(), w)])
    assert torch.equal(w, w_before) and _unchanged(before, _state(opt))


def test_composite_refuses_a_repeat_its_legacy_optimizer_would_refuse_before_any_optimizer_steps():
    a, b = _var(name="a"), _var(name="b")
    keras3, legacy = slotopt.SGD(learning_rate=0.5), slotopt.legacy.SGD(learning_rate=0.5)
    opt = slotopt.CompositeOptimizer([(keras3, [a]), (legacy, [b])])
    opt.apply_gradients([(_grad(), a), (_grad(), b)])
    before, values = _state(opt), (a.detach().clone(), b.detach().clone())
    with pytest.raises(ValueError, match=r"Variable b appears more than once in `grads_and_vars` for optimizer 1"):
        opt.apply_gradients([(_grad(), a), (_grad(), b), (_grad(), b)])
    assert torch.equal(a, values[0]) and torch.equal(b, values[1]) and _unchanged(before, _state(opt))
    assert int(keras3.iterations) == 1


def test_composite_with_a_keras3_optimizer_applies_a_repeat_in_turn():
    w = slotopt.Variable(torch.ones(3), name="w")
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=1.0, weight_decay=0.5), [w])])
    opt.apply_gradients([(torch.full((3,), 1.0), w), (torch.full((3,), 2.0), w)])
    assert w.tolist() == [-2.75] * 3
