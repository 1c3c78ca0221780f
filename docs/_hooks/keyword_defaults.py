"""A griffe extension for the API pages: an argument a constructor documents but takes through ``**kwargs`` or
through the engine's metaclass (``params=``, ``gradient_aggregator=``, tf.keras's ``clipnorm=``, ``decay=``...)
is shown with its default, not as required: it is added to the shown signature as keyword-only, where the
docstring's parameter table finds it. ``tests/project/test_docs.py`` checks the built pages for what is still shown as
required."""

from __future__ import annotations

import re
from typing import Any

from griffe import Class, Extension, Parameter, ParameterKind, Parameters

#: Defaults of the arguments taken through ``**kwargs`` that are not None (tf.keras's ``decay``).
DEFAULTS = {"decay": "0.0"}
#: Taken by every optimizer's constructor through the engine's metaclass (``engine/construction.py``).
METACLASS_KEYWORDS = ("params", "gradient_aggregator")


def documented_arguments(docstring: str) -> list[str]:
    """The names of a Google-style ``Args:`` section, in order."""
    lines = docstring.splitlines()
    names: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() != "Args:":
            continue
        indent = len(line) - len(line.lstrip())
        for item in lines[i + 1:]:
            if item.strip() and len(item) - len(item.lstrip()) <= indent:
                break
            match = re.match(rf"^\s{{{indent + 4}}}(\w+)(?: \([^)]*\))?:", item)
            if match:
                names.append(match.group(1))
    return names


class KeywordDefaults(Extension):
    def on_class_members(self, *, cls: Class, **kwargs: Any) -> None:
        init = cls.members.get("__init__")
        if init is None or not init.is_function:
            return
        text = "\n".join(d.value for d in (cls.docstring, init.docstring) if d is not None)
        shown = list(init.parameters)
        taken = {p.name for p in shown}
        has_kwargs = any(p.kind is ParameterKind.var_keyword for p in shown)
        missing = [n for n in documented_arguments(text)
                   if n not in taken and (has_kwargs or n in METACLASS_KEYWORDS)]
        if not missing:
            return
        added = [Parameter(n, kind=ParameterKind.keyword_only, default=DEFAULTS.get(n, "None")) for n in missing]
        at = next((i for i, p in enumerate(shown) if p.kind is ParameterKind.var_keyword), len(shown))
        init.parameters = Parameters(*shown[:at], *added, *shown[at:])
