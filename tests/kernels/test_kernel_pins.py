"""The compiled kernels run without the GIL (ctypes releases it, as the C++ rules on slices do): every storage a
kernel reads or writes is held for the call and every address it takes proven inside the storage held
(``kernels/native/pins.py``), so another thread that lets go of an operand's storage meanwhile (``p.data = ...``,
``p.grad = None``, a slot dropped) cannot make it write freed memory (issue 35). Run on both check paths (the C++
table on and off); ``make asan`` runs this file under AddressSanitizer."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import slotopt
from slotopt.kernels import native
from slotopt.kernels.native import pins, tensor_table

needs_compiled = pytest.mark.skipif(not native.active() and native.status()["library"] is None,
                                    reason="compiled kernels not built")


@pytest.fixture(params=[True, False], ids=["table-on", "table-off"])
def table(request):
    previous_kernels, previous = native.use("auto"), tensor_table.use(request.param)
    yield request.param
    tensor_table.use(previous)
    native.use(previous_kernels)


def test_pin_holds_storages_and_refuses_an_address_outside_them(table):
    a, b = torch.zeros(10), torch.zeros(5)
    table_ = np.array([[a.data_ptr(), b.data_ptr()]], dtype=np.uint64)
    assert pins.pin([[a, b]], table_, np.array([0, 10, 15], dtype=np.int64), 4) is not None
    assert pins.pin([[a, b]], table_, np.array([0, 10, 16], dtype=np.int64), 4) is None  # one past b
    flat = torch.zeros(15)
    whole = np.array([[flat.data_ptr(), flat.data_ptr() + 40]], dtype=np.uint64)
    assert pins.pin([flat], whole, np.array([0, 10, 15], dtype=np.int64), 4) is not None
    assert pins.pin([flat[:14]], whole, np.array([0, 10, 15], dtype=np.int64), 4) is not None  # (its storage)
    old = a.data_ptr()
    held = pins.pin([[a, b]], table_, np.array([0, 10, 15], dtype=np.int64), 4)
    storage = a.untyped_storage()
    a.data = torch.ones(10)  # a lets go of its storage; the pin still holds it
    assert held is not None and storage.data_ptr() == old
    # An address read before the tensor let go of its storage lies in none it has now: refused.
    assert pins.pin([[a, b]], table_, np.array([0, 10, 15], dtype=np.int64), 4) is None


@needs_compiled
def test_a_call_with_an_address_its_tensor_let_go_of_is_not_taken(table):
    """The addresses of a planned call were proven at the step's start; a storage let go of since (another thread's
    ``p.data = ...`` between that proof and the call) must not be written: before issue 35's pins the compiled SGD
    wrote into the freed storage."""
    p, g = torch.zeros(1000), torch.ones(1000)
    verified = native.Verified([p], [p.data_ptr()])
    p.data = torch.full((1000,), 3.0)  # the old storage is freed
    calls = native.calls()
    with pytest.raises(pins.Moved, match="let go of its memory"):
        native.apply("sgd", [verified, [g]], [0.5, 0.0, 0.0, 0.0])
    assert native.calls() == calls and torch.equal(p, torch.full((1000,), 3.0))
    fresh = native.Verified([p], [p.data_ptr()])
    assert native.apply("sgd", [fresh, [g]], [0.5, 0.0, 0.0, 0.0]) is True and torch.equal(p, torch.full((1000,), 2.5))


@needs_compiled
def test_rules_on_slices_run_with_their_operands_held(table):
    """The compiled rule on slices takes its addresses from the storages it holds (both the C++ call and ctypes)."""
    from slotopt.kernels import adagrad, sgd

    param, state = torch.zeros(8, 4), torch.full((8, 4), 1.0)
    calls = native.calls()
    assert native.apply_slices("adagrad_slices", param, torch.tensor([1, 3]), torch.ones(2, 4), state,
                               adagrad._ADAGRAD_SLICES.vector(lr=0.5, epsilon=0.0))
    assert native.calls() == calls + 1
    assert torch.equal(state[1], torch.full((4,), 2.0)) and torch.equal(param[1], torch.full((4,), -0.5 / 2 ** 0.5))
    assert param[0].eq(0).all() and state[0].eq(1).all()
    assert native.apply_slices("sgd_slices", param, torch.tensor([0], dtype=torch.int32), torch.ones(1, 4), None,
                               sgd._SGD_SLICES.vector(lr=0.25))
    assert torch.equal(param[0], torch.full((4,), -0.25))


def test_steps_while_another_thread_swaps_the_parameters_storages(table):
    """Another thread keeps replacing the parameters' storages (``p.data = ...``) while the main thread steps (for a
    bounded time): no crash, every step completes or is refused clearly, and every parameter stays finite.
    (Keras 3's ``apply_gradients``: a torch ``step()`` while another thread assigns ``p.grad`` can crash in the C++
    checks' reading of ``.grad`` on main before issue 35's pins too, and in torch's own bindings on the Python
    path; docs/architecture.md, "Threads".)"""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(200_000)) for _ in range(4)]
    grads = [torch.randn(200_000) * 1e-3 for _ in params]
    opt = slotopt.Adam(learning_rate=1e-3)
    stop = threading.Event()
    switches = [0]

    def meddle() -> None:
        generator = torch.Generator().manual_seed(1)
        while not stop.is_set():
            i = int(torch.randint(0, len(params), (1,), generator=generator))
            params[i].data = torch.randn(200_000, generator=generator)
            switches[0] += 1
            time.sleep(0)

    worker = threading.Thread(target=meddle, daemon=True)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # (a kernel long enough for the other thread to run during it)
    worker.start()
    done = refused = 0
    deadline = time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            try:
                opt.apply_gradients(zip(grads, params))
                done += 1
            except (RuntimeError, ValueError) as error:  # a step refused: it says why
                assert str(error)
                refused += 1
    finally:
        stop.set()
        worker.join(10)
        torch.set_num_threads(previous)
    assert not worker.is_alive() and done > 0 and switches[0] > 0
    assert all(torch.isfinite(p).all() for p in params)


def test_still_proves_an_ordinary_step_unchanged_in_one_pass():
    """``proven_again``'s C++ pass: the pairs ``fits`` proved, unchanged, pass; a variable moved, re-viewed or resized
    since, or a gradient replaced in the pair list, does not (``fits`` then runs again and the step is refused)."""
    if not tensor_table.active():
        pytest.skip("the C++ checks are not built for this torch")
    from slotopt.engine.proof.unchanged import _still

    variables = [torch.randn(6) for _ in range(3)]
    opt = slotopt.Adam(learning_rate=0.1)
    for _ in range(2):
        opt.apply_gradients(zip([torch.randn(6) for _ in variables], variables))
    pairs = [(torch.randn(6), v) for v in variables]
    step = opt._current_plan().fits(pairs)
    assert step is not None and _still(step)
    variables[1].data = variables[1].data.clone()  # moved
    assert not _still(step)
    assert opt._current_plan().fits(pairs) is None  # (fits agrees: the full path takes it)
    fresh = [torch.randn(6) for _ in range(3)]
    opt.apply_gradients(zip(fresh, variables))
    opt.apply_gradients(zip(fresh, variables))
    pairs = [(torch.randn(6), v) for v in variables]
    step = opt._current_plan().fits(pairs)
    assert _still(step)
    variables[2].resize_(5)  # sizes changed in place
    assert not _still(step)
    variables[2].resize_(6)
    assert _still(step)
    step[0] = (torch.randn(6), variables[0])  # another gradient than the one fits read
    assert not _still(step)
