"""Issue 50 item 2: a TensorFlow checkpoint's reader holds at most the file's data bytes, whatever the object graph's
references. ``io/bounds.check_object_graph`` refused only two nodes naming one key, and ``_optimizer_part`` only a
node referenced twice within one optimizer: one 1 MiB slot node listed by 40 optimizers was read 40 times. Now the
bundle counts what it hands out against its data bytes (``io/tensor_bundle.py``) and refuses the read past them."""

from __future__ import annotations

import _tf_bundle_writer as writer
import pytest
import torch

import slotopt
from slotopt.io.tensor_bundle import TensorBundle, TFCheckpointError


def test_each_entry_reads_once_within_the_budget_and_again_past_it(tmp_path):
    prefix = str(tmp_path / "ckpt")
    writer.write_bundle(prefix, {"a": torch.arange(1000.0), "b": torch.ones(10)})
    bundle = TensorBundle(prefix)
    assert torch.equal(bundle.read("a"), torch.arange(1000.0)) and torch.equal(bundle.read("b"), torch.ones(10))
    with pytest.raises(TFCheckpointError, match=r"entry 'a' is read again past the file's 4040 data bytes"):
        bundle.read("a")
    fresh = TensorBundle(prefix)  # (a bundle per read of the file: a second load starts again)
    assert torch.equal(fresh.read("a"), torch.arange(1000.0))


def _optimizers_sharing_one_slot(prefix: str, optimizers: int) -> None:
    graph, tensors = writer.Graph(), {}
    model = graph.add(0, "model")
    weight = graph.add(model, "kernel")
    graph.variable(weight, "dense/kernel", "w" + writer.SUFFIX)
    slot = graph.add(0, "shared_slot")
    graph.variable(slot, "adam/dense_kernel_momentum", "m" + writer.SUFFIX)
    for k in range(optimizers):
        opt = graph.add(0, f"optimizer{k}")
        variables, trainable = graph.add(opt, "_variables"), graph.add(opt, "_trainable_variables")
        graph.link(trainable, "0", weight)
        iterations = graph.add(opt, "_iterations")
        graph.variable(iterations, f"adam{k}/iteration", f"it{k}" + writer.SUFFIX)
        tensors[f"it{k}" + writer.SUFFIX] = torch.tensor(3, dtype=torch.int64)
        graph.link(variables, "0", iterations)
        graph.link(variables, "1", slot)  # the same 1 MiB node in every optimizer's list
    tensors["w" + writer.SUFFIX] = torch.zeros(1 << 18)
    tensors["m" + writer.SUFFIX] = torch.zeros(1 << 18)
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    writer.write_bundle(prefix, tensors)


def test_one_slot_node_listed_by_many_optimizers_is_refused_within_the_files_bytes(tmp_path):
    prefix = str(tmp_path / "shared-1")
    _optimizers_sharing_one_slot(prefix, 40)
    with pytest.raises(TFCheckpointError, match=r"entry 'm/\.ATTRIBUTES/VARIABLE_VALUE' is read again past the "
                                                r"file's \d+ data bytes"):
        slotopt.load_tf_checkpoint(prefix)
