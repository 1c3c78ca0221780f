"""Every registered class, from the one registration point (``engine/registry.py``): exported by its package,
shown on its API page, its config and ``state_dict`` round-tripping, resuming exactly, and the same bits on the
foreach and compiled paths (and, for the Keras 3 rules that take slices, on a table over the one-pass threshold).
A new optimizer is covered here by registering it, with no list to edit. Also: what kernels can do is found,
not promised (a rule without a compiled form falls back; a false promise is refused when the class is defined)."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt.engine import registry, sparse_pass, stages
from slotopt.kernels import native

DOCS = Path(__file__).resolve().parents[2] / "docs"
PACKAGES = {"keras3": "slotopt.keras3", "legacy": "slotopt.legacy", "v1": "slotopt.v1", "tfrs": "slotopt.tfrs"}
_REQUIRED = {"learning_rate": 0.05, "momentum": 0.9}
#: Arguments that put a rule on the path worth checking (SGD's slices take one pass only with momentum).
_WITH = {"SGD": {"momentum": 0.9}, "GradientDescentOptimizer": {}, "RMSprop": {"momentum": 0.5, "centered": True}}


def _api_pages() -> Any:
    spec = importlib.util.spec_from_file_location("api_pages", DOCS / "_hooks" / "api_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _is_optimizer(cls: type) -> bool:
    return issubclass(cls, torch.optim.Optimizer)


ALL = [pytest.param(e, id=f"{e.generation}-{e.cls.__name__}") for e in registry.registered()]
OPTIMIZERS = [p for p in ALL if _is_optimizer(p.values[0].cls)]
SLICED = [p for p in OPTIMIZERS if p.values[0].generation == "keras3" and p.values[0].by_name
          and p.values[0].cls._update_kernels]


def _maker(entry: registry.Registration) -> Callable[[torch.nn.Module], Any]:
    """How to build the class on a model: a wrapper or composite around its generation's SGD and Adam; any other
    with its required arguments."""
    cls, generation, name = entry.cls, entry.generation, entry.cls.__name__
    if name == "LossScaleOptimizer":
        inner = registry.registered_classes(generation)["SGD"]
        return lambda model: cls(inner(learning_rate=0.05, momentum=0.9), params=model.parameters())
    if name == "MultiOptimizer":
        return lambda model: cls(slotopt.OptimizerMap(slotopt.Adam(0.01), {"0\\..*": slotopt.SGD(0.05, momentum=0.9)}),
                                 params=model.named_parameters())
    if name == "CompositeOptimizer":
        return lambda model: cls([(slotopt.Adam(0.01), ["0.*"]), (slotopt.legacy.SGD(0.05, momentum=0.9), ["2.*"])],
                                 params=model)
    kwargs: dict[str, Any] = dict(_WITH.get(name, {}))
    for arg, parameter in inspect.signature(cls.__init__).parameters.items():
        if arg != "self" and parameter.default is inspect.Parameter.empty and parameter.kind not in (
                inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            kwargs[arg] = _REQUIRED.get(arg)
    if "global_step" in kwargs:  # AdagradDA's step counter: an integer tensor of each run's own
        return lambda model: cls(params=model.parameters(), **{**kwargs, "global_step": torch.tensor(0)})
    return lambda model: cls(params=model.parameters(), **kwargs)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 2))


def _train(model: torch.nn.Module, opt: Any, steps: range) -> None:
    for i in steps:
        opt.zero_grad()
        model(torch.linspace(-1.0, 1.0, 12).reshape(4, 3) * (1.0 + 0.25 * i)).square().mean().backward()
        opt.step()


def _bits(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _raw(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits (NaN and -0.0 compare as bits)."""
    if not t.is_floating_point():
        return t
    return t.contiguous().view(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(_raw(x), _raw(y))
                                    for x, y in zip(a, b))


def _unnamed(config: Any) -> Any:
    """A config without its optimizers' names (a rebuilt inner optimizer takes a fresh unique name)."""
    if isinstance(config, dict):
        return {k: _unnamed(v) for k, v in config.items() if k != "name"}
    if isinstance(config, list):
        return [_unnamed(v) for v in config]
    return config


@pytest.fixture
def kernel_mode() -> Any:
    previous = native.use("auto")
    yield native.use
    native.use(previous)


@pytest.mark.parametrize("entry", ALL)
def test_exported_and_documented(entry):
    package = importlib.import_module(PACKAGES[entry.generation])
    names = (entry.cls.__name__, *entry.aliases)
    assert all(n in package.__all__ and getattr(package, n) is entry.cls for n in names)
    if entry.generation == "keras3":  # the top of the package is the Keras 3 face
        assert all(n in slotopt.__all__ and getattr(slotopt, n) is entry.cls for n in names)
    pages = [p for p in (DOCS / "api").glob("*.md") if f"<!-- api: {PACKAGES[entry.generation]} -->" in p.read_text()]
    assert len(pages) == 1, pages
    shown = _api_pages().exported_objects(PACKAGES[entry.generation])
    assert f"{entry.cls.__module__}.{entry.cls.__qualname__}" in shown


#: The longest MRO a registered class may have: the class, what it is derived from in its family (AdamW from
#: Adam, Adam from MomentOptimizer), its face, ``OptimizerCore``, ``TorchProtocol``, torch's ``Optimizer``,
#: ``object``.
MRO_LIMIT = 8


@pytest.mark.parametrize("entry", ALL)
def test_built_from_functions_its_face_names_not_from_mixins(entry):
    """A face's parts (its stages, torch hooks, variables, state) are modules of functions the face class binds
    as methods, not base classes (issue 36: the MRO was 20 classes deep): a mixin added anywhere fails here."""
    from slotopt.engine.core import OptimizerCore
    from slotopt.engine.torch_protocol import TorchProtocol

    mro = entry.cls.__mro__
    assert len(mro) <= MRO_LIMIT, [c.__qualname__ for c in mro]
    base = registry.base_class(entry.generation) if entry.generation != "tfrs" else None
    if base is not None and issubclass(entry.cls, base):
        assert mro[mro.index(base):] == (base, OptimizerCore, TorchProtocol, torch.optim.Optimizer, object)


@pytest.mark.parametrize("entry", OPTIMIZERS)
def test_config_round_trip(entry):
    opt = _maker(entry)(_model())
    if entry.cls.__name__ == "AdagradDAOptimizer":  # its `global_step` is a tensor, never data: said so
        with pytest.raises(NotImplementedError, match="its `global_step` is tensor"):
            slotopt.serialize(opt)
        return
    serialized = slotopt.serialize(opt)
    assert serialized["module"] == registry.serialized_module(entry.cls)
    assert serialized["registered_name"] is None
    if entry.keras or entry.generation in ("v1", "tfrs"):  # (TF1's and TFRS's configs are slotopt's own)
        assert serialized["module"] != "slotopt.keras3"
    else:  # Keras could not load it: slotopt's own module, which only slotopt resolves
        assert serialized["module"].startswith("slotopt.")
    again = slotopt.deserialize(serialized)
    assert type(again) is entry.cls
    assert _unnamed(again.get_config()) == _unnamed(opt.get_config())


@pytest.mark.parametrize("entry", OPTIMIZERS)
def test_state_dict_round_trip_resumes_exactly(entry):
    make = _maker(entry)
    model = _model()
    opt = make(model)
    _train(model, opt, range(2))
    saved = copy.deepcopy(opt.state_dict())
    twin = copy.deepcopy(model)
    resumed = make(twin)
    resumed.load_state_dict(saved)
    assert _same(_bits(twin), _bits(model))
    _train(model, opt, range(2, 4))
    _train(twin, resumed, range(2, 4))
    assert _same(_bits(twin), _bits(model))
    assert int(resumed.state_dict()["state"] != {}) == int(opt.state_dict()["state"] != {})


@pytest.mark.parametrize("entry", OPTIMIZERS)
def test_foreach_and_compiled_give_the_same_bits(entry, kernel_mode):
    if not native.dtypes():
        pytest.skip("the compiled kernels are not built here")
    runs = []
    for mode in ("foreach", "native"):
        kernel_mode(mode)
        model = _model()
        _train(model, _maker(entry)(model), range(3))
        runs.append(_bits(model))
    assert _same(*runs)


@pytest.mark.parametrize("entry", SLICED)
def test_slices_on_a_table_over_the_one_pass_threshold(entry, kernel_mode):
    """A table of more than ``CHUNK_ELEMENTS`` elements: the one-pass sparse update where the class's kernel is
    compiled, the row-block path otherwise; both the same bits as foreach."""
    if not native.dtypes():
        pytest.skip("the compiled kernels are not built here")
    rows = sparse_pass.CHUNK_ELEMENTS + 7
    indices = torch.tensor([5, rows - 1, 5, 40000])
    values = torch.linspace(-1.0, 1.0, 8).reshape(4, 2)
    runs, calls = [], []
    for mode in ("foreach", "native"):
        kernel_mode(mode)
        table = slotopt.Variable(torch.linspace(-0.5, 0.5, rows * 2).reshape(rows, 2), name="table")
        opt = entry.cls(**_WITH.get(entry.cls.__name__, {}))
        before = native.calls()
        for step in range(2):
            opt.apply_gradients([(slotopt.IndexedSlices(values * (step + 1), indices, (rows, 2)), table)])
        calls.append(native.calls() - before)
        runs.append([table.detach().clone()])
    assert _same(*runs)
    assert calls[0] == 0
    if entry.cls._sparse_one_pass and entry.cls(**_WITH.get(entry.cls.__name__, {}))._sparse_layout == "blocks":
        assert calls[1] >= 2  # one compiled pass over the table per step


def test_a_rule_without_a_compiled_form_falls_back_to_foreach(kernel_mode):
    if not native.dtypes():
        pytest.skip("the compiled kernels are not built here")

    @native.compiled("slotopt_has_no_such_rule", 2, (native.Scalar("lr"),))
    def halve(params: list[torch.Tensor], grads: list[torch.Tensor], *, lr: float) -> None:
        torch._foreach_add_(params, grads, alpha=-lr)

    kernel_mode("native")
    params, grads = [torch.ones(5), torch.ones(3)], [torch.full((5,), 0.5), torch.full((3,), 2.0)]
    before = native.calls()
    halve(params, grads, lr=0.5)  # was: AttributeError (the built library has no such function)
    assert native.calls() == before
    assert params[0].tolist() == [0.75] * 5 and params[1].tolist() == [0.0] * 3


def test_a_promise_the_kernel_cannot_keep_is_refused_when_the_class_is_defined():
    def foreach_only(params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        torch._foreach_add_(params, grads)

    with pytest.raises(TypeError, match=r"sets `_sparse_one_pass = True`.*foreach_only"):
        class Promising(slotopt.Optimizer):
            _update_kernels = (foreach_only,)
            _sparse_one_pass = True

    with pytest.raises(TypeError, match="no `_update_kernels` declared"):
        class Bare(slotopt.Optimizer):
            _sparse_one_pass = True

    class Found(slotopt.Optimizer):  # derived, not flagged: a foreach-only kernel takes no one pass
        _update_kernels = (foreach_only,)

    assert Found._sparse_one_pass is False and slotopt.Adam._sparse_one_pass is True
    assert stages.apply_updates in Found._stages  # the stage is a function the face lists in its step, not a base


def test_a_class_keras_does_not_have_serializes_under_slotopts_own_module():
    @registry.register("keras3", keras=False)
    class SlotoptOnlySGD(slotopt.SGD):
        pass

    try:
        config = slotopt.serialize(SlotoptOnlySGD(learning_rate=0.25))
        assert config["module"] == "slotopt.keras3" and config["registered_name"] is None
        again = slotopt.deserialize(config)
        assert type(again) is SlotoptOnlySGD and float(again.learning_rate) == 0.25
        assert slotopt.serialize(slotopt.SGD())["module"] == "keras.optimizers"
        with pytest.raises(TypeError, match="already registers a class named 'SlotoptOnlySGD'"):
            registry.register("keras3")(type("SlotoptOnlySGD", (slotopt.SGD,), {}))
    finally:
        registry._REGISTRATIONS["keras3"].pop("SlotoptOnlySGD")


def test_the_readers_lists_derive_from_the_registry():
    from slotopt.io import keras as keras_io

    assert keras_io.KERAS3_OPTIMIZERS == tuple(e.cls.__name__ for e in registry.registered("keras3") if e.files)
    assert "Lamb" in keras_io.KERAS3_OPTIMIZERS and "Muon" not in keras_io.KERAS3_OPTIMIZERS
    assert set(keras_io.LEGACY_OPTIMIZERS) == {"SGD", "Adam", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta",
                                               "Ftrl"}


@pytest.mark.parametrize("face", ["slotopt", "keras3", "legacy", "v1"])
def test_the_static_names_for_type_checkers_are_the_registrys(face: str) -> None:
    """The faces export their classes at run time from the registry, which type checkers do not run: each face's
    ``if TYPE_CHECKING:`` block (tools/write_typing_blocks.py) must bind exactly the registry's names, each to its
    registered class. Run with TYPE_CHECKING true, here, so a stale or wrong import fails."""
    import ast
    import importlib

    from slotopt.engine import registry

    package = "slotopt" if face == "slotopt" else f"slotopt.{face}"
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"]
    assert len(blocks) == 1, f"{package}: one `if TYPE_CHECKING:` block (run tools/write_typing_blocks.py)"
    namespace: dict = {"__name__": package, "__package__": package}
    exec(compile(ast.Module(body=blocks[0].body, type_ignores=[]), module.__file__, "exec"), namespace)
    bound = {name: value for name, value in namespace.items() if not name.startswith("__")}
    expected = registry.exported_classes("keras3" if face == "slotopt" else face)
    assert bound.keys() == expected.keys(), "run tools/write_typing_blocks.py"
    assert all(bound[name] is expected[name] for name in expected)
