"""Regular expressions from configs matched without backtracking: a variable path is matched in time bounded by
(pattern size) x (path length), whatever the pattern.

Keras matches ``MultiOptimizer`` keys (``re.fullmatch``) and Muon's ``exclude_layers`` (``re.search``) as
Python regular expressions. Python's ``re`` backtracks, so a key such as ``(a+)+b`` against a 30-character path
runs for minutes: a config would be a way to hang a training step. :class:`PathPattern` parses the key with
Python's own parser (same syntax, same errors) and runs it as a Thompson automaton: the set of states alive
after each character, so each character is looked at once per state. Which characters one atom (a literal, a
class, ``.``, ``\\d``) accepts, and whether an anchor (``^``, ``$``, ``\\b``) holds at a position, is asked of
Python's ``re`` on that single atom, so flags (``(?i)``, ``(?s)``...) mean what they mean in Python. Greedy and
lazy repeats accept the same strings, so only whether a match exists is computed. Constructs whose language is
not regular or whose matching needs backtracking (backreferences, lookaround, atomic groups, possessive
repeats, conditionals) are refused with a ``ValueError``, as is a pattern whose automaton would exceed
:data:`MAX_STATES` (``x{1000}{1000}``).

Example:
    >>> from slotopt.engine.pattern import PathPattern
    >>> PathPattern("encoder/.*").fullmatch("encoder/dense/kernel"), PathPattern("(a+)+b").fullmatch("a" * 40)
    (True, False)
    >>> PathPattern("dense").search("model/dense_1/kernel")
    True
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    from re import _compiler as _sre_compile  # type: ignore[attr-defined]
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_compile as _sre_compile  # type: ignore[no-redef]
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = ["PathPattern", "MAX_STATES", "compile_pattern"]

#: The most automaton states one pattern may have (each bounded repeat copies its body).
MAX_STATES = 20_000
_CHAR, _SPLIT, _ASSERT, _EPS, _MATCH = range(5)
_REFUSED = {"GROUPREF": "a backreference", "GROUPREF_EXISTS": "a conditional group", "ASSERT": "a lookahead or "
            "lookbehind", "ASSERT_NOT": "a negative lookahead or lookbehind", "ATOMIC_GROUP": "an atomic group",
            "POSSESSIVE_REPEAT": "a possessive repeat", "GROUPREF_IGNORE": "a backreference",
            "GROUPREF_LOC_IGNORE": "a backreference", "GROUPREF_UNI_IGNORE": "a backreference"}
_CACHE: dict[str, PathPattern] = {}


class PathPattern:
    """A Python regular expression, matched without backtracking (see the module docstring).

    Raises ``ValueError`` for a pattern that does not compile (Python's ``re.error`` becomes a ``ValueError``),
    uses a construct that needs backtracking, or is too large."""

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise TypeError(f"A pattern must be a string. Received: {pattern!r}")
        self.pattern = pattern
        try:
            parsed = _sre_parse.parse(pattern, 0)
        except re.error as err:
            raise ValueError(f"{pattern!r} is not a valid regular expression ({err})") from None
        except RecursionError:
            raise ValueError(f"{pattern!r} nests groups too deeply to be read") from None
        self._state = parsed.state
        self._kind: list[int] = []
        self._out: list[int] = []
        self._alt: list[int] = []
        self._test: list[Any] = []
        self._memo: list[dict[str, bool]] = []
        match = self._new(_MATCH)
        try:
            self._start = self._sequence(list(parsed), parsed.state.flags, match, 0)
        except RecursionError:
            raise ValueError(f"{pattern!r} nests groups too deeply to be matched") from None

    # ------------------------------------------------------------------------------------------ building
    def _new(self, kind: int, out: int = -1, alt: int = -1, test: Any = None) -> int:
        if len(self._kind) >= MAX_STATES:
            raise ValueError(f"{self.pattern!r} is too large to match in bounded time (over {MAX_STATES} "
                             "automaton states: a bounded repeat of a bounded repeat?)")
        self._kind.append(kind)
        self._out.append(out)
        self._alt.append(alt)
        self._test.append(test)
        self._memo.append({})
        return len(self._kind) - 1

    def _atom(self, item: tuple, flags: int) -> Any:
        """Python's ``re`` compiled on the single item (one character or one anchor), under ``flags``."""
        sub = _sre_parse.SubPattern(self._state, [item])
        return _sre_compile.compile(sub, flags)

    def _sequence(self, items: list, flags: int, next_state: int, depth: int) -> int:
        for item in reversed(items):
            next_state = self._item(item, flags, next_state, depth)
        return next_state

    def _item(self, item: tuple, flags: int, next_state: int, depth: int) -> int:
        if depth > 200:
            raise ValueError(f"{self.pattern!r} nests groups more than 200 deep")
        op, av = item
        name = str(op)
        if name in _REFUSED:
            raise ValueError(f"{self.pattern!r} uses {_REFUSED[name]}, which cannot be matched without "
                             "backtracking; write the pattern without it")
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return self._new(_CHAR, next_state, test=self._atom(item, flags))
        if op is _c.AT:
            return self._new(_ASSERT, next_state, test=self._atom(item, flags))
        if op is _c.SUBPATTERN:
            _, add, remove, body = av
            return self._sequence(list(body), (flags | add) & ~remove, next_state, depth + 1)
        if op is _c.BRANCH:
            starts = [self._sequence(list(alt), flags, next_state, depth + 1) for alt in av[1]]
            state = starts[-1]
            for start in reversed(starts[:-1]):
                state = self._new(_SPLIT, start, state)
            return state
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            low, high, body = av
            body = list(body)
            state = next_state
            if high == _c.MAXREPEAT:
                loop = self._new(_SPLIT, -1, next_state)
                self._out[loop] = self._sequence(body, flags, loop, depth + 1)
                state = loop
            else:
                for _ in range(high - low):
                    state = self._new(_SPLIT, self._sequence(body, flags, state, depth + 1), next_state)
                    next_state = state
            for _ in range(low):
                state = self._sequence(body, flags, state, depth + 1)
            return state
        raise ValueError(f"{self.pattern!r} uses {name.lower()}, which slotopt's pattern matcher does not run")

    # ------------------------------------------------------------------------------------------ matching
    def _closure(self, states: list[int], text: str, pos: int, into: set[int]) -> None:
        stack = list(states)
        while stack:
            s = stack.pop()
            if s in into:
                continue
            into.add(s)
            kind = self._kind[s]
            if kind == _SPLIT:
                stack.append(self._alt[s])
                stack.append(self._out[s])
            elif kind == _ASSERT:
                if self._test[s].match(text, pos) is not None:
                    stack.append(self._out[s])

    def _accepts(self, state: int, char: str) -> bool:
        memo = self._memo[state]
        found = memo.get(char)
        if found is None:
            found = memo[char] = self._test[state].fullmatch(char) is not None
        return found

    def _run(self, text: str, anywhere: bool) -> bool:
        if not isinstance(text, str):
            raise TypeError(f"A path must be a string. Received: {text!r}")
        current: set[int] = set()
        self._closure([self._start], text, 0, current)
        for pos, char in enumerate(text):
            if anywhere and 0 in current:  # state 0 is the match state
                return True
            following = [self._out[s] for s in current if self._kind[s] == _CHAR and self._accepts(s, char)]
            current = set()
            self._closure(following + ([self._start] if anywhere else []), text, pos + 1, current)
            if not current:
                return False
        return 0 in current

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches (``re.fullmatch(pattern, text) is not None``)."""
        return self._run(text, anywhere=False)

    def search(self, text: str) -> bool:
        """Whether some part of ``text`` matches (``re.search(pattern, text) is not None``)."""
        return self._run(text, anywhere=True)


def compile_pattern(pattern: str) -> PathPattern:
    """:class:`PathPattern` of ``pattern``, kept (configs name few patterns and look them up every step)."""
    found = _CACHE.get(pattern)
    if found is None:
        found = PathPattern(pattern)
        if len(_CACHE) < 4096:
            _CACHE[pattern] = found
    return found
