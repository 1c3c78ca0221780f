"""Data parallelism with slotopt: what to pass when torch's engines do not reduce the gradients for you.

Under ``DistributedDataParallel`` or FSDP2 (``fully_shard``) the gradients are already reduced when the optimizer
runs: use any slotopt optimizer as it is. A hand-written data-parallel loop (no DDP) that wants TensorFlow's
contract passes an explicit aggregator to the optimizer, of any generation::

    opt = slotopt.Adam(learning_rate=0.1, gradient_aggregator=slotopt.distributed.all_reduce_mean)
    opt = slotopt.legacy.SGD(learning_rate=0.1, gradient_aggregator=slotopt.distributed.all_reduce_sum)

``all_reduce_sum`` is TensorFlow's own (the sum over replicas, as ``tf.distribute`` strategies give it);
``all_reduce_mean`` is DDP's. The generation's flag skips the aggregator for one call:
``apply_gradients(..., skip_gradients_aggregation=True)`` (Keras 3, TF1) or
``experimental_aggregate_gradients=False`` (tf.keras). With one process both aggregators return the gradients as
they are.
"""

from __future__ import annotations

from .engine.distributed import all_reduce_mean_gradients as all_reduce_mean
from .engine.distributed import all_reduce_sum_gradients as all_reduce_sum
from .engine.distributed import is_distributed, world_size

__all__ = ["all_reduce_sum", "all_reduce_mean", "is_distributed", "world_size"]
