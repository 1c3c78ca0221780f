"""Issue 50 items 9 and 10: smaller corners."""

from __future__ import annotations

import gc
import os
import threading

import pytest
import torch

import slotopt
from slotopt.engine.writing import atomic


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_9_a_fork_while_another_thread_is_mid_step_leaves_the_childs_collector_on():
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def step() -> None:
        token = atomic.hold()
        try:
            inside.set()
            leave.wait(30)
        finally:
            atomic.release(token)

    worker = threading.Thread(target=step)
    worker.start()
    inside.wait(30)
    assert not gc.isenabled()  # the other thread's step holds it off here
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if gc.isenabled() else 3)
    _, status = os.waitpid(pid, 0)
    leave.set()
    worker.join(30)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.isenabled()


def test_9_an_empty_parameter_with_a_huge_shape_steps_as_in_torch():
    shape = (0, 2 ** 62)
    opt, ref = slotopt.Adam([p := torch.nn.Parameter(torch.empty(shape))]), torch.optim.Adam(
        [q := torch.nn.Parameter(torch.empty(shape))])
    for o, w in ((opt, p), (ref, q)):
        w.grad = torch.empty(shape)
        o.step()
    assert tuple(opt.state[p]["momentum"].shape) == shape and int(opt.iterations) == 1


def test_9_inspect_escapes_control_characters_in_names(tmp_path):
    import io
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    import _tf_bundle_writer as writer

    from slotopt.cli.inspect import inspect_checkpoint

    writer.write_bundle(str(tmp_path / "model.ckpt-1"), {"w\x1b[2J\x07": torch.ones(2), "ok": torch.ones(1)})
    out = io.StringIO()
    inspect_checkpoint(str(tmp_path / "model.ckpt-1"), out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "w\\x1b[2J\\x07" in text


def test_9_a_nested_tensor_slot_is_refused_by_name_and_changes_nothing():
    w = torch.nn.Parameter(torch.ones(2))
    opt = slotopt.Adam([w], lr=0.1)
    w.grad = torch.ones(2)
    opt.step()
    saved = opt.state_dict()
    before = opt.state[w]["momentum"].clone()
    saved["state"][0]["momentum"] = torch.nested.nested_tensor([torch.ones(2)])
    with pytest.raises(TypeError, match="'momentum' of parameter 0 is a nested tensor"):
        opt.load_state_dict(saved)
    assert torch.equal(opt.state[w]["momentum"], before)
