"""How many dependent global-memory round trips a multi-tensor Triton kernel takes before its data moves, read from
the PTX (and the SASS) Triton's compiler makes for sm_90 without a GPU.

Each ``ld.global`` is given a depth: 1 + the deepest ``ld.global`` its address (or predicate) depends on through
the registers, so a load whose address is a kernel parameter or the program's id has depth 1, and a data load after
a load of its tensor's address has depth 2. The table layout (a meta row, then the address table indexed by the
tensor) gives the data loads depth 3; the rows layout (each program's row holding its count and addresses) depth 2.
``python tests/_ptx_prologue.py`` prints both layouts for every rule (``sass`` counts ``LDG`` before the first
data ``LDG`` too). A test helper: nothing here is part of slotopt."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import Any

_REGISTER = re.compile(r"%[a-z]+\d+")
_INSTRUCTION = re.compile(r"^\s*(@!?%p\d+\s+)?([a-z][\w.]*)\s*(.*?);\s*$")


def compile_rule(rule: str, dtype: str = "fp32", aligned: bool = True, row: int = 0, flags: int = 0) -> Any:
    """The rule's multi-tensor kernel compiled for sm_90 (``row``: the kernel's ``ROW``, 0 for the table layout;
    ``flags``: every flag of its description set to this)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from slotopt.kernels.native.scalars import DESCRIPTIONS
    from slotopt.kernels.triton import rules

    kernels = rules.build()
    description = DESCRIPTIONS[rule]
    constants = {**{flag: flags for flag, _ in description.flags}, "BY_VALUE": dtype == "fp32", "ALIGNED": aligned,
                 "BLOCK": 1024, "ROW": row}
    signature = {"tab_ptr": "*i64", "meta_ptr": "*i64", "s_ptr": f"*{dtype}", "T": "i32",
                 **{f"S{i}": "fp32" for i in range(len(description.entries))}, **{k: "constexpr" for k in constants}}
    return triton.compile(ASTSource(kernels[rule], signature, constexprs=constants),
                          target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})


def load_depths(ptx: str) -> list[tuple[str, int]]:
    """Each ``ld.global`` of the PTX in program order, with its depth (see the module's docstring). The kernels
    are straight-line code (every branch is a ``constexpr`` resolved when compiling; masks are predicates), so one
    pass in order sees every definition before its uses; a predicated instruction keeps the depth its destination
    had (it may not write it)."""
    depth: dict[str, int] = {}
    loads = []
    for line in ptx.splitlines():
        match = _INSTRUCTION.match(line)
        if match is None or line.lstrip().startswith(("//", ".", "{", "}")):
            continue
        predicate, opcode, operands = match.groups()
        if opcode.startswith(("st.", "bar", "ret", "bra")):
            continue
        destination, _, rest = operands.partition(",")
        if destination.strip().startswith("{"):  # a vector load: { %r1, %r2 }, [ ... ]
            destination, _, rest = operands.partition("}")
        targets = _REGISTER.findall(destination)
        sources = _REGISTER.findall(rest) + (_REGISTER.findall(predicate) if predicate else [])
        level = max((depth.get(s, 0) for s in sources), default=0)
        if opcode.startswith("ld.global"):
            level += 1
            loads.append((opcode, level))
        for target in targets:
            depth[target] = max(level, depth.get(target, 0)) if predicate else level
    return loads


def round_trips(ptx: str) -> int:
    """Global-memory round trips up to and including the data loads: the deepest load's depth."""
    return max(level for _, level in load_depths(ptx))


def sass(compiled: Any) -> str:
    """The SASS of a compiled kernel (Triton's own ``nvdisasm``; empty where it is missing)."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    if not os.path.exists(tool):
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        return subprocess.run([tool, "-c", cubin.name], capture_output=True, text=True, timeout=60).stdout


def sass_prologue(text: str) -> tuple[int, int]:
    """(LDG before the first data LDG, LDG in all): data loads are the operands' (``LDG.E.128`` when aligned,
    else of the element's width from a register computed after a 64-bit table load)."""
    loads = [line for line in text.splitlines() if re.search(r"\bLDG\.", line)]
    first_data = next((i for i, line in enumerate(loads) if "LDG.E.64" not in line or "@" in line), len(loads))
    return first_data, len(loads)


def report() -> str:
    from slotopt.kernels.native.scalars import DESCRIPTIONS
    from slotopt.kernels.triton import rules, table

    lines = ["| rule | operands | table: round trips, LDG before data | rows: round trips, LDG before data |",
             "| --- | --- | --- | --- |"]
    for rule in rules.RULES:
        cells = []
        for row in (0, table._width(DESCRIPTIONS[rule].operands)):
            compiled = compile_rule(rule, row=row)
            before, _ = sass_prologue(sass(compiled))
            cells.append(f"{round_trips(compiled.asm['ptx'])}, {before}")
        lines.append(f"| {rule} | {DESCRIPTIONS[rule].operands} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    print(report())
