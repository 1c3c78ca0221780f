"""Issue 50: ``capturable=True`` is refused on CUDA parameters whose steps cannot be captured (``capture.refusal``:
here Keras 3 and legacy Adam with ``clipnorm``), but only
those given to the constructor were checked: a later ``build()``, ``add_param_group`` or first ``apply_gradients``
took CUDA parameters without a word. Every variable that joins is checked now (``OptimizerCore._register_named``).

No CUDA here: the CUDA parameters are torch's own fake tensors (``FakeTensorMode``, what ``torch.compile`` traces
with), which report the device without memory; the check reads only the device, and refuses before any is used."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import slotopt
from slotopt.engine.torch_arguments import TorchSpellingError

REFUSED = r"Adam\(capturable=True\) on \['cuda'\]: its steps cannot be captured in a CUDA graph \(.*(clipnorm|host)"


def _cuda_parameter() -> torch.nn.Parameter:
    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.nn.Parameter(torch.empty(3, device="cuda"))


FACES = {"keras3": lambda *a, **k: slotopt.Adam(*a, clipnorm=100.0, **k),
         "legacy": lambda *a, **k: slotopt.legacy.Adam(*a, clipnorm=100.0, **k)}


@pytest.mark.parametrize("face", list(FACES))
def test_a_later_param_group_on_cuda_is_refused_with_nothing_added(face):
    cpu = torch.nn.Parameter(torch.ones(3))
    opt = FACES[face]([cpu], learning_rate=0.1, capturable=True)  # on the CPU capturable changes nothing
    with pytest.raises(TorchSpellingError, match=REFUSED):
        opt.add_param_group({"params": [_cuda_parameter()]})
    assert [len(g["params"]) for g in opt.param_groups] == [1]
    cpu.grad = torch.ones(3)
    opt.step()
    assert cpu.detach().tolist() == pytest.approx([0.9] * 3, abs=1e-6)


@pytest.mark.parametrize("face", list(FACES))
def test_a_later_build_on_cuda_is_refused(face):
    opt = FACES[face](learning_rate=0.1, capturable=True)
    with pytest.raises(TorchSpellingError, match=REFUSED):
        opt.build([_cuda_parameter()])
    assert not opt.param_groups  # nothing registered


def test_the_constructor_refusal_is_the_same():
    with pytest.raises(TorchSpellingError, match=REFUSED):
        slotopt.Adam([_cuda_parameter()], learning_rate=0.1, capturable=True, clipnorm=100.0)
