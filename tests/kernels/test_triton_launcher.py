"""The prepared Triton launch (``kernels/triton/launcher.py``) on the CPU: no GPU here.

What the CPU can check: the key against Triton's own specialisation (``native_specialize_impl`` with the CUDA
backend of a Hopper target), the launcher's form by version, the prepared argument list against kernels compiled
for a Hopper target, and the whole route through Triton's own ``JITFunction.run`` with a stand-in for the GPU
driver (``HopperWithoutADevice``: the device, stream and binary loading a launch asks the driver for, and a
launcher that records its call instead of launching), so that the prepared call can be compared with the call
Triton's normal route makes, argument for argument. The fallbacks (the interpreter, the switch, hooks, other
kinds of arguments) take the normal route.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from _hopper_driver import FUNCTION, STREAM, HopperWithoutADevice, Launcher, hopper_backend
from test_native_kernels import CASES, _make_lists

from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels
from slotopt.kernels.triton import launcher, rules, step_scalars

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")  # (a module global: older Tritons resolve a kernel's `tl` there)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_the_key_is_at_least_as_fine_as_triton_s_specialisation():
    try:
        from triton._C.libtriton import native_specialize_impl
    except ImportError:
        pytest.skip(f"Triton {triton.__version__} specialises in Python (native_specialize_impl is from 3.6 on)")

    backend = hopper_backend()
    base = torch.zeros(64, dtype=torch.float32)
    values = [base[k:] for k in range(6)] + [torch.zeros(8, dtype=torch.float64)[1:], torch.zeros(8, dtype=torch.int64)]
    values += [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 16, 2**31 - 1, 2**31, -2**31, -2**31 - 16, 2**40,
               2**63 - 1, 2**63, 2**64 - 16, 0.0, 1.0, -0.0, 1.5, True, False, None]
    for a, b in itertools.combinations(values, 2):
        if launcher.kind(a) == launcher.kind(b):
            assert native_specialize_impl(backend, a, False, True, True) == \
                native_specialize_impl(backend, b, False, True, True), (a, b)
    # and it tells apart what Triton tells apart: alignment, 1, multiples of 16, widths, dtypes
    assert launcher.kind(base) != launcher.kind(base[1:]) and launcher.kind(base) == launcher.kind(base[4:])
    assert len({launcher.kind(v) for v in (1, 16, 17, 2**31, 2**63)}) == 5
    assert launcher.kind(torch.zeros(4, dtype=torch.float64)) != launcher.kind(base)
    for other in (torch.float32, 1 << 64, "text", (1, 2)):
        with pytest.raises(TypeError):
            launcher.kind(other)


def test_the_launcher_form_by_triton_version():
    assert [launcher.form(v) for v in ("3.0.0", "3.1.0", "3.2.0", "3.3.1", "3.4.0", "3.9.0", "3.12.0+git1a2b")] == [
        "non-constexpr", "non-constexpr", "non-constexpr", "all", "all", "all", "all"]
    assert [launcher.form(v) for v in ("2.3.1", "4.0.0", "", "nightly")] == [None] * 4


def _recorded_launch(rule_case, monkeypatch, sizes=None):
    """A real ``apply`` launch of a dense rule under the interpreter, as recorded (kernel, grid, arguments,
    options), and the rule's kernel from a build for a GPU (``TRITON_INTERPRET=0``)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)
    name, kernel, roles, kwargs = next(c for c in CASES if c[0] == rule_case)
    if sizes is not None:
        import test_native_kernels

        monkeypatch.setattr(test_native_kernels, "SIZES", sizes)
    lists = _make_lists(roles, torch.float32, seed=3)
    with triton_kernels.recording() as launches:
        assert triton_kernels.apply(kernel.rule, lists, kernel.scalar_vector(*lists, **kwargs))
    (_, grid, arguments, options), = launches
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    built = rules.build()
    return rules.generated(kernel.rule, built), grid, arguments, options, lists


def _compile_for_hopper(kernel, arguments, options):
    """What Triton's ``JITFunction.run`` binds and compiles for these arguments, for a Hopper target."""
    from triton.compiler import ASTSource
    from triton.runtime import jit

    if not hasattr(jit, "create_function_from_signature") or not hasattr(kernel, "_pack_args"):
        pytest.skip(f"Triton {triton.__version__}: this binds with other functions (the 3.6+ binder is used here)")
    create_function_from_signature = jit.create_function_from_signature

    backend = hopper_backend()
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(options, debug=False)
    bound, specialization, parsed = binder(*arguments, **kwargs)
    parsed, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, parsed)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=backend.target,
                              options=parsed.__dict__)
    return compiled, bound


@pytest.mark.parametrize("case, sizes", [("adam", None), ("sgd", [1024])], ids=["adam", "sgd-one-tensor"])
def test_the_prepared_arguments_are_the_compiled_hopper_kernel_s_signature(case, sizes, monkeypatch):
    kernel, grid, arguments, options, lists = _recorded_launch(case, monkeypatch, sizes)
    if sizes is not None:  # one tensor: T == 1, which Triton makes a constexpr of the signature
        assert arguments[3] == 1 and compiled_signature_of(kernel, arguments, options)["T"] == "constexpr"
    compiled, bound = _compile_for_hopper(kernel, arguments, options)
    found = launcher.plan(kernel, arguments, options, "all", compiled.src.signature)
    assert found is not None and found.names == tuple(compiled.src.signature)
    # exactly the values Triton's JITFunction.run (3.3 on) hands the launcher: bound_args.values()
    prepared = [*arguments, *found.tail]
    assert len(prepared) == len(bound) and all(a is b for a, b in zip(prepared, bound.values()))
    assert "constexpr" in compiled.src.signature.values() and found.tail[-1] == options[found.names[-1]]
    # Triton 3.0-3.2: the non-constexpr arguments only, in a signature that lists those only
    older = {k: v for k, v in compiled.src.signature.items() if v != "constexpr" or k in found.names[:len(arguments)]}
    assert launcher.plan(kernel, arguments, options, "non-constexpr", older) == ((), tuple(older))
    # what does not fit is not prepared: a signature of other arguments, a constexpr by position, one missing
    assert launcher.plan(kernel, arguments[:-1], options, "all", compiled.src.signature) is None
    assert launcher.plan(kernel, [*arguments, options["BY_VALUE"]], options, "all") is None
    assert launcher.plan(kernel, arguments, {k: v for k, v in options.items() if k != "BLOCK"}, "all") is None
    renamed = dict(zip([f"x{k}" for k in range(len(compiled.src.signature))], compiled.src.signature.values()))
    assert launcher.plan(kernel, arguments, options, "all", renamed) is None


def compiled_signature_of(kernel, arguments, options):
    return _compile_for_hopper(kernel, arguments, options)[0].src.signature


@pytest.fixture
def hopper(monkeypatch):
    from triton.runtime.driver import driver

    driver.set_active(HopperWithoutADevice())
    launcher.configure(None)
    monkeypatch.delenv("SLOTOPT_TRITON_LAUNCHER", raising=False)
    Launcher.calls = []
    try:
        yield _Counts()
    finally:
        launcher.configure(None)  # (forgets every prepared launch, and a switch a failed test left)
        driver.set_active(None)  # (the real driver again, made when next asked for: none on this machine)


class _Counts:
    """Launches each way since ``start()``."""

    def start(self):
        self.before = launcher.stats()
        Launcher.calls.clear()

    def __call__(self):
        return {k: v - self.before[k] for k, v in launcher.stats().items() if k != "entries"}


def _same_call(normal, prepared):
    """The prepared call is the normal route's: the same grid, stream, function, packed metadata and arguments
    (by identity); no launch metadata and no hooks where Triton passed none or empty ones."""
    assert prepared[:6] == normal[:6] and prepared[6:9] == (None, None, None)
    assert all(hook is None or not hook.calls for hook in normal[7:9])  # (Triton 3.9: empty HookChains)
    assert len(prepared) == len(normal) and all(a is b for a, b in zip(prepared[9:], normal[9:]))


class _enter_hook:
    """A launch enter hook set where the installed Triton keeps it (knobs from 3.4, CompiledKernel before)."""

    def __init__(self, hook):
        self.hook = hook

    def __enter__(self):
        try:
            from triton import knobs
        except ImportError:
            from triton.compiler import CompiledKernel

            self.owner, self.name = CompiledKernel, "launch_enter_hook"
        else:
            self.owner, self.name = knobs.runtime, "launch_enter_hook"
        self.before = getattr(self.owner, self.name)
        if hasattr(self.before, "add"):  # (a HookChain)
            self.before.add(self.hook)
        else:
            setattr(self.owner, self.name, self.hook)

    def __exit__(self, *exc):
        if hasattr(self.before, "remove"):
            self.before.remove(self.hook)
        else:
            setattr(self.owner, self.name, self.before)


def test_a_prepared_rule_launch_calls_the_launcher_as_triton_s_own_route_does(hopper, monkeypatch):
    kernel, grid, arguments, options, lists = _recorded_launch("adam", monkeypatch)
    hopper.start()
    launcher.launch(kernel, grid, arguments, options)  # Triton's route: binds, specialises, compiles, launches
    launcher.launch(kernel, grid, arguments, options)  # the launcher called directly
    assert hopper() == {"prepared": 1, "normal": 1}
    normal, prepared = Launcher.calls
    assert normal[:6] == (grid[0], 1, 1, STREAM, FUNCTION, normal[5]) and normal[5] is not None
    _same_call(normal, prepared)
    # the per-step values travel: other float scalars, other tensors at aligned addresses, the same kernel
    other = [*arguments[:4], *(v * 0.5 for v in arguments[4:])]
    table = arguments[0].clone()
    launcher.launch(kernel, grid, [table, *other[1:]], options)
    assert hopper() == {"prepared": 2, "normal": 1} and Launcher.calls[-1][9] is table
    assert list(Launcher.calls[-1][13:13 + len(other) - 4]) == other[4:]
    # what decides the specialisation differs: the normal route (another compile), prepared in turn
    launcher.launch(kernel, grid, arguments, dict(options, num_warps=2 * options["num_warps"]))
    assert hopper() == {"prepared": 2, "normal": 2}
    unaligned = torch.zeros(table.numel() + 1, dtype=table.dtype)[1:]
    launcher.launch(kernel, grid, [unaligned, *arguments[1:]], options)
    assert hopper() == {"prepared": 2, "normal": 3}
    # a launch hook set, the switch off: the normal route, however often
    seen = []
    with _enter_hook(seen.append):
        launcher.launch(kernel, grid, arguments, options)
    assert hopper() == {"prepared": 2, "normal": 4}
    assert len(seen) == 1 and seen[0].get()["stream"] == STREAM  # (Triton's route called it, with its metadata)
    monkeypatch.setenv("SLOTOPT_TRITON_LAUNCHER", "0")
    launcher.configure(None, forget=False)  # (the variable is read at the first launch and at configure)
    launcher.launch(kernel, grid, arguments, options)
    launcher.configure(False, forget=False)
    launcher.launch(kernel, grid, arguments, options)
    assert hopper() == {"prepared": 2, "normal": 6}
    monkeypatch.setenv("SLOTOPT_TRITON_LAUNCHER", "1")
    launcher.configure(None, forget=False)
    launcher.launch(kernel, grid, arguments, options)
    assert hopper() == {"prepared": 3, "normal": 6}
    _same_call(normal, Launcher.calls[-1])
    launcher.launch(kernel, lambda bound: grid, arguments, options)  # a callable grid: Triton's route calls it
    assert hopper() == {"prepared": 3, "normal": 7} and Launcher.calls[-1][:3] == (grid[0], 1, 1)
    # a direct call that fails (a launcher of another form, say): Triton's route takes the launch, and takes
    # that combination from then on
    def refuse(*call):
        raise TypeError("a launcher that takes other arguments")

    for key, entry in list(launcher._prepared.items()):
        launcher._prepared[key] = entry._replace(run=refuse)
    launcher.launch(kernel, grid, arguments, options)
    launcher.launch(kernel, grid, arguments, options)
    assert hopper() == {"prepared": 3, "normal": 9}
    _same_call(normal, (*Launcher.calls[-1][:6], None, None, None, *Launcher.calls[-1][9:]))


def test_a_prepared_step_scalars_launch_calls_the_launcher_as_triton_s_own_route_does(hopper, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(step_scalars, "_kernels", None)
    if not step_scalars.available():
        pytest.skip("glibc's powf tables not found here")
    from slotopt.engine import step_recipes as R

    f32 = torch.float32
    t = R.step(f32)
    program = R.program({0: R.adam_alpha(R.const(0.01, f32), 0.9, 0.999, t), 1: R.const(0.01, f32) * t})
    scalars = step_scalars.Scalars(torch.device("cpu"), 0, program.inputs, program)
    vector = torch.zeros(8, dtype=torch.float32)
    hopper.start()
    for _ in range(3):
        step_scalars.run(program, scalars, vector)
    assert hopper() == {"prepared": 2, "normal": 1}
    normal, *prepared = Launcher.calls
    for call in prepared:
        _same_call(normal, call)
    assert normal[:3] == (1, 1, 1)
    arguments = (scalars.count, scalars.inputs, vector, *scalars.tables, *scalars.libm_tables,
                 program.extra if program.extra is not None else scalars.inputs, scalars.state)
    # (a program kernel has no constexpr: both calling forms pass exactly its arguments)
    assert len(normal) == 9 + len(arguments) and all(a is b for a, b in zip(normal[9:], arguments))


def test_under_the_interpreter_every_launch_takes_the_normal_route(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)
    name, kernel, roles, kwargs = next(c for c in CASES if c[0] == "sgd")
    lists = _make_lists(roles, torch.float32, seed=5)
    expected = [None if ts is None else [t.clone() for t in ts] for ts in lists]
    previous = native.use("foreach")
    try:
        kernel(*expected, **kwargs)
    finally:
        native.use(previous)
    before = launcher.stats()
    assert not launcher.enabled()
    assert triton_kernels.apply(kernel.rule, lists, kernel.scalar_vector(*lists, **kwargs))
    after = launcher.stats()
    assert after["normal"] == before["normal"] + 1 and after["prepared"] == before["prepared"]
    assert after["entries"] == 0
    assert all(torch.equal(a, b) for a, b in zip(lists[0], expected[0]))


def _scaled_copy():
    """A small kernel of every argument kind the rules pass (pointers, an integer, a float, constexprs), defined
    when called (after ``TRITON_INTERPRET`` is set): it compiles with every Triton 3.x, which slotopt's rule
    kernels do not all do."""

    @triton.jit
    def scaled_copy(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr, TWICE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask) * scale
        if TWICE:
            x = x * scale
        tl.store(y_ptr + offs, x, mask=mask)

    return scaled_copy


def test_a_prepared_launch_of_a_small_kernel_calls_the_launcher_as_triton_s_own_route_does(hopper, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    kernel = _scaled_copy()
    x, y = torch.zeros(64), torch.zeros(64)
    options = {"BLOCK": 32, "TWICE": False, "num_warps": 1, "enable_fp_fusion": False}
    hopper.start()
    for scale in (0.5, 2.0, -1.0):
        launcher.launch(kernel, (2,), (x, y, 64, scale), options)
    assert hopper() == {"prepared": 2, "normal": 1}
    normal, *prepared = Launcher.calls
    assert [call[12] for call in Launcher.calls] == [0.5, 2.0, -1.0]  # the float by value, each launch its own
    for call in prepared:
        _same_call(normal, (*call[:12], normal[12], *call[13:]))
    tail = normal[13:]
    assert tail == ((32, False) if launcher.form(triton.__version__) == "all" else ())
    # an integer Triton specialises otherwise (1, a multiple of 16, neither), an unaligned pointer: each takes
    # Triton's route once, then its own prepared launch
    for n, source in ((1, x), (17, x), (64, x[1:])):
        for _ in range(2):
            launcher.launch(kernel, (2,), (source, y, n, 0.5), options)
    assert hopper() == {"prepared": 5, "normal": 4}
    assert launcher.stats()["entries"] == 4  # (one prepared launch for each kind of call)
    # a constexpr equal to the prepared one but of another type (Triton compiles another kernel for it)
    launcher.launch(kernel, (2,), (x, y, 64, 0.5), dict(options, TWICE=0))
    assert hopper() == {"prepared": 5, "normal": 5} and launcher.stats()["entries"] == 5


def test_a_kernel_that_fails_to_compile_or_launch_falls_back_to_foreach_and_writes_nothing(monkeypatch):
    """Triton 3.0-3.5 (torch 2.4-2.9) cannot compile some of the kernels (found by running them there): the rule
    must take its foreach kernel, never raise out of a step, and nothing of the failed launch may be written."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)
    monkeypatch.setattr(triton_kernels, "_failed", {})
    name, kernel, roles, kwargs = next(c for c in CASES if c[0] == "sgd")
    lists = _make_lists(roles, torch.float32, seed=7)
    before = [t.clone() for t in lists[0]]
    calls = []

    def failing(*args, **kw):
        calls.append(1)
        raise RuntimeError("PassManager::run failed (an older Triton)")

    monkeypatch.setattr(launcher, "launch", failing)
    values = kernel.scalar_vector(*lists, **kwargs)
    with pytest.warns(RuntimeWarning, match="failed on Triton .* foreach kernel runs instead"):
        assert triton_kernels.apply(kernel.rule, lists, values) is False
    assert all(torch.equal(a, b) for a, b in zip(lists[0], before))
    assert "sgd" in triton_kernels.failed() and "PassManager" in triton_kernels.failed()["sgd"]
    assert triton_kernels.apply(kernel.rule, lists, values) is False and len(calls) == 1  # (not tried again)
    assert "failed here, on foreach: sgd" in triton_kernels.status()
