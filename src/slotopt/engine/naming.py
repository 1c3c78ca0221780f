"""Keras's automatic names: ``Adam`` becomes ``adam``, then ``adam_1``, ... (one counter per snake-cased class
name, shared by every generation, as Keras's global name scope is)."""

from __future__ import annotations

import re

__all__ = ["snake_case", "unique_name"]

_name_counts: dict[str, int] = {}


def snake_case(name: str) -> str:
    """Keras's ``to_snake_case`` (``Conv2D`` → ``conv2d``, ``ScheduleFreeAdamW`` → ``schedule_free_adam_w``)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def unique_name(class_name: str) -> str:
    """The next free name for an object of ``class_name``."""
    base = snake_case(class_name)
    count = _name_counts.get(base, 0)
    _name_counts[base] = count + 1
    return base if count == 0 else f"{base}_{count}"
