"""Each dense Triton kernel's prologue and epilogue, generated from the rule's scalar description.

A rule is written once as its arithmetic (a ``@triton.jit`` body in ``rules.py``/``rules_tf.py``): the loaded
operands first (one parameter per operand list, in the description's order), then the numbers it reads (each named
as its description entry), then the flags it tests (each a description flag's name in capitals); it returns the
new values of the operands the rule writes, in operand order (one value: not a tuple). Everything around it comes
from the description (``kernels/native/scalars.py``: ``operands``, ``names``, ``read_only``, ``entries``), as
``rules_scalars.h`` does for the C rules:

* the kernel's signature: ``(tab_ptr, meta_ptr, s_ptr, T, S0, ..., S<n-1>, BY_VALUE, <FLAGS>, ALIGNED, BLOCK, ROW)``,
  one ``S`` per entry of the vector and every flag of the description a ``constexpr``;
* the program's chunk (``_chunk``), each operand's pointers (``_operand``) and its masked load; an optional operand
  (one a ``Flag(given=<its list>)`` says is present) only under its flag, else the variable's value stands in;
* each number the body names, ``_sv(s_ptr, k, Sk, BY_VALUE)`` at its position ``k`` (a new entry flows through:
  positions come from the description as it is);
* the body's call, then one masked store per written operand (an optional one under its flag).

A number or flag the body does not name (a new entry of the description, say) is listed by :func:`unread`; a call
that sets one is declined (``kernels.triton.apply`` returns False and the other paths run it).

All loads precede all stores: a gradient that is its variable (read-only, aliased) is read before anything is
written, as in every hand-written kernel this replaces. The text is plain Python source, kept in ``linecache`` under
a file name of its own so that Triton (compiler and interpreter alike) can read it back; :func:`source` gives it.
Nothing here imports Triton: the generator is text in, text out.
"""

from __future__ import annotations

import keyword
import linecache
from collections.abc import Sequence

__all__ = ["source", "filename", "register", "unread", "RESERVED"]

#: Names the generated kernel uses itself: a body parameter may not take one.
RESERVED = frozenset({"tab_ptr", "meta_ptr", "s_ptr", "T", "BY_VALUE", "ALIGNED", "BLOCK", "ROW", "tl", "triton"})


def filename(rule: str) -> str:
    """The pseudo file name the kernel of ``rule`` is compiled from (in ``linecache``)."""
    return f"<slotopt.kernels.triton generated {rule}>"


def source(description: object, body: str, parameters: Sequence[str]) -> str:
    """The kernel's source for the rule ``description`` (a ``scalars.Description``) around the jit function named
    ``body`` whose parameters are ``parameters``. Raises ``TypeError`` naming the parameter that fits nothing in
    the description (a typo fails when the kernels are defined, never at run time)."""
    rule = description.rule  # type: ignore[attr-defined]
    operands: int = description.operands  # type: ignore[attr-defined]
    entries = description.entries  # type: ignore[attr-defined]
    names: tuple[str, ...] = description.names or tuple(f"list{k}" for k in range(operands))  # type: ignore
    read_only = set(description.read_only)  # type: ignore[attr-defined]
    if not operands:
        raise TypeError(f"{rule}: a rule on slices has no generated kernel")
    parameters = list(parameters)
    if len(parameters) < operands:
        raise TypeError(f"{rule}: the body {body} takes {parameters}, fewer than its {operands} operand lists")
    for name in parameters:
        if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED or name.startswith("_") \
                or name.startswith("S") and name[1:].isdigit():
            raise TypeError(f"{rule}: body parameter {name!r} is a name the generated kernel uses itself")
    roles, rest = parameters[:operands], parameters[operands:]
    numbers = {e.name: k for k, e in enumerate(entries) if e.kind == "scalar"}
    flags = [e.name.upper() for e in entries if e.kind == "flag"]
    for name in rest:
        if name not in numbers and name not in flags:
            raise TypeError(f"{rule}: body parameter {name!r} is neither a number nor a flag of its description "
                            f"(numbers {sorted(numbers)}, flags {flags})")
    if set(flags) & {"BY_VALUE", "ALIGNED", "BLOCK", "ROW"}:
        raise TypeError(f"{rule}: a flag takes a name the generated kernel uses itself")
    # an optional operand: the flag whose `given` is its list
    gate = {names.index(e.given): e.name.upper() for e in entries
            if e.kind == "flag" and getattr(e, "given", None) in names[1:]}
    written = [k for k in range(operands) if k not in read_only]
    if not written:
        raise TypeError(f"{rule}: a rule that writes no operand")

    lines = [f"def {rule}(tab_ptr, meta_ptr, s_ptr, T, {', '.join(f'S{k}' for k in range(len(entries)))},",
             "        BY_VALUE: tl.constexpr, " + "".join(f"{flag}: tl.constexpr, " for flag in flags)
             + "ALIGNED: tl.constexpr, BLOCK: tl.constexpr, ROW: tl.constexpr):",
             f"    # generated by slotopt.kernels.triton.generate from the description of {rule} around {body}",
             "    _t, _offs, _mask = _chunk(meta_ptr, ALIGNED, BLOCK, ROW)"]

    def block(k: int, statements: list[str], otherwise: list[str]) -> None:
        if k in gate:
            lines.append(f"    if {gate[k]}:")
            lines.extend("    " + s for s in statements)
            if otherwise:
                lines.append("    else:")
                lines.extend("    " + s for s in otherwise)
        else:
            lines.extend(statements)

    # Every operand's address first, then every load: the address loads all depend on the program's row alone,
    # so the compiler issues them together (one round trip), not one after each operand's data.
    for k in range(len(roles)):
        block(k, [f"    _p{k} = _operand(tab_ptr, {k}, T, _t, s_ptr, _offs, ALIGNED, ROW)"], [])
    for k, role in enumerate(roles):
        block(k, [f"    {role} = tl.load(_p{k}, mask=_mask)"], [f"    {role} = {roles[0]}"])
    for name in rest:
        if name in numbers:
            lines.append(f"    {name} = _sv(s_ptr, {numbers[name]}, S{numbers[name]}, BY_VALUE)")
    results = [roles[k] for k in written]
    lines.append(f"    {', '.join(results)} = {body}({', '.join(parameters)})")
    for k in written:
        block(k, [f"    tl.store(_p{k}, {roles[k]}, mask=_mask)"], [])
    return "\n".join(lines) + "\n"


def unread(description: object, parameters: Sequence[str]) -> tuple[int, ...]:
    """The positions of the description's numbers and flags the body does not name: an entry added to a
    description (a new option of the C rule) before the Triton body knows it. A call that sets one (a flag on, a
    number not 0) is declined by ``kernels.triton.apply``, so the other paths, which do know it, take the call."""
    named = set(parameters)
    return tuple(k for k, e in enumerate(description.entries)  # type: ignore[attr-defined]
                 if e.kind in ("scalar", "flag") and (e.name if e.kind == "scalar" else e.name.upper()) not in named)


def register(rule: str, text: str) -> None:
    """Keeps ``text`` in ``linecache`` under :func:`filename` (``inspect.getsource`` reads it from there: Triton
    needs a jit function's source). An entry with no modification time is never dropped by ``checkcache``."""
    lines = text.splitlines(keepends=True)
    linecache.cache[filename(rule)] = (len(text), None, lines, filename(rule))
