"""Whole optimizer steps of the CUDA path (the Triton kernels) under Triton's interpreter, CPU tensors standing in
for a GPU's (``native.use("triton")``): the step plan's proof taken by the launch (issue 48, host work per step).

Checked here: every face's steps through the Triton route give the compiled CPU path's bits with the plan kept and
the tables found by the plan's addresses; the Python run in slotopt's own frames by one ordinary step does not grow
with the number of tensors (8 against 256: the same count of bytecodes, on the Triton route and on the compiled
one); a step whose gradients moved, are not contiguous or of another dtype, or whose variable moved, still takes
its full checks (a table of the old addresses would read memory overwritten here, and the bits would differ).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

triton = pytest.importorskip("triton")

import slotopt  # noqa: E402
from slotopt.engine import plan_cache  # noqa: E402
from slotopt.engine import state as flat_state  # noqa: E402
from slotopt.kernels import native  # noqa: E402
from slotopt.kernels import triton as kt  # noqa: E402
from slotopt.kernels.triton import table  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (masked lanes of the interpreter)

_SOURCE = os.path.dirname(os.path.abspath(slotopt.__file__)) + os.sep
_TRITON = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep


@pytest.fixture
def interpreter(monkeypatch):
    """Triton's interpreter for these tests only (the kernels defined under it), tables made anew."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(kt, "_kernels", None)
    table.clear()
    yield
    table.clear()


class _Route:
    """``native.use(mode)`` for a block (restored after it)."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.previous = native.use(self.mode)

    def __exit__(self, *exc):
        native.use(self.previous)


def test_the_triton_route_is_refused_where_triton_cannot_run_cpu_tensors(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    before = native.use("auto")
    try:
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            native.use("triton")
        assert native.use("auto") == "auto"  # refused: nothing changed
    finally:
        native.use(before)


CASES = [
    ("adam", lambda ws: slotopt.Adam(ws, learning_rate=0.01)),
    ("sgd-momentum", lambda ws: slotopt.SGD(ws, learning_rate=0.1, momentum=0.9)),
    ("rmsprop", lambda ws: slotopt.RMSprop(ws, learning_rate=0.01)),
    ("adagrad", lambda ws: slotopt.Adagrad(ws, learning_rate=0.1)),
    ("adamw", lambda ws: slotopt.AdamW(ws, learning_rate=0.01, weight_decay=0.1)),
    ("legacy-adam", lambda ws: slotopt.legacy.Adam(params=ws, learning_rate=0.01)),
    ("v1-momentum", lambda ws: slotopt.v1.MomentumOptimizer(params=ws, learning_rate=0.01, momentum=0.9)),
]
#: Small variables (their state packed in one buffer per slot) and one over the packing threshold (64 here).
SIZES = (5, 33, 64, 1100)


def _model(make, sizes=SIZES, dtype=torch.float32):
    generator = torch.Generator().manual_seed(len(sizes))
    ws = [torch.nn.Parameter(torch.randn(n, generator=generator, dtype=dtype)) for n in sizes]
    return ws, make(ws)


def _gradients(ws, step):
    generator = torch.Generator().manual_seed(100 + step)
    return [torch.randn(w.shape, generator=generator, dtype=w.dtype) for w in ws]


def _bits(ws):
    return [w.detach().numpy().tobytes() for w in ws]


def _slots(opt, ws):
    """Every state tensor of every variable (torch's ``opt.state``), as bytes."""
    return [t.detach().contiguous().numpy().tobytes() for w in ws for t in opt.state[w].values()
            if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("make", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_whole_steps_through_triton_give_the_compiled_path_s_bits_with_the_plan_kept(make, interpreter, monkeypatch):
    monkeypatch.setattr(flat_state, "SMALL_TENSOR_ELEMENTS", 64)  # (1100 elements: the state of its own)
    reference, opt_reference = _model(make)
    candidate, opt = _model(make)
    steps = 4
    for step in range(steps):
        for w, g in zip(reference, _gradients(reference, step)):
            w.grad = g
        opt_reference.step()
    launches, proven = kt.launches(), table.proven_launches()
    with _Route("triton"):
        for step in range(steps):
            for w, g in zip(candidate, _gradients(candidate, step)):
                w.grad = g
            opt.step()
    assert _bits(candidate) == _bits(reference)
    assert _slots(opt, candidate) == _slots(opt_reference, reference) and _slots(opt, candidate)
    assert plan_cache.current_plan(opt) is not None and plan_cache.current_plan(opt).uses >= steps - 1
    ran = kt.launches() - launches
    assert ran >= steps  # (the packed small variables and the large one: one or two launches a step)
    assert table.proven_launches() - proven >= (steps - 1) * (ran // steps)  # every ordinary step's by the plan


def _python_run(step):
    """The bytecodes run in slotopt's own frames by ``step()``, the interpreter's kernel bodies (frames called from
    Triton's package) and everything else (torch, Triton, the standard library) left out."""
    count = [0]

    def local(frame, event, arg):
        if event == "opcode":
            count[0] += 1
        return local

    def start(frame, event, arg):
        if not frame.f_code.co_filename.startswith(_SOURCE):
            return None
        caller = frame.f_back
        while caller is not None:  # (a kernel body, or a helper it calls, run by the interpreter)
            if caller.f_code.co_filename.startswith(_TRITON):
                return None
            caller = caller.f_back
        frame.f_trace_opcodes = True
        return local

    # A trace function makes a step not quiet (plan.quiet_now: Python code could run in it); the step counted is
    # the quiet one it is without the counting, so quiet_now is asked with the trace function out of the way.
    quiet_now = plan_cache.quiet_now

    def quiet(plan):
        tracer = sys.gettrace()
        sys.settrace(None)
        try:
            return quiet_now(plan)
        finally:
            sys.settrace(tracer)

    plan_cache.quiet_now = quiet
    sys.settrace(start)
    try:
        step()
    finally:
        sys.settrace(None)
        plan_cache.quiet_now = quiet_now
    return count[0]


def _one_step_run(make, n, route):
    ws, opt = _model(make, sizes=(16,) * n)
    grads = _gradients(ws, 0)

    def step():
        for w, g in zip(ws, grads):
            w.grad = g
        opt.step()

    with _Route(route):
        for _ in range(3):  # the plan made, the tables made and kept
            step()
        launches = kt.launches()
        run = _python_run(step)
        assert kt.launches() - launches == (1 if route == "triton" else 0)
    assert plan_cache.current_plan(opt).uses >= 3
    return run


_FACES = dict(CASES)
#: (optimizer, route, packed): the Triton route for each generation, packed and not; the compiled route too (its
#: Keras 3 groups with their own state took a Python list per tensor before).
COUNTED = [("adam", "triton", True), ("adam", "triton", False), ("adamw", "triton", False),
           ("legacy-adam", "triton", False), ("v1-momentum", "triton", False), ("adam", "auto", True),
           ("adam", "auto", False), ("legacy-adam", "auto", False)]


@pytest.mark.parametrize("name,route,packed", COUNTED,
                         ids=[f"{n}-{r}-{'packed' if p else 'unpacked'}" for n, r, p in COUNTED])
def test_the_python_of_an_ordinary_step_does_not_grow_with_its_tensors(name, route, packed, interpreter,
                                                                       monkeypatch):
    make = _FACES[name]
    if route == "auto" and not native.active():
        pytest.skip("the compiled library is not loaded here")
    if not packed:  # every variable's state its own tensors (as for large variables)
        monkeypatch.setattr(flat_state, "SMALL_TENSOR_ELEMENTS", 0)
    few, many = _one_step_run(make, 8, route), _one_step_run(make, 256, route)
    assert many == few, f"{few} bytecodes in slotopt's frames for 8 tensors, {many} for 256"


def _stepped(make, route, change):
    """Four steps of a 2-D model whose third step's gradients or variable ``change`` alters; the bits, and whether
    the last step kept a plan."""
    generator = torch.Generator().manual_seed(7)
    ws = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in ((6, 5), (3, 7), (40,))]
    opt = make(ws)
    kept = []
    with _Route(route):
        for step in range(4):
            grads = _gradients(ws, step)
            if step == 2:
                grads = change(ws, grads, kept)
            _last[:] = grads
            opt.apply_gradients(list(zip(grads, ws)))  # (a gradient of another dtype: Keras casts it)
            for old in kept:  # memory a stale table would read: overwritten
                old.fill_(float("nan"))
    return _bits(ws) + _slots(opt, ws)


_last: list = []  # the gradients of the step before


def _moved_gradients(ws, grads, kept):
    kept.extend(_last)  # the last step's gradients stay allocated, at their addresses
    return [g.clone() for g in grads]


def _strided_gradients(ws, grads, kept):
    return [g.t().contiguous().t() if g.dim() == 2 else g for g in grads]


def _float64_gradients(ws, grads, kept):
    return [g.double() for g in grads]


def _moved_variable(ws, grads, kept):
    with torch.no_grad():
        kept.append(ws[0].data)
        ws[0].data = ws[0].data.clone()  # the variable at another address: its old memory kept and overwritten
    return grads


@pytest.mark.parametrize("change", [_moved_gradients, _strided_gradients, _float64_gradients, _moved_variable],
                         ids=["gradients-moved", "strided-gradients", "float64-gradients", "variable-moved"])
@pytest.mark.parametrize("make", [CASES[0][1], CASES[5][1]], ids=["adam", "legacy-adam"])
def test_a_changed_step_still_takes_the_full_checks_and_no_stale_table(make, change, interpreter):
    reference = _stepped(make, "auto", change)
    launches = kt.launches()
    assert _stepped(make, "triton", change) == reference
    assert kt.launches() > launches


def test_a_table_is_made_once_per_set_of_addresses_and_found_again(interpreter):
    ws, opt = _model(CASES[0][1], sizes=(16,) * 12)
    first, second = _gradients(ws, 0), _gradients(ws, 1)
    with _Route("triton"):
        for grads in (first, first, second, first, second):  # two sets of gradient addresses, alternating
            for w, g in zip(ws, grads):
                w.grad = g
            opt.step()
    # (the keys of tables found by a step's proven addresses: dtype, device, ...; launch_table's: dtype, count, ...)
    proven = [key for key in table._cache if isinstance(key[1], torch.device)]
    assert len(proven) == 2  # one table per set of gradient addresses, found again while they stay
    assert len(table._cache) == 2
