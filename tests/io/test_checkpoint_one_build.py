"""A checkpoint becomes an optimizer with one probe and one build (issue 46), and the slots packed into a shared
buffer are the reader's tensors afterwards as a whole slot is (engine/adopt.py: the offer is handed to the
optimizer being built, not read from a context by whatever builds).

The builds are counted on a registered subclass, the way a user's own class is known to the readers."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import slotopt
from slotopt.engine import registry

sys.path.insert(0, str(Path(__file__).parents[1]))
import _tf_bundle_writer as writer  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "data" / "keras_checkpoints" / "keras3_adam_float32.keras"


@pytest.fixture
def counting():
    """A registered Adam that counts its constructions and builds."""
    calls = {"init": 0, "build": 0}

    @registry.register("keras3", keras=False)
    class BuildCountingAdam(slotopt.Adam):
        def __init__(self, *args, **kwargs):
            calls["init"] += 1
            super().__init__(*args, **kwargs)

        def build(self, var_list):
            calls["build"] += 1
            return super().build(var_list)

    try:
        yield BuildCountingAdam, calls
    finally:
        registry._REGISTRATIONS["keras3"].pop("BuildCountingAdam")


def _renamed(path: Path, class_name: str) -> Path:
    """The fixture's .keras file with its optimizer's class renamed (slotopt's own module)."""
    with zipfile.ZipFile(FIXTURE) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                config["compile_config"]["optimizer"].update(class_name=class_name, module="slotopt.keras3")
                data = json.dumps(config).encode()
            target.writestr(item, data)
    return path


def test_a_keras_checkpoint_becomes_an_optimizer_with_one_probe_and_one_build(tmp_path, counting):
    cls, calls = counting
    ck = slotopt.io.load_keras_checkpoint(_renamed(tmp_path / "counted.keras", cls.__name__))
    assert calls == {"init": 1, "build": 1}  # the probe, on meta tensors, when the file is read
    opt = ck.optimizer(ck.parameters())
    assert type(opt) is cls and calls == {"init": 2, "build": 2}  # (it was 3 and 3: a second probe)
    assert int(opt.iterations) == int(np.asarray(ck.optimizer_state[0]))


def test_a_tf_checkpoint_builds_the_given_optimizer_once_after_one_probe(tmp_path, counting):
    cls, calls = counting
    names = ["dense/kernel", "dense/bias"]
    params = [torch.randn(200, 200), torch.randn(200)]
    trained = slotopt.Adam(0.01)
    trained.build(list(zip(names, params)))
    trained.apply_gradients([(torch.randn(p.shape), p) for p in params])
    writer.write_keras3_checkpoint(str(tmp_path / "ckpt-1"), trained, names)
    ck = slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")
    given = cls(0.01)
    opt = ck.optimizer(ck.parameters(), optimizer=given)
    assert opt is given and calls == {"init": 1, "build": 2}  # the caller's; a copy of it probed on meta tensors


def _reference(path: Path):
    """The file's optimizer as ``set_weights`` loads it, on copies of the file's weights."""
    ck = slotopt.io.load_keras_checkpoint(path)
    params = [torch.tensor(np.asarray(ck.weights[n])) for n in ck.variable_names]
    opt = slotopt.Adam.from_config(ck.optimizer_config["config"])
    opt.build(list(zip(ck.variable_names, params)))
    opt.set_weights([np.asarray(v) for v in ck.optimizer_state])
    return opt, params


def test_packed_slots_are_the_readers_tensors_and_continue_bit_for_bit():
    ck = slotopt.io.load_keras_checkpoint(FIXTURE)
    saved = [np.array(v, copy=True) for v in ck.optimizer_state]
    params = ck.parameters()
    opt = ck.optimizer(params)
    buffers = {b.untyped_storage().data_ptr() for b in opt._flat_state._buffers.values()}
    slots = [(i, v) for i, v in enumerate(opt.variables) if v.dim() > 0]
    assert len(slots) == 8 and {v.untyped_storage().data_ptr() for _, v in slots} <= buffers  # all packed
    for i, slot in slots:
        held = torch.from_numpy(np.asarray(ck.optimizer_state[i]))
        assert held.data_ptr() == slot.data_ptr()  # one copy: the reader's value is the packed slot's memory
        assert np.array_equal(np.asarray(slot.detach()), saved[i])
    reference, reference_params = _reference(FIXTURE)
    generator = torch.Generator().manual_seed(3)
    for _ in range(2):
        grads = [torch.randn(p.shape, generator=generator) for p in params]
        opt.apply_gradients(list(zip(grads, params)))
        reference.apply_gradients(list(zip([g.clone() for g in grads], reference_params)))
    for a, b in zip(opt.variables + list(params), reference.variables + reference_params):
        assert torch.equal(a.detach(), b.detach())
    # Trained since, the reader's values are no longer the file's: a second optimizer is refused, nothing changed.
    with pytest.raises(ValueError, match="has been written since"):
        ck.optimizer([p.detach().clone() for p in params])
    # A reset writes the face's fill back, not the file's values the slot was filled from.
    del opt.state[params[0]]
    assert all(float(t.abs().sum()) == 0.0 for t in opt.state[params[0]].values() if t.dim() > 0)


def test_packed_slots_of_a_tf_checkpoint_are_its_tensors(tmp_path):
    names = ["a", "b", "c"]
    params = [torch.randn(8, 4), torch.randn(4), torch.randn(16)]
    trained = slotopt.Adam(0.01)
    trained.build(list(zip(names, params)))
    trained.apply_gradients([(torch.randn(p.shape), p) for p in params])
    writer.write_keras3_checkpoint(str(tmp_path / "ckpt-1"), trained, names)
    ck = slotopt.load_tf_checkpoint(tmp_path / "ckpt-1")
    opt = ck.optimizer(ck.parameters(), optimizer=slotopt.Adam(0.01))
    buffers = {b.untyped_storage().data_ptr() for b in opt._flat_state._buffers.values()}
    held = {v.value.data_ptr() for v in ck.optimizer_variables if v.owner is not None}
    slots = [v for v in opt.variables if v.dim() > 0]
    assert len(slots) == 6 and {v.untyped_storage().data_ptr() for v in slots} <= buffers
    assert {v.data_ptr() for v in slots} == held
    for mine, theirs in zip(slots, [v for v in trained.variables if v.dim() > 0]):
        assert torch.equal(mine.detach(), theirs.detach())
