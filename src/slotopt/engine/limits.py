"""Bounds on what a config may make slotopt do: how deep it may nest.

A config (``from_config``/``deserialize``, ``slotopt.get``, ``slotopt demo --optimizer`` JSON, the optimizer of a
``.keras`` file) is data from outside. Nested thousands of levels deep, it ended in a bare ``RecursionError``
somewhere inside JSON decoding or a deep copy; it is refused first, by a loop (never recursion), with a message
saying where and by how much. Real configs nest a few levels (an optimizer, its schedule, a wrapped schedule).

Example:
    >>> from slotopt.engine.limits import check_depth, MAX_CONFIG_DEPTH
    >>> check_depth({"class_name": "Adam", "config": {"learning_rate": 0.1}}, "config")
    >>> check_depth([[[[1]]]], "config", limit=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: config nests deeper than 3 levels, slotopt's limit for a config ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MAX_CONFIG_DEPTH", "check_depth", "check_config_entries", "check_json_depth"]

#: The deepest nesting of dicts and lists a config may have.
MAX_CONFIG_DEPTH = 64
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _refuse(what: str, limit: int) -> ValueError:
    return ValueError(f"{what} nests deeper than {limit} levels, slotopt's limit for a config "
                      "(`slotopt.engine.limits.MAX_CONFIG_DEPTH`; what `get_config()` writes nests a few): refused, "
                      "nothing read from it. Check what wrote it.")


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


def check_config_entries(config: Any, where: str = "Argument `config` of `from_config`") -> None:
    """``check_depth`` on a ``from_config`` dict, naming the entry too deep (a config that is no dict is named
    whole; what else is wrong with it is the caller's to say)."""
    if not isinstance(config, Mapping):
        check_depth(config, where)
        return
    for key, value in config.items():
        if isinstance(value, (Mapping, list, tuple)):
            check_depth(value, f"{where}, entry {key!r},")


def check_json_depth(text: Any, what: str, limit: int = MAX_CONFIG_DEPTH) -> None:
    """The same bound on JSON text before it is decoded: brackets counted outside strings, by a regular
    expression without nested repeats (linear) and a running sum in numpy (a large config checks in
    milliseconds)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if data.count(b"[") + data.count(b"{") <= limit:
        return
    bare = _STRINGS.sub(b'""', data)  # an unterminated string is left: json.loads will refuse it
    codes = np.frombuffer(bare, dtype=np.uint8)
    steps = (codes == 0x5B).astype(np.int64) + (codes == 0x7B) - (codes == 0x5D) - (codes == 0x7D)
    if steps.size and int(np.cumsum(steps).max()) > limit:
        raise _refuse(what, limit)
