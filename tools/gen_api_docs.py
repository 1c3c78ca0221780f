#!/usr/bin/env python3
"""Writes docs/api.md, slotopt's API reference, from the docstrings and signatures of the public objects.

Usage (from the repository root, with slotopt importable):

    python tools/gen_api_docs.py            # (re)write docs/api.md
    python tools/gen_api_docs.py --check    # exit 1 if docs/api.md is not up to date

Public objects are the names in each documented module's ``__all__``, in that order. Only the standard library
is used (``inspect``); the output is deterministic.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"

#: (module, title, introduction) in the order they appear in the reference.
MODULES = [
    ("slotopt", "Keras 3 optimizers: `slotopt`",
     "The top-level namespace mirrors `keras.optimizers` (Keras 3), plus `CompositeOptimizer`."),
    ("slotopt.schedules", "Learning-rate schedules: `slotopt.schedules`",
     "Mirrors `keras.optimizers.schedules`; every optimizer line accepts these schedules."),
    ("slotopt.legacy", "tf.keras legacy optimizers: `slotopt.legacy`",
     "Mirrors `tf.keras.optimizers.legacy` (the `OptimizerV2` line of tf.keras 2.x)."),
    ("slotopt.v1", "TF1 optimizers: `slotopt.v1`",
     "Mirrors `tf.compat.v1.train`'s optimizers. See also [tf1_migration.md](tf1_migration.md)."),
    ("slotopt.cli.reference", "Reference trajectories: `slotopt.cli.reference`",
     "The bundled Keras reference cases and the replay used by `slotopt parity` and the tests."),
]

SECTION = re.compile(r"^(Args|Arguments|Returns|Raises|Yields|Example|Examples|Note|Notes|Attributes):\s*$")


def docstring_to_markdown(doc: str) -> str:
    """Google-style docstring → Markdown: sections in bold, ``Args`` as a list, doctest examples fenced."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    section = None
    in_code = False
    for raw in lines:
        stripped = raw.strip()
        if stripped.startswith((">>>", "...")) or (in_code and stripped):
            if not in_code:
                if out and out[-1] != "":
                    out.append("")
                out.append("```pycon")
                in_code = True
            out.append(stripped if stripped.startswith((">>>", "...")) else raw.strip())
            continue
        if in_code:
            out.extend(["```", ""])
            in_code = False
        match = SECTION.match(stripped)
        if match and raw == stripped:
            section = match.group(1)
            if out and out[-1] != "":
                out.append("")
            out.extend([f"**{section}:**", ""])
            continue
        if section in ("Args", "Arguments", "Attributes", "Raises") and raw.startswith("    ") and stripped:
            item = re.match(r"^    (\*{0,2}[A-Za-z_][\w ,/*]*?)(\s*\([^)]*\))?:\s+(.*)$", raw)
            if item and not raw.startswith("        "):
                out.append(f"- `{item.group(1).strip()}`{item.group(2) or ''}: {item.group(3)}")
            elif out and out[-1].startswith("- "):
                out[-1] += " " + stripped
            else:
                out.append(stripped)
            continue
        if not stripped:
            section = None if section in ("Example", "Examples") else section
            out.append("")
            continue
        out.append(raw[4:] if section and raw.startswith("    ") else raw)
    if in_code:
        out.append("```")
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _annotation(value: Any) -> str:
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _format_param(p: inspect.Parameter) -> str:
    text = p.name
    if p.kind is p.VAR_POSITIONAL:
        text = "*" + text
    elif p.kind is p.VAR_KEYWORD:
        text = "**" + text
    if p.annotation is not p.empty:
        text += f": {_annotation(p.annotation)}"
    if p.default is not p.empty:
        text += f" = {p.default!r}" if p.annotation is not p.empty else f"={p.default!r}"
    return text


def _signature(obj: Any) -> inspect.Signature | None:
    target = obj
    if inspect.isclass(obj):
        init = next((k.__dict__["__init__"] for k in obj.__mro__ if "__init__" in k.__dict__), None)
        target = init if init is not None and init is not object.__init__ else obj
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def format_signature(name: str, obj: Any, wrap: bool = True, drop_first: bool = False) -> str:
    """``name(params) -> return``; one parameter per line when long and ``wrap`` is set."""
    sig = _signature(obj)
    if sig is None:
        return f"{name}(...)"
    params = list(sig.parameters.values())
    if params and (params[0].name == "self" or drop_first or inspect.isclass(obj)):
        params = params[1:] if params[0].name in ("self", "cls") else params
    kw_only_started = False
    parts = []
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not kw_only_started and not any(
                q.kind is q.VAR_POSITIONAL for q in params):
            parts.append("*")
            kw_only_started = True
        parts.append(_format_param(p))
    ret = None
    if sig.return_annotation is not inspect.Signature.empty and not inspect.isclass(obj):
        ret = _annotation(sig.return_annotation)
    one_line = f"{name}({', '.join(parts)})" + (f" -> {ret}" if ret else "")
    if not wrap or len(one_line) <= 100:
        return one_line
    body = "".join(f"    {p},\n" for p in parts)
    return f"{name}(\n{body})" + (f" -> {ret}" if ret else "")


def first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    para = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines())


#: Modules of the mixins a face is built from (no section of their own): their public members are listed on the
#: face that takes them.
MIXIN_MODULES = ("slotopt.engine.stages", "slotopt.keras3.optimizer_variables", "slotopt.legacy.hyperparameters",
                 "slotopt.legacy.weights", "slotopt.v1.state")


def public_members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on ``cls`` itself, in source order, then those it takes from the
    mixins it is built from (``MIXIN_MODULES``)."""
    members = []
    own = [cls.__dict__] + [base.__dict__ for base in cls.__bases__ if base.__module__ in MIXIN_MODULES]
    seen: set[str] = set()
    for name, value in [item for namespace in own for item in namespace.items()]:
        if name.startswith("_") or name in seen:
            continue
        seen.add(name)
        if isinstance(value, classmethod):
            members.append((name, ("classmethod", value.__func__)))
        elif isinstance(value, staticmethod):
            members.append((name, ("staticmethod", value.__func__)))
        elif inspect.isfunction(value) or isinstance(value, property):
            members.append((name, value))
    return members


def document_class(qualname: str, cls: type) -> list[str]:
    out = [f"### `{qualname}`", "", "```python", format_signature(qualname, cls), "```", ""]
    bases = [b for b in cls.__bases__ if b is not object]
    if bases:
        out += ["*Bases:* " + ", ".join(f"`{_public_name(b)}`" for b in bases), ""]
    if cls.__doc__:
        out += [docstring_to_markdown(cls.__doc__), ""]
    members = public_members(cls)
    if members:
        out += ["| member | description |", "|---|---|"]
        for name, value in members:
            if isinstance(value, property):
                label = f"`{name}` (property)"
                doc = value.fget.__doc__ if value.fget else None
            elif isinstance(value, tuple):
                kind, fn = value
                label = f"`{format_signature(name, fn, wrap=False, drop_first=kind == 'classmethod')}` ({kind})"
                doc = fn.__doc__
            else:
                label = f"`{format_signature(name, value, wrap=False)}`"
                doc = value.__doc__
            out.append(f"| {label.replace('|', '&#124;')} | {first_paragraph(doc).replace('|', '&#124;')} |")
        out.append("")
    return out


def document_function(qualname: str, fn: Any) -> list[str]:
    out = [f"### `{qualname}`", "", "```python", format_signature(qualname, fn), "```", ""]
    if fn.__doc__:
        out += [docstring_to_markdown(fn.__doc__), ""]
    return out


def _public_name(cls: type) -> str:
    module = cls.__module__
    for mod_name, _, _ in MODULES:
        mod = importlib.import_module(mod_name)
        if getattr(mod, cls.__name__, None) is cls:
            return f"{mod_name}.{cls.__name__}"
    return f"{module}.{cls.__qualname__}"


def generate() -> str:
    import slotopt

    out = [
        "# slotopt API reference",
        "",
        f"Generated from the docstrings of slotopt {slotopt.__version__} by `tools/gen_api_docs.py`; do not edit by "
        "hand. Each class lists the public members it defines itself; inherited members are documented on its "
        "base class. The command-line tool is described in the README (`slotopt --help`).",
        "",
        "## Contents",
        "",
    ]
    for _, title, _ in MODULES:
        anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
        out.append(f"- [{title.replace('`', '')}](#{anchor})")
    out.append("")
    for mod_name, title, intro in MODULES:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as err:
            out += [f"## {title}", "", f"*(not importable: {err})*", ""]
            continue
        out += [f"## {title}", "", intro, ""]
        names = list(getattr(module, "__all__", []))
        for name in names:
            obj = getattr(module, name, None)
            qualname = f"{mod_name}.{name}"
            if inspect.isclass(obj):
                out += document_class(qualname, obj)
            elif inspect.isfunction(obj):
                out += document_function(qualname, obj)
            elif inspect.ismodule(obj):
                continue  # documented as its own section
            elif obj is not None:
                out += [f"### `{qualname}`", "", f"`{name} = {obj!r}`", ""]
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write (default docs/api.md)")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python tools/gen_api_docs.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
