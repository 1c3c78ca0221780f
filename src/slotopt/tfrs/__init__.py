"""TensorFlow Recommenders' optimizers on PyTorch tensors: ``CompositeOptimizer`` (a different optimizer per group
of variables, serializable).

Example:
    >>> import torch, slotopt
    >>> emb, dense = slotopt.Variable(torch.zeros(4, 2), name="emb"), slotopt.Variable(torch.zeros(2), name="w")
    >>> opt = slotopt.tfrs.CompositeOptimizer([(slotopt.legacy.Adagrad(0.1), lambda: [emb]),
    ...                                        (slotopt.legacy.Adam(0.01), lambda: [dense])])
    >>> _ = opt.apply_gradients([(torch.ones(4, 2), emb), (torch.ones(2), dense)])
    >>> [int(o.iterations) for o in opt.optimizers]
    [1, 1]
"""

from ..engine import registry

registry.import_face(__name__, __path__)
globals().update(registry.exported_classes("tfrs"))

registry.register_generation(
    "tfrs", public_module="slotopt.tfrs",
    modules=("slotopt.composite",),
    prefixes=("slotopt.tfrs", "tensorflow_recommenders.experimental.optimizers"),
)

__all__ = [*registry.exported_names("tfrs")]
