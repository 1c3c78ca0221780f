"""TensorFlow's arithmetic comes from one place: no torch root, power, transcendental or reduction elsewhere.

torch's CPU ``sqrt``, ``pow``, ``cos``, ``exp``, ``log`` and its sums and norms give other bits than TensorFlow's
(``slotopt.numerics`` says how); a value that must match TensorFlow takes them from ``slotopt.numerics`` (or the
kernels' ``roots``, its alias). This test reads every module of ``src/slotopt`` with ``ast`` and lists each call of
such a function through ``torch`` or as a tensor method, and each ``**`` with a non-constant operand. Every one
must be in ``ALLOWED``, with the reason its value need not match TensorFlow, and every allowance must still be used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import slotopt

SRC = Path(slotopt.__file__).resolve().parent
#: The functions whose bits differ from TensorFlow's (the method name, without a leading ``_foreach_``).
SUSPECT = {"sqrt", "rsqrt", "pow", "float_power", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "cos",
           "sin", "tan", "tanh", "sum", "nansum", "mean", "nanmean", "norm", "vector_norm", "matrix_norm", "dist",
           "logsumexp", "var", "std", "cumsum", "prod"}
#: Receivers that are TensorFlow's arithmetic (slotopt.numerics and its aliases) or plain Python numbers.
#: ``step_recipes`` (imported as ``R``): a capturable step's per-step scalars as recipes, each operation evaluated
#: on the host with numerics' functions and on the device by kernels with the same bits (checked before each launch).
TRUSTED = {"numerics", "roots", "libm", "eigen", "math", "R", "step_recipes"}

#: (module path under src/slotopt, enclosing function, call) -> why its value need not match TensorFlow.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("engine/shards.py", "all_finite", "_foreach_norm"):
        "an inf-norm only tells whether every gradient is finite; the value is not used",
    ("kernels/muon.py", "newton_schulz5", "vector_norm"):
        "Muon's Newton-Schulz iteration follows the BLAS library's summation order anyway (a tolerance, "
        "cli/reference.py OPTIMIZER_TOLERANCES)",
    ("kernels/triton/rules.py", "build._sqrt_rn", "sqrt"):
        "the CUDA path: Triton's sqrt_rn, correctly rounded on the GPU",
    ("kernels/adafactor.py", "_rms", "sum"):
        "FSDP2 shards: a shard's sum, then summed over the processes; no TensorFlow order to follow",
    ("kernels/adafactor.py", "_mean", "sum"):
        "FSDP2 shards: a shard's sum over a split axis, then summed over the processes",
    ("io/keras_result.py", "KerasCheckpoint.regularization_loss", "sum"):
        "a term of the model's loss, differentiated by autograd (the forward pass is torch's anyway)",
    ("cli/demo.py", "train_digits", "mean"): "the demo's accuracy, not an optimizer value",
    ("cli/demo.py", "train_recommender", "mean"): "the demo's accuracy, not an optimizer value",
    ("cli/demo.py", "TwoTower.forward", "sum"): "the demo model's forward pass",
    ("cli/demo.py", "make_interactions", "sum"): "the demo's synthetic data",
}


def _receiver(node: ast.expr) -> str:
    """The leftmost name of an attribute chain (``torch`` for ``torch.linalg.norm``), or "" for an expression."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def findings(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, suspect call, line) for every suspect call and non-constant ``**`` in ``source``."""
    found: list[tuple[str, str, int]] = []
    scope: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.AST) -> None:
            scope.append(node.name)  # type: ignore[attr-defined]
            self.generic_visit(node)
            scope.pop()

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def visit_Call(self, node: ast.Call) -> None:
            func = node.func
            if isinstance(func, ast.Attribute):
                name = func.attr.lstrip("_")
                name = name[len("foreach_"):] if name.startswith("foreach_") else name
                receiver = _receiver(func.value)
                if name.rstrip("_") in SUSPECT and receiver not in TRUSTED and receiver != "np":
                    found.append((".".join(scope) or "<module>", func.attr, node.lineno))
            self.generic_visit(node)

        def visit_BinOp(self, node: ast.BinOp) -> None:
            if isinstance(node.op, ast.Pow) and not (isinstance(node.left, ast.Constant)
                                                     and isinstance(node.right, ast.Constant)):
                found.append((".".join(scope) or "<module>", "**", node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


def _all_findings() -> dict[tuple[str, str, str], list[int]]:
    result: dict[tuple[str, str, str], list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module.startswith("numerics/"):
            continue  # the one place allowed to call torch's functions (and deciding when they are exact)
        for function, call, line in findings(path.read_text()):
            result.setdefault((module, function, call), []).append(line)
    return result


def test_no_torch_transcendental_or_reduction_outside_numerics():
    unexplained = {f"{module}:{lines[0]} {function}: {call}" for (module, function, call), lines
                   in _all_findings().items() if (module, function, call) not in ALLOWED}
    assert not unexplained, ("torch's functions give other bits than TensorFlow's: use slotopt.numerics, or add "
                             f"the call to ALLOWED with the reason: {sorted(unexplained)}")


def test_every_allowance_is_still_needed():
    stale = set(ALLOWED) - set(_all_findings())
    assert not stale, f"remove from ALLOWED (no longer in the code): {sorted(stale)}"


def test_the_scan_sees_each_form_of_violation():
    source = '''
import torch
def step(x, p):
    a = torch.sqrt(x)
    b = x.sqrt()
    c = torch._foreach_pow([x], 2)
    d = x ** p
    e = torch.linalg.vector_norm(x)
    f = x.sum()
    g = numerics.sqrt(x) + roots.sqrt([x])[0] + math.sqrt(2.0) + 2 ** 31
'''
    calls = [call for _, call, _ in findings(source)]
    assert calls == ["sqrt", "sqrt", "_foreach_pow", "**", "vector_norm", "sum"]
