"""The package's shape: no import circle anywhere in ``src/slotopt`` (every import counts: module level, inside
functions and under ``TYPE_CHECKING``), the engine and kernels import no face, the faces import no other face
except through the registry that serialization offers, and the library never imports its command line."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import slotopt

SRC = Path(slotopt.__file__).resolve().parent
FACES = ("keras3", "legacy", "v1", "tfrs")


def _module_name(path: Path) -> str:
    parts = ("slotopt", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ALL_MODULES = {_module_name(p) for p in SRC.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every ``slotopt`` module ``path`` imports, resolved to module names (``from . import x`` counts ``x`` when it
    is a module)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("slotopt"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("slotopt"):
                continue
            submodules = {f"{target}.{alias.name}" for alias in node.names} & ALL_MODULES
            found |= submodules
            if len(submodules) < len(node.names):  # some names are attributes of ``target`` itself
                found.add(target)
    return found


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_no_import_circle_in_the_package():
    assert _cycle(GRAPH) == []


#: The floors, lowest first: a module imports only from its own part of the package or from a lower floor, never
#: up one, lazily or not (parts of one floor import each other not at all). ``slotopt`` is the package's __init__.
FLOORS = (("variables", "numerics"), ("kernels",), ("engine",), ("schedules",), ("keras3", "legacy", "v1", "tfrs", "io"),
          ("distributed",), ("slotopt",), ("cli",))
FLOOR = {part: level for level, parts in enumerate(FLOORS) for part in parts}


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else "slotopt"


def test_every_part_of_the_package_has_a_floor():
    assert {_part(m) for m in MODULES} == set(FLOOR)


def test_no_import_goes_up_a_floor_or_across_one():
    bad = sorted((name, dep) for name, deps in GRAPH.items() for dep in deps
                 if _part(dep) != _part(name) and FLOOR[_part(dep)] >= FLOOR[_part(name)])
    assert bad == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("layer", ["engine", "kernels", "variables", "schedules", "numerics"])
def test_shared_layers_import_no_face_and_no_program(layer):
    for name, deps in GRAPH.items():
        if name == f"slotopt.{layer}" or name.startswith(f"slotopt.{layer}."):
            bad = {d for d in deps if d.split(".")[1:2] and d.split(".")[1] in (*FACES, "io", "cli")}
            assert not bad, (name, bad)


def test_the_library_never_imports_its_command_line():
    for name, deps in GRAPH.items():
        if not name.startswith("slotopt.cli"):
            assert not {d for d in deps if d.startswith("slotopt.cli")}, name


@pytest.mark.parametrize("face", ["keras3", "legacy", "v1", "tfrs"])
def test_a_generation_imports_no_sibling_generation(face):
    # Serialized names of every generation resolve through engine/registry.py, so no face needs another.
    for name, deps in GRAPH.items():
        if name.startswith(f"slotopt.{face}"):
            others = {d for d in deps if d.split(".")[1:2] and d.split(".")[1] in FACES and d.split(".")[1] != face}
            assert not others, (name, others)


def test_every_module_imports():
    for name in MODULES:
        importlib.import_module(name)


def _module_keys(config) -> list[str]:
    """Every ``module`` value in a (nested) serialized config."""
    if isinstance(config, dict):
        found = [config["module"]] if isinstance(config.get("module"), str) else []
        return found + [key for value in config.values() for key in _module_keys(value)]
    if isinstance(config, (list, tuple)):
        return [key for value in config for key in _module_keys(value)]
    return []


def test_every_module_a_config_can_name_is_keras_s_or_an_importable_slotopt_module():
    keys: set[str] = set()
    composite = slotopt.CompositeOptimizer([(slotopt.legacy.Adagrad(0.1), ["*emb*"]), (slotopt.Adam(0.1), ["*"])])
    keys.update(_module_keys(composite.get_config()))
    keys.update(_module_keys(slotopt.serialize(slotopt.LossScaleOptimizer(slotopt.SGD(0.1)))))
    keys.update(_module_keys(slotopt.legacy.LossScaleOptimizer(slotopt.legacy.SGD(0.1)).get_config()))
    keys.update(_module_keys(slotopt.serialize(slotopt.MultiOptimizer(slotopt.OptimizerMap(
        slotopt.SGD(0.1), {"w.*": slotopt.Adam(0.1)})))))
    keys.update(_module_keys(slotopt.serialize(slotopt.Adam(slotopt.schedules.ExponentialDecay(0.1, 10, 0.5)))))
    for cls in (slotopt.legacy.Adam, slotopt.legacy.SGD, slotopt.Lamb):
        keys.update(_module_keys(slotopt.CompositeOptimizer([(cls(0.1), ["*"])]).get_config()))
    # Registered classes are written under their generation's module (Keras's, or slotopt.v1 / slotopt.tfrs),
    # every other class under its own Python module (issue 24: a round trip keeps the generation and class).
    assert {"keras.optimizers.legacy", "keras.optimizers"} <= keys  # (Lamb too: Keras writes its module)
    for key in keys:
        if key.startswith("keras."):
            continue  # Keras's own module names, which slotopt's registry resolves by class name
        module = importlib.import_module(key)
        assert module.__name__.startswith("slotopt."), key
