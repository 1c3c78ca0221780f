"""MkDocs hook: the API pages show what the package exports, so that a class added to a package's ``__all__``
appears without editing a page, and an alias appears once.

A page line ``<!-- api: slotopt.keras3 -->`` becomes one ``::: module.Name`` block for each class and function of
that module's ``__all__``, in its order; an object exported under two names (``RMSProp`` for ``RMSprop``) is shown
once, and constants are left to the page's text.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

_MARKER = re.compile(r"^<!-- api: ([\w.]+) -->$", re.MULTILINE)


def exported_objects(module_name: str) -> list[str]:
    """The dotted paths of the classes and functions ``module_name`` exports, each object once."""
    module = importlib.import_module(module_name)
    seen: set[int] = set()
    paths = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        paths.append(f"{obj.__module__}.{obj.__qualname__}")
    return paths


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return _MARKER.sub(lambda m: "\n\n".join(f"::: {path}" for path in exported_objects(m.group(1))), markdown)
