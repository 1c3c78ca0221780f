"""Bounds on what a config may make slotopt do: how deep it may nest.

A config (``from_config``/``deserialize``, ``slotopt.get``, ``slotopt demo --optimizer`` JSON, the optimizer of a
``.keras`` file) is data from outside. Nested thousands of levels deep, it ended in a bare ``RecursionError``
somewhere inside JSON decoding or a deep copy; it is refused first, by a loop (never recursion), with a message
saying where and by how much. Real configs nest a few levels (an optimizer, its schedule, a wrapped schedule).

Example:
    >>> from slotopt.engine.limits import check_depth, MAX_CONFIG_DEPTH
    >>> check_depth({"class_name": "Adam", "config": {"learning_rate": 0.1}}, "config")
    >>> check_depth([[[[1]]]], "config", limit=3)
    Traceback (most recent call last):
    ...
    ValueError: config nests deeper than 3 levels (a real config nests a few); refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_CONFIG_DEPTH", "check_depth", "check_json_depth"]

#: The deepest nesting of dicts and lists a config may have.
MAX_CONFIG_DEPTH = 64


def _refuse(what: str, limit: int) -> ValueError:
    return ValueError(f"{what} nests deeper than {limit} levels (a real config nests a few); refused.")


def check_depth(value: Any, what: str, limit: int = MAX_CONFIG_DEPTH) -> None:
    """Raises ``ValueError`` naming ``what`` when ``value`` nests dicts/lists/tuples more than ``limit`` deep
    (a container that holds itself counts as too deep)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            raise _refuse(what, limit)
        seen += 1
        if seen > 10_000_000:  # a structure that shares itself grows without end: refused as too deep
            raise _refuse(what, limit)
        stack.extend((child, depth + 1) for child in children)


def check_json_depth(text: Any, what: str, limit: int = MAX_CONFIG_DEPTH) -> None:
    """The same bound on JSON text before it is decoded (brackets counted outside strings, in one pass)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    depth, in_string, escaped = 0, False, False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                raise _refuse(what, limit)
        elif byte in (0x5D, 0x7D):
            depth -= 1
