"""A step met by a CUDA graph capture that cannot be captured is refused, by name, before anything is written
(engine/capture.py): its scalars are host numbers a graph would replay frozen, and numerics has no host copy to take
during a capture.
(No GPU here: the capture's own predicate, ``capture.capturing``, answers as it would during one.)"""

from __future__ import annotations

import pytest
import torch

import slotopt
from slotopt.engine import capture
from slotopt.numerics import device


def _adam(**kwargs):
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    opt = slotopt.Adam([w], lr=0.1, **kwargs)
    w.grad = torch.tensor([0.5, 0.25, -1.0])
    return w, opt


def test_no_capture_outside_one():
    assert not capture.capturing()
    w, opt = _adam()
    opt.step()  # an ordinary step: nothing refused
    assert not torch.equal(w.detach(), torch.tensor([1.0, -2.0, 3.0]))


def test_a_step_during_a_capture_is_refused_by_name_and_changes_nothing(monkeypatch):
    w, opt = _adam(clipnorm=1.0)  # (capturable steps, and what they refuse: tests/kernels/test_capturable_steps.py)
    opt.step()
    before, iterations = w.detach().clone(), int(opt.iterations)
    monkeypatch.setattr(capture, "capturing", lambda: True)
    with pytest.raises(capture.CaptureRefused, match=r"A step of slotopt\.Adam: `clipnorm=1\.0`: clipping "):
        opt.step()
    assert torch.equal(w.detach(), before) and int(opt.iterations) == iterations
    monkeypatch.setattr(capture, "capturing", lambda: False)
    opt.step()  # and the next step outside the capture runs
    assert int(opt.iterations) == iterations + 1


def test_every_optimizer_names_itself_in_its_refusal():
    _, opt = _adam(use_ema=True)
    assert capture.refusal(opt).startswith("slotopt.Adam: `use_ema=True`")
    assert capture.refusal(slotopt.Lamb([torch.nn.Parameter(torch.zeros(2))])).startswith("slotopt.Lamb: ")
    legacy = slotopt.legacy.Nadam([torch.nn.Parameter(torch.zeros(2))], learning_rate=0.1)
    assert capture.refusal(legacy).startswith("slotopt.legacy.Nadam: ")
    assert capture.refusal(slotopt.v1.AdamOptimizer).startswith("slotopt.v1.AdamOptimizer: ")  # a class too


def test_numerics_refusal_is_re_raised_with_the_optimizer_s_name():
    _, opt = _adam()
    error = capture.refused(opt, device.NotCapturable("numerics.pow", "no device kernel"))
    assert str(error) == ("A step of slotopt.Adam cannot be captured in a CUDA graph: numerics.pow cannot be "
                          "captured in a CUDA graph: no device kernel")
