"""Every option keeps the step plan (issue 46): a quiet step with clipping, unscaling, clipvalue, EMA, weight decay,
AMSGrad or gradient accumulation, in every face that has the option, still reaches its first write as an ordinary
step of its plan (``StepPlan.uses``, counted by ``unchanged.proven_again`` on the optimizer that updates).

A stage that maps the gradients hands the next stage planned pairs (``engine/gradient_maps.py``): before it, any
such stage returned a plain list and the step fell to the per-tensor path."""

import pytest
import torch

import slotopt
from slotopt.engine import plan_cache

KERAS3 = {"clipnorm": {"clipnorm": 1.0}, "global_clipnorm": {"global_clipnorm": 1.0}, "clipvalue": {"clipvalue": 0.5},
          "loss_scale_factor": {"loss_scale_factor": 2.0}, "use_ema": {"use_ema": True},
          "weight_decay": {"weight_decay": 0.01}, "amsgrad": {"amsgrad": True},
          "gradient_accumulation_steps": {"gradient_accumulation_steps": 2},
          "loss_scale_factor+clipnorm": {"loss_scale_factor": 4.0, "clipnorm": 0.5}}
LEGACY = {"clipnorm": {"clipnorm": 1.0}, "global_clipnorm": {"global_clipnorm": 1.0}, "clipvalue": {"clipvalue": 0.5},
          "amsgrad": {"amsgrad": True}, "clipvalue+clipnorm": {"clipvalue": 0.5, "clipnorm": 1.0},
          "clipvalue+global_clipnorm": {"clipvalue": 0.5, "global_clipnorm": 1.0}}


def _model(n=6):
    g = torch.Generator().manual_seed(3)
    return [torch.nn.Parameter(torch.randn(n + i, generator=g)) for i in range(n)]


def _grads(params, step):
    g = torch.Generator().manual_seed(10 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 3


def _faces():
    for name, kw in KERAS3.items():
        yield f"keras3-{name}", lambda kw=kw: (lambda p: slotopt.Adam(p, learning_rate=0.01, **kw)), None
        if "loss_scale_factor" not in kw:
            yield (f"keras3-lso-{name}", lambda kw=kw: (
                lambda p: slotopt.LossScaleOptimizer(slotopt.Adam(p, learning_rate=0.01, **kw), initial_scale=4.0)),
                "inner_optimizer")
            yield (f"multi-{name}", lambda kw=kw: (
                lambda p: slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(learning_rate=0.01, **kw)),
                                                 params=p)), "multi")
    for name, kw in LEGACY.items():
        yield f"legacy-{name}", lambda kw=kw: (lambda p: slotopt.legacy.Adam(p, learning_rate=0.01, **kw)), None
        yield (f"legacy-lso-{name}", lambda kw=kw: (
            lambda p: slotopt.legacy.LossScaleOptimizer(slotopt.legacy.Adam(p, learning_rate=0.01, **kw),
                                                        initial_scale=4.0)), "inner_optimizer")


FACES = list(_faces())


def _updating(opt, how):
    if how is None:
        return [opt]
    if how == "multi":
        return list(opt._inner_optimizers)
    return [getattr(opt, how)]


@pytest.mark.parametrize("name,make,how", FACES, ids=[f[0] for f in FACES])
def test_a_quiet_step_with_the_option_takes_the_plan(name, make, how):
    params = _model()
    opt = make()(params)
    for step in range(3):
        _grads(params, step)
        opt.step()
    updating = _updating(opt, how)
    plans = [plan_cache.current_plan(o) for o in updating]
    assert all(plan is not None for plan in plans), name
    before = [plan.uses for plan in plans]
    for step in range(3, 7):
        _grads(params, step)
        opt.step()
    after = [plan_cache.current_plan(o).uses for o in updating]
    # Accumulation: only every second call updates (the others stop before the first write).
    assert all(a - b >= (2 if "accumulation" in name else 4) for a, b in zip(after, before)), (name, before, after)
