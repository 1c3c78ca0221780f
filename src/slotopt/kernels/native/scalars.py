"""The scalar vector of each compiled rule, described once, next to its foreach kernel.

A compiled rule (C in ``rules.inc``, its Triton twin in ``kernels/triton``) takes its hyperparameters as one vector
of doubles. Its description, given to ``@native.compiled(..., scalars=(...))`` (or to :func:`slices` for a rule on
slices), names each entry in order and says what it is:

* :class:`Scalar`: a number, a keyword argument of the kernel (``absent``: the value written when the argument is
  None or zero, for an optional term whose flag is off);
* :class:`Flag`: 0 or 1, a keyword argument's truth, or (``given``) whether an argument, an operand list or a
  keyword, is not None;
* :class:`Integer`: a whole number computed from the kernel's arguments by a function (the row length of
  TensorFlow's packets).

From the description come, and only from it:

* the Python marshalling, :attr:`Description.vector`: a function from the kernel's arguments to the tuple of
  numbers, generated as Python source (as ``dataclasses`` generates ``__init__``), so it costs what a hand-written
  lambda costs;
* the C side: ``rules_scalars.h`` (:func:`header`), one ``#define`` per entry, which ``rules.inc`` reads through
  ``SV(rule, name)``, ``FLAG(rule, name)`` and ``INTEGER(rule, name)``, so that a C rule names the entries it reads
  and a name of the wrong kind does not compile. The header is committed; ``tools/write_rules_scalars.py``
  rewrites it and ``tests/kernels/test_rule_scalars.py`` fails while it is not current, and also checks each C rule and
  each Triton kernel against the description (the entries it reads, their kinds and positions);
* Triton's compile-time flags: each :class:`Flag` is the kernel's ``constexpr`` parameter of its name in capitals
  (:attr:`Description.flags`).

Nothing here reads a file or a config: descriptions are written in slotopt's own kernel modules.
"""

from __future__ import annotations

import inspect
import keyword
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

__all__ = ["Scalar", "Flag", "Integer", "Description", "DESCRIPTIONS", "describe", "slices", "header",
           "SLICE_RULES"]


@dataclass(frozen=True)
class Scalar:
    """A number: the kernel's keyword argument ``name``; ``absent``: written instead when the argument is None or
    zero (``value or absent``: an optional term whose flag says it is off)."""

    name: str
    absent: Optional[float] = None
    kind = "scalar"


@dataclass(frozen=True)
class Flag:
    """0 or 1: the truth of the kernel's keyword argument ``name``, or, with ``given``, whether the kernel's argument
    ``given`` (an operand list or a keyword) is not None."""

    name: str
    given: Optional[str] = None
    kind = "flag"


@dataclass(frozen=True)
class Integer:
    """A whole number: ``function(*arguments)``, each argument a name of the kernel's arguments or a constant
    (a bool, an int or None)."""

    name: str
    function: Callable[..., int]
    arguments: tuple[Union[str, bool, int, None], ...] = ()
    kind = "integer"


Entry = Union[Scalar, Flag, Integer]


@dataclass
class Description:
    """The scalar vector of the compiled rule ``rule``: ``entries`` in order. ``operands``: how many operand lists
    it takes (None for a rule on slices); ``state``: whether a rule on slices has a state tensor."""

    rule: str
    entries: tuple[Entry, ...]
    operands: Optional[int] = None
    state: bool = False
    module: str = ""
    #: The operand lists' names (the kernel's positional parameters) and the positions of those it never writes
    #: (``kernels/triton/generate.py`` derives each Triton kernel's loads and stores from them).
    names: tuple[str, ...] = ()
    read_only: tuple[int, ...] = (1,)
    #: The kernel's arguments to the tuple of numbers (None for a variant with no compiled form).
    vector: Callable[..., Optional[tuple[Any, ...]]] = field(default=lambda *a, **k: None, repr=False)
    flags: tuple[tuple[str, int], ...] = field(init=False, default=())

    def position(self, name: str) -> int:
        """The position of the entry ``name``."""
        for i, entry in enumerate(self.entries):
            if entry.name == name:
                return i
        raise KeyError(f"{self.rule} has no scalar {name!r}")

    def __post_init__(self) -> None:
        #: Triton's compile-time flags: (the kernel's ``constexpr`` parameter, the flag's position).
        self.flags = tuple((entry.name.upper(), i) for i, entry in enumerate(self.entries) if entry.kind == "flag")


#: Every description, by rule name (filled as the kernel modules are imported).
DESCRIPTIONS: dict[str, Description] = {}
#: The rules on slices: name -> whether the rule has a state tensor (derived from their descriptions).
SLICE_RULES: dict[str, bool] = {}


def _identifier(name: Any, what: str, rule: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise TypeError(f"scalars of {rule!r}: {what} {name!r} is not a plain identifier")
    return name


def _expression(entry: Entry, rule: str, arguments: set[str], constants: dict[str, Any], index: int) -> str:
    """The Python expression of one entry, over the kernel's argument names (checked: a typo fails here, when the
    kernel module is imported)."""

    def argument(name: Any, what: str) -> str:
        _identifier(name, what, rule)
        if name not in arguments:
            raise TypeError(f"scalars of {rule!r}: {what} {name!r} is not an argument of the kernel "
                            f"(it takes {sorted(arguments)})")
        return name

    if isinstance(entry, Scalar):
        name = argument(entry.name, "scalar")
        if entry.absent is None:
            return name
        if not isinstance(entry.absent, (int, float)) or isinstance(entry.absent, bool) \
                or not math.isfinite(entry.absent):
            raise TypeError(f"scalars of {rule!r}: `absent` of {name!r} must be a finite number")
        return f"({name} or {float(entry.absent)!r})"
    if isinstance(entry, Flag):
        _identifier(entry.name, "flag", rule)
        if entry.given is None:
            return argument(entry.name, "flag")
        return f"{argument(entry.given, 'flag argument')} is not None"
    if isinstance(entry, Integer):
        _identifier(entry.name, "integer", rule)
        if not callable(entry.function):
            raise TypeError(f"scalars of {rule!r}: the function of {entry.name!r} is not callable")
        constants[f"_f{index}"] = entry.function
        parts = []
        for value in entry.arguments:
            if isinstance(value, str):
                parts.append(argument(value, "argument"))
            elif value is None or isinstance(value, (bool, int)):
                parts.append(repr(value))
            else:
                raise TypeError(f"scalars of {rule!r}: argument {value!r} of {entry.name!r} is neither a name nor "
                                "a bool, an int or None")
        return f"_f{index}({', '.join(parts)})"
    raise AssertionError(entry)  # (_generate checked the kinds)


def _generate(rule: str, positional: list[str], keywords: list[inspect.Parameter], entries: tuple[Entry, ...],
              foreach_if: Optional[str]) -> Callable[..., Optional[tuple[Any, ...]]]:
    """The marshalling function, from its source: positional parameters (the operand lists), then keyword-only
    ones with the kernel's defaults, returning the tuple (or None where ``foreach_if`` holds)."""
    arguments = set(positional) | {p.name for p in keywords}
    constants: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, (Scalar, Flag, Integer)):
            raise TypeError(f"scalars of {rule!r}: {entry!r} is not a Scalar, a Flag or an Integer")
    names = {entry.name for entry in entries}
    if len(names) != len(entries):
        raise TypeError(f"scalars of {rule!r}: a name is given twice")
    body = ", ".join(_expression(entry, rule, arguments, constants, i) for i, entry in enumerate(entries))
    body = f"({body},)" if len(entries) == 1 else f"({body})"
    if foreach_if is not None:
        negated = foreach_if.startswith("not ")
        condition = foreach_if[4:] if negated else foreach_if
        _identifier(condition, "foreach_if", rule)
        if condition not in arguments:
            raise TypeError(f"scalars of {rule!r}: foreach_if names {condition!r}, not an argument of the kernel")
        body = f"{body} if {condition} else None" if negated else f"None if {condition} else {body}"
    signature = list(positional)
    if keywords:
        signature.append("*")
    for i, parameter in enumerate(keywords):
        if parameter.default is inspect.Parameter.empty:
            signature.append(parameter.name)
        else:
            constants[f"_d{i}"] = parameter.default
            signature.append(f"{parameter.name}=_d{i}")
    source = f"def {rule}_scalars({', '.join(signature)}):\n    return {body}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<scalars of {rule}>", "exec"), constants, namespace)  # noqa: S102 (our own source)
    function = namespace[f"{rule}_scalars"]
    function.__source__ = source
    return function


def _register(description: Description) -> Description:
    _identifier(description.rule, "rule", description.rule)
    known = DESCRIPTIONS.get(description.rule)
    if known is not None and known.module != description.module:
        raise TypeError(f"compiled rule {description.rule!r} is described twice ({known.module} and "
                        f"{description.module})")
    DESCRIPTIONS[description.rule] = description
    return description


def describe(rule: str, kernel: Callable[..., Any], operands: int, entries: tuple[Entry, ...],
             foreach_if: Optional[str] = None, read_only: tuple[int, ...] = (1,)) -> Description:
    """Registers the scalar vector of the compiled rule ``rule``, the twin of the foreach ``kernel`` over its first
    ``operands`` operand lists, and generates its marshalling from the kernel's signature. ``foreach_if``: a
    keyword argument (or ``"not <argument>"``) under which the rule has no compiled form (the vector is then None
    and the foreach kernel runs)."""
    parameters = list(inspect.signature(kernel).parameters.values())
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < operands:
        raise TypeError(f"compiled rule {rule!r}: {operands} operand lists, but the kernel takes {positional}")
    keywords = [p for p in parameters if p.kind is p.KEYWORD_ONLY]
    vector = _generate(rule, positional[:operands], keywords, tuple(entries), foreach_if)
    return _register(Description(rule, tuple(entries), operands=operands, module=kernel.__module__, vector=vector,
                                 names=tuple(positional[:operands]), read_only=tuple(read_only)))


def slices(rule: str, state: bool, entries: tuple[Scalar, ...], module: str = "") -> Description:
    """Registers the scalar vector of the compiled rule on slices ``rule`` (numbers only, given by keyword:
    ``description.vector(lr=...)``); ``state``: whether it updates a state tensor beside the variable."""
    if any(not isinstance(entry, Scalar) or entry.absent is not None for entry in entries):
        raise TypeError(f"scalars of {rule!r}: a rule on slices takes plain Scalar entries only")
    keywords = [inspect.Parameter(entry.name, inspect.Parameter.KEYWORD_ONLY) for entry in entries]
    vector = _generate(rule, [], keywords, tuple(entries), None)
    description = _register(Description(rule, tuple(entries), state=state, module=module, vector=vector))
    SLICE_RULES[rule] = state
    return description


#: The prefix of each kind's ``#define`` in ``rules_scalars.h`` (``rules.inc``'s SV, FLAG and INTEGER paste it).
PREFIXES = {"scalar": "SV", "flag": "FLAG", "integer": "INT"}
_HEADER_TOP = """\
/* The scalar vector of each compiled rule: where each of its entries is in `const double *s_`. GENERATED from the
 * descriptions next to the foreach kernels (@native.compiled(..., scalars=...) and native.slices(...) in
 * slotopt/kernels/<family>.py, read by slotopt/kernels/native/scalars.py) by tools/write_rules_scalars.py: do not
 * edit; tests/kernels/test_rule_scalars.py fails while it is not current. rules.inc reads an entry by name:
 * SV(rule, name) a number, FLAG(rule, name) a flag, INTEGER(rule, name) a whole number; a name of another kind
 * or another rule is not defined, so it does not compile. */
#ifndef SLOTOPT_RULES_SCALARS_H
#define SLOTOPT_RULES_SCALARS_H
"""


def header(descriptions: Optional[dict[str, Description]] = None) -> str:
    """The text of ``rules_scalars.h`` for ``descriptions`` (default: every registered one), rules in name order;
    only the rules of slotopt's own modules (a rule described elsewhere, e.g. in a test, has no C form here)."""
    descriptions = DESCRIPTIONS if descriptions is None else descriptions
    lines = [_HEADER_TOP]
    for rule in sorted(descriptions):
        description = descriptions[rule]
        if not description.module.startswith("slotopt."):
            continue
        listed = ", ".join(entry.name + ("" if entry.kind == "scalar" else f" ({entry.kind})")
                           for entry in description.entries)
        lines.append("\n" + "\n".join(textwrap.wrap(f"/* {rule} ({description.module}): {listed} */", 116,
                                                     subsequent_indent=" * ", break_on_hyphens=False)) + "\n")
        for i, entry in enumerate(description.entries):
            lines.append(f"#define {PREFIXES[entry.kind]}_{rule}_{entry.name} {i}\n")
    lines.append("\n#endif\n")
    return "".join(lines)
