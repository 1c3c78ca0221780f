"""Issue 40: the optimizer built from a checkpoint at the memory floor (engine/adopt.py). ``parameters()`` hands
the reader's weights over and the optimizer takes the file's slots as they are, so nothing beyond the loaded data
is allocated (checked by memory addresses, not by timing); the run continues bit for bit; a second use of what
was handed over copies it while unwritten and is refused, changing nothing, once training wrote it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import slotopt

sys.path.insert(0, str(Path(__file__).parents[1]))
import _tf_bundle_writer as writer  # noqa: E402

NAMES = ["dense/kernel", "dense/bias", "out/kernel"]
# Kernels over the engine's packing threshold (32768 elements) and one small variable: no slot is packed.
SHAPES = [(200, 200), (200,), (200, 180)]


def _params(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=generator) for s in SHAPES]


def _train(opt, params, steps, seed, **kwargs):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.apply_gradients([(torch.randn(p.shape, generator=generator), p) for p in params], **kwargs)


def _addresses(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def _file_tensors(ck) -> set[int]:
    return _addresses(list(ck.weights.values()) + [v.value for v in ck.optimizer_variables])


def _keras3(tmp_path):
    params = _params()
    opt = slotopt.Adam(0.01)
    opt.build(list(zip(NAMES, params)))
    _train(opt, params, 3, seed=1)
    writer.write_keras3_checkpoint(str(tmp_path / "ckpt-1"), opt, NAMES)
    return slotopt.load_tf_checkpoint(tmp_path / "ckpt-1"), opt, params, lambda: slotopt.Adam(0.01), {}


def _legacy(tmp_path):
    params = _params()
    opt = slotopt.legacy.Adam(0.01)
    opt.build(list(zip(NAMES, params)))
    _train(opt, params, 3, seed=1)
    writer.write_legacy_checkpoint(str(tmp_path / "ckpt-1"), opt, NAMES, params)
    return slotopt.load_tf_checkpoint(tmp_path / "ckpt-1"), opt, params, lambda: slotopt.legacy.Adam(0.01), {}


def _v1(tmp_path):
    params = [slotopt.Variable(p, name=n) for n, p in zip(NAMES, _params())]
    step = slotopt.Variable(torch.tensor(0, dtype=torch.int64), name="global_step")
    opt = slotopt.v1.AdamOptimizer(0.01)
    _train(opt, params, 3, seed=1, global_step=step)
    tensors = {v.name: v.detach().clone() for v in opt.variables()}
    tensors |= {n: p.detach().clone() for n, p in zip(NAMES, params)} | {"global_step": step.detach().clone()}
    prefix = str(tmp_path / "model.ckpt-3")
    writer.write_bundle(prefix, tensors)
    writer.write_meta_graph(prefix + ".meta", {"Adam/learning_rate": 0.01, "Adam/beta1": 0.9, "Adam/beta2": 0.999,
                                               "Adam/epsilon": 1e-8}, NAMES)
    return slotopt.load_tf_checkpoint(prefix), opt, params, lambda: None, {}


@pytest.mark.parametrize("make", [_keras3, _legacy, _v1], ids=["keras3", "legacy", "v1"])
def test_the_optimizer_is_built_on_the_files_tensors_and_continues_bit_for_bit(tmp_path, make):
    ck, opt, params, new, kwargs = make(tmp_path)
    file_memory = _file_tensors(ck)
    restored = ck.parameters()
    # The parameters are the reader's weights (no clone) ...
    assert all(p.data_ptr() == ck.weights[n].data_ptr() for n, p in zip(ck.variable_names, restored))
    resumed = ck.optimizer(restored, optimizer=new())
    # ... and every slot is the file's tensor: building the optimizer allocated no slot memory.
    slots = [t for p in restored for name, t in resumed.state[p].items() if name != "step" and t.dim() > 0]
    assert len(slots) == 2 * len(restored)
    assert _addresses(slots) <= file_memory
    assert all(not s.requires_grad for s in slots)
    reference = [p.detach().clone() for p in params]
    _train(opt, params, 3, seed=5)
    _train(resumed, restored, 3, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(restored, params)) and not all(
        torch.equal(a, b) for a, b in zip(restored, reference))
    assert all(torch.equal(a, b) for a, b in zip(_state(resumed), _state(opt)))


def _state(opt) -> list[torch.Tensor]:
    variables = opt.variables() if callable(opt.variables) else opt.variables
    return [v.detach() for v in (opt.weights if isinstance(opt, slotopt.legacy.Optimizer) else variables)]


def test_a_slot_taken_from_the_file_resets_to_the_faces_fill_not_the_files_values(tmp_path):
    ck, _, _, new, _ = _keras3(tmp_path)
    restored = ck.parameters()
    resumed = ck.optimizer(restored, optimizer=new())
    kernel = restored[0]
    assert float(resumed.state[kernel]["momentum"].abs().sum()) > 0
    del resumed.state[kernel]  # torch's reset: the slot's initial value, zeros for Adam (not the file's m)
    assert float(resumed.state[kernel]["momentum"].abs().sum()) == 0


def test_small_variables_keep_their_packed_buffer_and_get_the_files_values(tmp_path):
    names = ["a/bias", "b/bias", "c/kernel"]
    generator = torch.Generator().manual_seed(3)
    params = [torch.randn(s, generator=generator) for s in ((7,), (5,), (300, 200))]
    opt = slotopt.Adam(0.01)
    opt.build(list(zip(names, params)))
    _train(opt, params, 2, seed=2)
    writer.write_keras3_checkpoint(str(tmp_path / "ckpt-1"), opt, names)
    ck = slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")
    restored = ck.parameters()
    resumed = ck.optimizer(restored, optimizer=slotopt.Adam(0.01))
    small = [resumed.state[p]["momentum"] for p in restored[:2]]
    # The two biases' momenta are views of one buffer (the engine's layout), holding the file's values.
    assert small[0].untyped_storage().data_ptr() == small[1].untyped_storage().data_ptr()
    assert resumed.state[restored[2]]["momentum"].data_ptr() in {v.value.data_ptr() for v in ck.optimizer_variables}
    assert all(torch.equal(a, b.detach()) for a, b in zip(resumed.variables, opt.variables))
    _train(opt, params, 2, seed=7)
    _train(resumed, restored, 2, seed=7)
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(resumed.variables, opt.variables))


def test_a_keras_file_builds_its_optimizer_on_the_files_tensors(tmp_path):
    pytest.importorskip("h5py")
    from test_keras_files import write_keras3

    params = _params()
    opt = slotopt.Adam(0.01)
    opt.build(list(zip(["dense/kernel", "dense/bias", "out/kernel"], params)))
    _train(opt, params, 2, seed=1)
    layers = [("Dense", "dense", [params[0].numpy(), params[1].numpy()], {}),
              ("Dense", "out", [params[2].numpy()], {"use_bias": False})]
    ck = slotopt.load_keras_checkpoint(write_keras3(tmp_path / "m.keras", layers, opt))
    restored = ck.parameters()
    assert all(p.data_ptr() == ck.weights[n].data_ptr() for n, p in zip(ck.variable_names, restored))
    resumed = ck.optimizer(restored)
    kernel_slots = [resumed.state[restored[i]][n] for i in (0, 2) for n in ("momentum", "velocity")]
    state_memory = {int(a.__array_interface__["data"][0]) for a in ck.optimizer_state}
    assert {s.data_ptr() for s in kernel_slots} <= state_memory
    _train(opt, params, 2, seed=4)
    _train(resumed, restored, 2, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(restored, params))


def test_a_second_use_copies_while_unwritten_and_is_refused_once_trained(tmp_path):
    ck, _, _, new, _ = _keras3(tmp_path)
    first = ck.parameters()
    second = ck.parameters()  # unwritten: copies, never the same memory as the first model's
    assert all(a.data_ptr() != b.data_ptr() and torch.equal(a, b) for a, b in zip(first, second))
    resumed = ck.optimizer(first, optimizer=new())
    _train(resumed, first, 1, seed=3)
    with pytest.raises(ValueError, match="'dense/kernel' was handed over without a copy .* written since"):
        ck.parameters()
    untouched = new()
    with pytest.raises(ValueError, match="handed over without a copy"):  # its slots were trained too
        ck.optimizer([p.detach().clone() for p in second], optimizer=untouched)
    assert not untouched.built  # all or nothing: the optimizer given is not built
    module = torch.nn.Sequential(torch.nn.Linear(200, 200), torch.nn.Linear(200, 180, bias=False))
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ValueError, match="handed over without a copy"):
        ck.load_module(module, {"dense/kernel": "0.weight", "dense/bias": "0.bias", "out/kernel": "1.weight"},
                       optimizer=new())
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), before))  # the module is not written
    fresh = slotopt.load_tf_checkpoint(ck.path)  # a second model: read the file again
    assert ck.optimizer is not None and fresh.optimizer(fresh.parameters(), optimizer=new()).built


@pytest.mark.parametrize("fmt", ["tf", "keras"])
def test_load_module_hands_the_files_tensors_over_to_the_module_and_its_optimizer(tmp_path, fmt):
    if fmt == "tf":
        ck = _keras3(tmp_path)[0]
    else:
        pytest.importorskip("h5py")
        from test_keras_files import write_keras3

        params = _params()
        opt = slotopt.Adam(0.01)
        opt.build(list(zip(NAMES, params)))
        _train(opt, params, 2, seed=1)
        layers = [("Dense", "dense", [params[0].numpy(), params[1].numpy()], {}),
                  ("Dense", "out", [params[2].numpy()], {"use_bias": False})]
        ck = slotopt.load_keras_checkpoint(write_keras3(tmp_path / "m.keras", layers, opt))
    saved = {n: t.clone() for n, t in ck.weights.items()}
    module = torch.nn.Sequential(torch.nn.Linear(200, 200), torch.nn.Linear(200, 180, bias=False))
    mapping = {"dense/kernel": "0.weight", "dense/bias": "0.bias", "out/kernel": "1.weight"}
    opt = ck.load_module(module, mapping, optimizer=slotopt.Adam(0.01)) if fmt == "tf" else \
        ck.load_module(module, mapping)
    named = dict(module.named_parameters())
    # The checkpoint keeps views of the module's parameters (Keras layout): the file's copies are freed.
    for name, pname in mapping.items():
        assert ck.weights[name].untyped_storage().data_ptr() == named[pname].untyped_storage().data_ptr()
        assert torch.equal(ck.weights[name], saved[name])
    assert torch.equal(named["0.weight"], saved["dense/kernel"].T)
    kernel_slot = opt.state[named["0.weight"]]["momentum"]  # converted once: the optimizer's own tensor
    assert kernel_slot.is_contiguous() and tuple(kernel_slot.shape) == (200, 200)
    again = ck.parameters()  # unwritten: copies, not the module's memory
    assert all(p.data_ptr() != named[mapping[n]].data_ptr() for n, p in zip(ck.variable_names, again))
    x = torch.randn(4, 200)
    module(x).square().sum().backward()
    opt.step()
    with pytest.raises(ValueError, match="handed over without a copy"):
        ck.parameters()


@pytest.mark.parametrize("kind, shape", [
    ("as_is", (5,)), ("flatten", (2, 3)), ("prelu", (1, 1, 4)), ("dense_kernel", (3, 4)),
    ("conv1d_kernel", (3, 4, 5)), ("conv2d_kernel", (2, 3, 4, 5)), ("conv3d_kernel", (2, 3, 2, 4, 5)),
    ("depthwise_kernel", (3, 3, 4, 2)), ("depthwise_kernel", (3, 4, 2)), ("einsum_kernel:1", (4, 2, 3)),
    ("einsum_kernel:2", (4, 2, 3)), ("gru_kernel", (4, 6)), ("gru_bias", (2, 6))])
def test_the_views_between_layouts_undo_the_conversion_exactly(kind, shape):
    from slotopt.io.keras_layers import keras_view, to_torch, torch_view

    keras = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    converted = to_torch(keras, kind)
    back = keras_view(converted, kind, shape)  # what load_module keeps in place of the file's tensor
    if kind.startswith("gru"):
        assert back is None  # (gates are reordered: no view; the file's tensor is kept)
    else:
        assert back is not None and back.data_ptr() == converted.data_ptr() and torch.equal(back, keras)
    forward = torch_view(keras, kind)  # what load_module copies the weights from
    if forward is not None:
        assert forward.data_ptr() == keras.data_ptr() and torch.equal(forward, converted)
    else:
        assert kind not in ("as_is", "dense_kernel", "conv1d_kernel", "conv2d_kernel", "conv3d_kernel")


@pytest.mark.parametrize("run, optimizers", [
    ("migration2/c11_tfrs_ranking_composite/ckpts", lambda: [slotopt.legacy.Adagrad(0.1), slotopt.legacy.Adam(0.01)]),
    ("migration3/f4_tf1_wide_deep_adagrad_adam", lambda: None)], ids=["tfrs", "tf1_two_optimizers"])
def test_every_part_of_a_composite_takes_the_files_slots(run, optimizers):
    ck = slotopt.load_tf_checkpoint(Path(__file__).parents[1] / "data" / run)
    file_memory = _addresses([v.value for part in ck.parts for v in part.optimizer_variables])
    params = ck.parameters()
    opt = ck.optimizer(params, optimizer=optimizers())
    slots = [t for p in params for name, t in opt.state[p].items() if name != "step" and t.dim() > 0]
    assert len(slots) >= len(ck.parts) and _addresses(slots) <= file_memory


def test_writes_through_data_are_seen_as_writes(tmp_path):
    """Issue 50 item 1: ``.data`` is a new tensor on the same memory with a version counter of its own, so a write
    through it moves no counter of the tensor handed out; a second use must still see the write (parameters and
    slots alike), not hand the written values out as the file's."""
    ck, _, _, new, _ = _keras3(tmp_path)
    ps = ck.parameters()
    ps[0].data.add_(1)  # no version counter of ck.weights moves
    with pytest.raises(ValueError, match="'dense/kernel' was handed over without a copy .* written since"):
        ck.parameters()
    (tmp_path / "again").mkdir()
    ck = _keras3(tmp_path / "again")[0]
    first = ck.parameters()
    opt = ck.optimizer(first, optimizer=new())
    slot = next(v for v in opt.variables if v.path.endswith("dense_kernel_momentum"))
    slot.data.mul_(2)  # a slot taken from the file, written through .data
    untouched = new()
    with pytest.raises(ValueError, match="handed over without a copy"):
        ck.optimizer([p.detach().clone() for p in first], optimizer=untouched)
    assert not untouched.built


def test_an_unwritten_view_handed_out_is_fingerprinted_over_its_own_bytes():
    from slotopt.engine import adopt

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base[1:3].T  # a strided view: its extent is rows 1..2 of the storage
    mark = adopt.fingerprint(view)
    base[0].add_(1)  # outside the view's bytes
    assert adopt.fingerprint(view) == mark
    base.data[2, 5] = -1.0  # inside: seen although no version counter of `view` moved
    assert adopt.fingerprint(view) != mark
    assert adopt.fingerprint(torch.empty(3, device="meta")) is None
