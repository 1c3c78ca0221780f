"""An Adam run whose every bit must be the same on every supported torch: prints one JSON line.

The gradients are made by NumPy (not by torch's matmuls or random generator, which may change between torch
versions), so the only torch code that shapes the result is slotopt's step: the compiled kernels where they load,
else the foreach kernels. Tensors of several sizes (one over the threaded kernels' 32,768-element threshold) and
dtypes. tools/compat.py runs it in each torch's venv and compares the digest with the reference torch's.

It also shows the no-half-applied-step rule on this torch: a step that raises must leave the weights, the moments
and ``iterations`` as they were (``"half_applied"`` says whether a raising step changed any of them).
"""

import hashlib
import json

import numpy as np
import torch

import slotopt
from slotopt.kernels import native
from slotopt.kernels.native import tensor_table

SHAPES = [(5,), (37, 3), (64, 600), (1000,)]  # 38,400 elements for the threaded path
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
STEPS = 20


def snapshot(params, opt):
    tensors = [p.detach() for p in params] + [v.detach() if isinstance(v, torch.Tensor) else v.value.detach()
                                              for v in opt.variables]
    return [t.contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else t.reshape(1).view(torch.uint8)
            .numpy().tobytes() for t in tensors]


def main() -> None:
    rng = np.random.RandomState(1234)
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype))
              for dtype in DTYPES for shape in SHAPES]
    opt = slotopt.get({"class_name": "Adam", "config": {"learning_rate": 1e-2, "epsilon": 1e-7}})
    opt.build(params)
    error = None
    half_applied = False
    for _ in range(STEPS):
        for p in params:
            p.grad = torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32)).to(p.dtype)
        before = snapshot(params, opt)
        try:
            opt.step()
        except Exception as caught:  # an ordinary step that raises on this torch: did it change anything?
            error, half_applied = f"step: {type(caught).__name__}: {caught}"[:200], snapshot(params, opt) != before
            break
    digest = hashlib.sha256(b"".join(snapshot(params, opt))).hexdigest()
    if error is None:  # a step that must fail: one gradient of the wrong shape, the others fine; nothing may change
        before = snapshot(params, opt)
        grads = [torch.ones_like(p) for p in params]
        grads[-1] = torch.ones(3, dtype=params[-1].dtype)
        try:
            opt.apply_gradients(list(zip(grads, params)))
            error = "none raised"
        except Exception as caught:  # the rule is about any error
            error = f"bad gradient: {type(caught).__name__}"
        half_applied = snapshot(params, opt) != before
    print(json.dumps({"torch": torch.__version__, "digest": digest, "iterations": int(opt.iterations),
                      "kernels": native.status()["path"], "variant": native.status().get("variant"),
                      "checks": "C++" if tensor_table.status()["active"] else "Python",
                      "bad_step_error": error, "half_applied": half_applied}))


if __name__ == "__main__":
    main()
