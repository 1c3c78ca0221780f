"""Hypothesis strategies and helpers shared by the property suites.

Optimizer configurations are drawn from small lists of valid values per hyperparameter, shapes are small (the
properties are about bookkeeping and bits, not about size), and gradients come from a seeded torch generator, so
every example is cheap and every failure is reproducible from the printed example.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import slotopt
from slotopt import legacy, v1
from slotopt.kernels import blocks

# Fast, reproducible: derandomized (CI sees the same examples every run), no per-example deadline on a shared box.
FAST = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LR = st.sampled_from([0.001, 0.01, 0.1, 0.5])
BETA = st.sampled_from([0.0, 0.5, 0.9, 0.99])
BETA2 = st.sampled_from([0.5, 0.9, 0.999])
EPS = st.sampled_from([1e-7, 1e-3, 0.1])
MOMENTUM = st.sampled_from([0.0, 0.5, 0.9])
RHO = st.sampled_from([0.0, 0.5, 0.9, 0.95])
ACC0 = st.sampled_from([0.0, 0.1, 1.0])
L1L2 = st.sampled_from([0.0, 0.01, 0.5])
POWER = st.sampled_from([-0.5, -0.25, 0.0])


def _config(name: str, **kwargs: Any) -> st.SearchStrategy:
    return st.fixed_dictionaries(kwargs).map(lambda kw: (name, kw))


KERAS3_RULES = st.one_of(
    _config("SGD", learning_rate=LR, momentum=MOMENTUM, nesterov=st.booleans()),
    _config("Adam", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS, amsgrad=st.booleans()),
    _config("AdamW", learning_rate=LR, weight_decay=st.sampled_from([0.0, 0.004, 0.1]), amsgrad=st.booleans()),
    _config("Adamax", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS),
    _config("Nadam", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS),
    _config("RMSprop", learning_rate=LR, rho=RHO, momentum=MOMENTUM, centered=st.booleans(), epsilon=EPS),
    _config("Adagrad", learning_rate=LR, initial_accumulator_value=ACC0, epsilon=EPS),
    _config("Adadelta", learning_rate=LR, rho=RHO, epsilon=EPS),
    _config("Ftrl", learning_rate=LR, learning_rate_power=POWER, initial_accumulator_value=ACC0,
            l1_regularization_strength=L1L2, l2_regularization_strength=L1L2,
            l2_shrinkage_regularization_strength=L1L2, beta=st.sampled_from([0.0, 0.5])),
    _config("Lion", learning_rate=LR, beta_1=st.sampled_from([0.5, 0.9]), beta_2=BETA2),
    _config("Adafactor", learning_rate=LR),
    _config("Lamb", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS),
)

# Base-class stages of Keras 3: at most one clipping option, weight decay, EMA, accumulation.
KERAS3_BASE = st.fixed_dictionaries({}, optional={
    "clip": st.sampled_from([("clipnorm", 1.0), ("clipvalue", 0.5), ("global_clipnorm", 2.0)]),
    "weight_decay": st.sampled_from([0.01, 0.1]),
    "use_ema": st.just(True),
    "gradient_accumulation_steps": st.sampled_from([2, 3]),
})

LEGACY_RULES = st.one_of(
    _config("SGD", learning_rate=LR, momentum=MOMENTUM, nesterov=st.booleans()),
    _config("Adam", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS, amsgrad=st.booleans()),
    _config("Adamax", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS),
    _config("Nadam", learning_rate=LR, beta_1=BETA, beta_2=BETA2, epsilon=EPS),
    _config("RMSprop", learning_rate=LR, rho=RHO, momentum=MOMENTUM, centered=st.booleans(), epsilon=EPS),
    _config("Adagrad", learning_rate=LR, initial_accumulator_value=ACC0, epsilon=EPS),
    _config("Adadelta", learning_rate=LR, rho=RHO, epsilon=EPS),
    _config("Ftrl", learning_rate=LR, learning_rate_power=POWER, initial_accumulator_value=ACC0,
            l1_regularization_strength=L1L2, l2_regularization_strength=L1L2,
            l2_shrinkage_regularization_strength=L1L2, beta=st.sampled_from([0.0, 0.5])),
)
LEGACY_BASE = st.fixed_dictionaries({}, optional={
    "clipnorm": st.sampled_from([0.5, 1.0]), "clipvalue": st.sampled_from([0.25, 1.0]),
    "global_clipnorm": st.sampled_from([1.0, 2.0]), "decay": st.sampled_from([0.0, 0.01]),
}).filter(lambda kw: not ("clipnorm" in kw and "global_clipnorm" in kw))

V1_RULES = st.one_of(
    _config("GradientDescentOptimizer", learning_rate=LR),
    _config("MomentumOptimizer", learning_rate=LR, momentum=MOMENTUM, use_nesterov=st.booleans()),
    _config("AdamOptimizer", learning_rate=LR, beta1=BETA, beta2=BETA2, epsilon=EPS),
    _config("AdagradOptimizer", learning_rate=LR, initial_accumulator_value=st.sampled_from([0.1, 1.0])),
    _config("AdadeltaOptimizer", learning_rate=LR, rho=RHO, epsilon=EPS),
    _config("RMSPropOptimizer", learning_rate=LR, decay=RHO, momentum=MOMENTUM, epsilon=EPS,
            centered=st.booleans()),
    _config("FtrlOptimizer", learning_rate=LR, learning_rate_power=POWER,
            initial_accumulator_value=st.sampled_from([0.1, 1.0]), l1_regularization_strength=L1L2,
            l2_regularization_strength=L1L2, l2_shrinkage_regularization_strength=L1L2),
    _config("ProximalGradientDescentOptimizer", learning_rate=LR, l1_regularization_strength=L1L2,
            l2_regularization_strength=L1L2),
    _config("ProximalAdagradOptimizer", learning_rate=LR, initial_accumulator_value=st.sampled_from([0.1, 1.0]),
            l1_regularization_strength=L1L2, l2_regularization_strength=L1L2),
    _config("AdagradDAOptimizer", learning_rate=LR, l1_regularization_strength=L1L2,
            l2_regularization_strength=L1L2),
)

SHAPE = st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple)
SHAPES = st.lists(SHAPE, min_size=1, max_size=3)
DTYPE = st.sampled_from([torch.float32, torch.float64])
SEED = st.integers(0, 2**16)


def keras3_kwargs(rule_kwargs: dict, base: dict) -> dict:
    kwargs = dict(rule_kwargs)
    for key, value in base.items():
        if key == "clip":
            kwargs[value[0]] = value[1]
        elif key == "weight_decay" and "weight_decay" in kwargs:
            continue
        else:
            kwargs[key] = value
    return kwargs


class Factory:
    """A picklable description of one optimizer: generation, class name, keyword arguments."""

    def __init__(self, api: str, name: str, kwargs: dict) -> None:
        self.api, self.name, self.kwargs = api, name, dict(kwargs)
        self.global_step = None

    def __call__(self) -> Any:
        if self.api == "keras3":
            return getattr(slotopt, self.name)(**self.kwargs)
        if self.api == "legacy":
            return getattr(legacy, self.name)(**self.kwargs)
        kwargs = dict(self.kwargs)
        if self.name == "AdagradDAOptimizer":
            self.global_step = torch.zeros((), dtype=torch.int64)
            return v1.AdagradDAOptimizer(kwargs.pop("learning_rate"), self.global_step, **kwargs)
        return getattr(v1, self.name)(**kwargs)

    def apply(self, opt: Any, pairs: list) -> None:
        if self.api == "v1" and self.name == "AdagradDAOptimizer":
            opt.apply_gradients(pairs, global_step=self.global_step)
        else:
            opt.apply_gradients(pairs)

    def __repr__(self) -> str:
        return f"{self.api}.{self.name}({self.kwargs})"


@st.composite
def factories(draw: Callable, apis: tuple = ("keras3", "legacy", "v1"), base: bool = True) -> Factory:
    api = draw(st.sampled_from(apis))
    if api == "keras3":
        name, kw = draw(KERAS3_RULES)
        return Factory(api, name, keras3_kwargs(kw, draw(KERAS3_BASE)) if base else kw)
    if api == "legacy":
        name, kw = draw(LEGACY_RULES)
        return Factory(api, name, {**kw, **(draw(LEGACY_BASE) if base else {})})
    name, kw = draw(V1_RULES)
    return Factory(api, name, kw)


def make_variables(shapes: list, dtype: torch.dtype, seed: int, prefix: str = "v") -> list:
    gen = torch.Generator().manual_seed(seed)
    return [slotopt.Variable(torch.randn(s, generator=gen, dtype=torch.float64).to(dtype), name=f"{prefix}{i}")
            for i, s in enumerate(shapes)]


def gradient_steps(variables: list, steps: int, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed + 1)
    return [[torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v.dtype) for v in variables]
            for _ in range(steps)]


def trained(factory, shapes: list, dtype: torch.dtype, seed: int, steps: int) -> tuple:
    """A fresh optimizer from ``factory`` after ``steps`` steps on new variables: ``(optimizer, variables)``."""
    variables = make_variables(shapes, dtype, seed)
    opt = factory()
    for grads in gradient_steps(variables, steps, seed):
        factory.apply(opt, list(zip(grads, variables)))
    return opt, variables


def clone_variables(variables: list, prefix: str = "c") -> list:
    return [slotopt.Variable(v.detach().clone(), name=f"{prefix}{i}") for i, v in enumerate(variables)]


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit pattern (NaN-safe exact comparison)."""
    t = t.detach().contiguous()
    view = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}.get(t.dtype)
    return t.view(view) if view is not None else t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def optimizer_state(opt: Any) -> list:
    """Every tensor of the optimizer's state, cloned, in a stable order."""
    variables = opt.variables() if callable(getattr(opt, "variables", None)) else opt.variables
    return [v.detach().clone() for v in variables]


@contextlib.contextmanager
def block_elements(n: int):
    """Sets the CPU block size for the duration (tiny blocks cut even small variables into many blocks)."""
    saved = blocks.CPU_BLOCK_ELEMENTS
    blocks.CPU_BLOCK_ELEMENTS = n
    blocks._plans.clear()
    try:
        yield
    finally:
        blocks.CPU_BLOCK_ELEMENTS = saved
        blocks._plans.clear()
