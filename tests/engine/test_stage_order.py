"""The order of each face's declared step (``_stages``, engine/pipeline.py) matters, stage by stage.

For every face that runs the pipeline (Keras 3, tf.keras legacy, TF1, the Keras 3 LossScaleOptimizer and
MultiOptimizer), each pair of neighbouring stages of the class's real declared step is swapped (the frame's cuts
``UPDATE``, ``first_write`` and ``AFTER`` stay where they are, so a stage next to a cut crosses it), and a few steps
with options that make every order observable (a missing gradient, maximize, a flagged variable, loss-scale unscaling,
accumulation, a non-linear aggregator, clipping, weight decay, a constraint that reads the step count, moving
averages) must then end elsewhere than the declared step does, or be refused. Moving the unscale after the clip,
a real bug that once passed every other test, is one of these swaps.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest
import torch

import slotopt
from slotopt.engine.pipeline import Step

STEPS = 4


def _grads(step: int, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return [torch.randn(shape, generator=generator, dtype=torch.float32) * 3 for shape in shapes]


def _squared(pairs: list[Any]) -> list[Any]:
    """A non-linear aggregator, not odd either (a missing gradient is an error, as a real all-reduce's would be)."""
    return [(g * g.abs() + 0.125, v) for g, v in pairs]


def _counted_constraint(counter: Callable[[], int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """Clamps to [-1, 1], and halves on odd counts: a constraint that sees whether the step was counted yet."""
    def constraint(v: torch.Tensor) -> torch.Tensor:
        return v.clamp(-1.0, 1.0) * (0.5 if counter() % 2 else 1.0)
    return constraint


def _keras3() -> tuple[Any, Callable[[int], None]]:
    opt_box: list[Any] = []
    w = slotopt.Variable(torch.linspace(-1, 1, 6).reshape(2, 3), name="w",
                         constraint=_counted_constraint(lambda: int(opt_box[0].iterations)))
    b = slotopt.Variable(torch.linspace(0.5, 1, 3), name="b")
    flagged = slotopt.Variable(torch.zeros(3), name="scale")
    flagged.overwrite_with_gradient = True
    missing = slotopt.Variable(torch.zeros(2), name="history")
    missing.overwrite_with_gradient = True
    opt = slotopt.AdamW(learning_rate=0.05, weight_decay=0.1, clipnorm=1.0, use_ema=True,
                        loss_scale_factor=3.0, gradient_accumulation_steps=2, gradient_aggregator=_squared,
                        maximize=True)
    opt_box.append(opt)
    variables = [w, b, flagged, missing]
    opt.build(variables)

    def step(i: int) -> None:
        grads: list[Any] = _grads(i, [(2, 3), (3,), (3,)]) + [None]
        opt.apply_gradients(list(zip(grads, variables)))
    return opt, step


def _legacy() -> tuple[Any, Callable[[int], None]]:
    opt_box: list[Any] = []
    w = slotopt.Variable(torch.linspace(-1, 1, 6).reshape(2, 3), name="w",
                         constraint=_counted_constraint(lambda: int(opt_box[0].iterations)))
    b = slotopt.Variable(torch.linspace(0.5, 1, 3), name="b")
    unused = slotopt.Variable(torch.zeros(2), name="unused")
    opt = slotopt.legacy.Adam(learning_rate=0.05, clipnorm=1.0, gradient_aggregator=_squared, maximize=True)
    opt_box.append(opt)

    def step(i: int) -> None:
        grads: list[Any] = _grads(i, [(2, 3), (3,)]) + [None]
        opt.apply_gradients(list(zip(grads, [w, b, unused])))
    return opt, step


def _v1() -> tuple[Any, Callable[[int], None]]:
    global_step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
    w = slotopt.Variable(torch.linspace(-1, 1, 6).reshape(2, 3), name="w",
                         constraint=_counted_constraint(lambda: int(global_step)))
    b = slotopt.Variable(torch.linspace(0.5, 1, 3), name="b")
    unused = slotopt.Variable(torch.zeros(2), name="unused")
    opt = slotopt.v1.AdamOptimizer(learning_rate=0.05, gradient_aggregator=_squared, maximize=True)

    def step(i: int) -> None:
        grads: list[Any] = _grads(i, [(2, 3), (3,)]) + [None]
        opt.apply_gradients(list(zip(grads, [w, b, unused])), global_step=global_step)
    return opt, step


def _loss_scale() -> tuple[Any, Callable[[int], None]]:
    w = slotopt.Variable(torch.linspace(-1, 1, 6).reshape(2, 3), name="w")
    b = slotopt.Variable(torch.linspace(0.5, 1, 3), name="b")
    unused = slotopt.Variable(torch.zeros(2), name="unused")
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.05, gradient_aggregator=_squared),
                                     initial_scale=4.0)
    opt.build([w, b, unused])

    def step(i: int) -> None:
        grads: list[Any] = _grads(i, [(2, 3), (3,)]) + [None]
        opt.apply_gradients(list(zip(grads, [w, b, unused])))
    return opt, step


def _multi() -> tuple[Any, Callable[[int], None]]:
    kernel = slotopt.Variable(torch.linspace(-1, 1, 6).reshape(2, 3), name="kernel")
    bias = slotopt.Variable(torch.linspace(0.5, 1, 3), name="bias")
    unused = slotopt.Variable(torch.zeros(2), name="unused")
    sgd = slotopt.SGD(learning_rate=0.1, momentum=0.9, gradient_aggregator=_squared)
    adam = slotopt.Adam(learning_rate=0.05, gradient_aggregator=_squared)
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {"kern.*": adam}))
    opt.build([kernel, bias, unused])

    def step(i: int) -> None:
        grads: list[Any] = _grads(i, [(2, 3), (3,)]) + [None]
        opt.apply_gradients(list(zip(grads, [kernel, bias, unused])))
    return opt, step


FACES = {"keras3": _keras3, "legacy": _legacy, "v1": _v1, "LossScaleOptimizer": _loss_scale,
         "MultiOptimizer": _multi}


def _trajectory(make: Callable[[], tuple[Any, Callable[[int], None]]], stages: Any = None) -> Any:
    """Every tensor the optimizer holds or updates after each step (or the error a step raised)."""
    opt, step = make()
    if stages is not None:
        opt._stages = stages  # (on the instance: the class's own step is left as declared)
    seen = []
    try:
        for i in range(STEPS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (the missing gradient's warning, every step)
                step(i)
            tensors = list(opt.param_groups[0]["params"]) + [t for g in opt.param_groups[1:] for t in g["params"]]
            tensors += [t for state in opt.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
            seen.append([t.detach().clone() for t in tensors])
    except Exception as err:  # noqa: BLE001 - a swapped step that is refused is a swap that was noticed
        return type(err).__name__
    return seen


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(len(x) == len(y) and all(t.shape == u.shape and torch.equal(t, u) for t, u in zip(x, y))
               for x, y in zip(a, b))


def _swaps(step: Step) -> list[tuple[str, Step]]:
    """The declared step with each pair of neighbouring stages swapped (the cuts stay in place)."""
    positions = [i for i, entry in enumerate(step) if entry in step.stages()]
    swapped = []
    for first, second in zip(positions, positions[1:]):
        entries = list(step)
        entries[first], entries[second] = entries[second], entries[first]
        name = f"{step[first].__name__}<->{step[second].__name__}"
        swapped.append((name, Step(*entries, result=step.result)))
    return swapped


def _face_swaps() -> list[Any]:
    params = []
    for face, make in FACES.items():
        step = type(make()[0])._stages
        params += [pytest.param(face, swapped, id=f"{face}:{name}") for name, swapped in _swaps(step)]
    return params


def test_every_face_declares_its_step_and_the_cases_run_it_cleanly():
    for face, make in FACES.items():
        opt, _ = make()
        assert isinstance(type(opt)._stages, Step) and len(type(opt)._stages.stages()) >= 3, face
        trajectory = _trajectory(make)
        assert not isinstance(trajectory, str), (face, trajectory)
        assert len(trajectory) == STEPS


@pytest.mark.parametrize(("face", "swapped"), _face_swaps())
def test_swapping_two_neighbouring_stages_changes_the_step(face, swapped):
    declared = _trajectory(FACES[face])
    assert not isinstance(declared, str)
    assert not _same(declared, _trajectory(FACES[face], swapped))


def test_the_unscale_before_the_clip_is_part_of_the_order_test():
    # The bug that once passed every test: Keras 3's unscale moved after its clip. With clipping on, the swap of
    # the two stages (not neighbours in the tuple: accumulation and aggregation sit between them) changes the step.
    from slotopt.engine import stages

    step = slotopt.AdamW._stages
    entries = list(step)
    i, j = entries.index(stages.unscale_gradients), entries.index(stages.clip_gradients)
    assert i < j
    entries[i], entries[j] = entries[j], entries[i]
    assert not _same(_trajectory(_keras3), _trajectory(_keras3, Step(*entries, result=step.result)))
