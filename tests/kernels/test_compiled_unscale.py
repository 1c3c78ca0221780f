"""The compiled unscale of the Keras 3 LossScaleOptimizer's ordinary step (``native.unscale_into``, used by
``engine/loss_scaling.finite_unscaled``): one pass per kind that checks the scaled gradients for inf/NaN and
writes ``g.to(promote_types(g.dtype, float32)) / scale`` into the kept buffer, the same bits as torch's
``flat.to(...) / scale`` under the step's flush-to-zero mode, for every float dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import slotopt
from slotopt import numerics
from slotopt.engine import loss_scaling
from slotopt.kernels import native

INF, NAN = float("inf"), float("nan")
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SCALES = [2.0**15, 1.0, 2.0**-10, 3.0]
_BITS = {torch.float32: (torch.int32, 32), torch.float64: (torch.int64, 64), torch.float16: (torch.int16, 16),
         torch.bfloat16: (torch.int16, 16)}


def compiled_unscale_built():
    return native.unscale_into(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64), torch.float32,
                               torch.empty(0), 1.0, tensors=lambda: []) is not None


needs_compiled = pytest.mark.skipif(not compiled_unscale_built(), reason="compiled kernels not built")


@pytest.fixture
def kernels():
    """Restores the kernel path a test switches."""
    previous = native.use("auto")
    yield
    native.use(previous)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    integer = _BITS[a.dtype][0]
    return torch.equal(a.reshape(-1).view(integer), b.reshape(-1).view(integer))


def edge_values(dtype):
    """Finite values of ``dtype`` that the conversion and the division must get right."""
    info = torch.finfo(dtype)
    tiny, smallest = info.tiny, info.smallest_normal * info.eps  # smallest normal, smallest subnormal
    values = [0.0, -0.0, 1.0, -1.0, 3.0, info.max, -info.max, info.max / 3, tiny, -tiny, smallest, -smallest,
              tiny / 2, tiny * 0.75, -tiny / 3, smallest * 3, 1e-35, -1e-38, 1e-300, 65504.0, 3.0e38, 1e300]
    return torch.tensor(values, dtype=torch.float64).to(dtype)  # (out of range: inf, dropped below)


def random_values(dtype, numel, generator):
    """Random finite values of ``dtype``: random bit patterns (every exponent, subnormals included), edge values,
    scaled normals."""
    integer, bits = _BITS[dtype]
    raw = torch.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, (numel,), generator=generator, dtype=torch.int64)
    values = raw.to(integer).view(dtype).clone()
    edges = edge_values(dtype)
    pick = torch.randint(0, 3, (numel,), generator=generator)
    chosen = edges[torch.randint(0, len(edges), (numel,), generator=generator)]
    normal = (torch.randn(numel, generator=generator, dtype=torch.float64) * 3000.0).to(dtype)
    values = torch.where(pick == 0, values, torch.where(pick == 1, chosen, normal))
    return torch.where(torch.isfinite(values), values, normal)


def torch_unscaled(tensors, dtype, scale):
    """The torch path: one flat copy, converted, divided by the 0-d float32 scale; under flush-to-zero, on one
    thread (torch's worker threads do not take the mode, the compiled kernel's do)."""
    flat = torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0, dtype=dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with numerics.flush_to_zero():
            return flat.to(torch.promote_types(dtype, torch.float32)) / torch.tensor(scale, dtype=torch.float32)
    finally:
        torch.set_num_threads(threads)


def compiled_unscaled(tensors, dtype, scale, threads=None):
    addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum([t.numel() for t in tensors])]).astype(np.int64)
    out = torch.full((int(offsets[-1]),), 7.0, dtype=torch.promote_types(dtype, torch.float32))
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with numerics.flush_to_zero():
            found = native.unscale_into(addresses, offsets, dtype, out, scale, tensors=lambda: tensors)
    finally:
        torch.set_num_threads(previous)
    return found, out


def random_group(dtype, sizes, generator):
    return [random_values(dtype, size, generator).reshape(shape) for size, shape in
            ((s, (s,) if s % 3 else (s // 3, 3) if s else (0, 4)) for s in sizes)]


@needs_compiled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_compiled_unscale_gives_torch_bits(dtype, scale, kernels):
    generator = torch.Generator().manual_seed(int(scale * 1024) + DTYPES.index(dtype))
    groups = [[], [torch.zeros(0, dtype=dtype)], [edge_values(dtype)[torch.isfinite(edge_values(dtype))]]]
    for _ in range(8):
        count = int(torch.randint(1, 12, (1,), generator=generator))
        sizes = [int(s) for s in torch.randint(0, 300, (count,), generator=generator)]
        sizes[int(torch.randint(0, count, (1,), generator=generator))] = 0  # an empty tensor among them
        groups.append(random_group(dtype, sizes, generator))
    groups.append(random_group(dtype, [1], generator))
    groups.append(random_group(dtype, [1031], generator))  # one tensor, odd length (vector blocks + a tail)
    for tensors in groups:
        found, out = compiled_unscaled(tensors, dtype, scale)
        assert found is False
        assert same_bits(out, torch_unscaled(tensors, dtype, scale))


@needs_compiled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compiled_unscale_flushes_on_every_thread(dtype, kernels):
    """A group above the parallel threshold (32768 elements) split over two threads: subnormal inputs read as 0
    and subnormal results become 0 on both, as on the calling thread."""
    generator = torch.Generator().manual_seed(7)
    info = torch.finfo(dtype)
    tensors = random_group(dtype, [40001, 3, 30000], generator)
    for t in tensors:  # many subnormal inputs and results
        t.view(-1)[::5] = info.tiny / 4
        t.view(-1)[1::5] = info.tiny * 8
    for scale in (2.0**15, 3.0):
        reference = torch_unscaled(tensors, dtype, scale)
        for threads in (1, 2):
            found, out = compiled_unscaled(tensors, dtype, scale, threads)
            assert found is False and same_bits(out, reference)
    if dtype in (torch.float32, torch.bfloat16):  # subnormal inputs exist in the division's dtype: DAZ shows
        subnormal_inputs = torch.cat([torch.arange(t.numel()) % 5 == 0 for t in tensors])
        assert (reference[subnormal_inputs] == 0).all()


@needs_compiled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compiled_unscale_reports_inf_and_nan_anywhere(dtype, kernels):
    generator = torch.Generator().manual_seed(3)
    integer, _ = _BITS[dtype]
    quiet_nan_bits = torch.tensor([NAN], dtype=dtype).view(integer)
    signalling = {torch.float32: 0x7F800001, torch.float64: 0x7FF0000000000001, torch.float16: 0x7C01,
                  torch.bfloat16: 0x7F81}[dtype]
    bad_values = [torch.tensor([v], dtype=dtype) for v in (INF, -INF, NAN, -NAN)]
    bad_values.append(torch.tensor([signalling], dtype=torch.int64).to(integer).view(dtype))
    bad_values.append((quiet_nan_bits | 1).view(dtype))
    for trial in range(24):
        sizes = [int(s) for s in torch.randint(0, 200, (int(torch.randint(1, 8, (1,), generator=generator)),),
                                               generator=generator)]
        sizes[-1] += 1
        tensors = random_group(dtype, sizes, generator)
        if trial % 6 == 5:
            tensors.append(random_values(dtype, 40000, generator))  # the threaded split
        hosts = [i for i, t in enumerate(tensors) if t.numel()]
        host = hosts[int(torch.randint(0, len(hosts), (1,), generator=generator))]
        position = int(torch.randint(0, tensors[host].numel(), (1,), generator=generator))
        tensors[host].view(-1)[position] = bad_values[trial % len(bad_values)][0]
        found, _ = compiled_unscaled(tensors, dtype, 2.0**15)
        assert found is True, (trial, host, position)
        assert native.first_nonfinite(np.array([t.data_ptr() for t in tensors], dtype=np.uint64),
                                      np.concatenate([[0], np.cumsum([t.numel() for t in tensors])]).astype(np.int64),
                                      dtype, lambda ts=tensors: ts) == host


@needs_compiled
def test_compiled_unscale_checks_before_the_division(kernels):
    """A huge finite gradient is finite (the step is applied) even when dividing by a small scale overflows."""
    tensors = [torch.tensor([3.0e38, -3.0e38, 1.0])]
    found, out = compiled_unscaled(tensors, torch.float32, 2.0**-10)
    assert found is False and out.tolist() == [INF, -INF, 1024.0]


@needs_compiled
def test_compiled_unscale_refuses_a_wrong_output_and_is_off_under_foreach(kernels):
    tensors = [torch.ones(4, dtype=torch.float16)]
    addresses = np.array([tensors[0].data_ptr()], dtype=np.uint64)
    offsets = np.array([0, 4], dtype=np.int64)
    for out in (torch.empty(4, dtype=torch.float16), torch.empty(5), torch.empty(8)[::2]):
        with pytest.raises(ValueError, match="out"):
            native.unscale_into(addresses, offsets, torch.float16, out, 2.0, tensors=lambda: tensors)
    native.use("foreach")
    out = torch.full((4,), 7.0)
    assert native.unscale_into(addresses, offsets, torch.float16, out, 2.0, tensors=lambda: tensors) is None
    assert out.tolist() == [7.0] * 4  # nothing done
    native.use("auto")
    version = out._version
    assert native.unscale_into(addresses, offsets, torch.float16, out, 2.0, tensors=lambda: tensors) is False
    assert out.tolist() == [0.5] * 4 and out._version > version


@needs_compiled
def test_compiled_unscale_bounds_check_refuses_addresses_outside_the_gradients(kernels):
    tensors = [torch.ones(4), torch.ones(3)]
    addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
    offsets = np.array([0, 4, 8], dtype=np.int64)  # one element more than the second tensor has
    previous = native.check_bounds(True)
    try:
        with pytest.raises(native.BoundsError):
            native.unscale_into(addresses, offsets[:3], torch.float32, torch.empty(8), 1.0,
                                tensors=lambda: tensors)
    finally:
        native.check_bounds(previous)


# ---------------------------------------------------------------------------------------- through the wrapper
SHAPES = [(5,), (3, 4), (), (7,), (2, 3, 2), (1,), (0,), (33,)]


def make_params(dtypes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=torch.float64).to(dtypes[i % len(dtypes)]))
            for i, shape in enumerate(SHAPES)]


def scaled_grads(params, step, scale, poison=None):
    """Gradients as a scaled loss gives them (``scale`` times a unit gradient of about 0.01), with subnormals,
    a huge value and signed zeros among them; ``poison=(tensor, element, value)`` plants one value. (The huge
    value unscaled is at most a quarter of the square root of the dtype's largest: Adam's second moment stays
    finite, so that no NaN, whose bits the compiled and foreach Adam need not share, enters the training.)"""
    g = torch.Generator().manual_seed(1000 + step)
    grads = []
    for p in params:
        values = torch.randn(p.shape, generator=g, dtype=torch.float64) * (0.01 * scale)
        if values.numel() > 3:
            info = torch.finfo(p.dtype)
            huge = min(info.max ** 0.5 / 4 * scale, info.max / 4)
            values.view(-1)[:4] = torch.tensor([info.tiny / 4, -0.0, huge, info.tiny * 3],
                                               dtype=torch.float64)
        grads.append(values.to(p.dtype))
    if poison is not None:
        index, element, value = poison
        grads[index].view(-1)[element] = value
    return grads


@pytest.fixture
def unscaled_record(monkeypatch):
    """Records what ``finite_unscaled`` hands the inner optimizer (copies: the kept buffer is rewritten) and how
    many kinds the compiled unscale took."""
    record = {"grads": [], "compiled": 0}
    finite_unscaled, unscale_into = loss_scaling.finite_unscaled, native.unscale_into

    def recorded(step, scale, keep):
        grads = finite_unscaled(step, scale, keep)
        record["grads"].append(None if grads is None else [g.clone() for g in grads])
        return grads

    def counted(*args, **kwargs):
        found = unscale_into(*args, **kwargs)
        record["compiled"] += found is not None
        return found
    monkeypatch.setattr(loss_scaling, "finite_unscaled", recorded)
    monkeypatch.setattr(native, "unscale_into", counted)
    return record


MIXES = {"f32": (torch.float32,), "f64": (torch.float64,), "f16": (torch.float16,), "bf16": (torch.bfloat16,),
         "all-four": (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


def train(dtypes, scale, poisons, inner=None):
    """Parameters, scale and iterations after each step of a Keras 3 LossScaleOptimizer whose scale is set to
    ``scale`` after the build."""
    params = make_params(dtypes)
    opt = slotopt.LossScaleOptimizer(inner or slotopt.Adam(learning_rate=0.01), dynamic_growth_steps=1000)
    opt.build(params)
    opt._dynamic_scale.fill_(scale)
    history = []
    for step, poison in enumerate(poisons):
        grads = scaled_grads(params, step, float(opt.dynamic_scale), poison)
        given = [g.clone() for g in grads]
        opt.apply_gradients(list(zip(grads, params)))
        assert all(same_bits(a, b) for a, b in zip(grads, given))  # the caller's gradients are left as they were
        history.append(([p.detach().clone() for p in params], float(opt.dynamic_scale), int(opt.iterations)))
    return history


def assert_same_history(a, b):
    assert len(a) == len(b)
    for (values, scale, iterations), (ref_values, ref_scale, ref_iterations) in zip(a, b):
        assert (scale, iterations) == (ref_scale, ref_iterations)
        assert all(same_bits(x, y) for x, y in zip(values, ref_values))


POISONS = [None, (1, 7, NAN), None, (7, 32, INF), None, (0, 4, -INF), None]


@needs_compiled
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("scale", SCALES)
def test_wrapper_unscales_compiled_as_torch_does(mix, scale, unscaled_record, kernels):
    """What the inner optimizer receives, compiled or not, is ``g.to(promote(g.dtype, float32)) / scale``, and
    training runs to the same bits with the compiled path and with the foreach one."""
    dtypes = MIXES[mix]
    compiled = train(dtypes, scale, POISONS)
    compiled_grads = unscaled_record["grads"][:]
    kinds, finite_steps = len({*dtypes}), POISONS.count(None)
    # One call per kind on a finite step; a step with an inf or a NaN stops at the kind that has it.
    assert finite_steps * kinds + len(POISONS) - finite_steps <= unscaled_record["compiled"] <= len(POISONS) * kinds
    calls = unscaled_record["compiled"]
    assert [g is None for g in compiled_grads] == [p is not None for p in POISONS]
    skipped = [i for i, (_, _, it) in enumerate(compiled) if it == (compiled[i - 1][2] if i else 0)]
    assert skipped == [1, 3, 5]
    params = make_params(dtypes)
    scales = [scale, scale, scale / 2, scale / 2, scale / 4, scale / 4, scale / 8]
    for step, (grads, step_scale) in enumerate(zip(compiled_grads, scales)):
        if grads is not None:
            for got, g in zip(grads, scaled_grads(params, step, step_scale)):
                assert same_bits(got, torch_unscaled([g], g.dtype, step_scale).reshape(g.shape))
    native.use("foreach")
    unscaled_record["grads"].clear()
    assert_same_history(compiled, train(dtypes, scale, POISONS))
    assert unscaled_record["compiled"] == calls  # no compiled call under foreach
    for got, expected in zip(unscaled_record["grads"], compiled_grads):
        assert (got is None) == (expected is None)
        assert got is None or all(same_bits(a, b) for a, b in zip(got, expected))


@needs_compiled
def test_wrapper_mixes_compiled_and_torch_kinds(unscaled_record, monkeypatch, kernels):
    """A kind whose buffer is not kept (over ``KEPT_BYTES``) takes the torch path next to compiled kinds; the
    finite check still covers it."""
    dtypes = MIXES["all-four"]
    # Kept: the float32 kind (17 elements, 68 bytes) and the float16 one (1 element, in float32); not kept: the
    # float64 kind (13 elements, 104 bytes) and the bfloat16 one (40 elements, 160 bytes in float32).
    monkeypatch.setattr(loss_scaling, "KEPT_BYTES", 100)
    poisons = [None, (3, 2, NAN), None, (0, 4, INF), None, (1, 7, -INF), None]
    mixed = train(dtypes, 3.0, poisons)
    assert unscaled_record["compiled"] > 0
    assert [g is None for g in unscaled_record["grads"]] == [p is not None for p in poisons]
    monkeypatch.setattr(loss_scaling, "KEPT_BYTES", 1 << 26)
    native.use("foreach")
    assert_same_history(mixed, train(dtypes, 3.0, poisons))


@needs_compiled
def test_wrapper_takes_the_torch_path_for_strided_gradients_and_custom_updates(unscaled_record, kernels):
    """Not contiguous (no addresses read) or a gradient the inner optimizer may keep (no kept buffer): the torch
    path, the same bits."""
    params = make_params((torch.float32,))
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), initial_scale=3.0)
    reference = [p.detach().clone().requires_grad_() for p in params]
    ref_opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), initial_scale=3.0)
    native.use("foreach")
    for step in range(3):
        grads = scaled_grads(params, step, 3.0)
        ref_opt.apply_gradients(list(zip(grads, reference)))
    native.use("auto")
    for step in range(3):
        grads = scaled_grads(params, step, 3.0)
        grads[1] = grads[1].t().contiguous().t()  # a strided gradient of the right shape
        opt.apply_gradients(list(zip(grads, params)))
    assert unscaled_record["compiled"] == 0
    assert all(same_bits(p.detach(), r.detach()) for p, r in zip(params, reference))

    class Keeping(slotopt.SGD):
        def update_step(self, gradient, variable, learning_rate):
            super().update_step(gradient, variable, learning_rate)

    opt = slotopt.LossScaleOptimizer(Keeping(learning_rate=0.1), initial_scale=3.0)
    opt.apply_gradients(list(zip(scaled_grads(params, 0, 3.0), params)))
    assert unscaled_record["compiled"] == 0


@needs_compiled
def test_wrapper_steps_pass_the_bounds_check_with_the_same_bits(unscaled_record, monkeypatch, kernels):
    """With the debug bounds check on, every compiled unscale's addresses are checked against the gradients (they
    fit), and the training is the same."""
    dtypes = MIXES["all-four"]
    plain = train(dtypes, 3.0, POISONS)
    one_list_tables = []  # the unscale's tables (the update rules' have two operand lists or more)
    check_table = native._check_table

    def recorded(table, offsets, extents, element_size):
        check_table(table, offsets, extents, element_size)
        if table.shape[0] == 1:
            one_list_tables.append(table.shape[1])
    monkeypatch.setattr(native, "_check_table", recorded)
    previous = native.check_bounds(True)
    try:
        calls = unscaled_record["compiled"]
        assert_same_history(plain, train(dtypes, 3.0, POISONS))
        assert len(one_list_tables) == unscaled_record["compiled"] - calls > 0
        assert set(one_list_tables) == {2}  # each kind of the mix: two gradients
    finally:
        native.check_bounds(previous)


@needs_compiled
@pytest.mark.parametrize("threads", [1, 2])
def test_the_threaded_finite_check_finds_the_first_tensor_with_an_inf_or_nan(kernels, threads):
    # Over 32,768 elements the tensors are shared between threads, each stopping at the first it finds; the answer
    # must still be the first tensor of the whole group, wherever the others lie (and -1 when there is none).
    generator = torch.Generator().manual_seed(7)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trial in range(40):
            sizes = [int(s) for s in torch.randint(0, 700, (400,), generator=generator)]
            tensors = [torch.randn(s, generator=generator) for s in sizes]
            addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            assert native.first_nonfinite(addresses, offsets, torch.float32, lambda ts=tensors: ts) == -1
            hosts = sorted({int(h) for h in torch.randint(0, 400, (1 + trial % 4,), generator=generator)
                            if sizes[int(h)]})
            for host in hosts:
                tensors[host].view(-1)[sizes[host] - 1] = (INF, -INF, float("nan"))[host % 3]
            assert native.first_nonfinite(addresses, offsets, torch.float32, lambda ts=tensors: ts) == (hosts[0] if hosts else -1)
    finally:
        torch.set_num_threads(previous)
