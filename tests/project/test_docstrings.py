"""Every public class documents itself with an example, and every example in a docstring runs as shown."""

import doctest
import importlib
import inspect
import pkgutil

import pytest

import slotopt

MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(slotopt.__path__, prefix="slotopt.")
    if not name.startswith(("slotopt.cli.command", "slotopt.cli.demo", "slotopt.cli.bench"))
)
PUBLIC = [(m, n) for m in ("slotopt", "slotopt.legacy", "slotopt.v1", "slotopt.schedules")
          for n in importlib.import_module(m).__all__]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("module_name,name", PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_public_class_has_a_runnable_example(module_name, name):
    obj = getattr(importlib.import_module(module_name), name)
    if inspect.isclass(obj) and not issubclass(obj, Exception):
        assert ">>>" in (obj.__doc__ or ""), f"{module_name}.{name} has no example in its docstring"
