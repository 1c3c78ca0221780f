"""A capturable step's scalars computed on the device, with TensorFlow's bits (issue 48).

A step captured in a CUDA graph cannot take its learning rate or bias corrections as launch arguments: a replay
would apply the captured step's values at every step. In a capturable step (``engine/capture.py``) they live in
device memory, in the rule's own scalar vector (the vector the Triton rules read with ``BY_VALUE=False``), and
one launch of :func:`run` before the update writes this step's entries there: it adds one to the group's step
count (an int64 on the device) and evaluates the group's program, the face's per-step entries lowered from their
recipes (``engine/step_recipes.py``: Adam's ``alpha = (lr * sqrt(1 - beta_2**t)) / (1 - beta_1**t)``, Adamax's
``1 - beta_1**t``, a schedule's rate...), each operation rounded once in its dtype as the host's
``engine.constants.evaluate`` rounds it, subnormal results flushed: :func:`source` writes the kernel of each
program's form once. ``beta**t`` in float32 is the C library's ``powf`` (TensorFlow's ``Pow`` of a 0-d tensor),
evaluated here from glibc's own tables (``numerics/powf_tables.py``) operation for operation in double
precision, rounded once to float and flushed to zero when subnormal; the square root and the division correctly
rounded (``sqrt_rn``, ``div_rn``). A program that needs what the device lacks (float64 ``pow`` before
``kernels/triton/libm.py`` gives glibc's) is named by :func:`missing` and refused. A program may read a face's
one-element state tensor (Nadam's ``u_product``, ``x_ptr``) and its group's own state slots (``st_ptr``: TF1's
beta powers, float64), writing each slot's next value after its outputs; every load precedes every store.
:func:`negated` is the capturable step's negation of the gradients (``maximize``), one launch per tensor.

:func:`powf` is the same ``powf`` over a tensor (``numerics.device``'s ``scalar_pow``; the tests prove it bit for
bit against ``numerics.libm.scalar_pow``), every float32 pair: glibc's special cases (zero, infinite and NaN
operands, a negative base with an integer power, a subnormal base normalised) as glibc takes them; NaN results
are NaN (their payload bits are the device's).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from ...numerics import powf_tables
from . import launcher

__all__ = ["available", "powf", "missing", "source", "run", "Scalars"]

_kernels: Optional[dict[str, Any]] = None
_device_tables: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
_BLOCK = 256


def available() -> bool:
    """Whether the C library's ``powf`` tables were found here (glibc), so the device ``powf`` has its bits."""
    return powf_tables.tables() is not None


def _build() -> dict[str, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def _u32(x, value: tl.constexpr):  # an unsigned 32-bit constant of x's shape (bare literals above 2**31 vary)
        return tl.full(x.shape, value, tl.uint32)

    @triton.jit
    def _core(ix, y, odd, d_ptr, e_ptr):
        # log2(x) = k + log2(c) + log2(z / c), z in the subinterval i of [0x1.66p-1, 0x1.66p0), 1/c its entry
        tmp = ix - _u32(ix, 0x3F330000)
        i = ((tmp >> 19) % 16).to(tl.int32)
        top = tmp & _u32(ix, 0xFF800000)
        k = top.to(tl.int32, bitcast=True) >> 23
        z = (ix - top).to(tl.float32, bitcast=True).to(tl.float64)
        invc = tl.load(d_ptr + 2 * i)
        logc = tl.load(d_ptr + 2 * i + 1)
        r = z * invc - 1.0
        y0 = logc + k.to(tl.float64)
        r2 = r * r
        q = (tl.load(d_ptr + 34) * r + tl.load(d_ptr + 35)) * r2 + (tl.load(d_ptr + 36) * r + y0)
        log2x = (tl.load(d_ptr + 32) * r + tl.load(d_ptr + 33)) * (r2 * r2) + q
        ylogx = y.to(tl.float64) * log2x
        # 2**ylogx = 2**(j/32) * 2**rr: j by the rounding shift (the sum rounded to a double), rr the rest; an odd
        # power of a negative base: the sign bit set through the table's exponent (glibc's sign bias)
        shift = tl.load(d_ptr + 40)
        kd = ylogx + shift
        ki = kd.to(tl.uint64, bitcast=True)
        rr = ylogx - (kd - shift)
        ski = ki + tl.where(odd, 1 << 16, 0).to(tl.uint64)
        s = (tl.load(e_ptr + (ki % 32).to(tl.int32)) + (ski << 47)).to(tl.float64, bitcast=True)
        value = ((tl.load(d_ptr + 37) * rr + tl.load(d_ptr + 38)) * (rr * rr)
                 + (tl.load(d_ptr + 39) * rr + 1.0)) * s
        result = value.to(tl.float32)
        signed_zero = tl.where(odd, -0.0, 0.0)
        inf = _u32(ix, 0x7F800000).to(tl.float32, bitcast=True)
        result = tl.where(ylogx <= -150.0, signed_zero, result)  # underflow
        return tl.where(ylogx > tl.load(d_ptr + 41), tl.where(odd, -inf, inf), result)  # overflow

    @triton.jit
    def _powf(x, y, d_ptr, e_ptr):
        ix0 = x.to(tl.uint32, bitcast=True)
        iy = y.to(tl.uint32, bitcast=True)
        # y an integer: 0 no, 1 odd, 2 even (glibc's checkint)
        e = ((iy >> 23) & 0xFF).to(tl.int32)
        bits = tl.minimum(tl.maximum(0x7F + 23 - e, 0), 31).to(tl.uint32)
        below = iy & ((_u32(iy, 1) << bits) - 1)
        at = (iy >> bits) & 1
        yint = tl.where(e < 0x7F, 0, tl.where(e > 0x7F + 23, 2, tl.where(below != 0, 0, tl.where(at != 0, 1, 2))))
        negative = (ix0 >> 31) != 0
        odd = negative & (yint == 1)
        ix = ix0 & _u32(ix0, 0x7FFFFFFF)
        normalized = ((x * 8388608.0).to(tl.uint32, bitcast=True) & _u32(ix0, 0x7FFFFFFF)) - (23 << 23)
        ix = tl.where(ix < _u32(ix, 0x00800000), normalized, ix)  # a subnormal base, normalised
        result = _core(ix, y, odd, d_ptr, e_ptr)
        nan = _u32(ix0, 0x7FC00000).to(tl.float32, bitcast=True)
        result = tl.where(negative & (yint == 0), nan, result)  # a negative base, a non-integer power
        # x zero, infinite or NaN
        x2 = x * x
        x2 = tl.where(odd, -x2, x2)
        x_special = (ix0 * 2 - 1) >= _u32(ix0, 0xFEFFFFFF)
        result = tl.where(x_special, tl.where((iy >> 31) != 0, tl.math.div_rn(tl.full(x.shape, 1.0, tl.float32), x2),
                                              x2), result)
        # y zero, infinite or NaN
        one = tl.full(x.shape, 1.0, tl.float32)
        unit = (ix0 * 2) < _u32(ix0, 0x7F000000)  # |x| < 1
        y_inf = tl.where(unit == ((iy >> 31) == 0), 0.0, y * y)
        y_inf = tl.where((ix0 * 2) == _u32(ix0, 0x7F000000), one, y_inf)  # x = -1
        either_nan = ((ix0 * 2) > _u32(ix0, 0xFF000000)) | ((iy * 2) > _u32(iy, 0xFF000000))
        y_inf = tl.where(either_nan, x + y, y_inf)
        y_inf = tl.where(((iy * 2) == 0) | (ix0 == _u32(ix0, 0x3F800000)), one, y_inf)  # y = 0 or x = 1
        y_special = (iy * 2 - 1) >= _u32(iy, 0xFEFFFFFF)
        result = tl.where(y_special, y_inf, result)
        return tl.where(tl.abs(result) < 1.1754943508222875e-38, result * 0.0, result)  # flushed to zero

    # (Triton resolves a jit function's callees among its module's globals)
    globals().update(tl=tl, _u32=_u32, _core=_core, _powf=_powf)

    @triton.jit
    def powf_kernel(x_ptr, y_ptr, out_ptr, n, d_ptr, e_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=1.0)
        y = tl.load(y_ptr + offs, mask=mask, other=1.0)
        tl.store(out_ptr + offs, _powf(x, y, d_ptr, e_ptr), mask=mask)

    @triton.jit
    def _ftz(x):  # a subnormal result flushed to zero, its sign kept (TensorFlow's kernels run flushed)
        if x.dtype == tl.float32:
            tiny = 1.1754943508222875e-38
        else:
            tiny = 2.2250738585072014e-308
        return tl.where(tl.abs(x) < tiny, x * 0.0, x)

    globals().update(_ftz=_ftz)
    return {"powf": powf_kernel}


def _kernel(name: str) -> Any:
    global _kernels
    if _kernels is None:
        _kernels = _build()
    return _kernels[name]


def _tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """glibc's tables on ``device``, copied there once (never during a capture: ``Scalars`` is made before)."""
    held = _device_tables.get(device)
    if held is None:
        found = powf_tables.tables()
        assert found is not None
        held = (torch.tensor(found.doubles, dtype=torch.float64, device=device),
                torch.tensor(found.exp2.view("int64"), dtype=torch.int64, device=device))
        _device_tables[device] = held
    return held


def powf(x: torch.Tensor, y: torch.Tensor) -> Optional[torch.Tensor]:
    """``powf`` of two float32 tensors of one shape on a Triton device, element by element (new tensor), or None
    where it does not apply (tables not found, other dtypes, a base not positive and normal, a non-finite
    exponent: checked on the device's values, so this one reads back; the capturable step's launch does not)."""
    if not available() or x.dtype != torch.float32 or y.dtype != torch.float32 or x.shape != y.shape \
            or x.device != y.device:
        return None
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    if x.numel():
        d, e = _tables(x.device)
        grid = (-(-x.numel() // _BLOCK),)
        _kernel("powf")[grid](x, y, out, x.numel(), d, e, BLOCK=_BLOCK, enable_fp_fusion=False)
    return out


# ------------------------------------------------------------------ per-step programs (engine/step_recipes.py)
#: Each instruction of a program as device code, (float32 form, float64 form); None: no exact device form here.
#: Division and root correctly rounded (float64's ``/`` and ``sqrt`` are); no contraction (launched with
#: ``enable_fp_fusion=False``); every arithmetic result flushed when subnormal (``_ftz``).
_OPS: dict[str, tuple[Optional[str], Optional[str]]] = {
    "add": ("{0} + {1}",) * 2, "sub": ("{0} - {1}",) * 2, "mul": ("{0} * {1}",) * 2, "neg": ("-{0}",) * 2,
    "div": ("tl.math.div_rn({0}, {1})", "{0} / {1}"), "sqrt": ("tl.math.sqrt_rn({0})", "tl.sqrt({0})"),
    "floor": ("tl.floor({0})",) * 2, "min": ("tl.minimum({0}, {1})",) * 2, "ceil": ("tl.ceil({0})",) * 2,
    "where": ("tl.where({0} != 0, {1}, {2})",) * 2,
    "eq": ("({0} == {1}).to(tl.float32)", "({0} == {1}).to(tl.float64)"),
    "cast": ("{0}.to(tl.float32)", "{0}.to(tl.float64)"),
    "le": ("({0} <= {1}).to(tl.float32)", "({0} <= {1}).to(tl.float64)"),
    "gt": ("({0} > {1}).to(tl.float32)", "({0} > {1}).to(tl.float64)"),
    "pow": ("_powf({0}, {1}, d_ptr, e_ptr)", "pow({0}, {1}, ld_ptr, le_ptr)"),  # (float64: libm.py's helper)
    "cos": ("cosf({0}, ld_ptr, le_ptr)", None),  # (libm.py's helper; float64 cos: none)
}
_TYPES = {"float32": "tl.float32", "float64": "tl.float64"}
_programs: dict[Any, Any] = {}


def _libm() -> Optional[Any]:
    """``kernels/triton/libm.py`` (the C library's functions as device helpers) when it is there, with the parts
    a program uses: ``helpers()`` (the ``@triton.jit`` functions: ``pow(x, y, d_ptr, e_ptr)`` in float64,
    ``cosf(x, d_ptr, e_ptr)`` in float32), ``tables(device)``, ``prepare(device)`` (each function checked against
    the C library on the device) and ``FUNCTIONS``."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(f"{__package__}.libm") is None:
        return None
    module = importlib.import_module(f"{__package__}.libm")
    if not all(callable(getattr(module, name, None)) for name in ("helpers", "tables", "prepare", "available")) \
            or not isinstance(getattr(module, "FUNCTIONS", None), dict) or not module.available():
        return None
    return module


#: The device functions of libm.py a program's operation takes, by (operation, dtype).
_LIBM = {("pow", "float64"): "pow", ("cos", "float32"): "cosf"}


def _libm_pow() -> Optional[Any]:
    """The device ``pow`` with glibc's double bits, when ``kernels/triton/libm.py`` gives it here."""
    module = _libm()
    return module if module is not None and "pow" in module.FUNCTIONS else None


def _uses_libm(program: Any) -> bool:
    return any(need in _LIBM for need in program.needs())


def missing(program: Any, device: Optional[torch.device] = None) -> Optional[str]:
    """What the device lacks to give ``program`` (an ``engine.step_recipes.Program``) the host's bits, by name,
    or None: float32 ``pow`` needs glibc's powf tables; float64 ``pow`` and float32 ``cos`` glibc's ``pow`` and
    ``cosf`` as device functions (``kernels/triton/libm.py``; given ``device``: checked there against the C
    library, outside a capture: ``libm.prepare``); float64 ``cos`` has no device form."""
    for op, dtype in sorted(program.needs()):
        if op == "pow" and dtype == "float32" and not available():
            return "powf needs the C library's tables on the device (glibc's not found here)"
        if op == "cos" and dtype == "float64":
            return "float64 cos has no device form (glibc's IBM cos: not done)"
        name = _LIBM.get((op, dtype))
        if name is not None:
            module = _libm()
            if module is None or name not in module.FUNCTIONS:
                return (f"{dtype} {op} needs the C library's {name} as a device function (kernels/triton/libm.py "
                        f"`{name}`), not there yet")
            if device is not None and not module.prepare(device).get(name):
                return f"{dtype} {op}: the device's {name} does not give this C library's bits here (libm.verify)"
    return None


def source(program: Any, name: str = "advance_program") -> str:
    """The Triton source of ``program``'s kernel: the step count plus one, then each instruction, then each
    output stored at its position of the vector."""
    lines = [f"def {name}(count_ptr, in_ptr, vec_ptr, d_ptr, e_ptr, ld_ptr, le_ptr, x_ptr, st_ptr):",
             "    t = tl.load(count_ptr) + 1",
             "    tl.store(count_ptr, t)"]
    for k, (op, dtype, operands) in enumerate(program.code):
        form = 0 if dtype == "float32" else 1
        if op == "input":
            lines.append(f"    r{k} = tl.load(in_ptr + {operands[0]}).to({_TYPES[dtype]})")
        elif op == "step":
            lines.append(f"    r{k} = (t + {operands[0]}).to({_TYPES[dtype]})")
        elif op == "load":  # (every load before the first store: the state tensor may be the output too)
            lines.append(f"    r{k} = tl.load(x_ptr).to({_TYPES[dtype]})")
        elif op == "state":
            lines.append(f"    r{k} = tl.load(st_ptr + {operands[0]}).to({_TYPES[dtype]})")
        else:
            code = _OPS[op][form]
            if code is None:
                raise ValueError(f"{op} in {dtype} has no device form")
            lines.append(f"    r{k} = _ftz({code.format(*(f'r{j}' for j in operands))})")
    for position, k in program.outputs:
        lines.append(f"    tl.store(vec_ptr + {position}, r{k}.to(vec_ptr.dtype.element_ty))")
    for slot, k in program.updates:  # (float64 slots: a float32 value exactly)
        lines.append(f"    tl.store(st_ptr + {slot}, r{k}.to(tl.float64))")
    return "\n".join(lines) + "\n"


def _program_kernel(program: Any) -> Any:
    import linecache

    import triton

    _kernel("powf")  # (the helpers defined, under the interpreter setting read now)
    key = (program.key, os.environ.get("TRITON_INTERPRET", "0"))
    kernel = _programs.get(key)
    if kernel is None:
        name = f"advance_program_{len(_programs)}"
        text = source(program, name)
        filename = f"<slotopt.kernels.triton step scalars {name}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
        namespace = dict(globals())
        if _uses_libm(program):
            namespace.update(_libm().helpers())  # (missing() said it is there)
        exec(compile(text, filename, "exec"), namespace)  # noqa: S102 (our own source)
        kernel = _programs[key] = triton.jit(namespace[name])
    return kernel


class Scalars:
    """One group's device inputs for a program: ``count`` (int64, the step count of its last step), ``inputs``
    (float64: the program's constants, exact for float32 ones) and the tables its ``pow`` and ``cos`` read
    (glibc's powf tables; for libm.py's functions, its), all made before any capture."""

    def __init__(self, device: torch.device, count: int, inputs: Any, program: Any = None,
                 state: Any = ()) -> None:
        self.count = torch.tensor([count], dtype=torch.int64, device=device)
        self.state = torch.tensor([float(v) for v in state] or [0.0], dtype=torch.float64, device=device)
        self.inputs = torch.tensor([float(v) for v in inputs] or [0.0], dtype=torch.float64, device=device)
        self.tables = _tables(device) if available() else (self.inputs, self.count)  # (read by powf only)
        self.libm_tables = (self.inputs, self.count)  # (read by float64 pow only)
        if program is not None and _uses_libm(program):
            held = _libm().tables(device)
            assert held is not None  # (missing() checked them on this device)
            self.libm_tables = held


def run(program: Any, scalars: Scalars, vector: torch.Tensor) -> Any:
    """One launch of ``program``'s kernel: the count plus one, its outputs written into ``vector`` (the rule's
    scalar vector on the device). Returns the launch's (kernel, grid, arguments, options), for the record."""
    kernel = _program_kernel(program)
    extra = program.extra if program.extra is not None else scalars.inputs  # (read by a load only)
    arguments = (scalars.count, scalars.inputs, vector, *scalars.tables, *scalars.libm_tables, extra,
                 scalars.state)
    options = {"enable_fp_fusion": False}
    launcher.launch(kernel, (1,), arguments, options)  # kernel[(1,)](...), through the prepared route
    return kernel, (1,), arguments, options


# ------------------------------------------------------------------ a capturable step's negated gradients
def _negate_kernel() -> Any:
    kernel = _programs.get(("negate", os.environ.get("TRITON_INTERPRET", "0")))
    if kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def negate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)

        kernel = _programs[("negate", os.environ.get("TRITON_INTERPRET", "0"))] = negate
    return kernel


def negated(tensors: Any) -> Optional[list[Any]]:
    """``-g`` of each tensor (contiguous float32/float64 on a Triton device), new tensors, one launch each
    (negation is exact: torch's ``_foreach_neg``'s bits); with each launch's record. None where one does not
    apply (torch's op then)."""
    if not all(isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64) and t.is_contiguous()
               and not t.is_sparse for t in tensors):
        return None
    kernel, out, launches = _negate_kernel(), [], []
    for t in tensors:
        o = torch.empty_like(t)
        if t.numel():
            grid = (-(-t.numel() // _BLOCK),)
            arguments, options = (t, o, t.numel()), {"BLOCK": _BLOCK}
            kernel[grid](*arguments, **options)
            launches.append((kernel, grid, arguments, options))
        out.append(o)
    return [out, launches]
