"""A TensorBundle writer for tests only: builds TensorFlow checkpoints (``.index`` + ``.data-*``), object graphs
and ``.meta`` graphs from the format's specification, so the reader meets every dtype, several shards, small
blocks, snappy blocks, big-endian data, and each generation's naming without TensorFlow."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import torch

from slotopt.io.bundle_writer import _separator, _successor  # (the table's key shortening, written once)
from slotopt.io.crc32c import crc32c, mask

# TensorFlow DataType codes by torch dtype.
CODES = {torch.float32: 1, torch.float64: 2, torch.int32: 3, torch.uint8: 4, torch.int16: 5, torch.int8: 6,
         torch.complex64: 8, torch.int64: 9, torch.bool: 10, torch.bfloat16: 14, torch.uint16: 17,
         torch.complex128: 18, torch.float16: 19, torch.uint32: 22, torch.uint64: 23}
STRING = 7
MAGIC = 0xDB4775248B80FB57


# ------------------------------------------------------------------------------------------------ protobuf
def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def f_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def f_bytes(number: int, value: Union[bytes, str]) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def f_fixed32(number: int, value: int) -> bytes:
    return varint(number << 3 | 5) + value.to_bytes(4, "little")


def entry_proto(dtype: int, shape: Sequence[int], shard: int, offset: int, size: int, crc: int,
                slices: Sequence[Sequence[tuple[int, int]]] = ()) -> bytes:
    shape_proto = b"".join(f_bytes(2, f_varint(1, d)) for d in shape)
    out = f_varint(1, dtype) + f_bytes(2, shape_proto)
    if shard:
        out += f_varint(3, shard)
    if offset:
        out += f_varint(4, offset)
    out += f_varint(5, size) + f_fixed32(6, crc)
    for extents in slices:
        out += f_bytes(7, b"".join(f_bytes(1, f_varint(1, s) + (f_varint(2, n) if n >= 0 else b""))
                                   for s, n in extents))
    return out


def header_proto(num_shards: int, big_endian: bool = False, min_consumer: int = 0) -> bytes:
    version = f_varint(1, 1) + (f_varint(2, min_consumer) if min_consumer else b"")
    return f_varint(1, num_shards) + (f_varint(2, 1) if big_endian else b"") + f_bytes(3, version)


# ------------------------------------------------------------------------------------------------ table
def snappy_literal(data: bytes) -> bytes:
    """A valid snappy stream made of literals only (a compressor need not find any copy)."""
    out = bytearray(varint(len(data)))
    for start in range(0, len(data), 60):
        chunk = data[start:start + 60]
        out.append((len(chunk) - 1) << 2)
        out += chunk
    return bytes(out)


def _block(entries: list[tuple[bytes, bytes]], restart_interval: int) -> bytes:
    out, restarts, previous = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        shared = 0
        if i % restart_interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")


def table(entries: list[tuple[bytes, bytes]], block_size: int = 4096, snappy: bool = False,
          restart_interval: int = 16) -> bytes:
    """A LevelDB-format table of ``entries`` (sorted by key here)."""
    entries = sorted(entries)
    out = bytearray()

    def emit(contents: bytes) -> bytes:
        kind = 0
        if snappy:
            contents, kind = snappy_literal(contents), 1
        offset = len(out)
        out.extend(contents)
        out.append(kind)
        out.extend(mask(crc32c(contents + bytes([kind]))).to_bytes(4, "little"))
        return varint(offset) + varint(len(contents))

    # As LevelDB's TableBuilder: a block is cut once its estimated size reaches ``block_size``; its index key is
    # the shortest separator between its last key and the next block's first key (the last block: a successor).
    index, current, size, pending = [], [], 0, None
    for key, value in entries:
        if pending is not None:
            index.append((_separator(pending[0], key), pending[1]))
            pending = None
        current.append((key, value))
        size = len(_block(current, restart_interval))
        if size >= block_size:
            pending = (current[-1][0], emit(_block(current, restart_interval)))
            current = []
    if current:
        pending = (current[-1][0], emit(_block(current, restart_interval)))
    if pending is not None:
        index.append((_successor(pending[0]), pending[1]))
    meta_handle = emit(_block([], restart_interval))
    index_handle = emit(_block(index, 1))
    footer = (meta_handle + index_handle).ljust(40, b"\x00") + MAGIC.to_bytes(8, "little")
    return bytes(out) + footer


# ------------------------------------------------------------------------------------------------ bundle
def _tensor_bytes(value: Any, big_endian: bool) -> tuple[int, tuple[int, ...], bytes]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, bytes) for v in value):
        lengths = b"".join(varint(len(v)) for v in value)
        crc = crc32c(b"".join(len(v).to_bytes(4, "little") for v in value))
        return STRING, (len(value),), lengths + mask(crc).to_bytes(4, "little") + b"".join(value)
    if isinstance(value, bytes):
        body = varint(len(value))
        crc = crc32c(len(value).to_bytes(4, "little"))
        return STRING, (), body + mask(crc).to_bytes(4, "little") + value
    tensor = torch.as_tensor(value).contiguous()
    code = CODES[tensor.dtype]
    if tensor.dtype == torch.bfloat16:
        array = tensor.view(torch.int16).numpy()
    elif tensor.dtype in (torch.uint16, torch.uint32, torch.uint64):
        array = tensor.view({torch.uint16: torch.int16, torch.uint32: torch.int32,
                             torch.uint64: torch.int64}[tensor.dtype]).numpy()
    else:
        array = tensor.numpy()
    if big_endian:
        array = array.astype(array.dtype.newbyteorder(">"))
    return code, tuple(tensor.shape), array.tobytes()


def string_crc(data: bytes, count: int) -> int:
    """The entry checksum of a string tensor's bytes: lengths as uint32, the length checksum, the strings."""
    from slotopt.io.protowire import read_varint
    pos, lengths = 0, []
    for _ in range(count):
        n, pos = read_varint(data, pos)
        lengths.append(n)
    length_bytes = b"".join(n.to_bytes(4, "little") for n in lengths)
    return crc32c(length_bytes + data[pos:])


def write_bundle(prefix: str, tensors: dict[str, Any], num_shards: int = 1, block_size: int = 4096,
                 snappy: bool = False, big_endian: bool = False, align: int = 1) -> None:
    """Writes ``tensors`` (key → tensor, array, or bytes / list of bytes for a string tensor) spread over
    ``num_shards`` data files, as TensorFlow's ``BundleWriter`` does."""
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    shards = [bytearray() for _ in range(num_shards)]
    entries = [(b"", header_proto(num_shards, big_endian))]
    for i, key in enumerate(sorted(tensors)):
        code, shape, data = _tensor_bytes(tensors[key], big_endian)
        shard = i % num_shards
        out = shards[shard]
        while len(out) % align:
            out.append(0)
        if code == STRING:
            count = int(np.prod(shape)) if shape else 1
            crc = string_crc(data, count)
        else:
            crc = crc32c(data)
        entries.append((key.encode(), entry_proto(code, shape, shard, len(out), len(data), mask(crc))))
        out.extend(data)
    for shard, data in enumerate(shards):
        with open(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}", "wb") as f:
            f.write(data)
    with open(f"{prefix}.index", "wb") as f:
        f.write(table(entries, block_size=block_size, snappy=snappy))


def write_state_file(directory: str, model_checkpoint_path: str) -> None:
    escaped = model_checkpoint_path.replace("\\", "\\\\").replace('"', '\\"')
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{escaped}"\nall_model_checkpoint_paths: "{escaped}"\n')


# ------------------------------------------------------------------------------------------------ object graphs
SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class Graph:
    """A ``TrackableObjectGraph`` under construction: node 0 is the root."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, list]] = [{"children": [], "attributes": [], "slots": []}]

    def add(self, parent: int, local_name: str) -> int:
        self.nodes.append({"children": [], "attributes": [], "slots": []})
        node = len(self.nodes) - 1
        self.nodes[parent]["children"].append((node, local_name))
        return node

    def link(self, parent: int, local_name: str, node: int) -> None:
        self.nodes[parent]["children"].append((node, local_name))

    def variable(self, node: int, full_name: str, key: str) -> None:
        self.nodes[node]["attributes"].append(("VARIABLE_VALUE", full_name, key))

    def serialize(self) -> bytes:
        out = b""
        for node in self.nodes:
            body = b"".join(f_bytes(1, f_varint(1, c) + f_bytes(2, n)) for c, n in node["children"])
            body += b"".join(f_bytes(2, f_bytes(1, a) + f_bytes(2, b) + f_bytes(3, k)) for a, b, k in node["attributes"])
            body += b"".join(f_bytes(3, f_varint(1, o) + f_bytes(2, s) + f_varint(3, t)) for o, s, t in node["slots"])
            out += f_bytes(1, body)
        return out


def write_keras3_checkpoint(prefix: str, opt: Any, names: Sequence[str], model_extra: Optional[dict] = None,
                            **bundle_options: Any) -> None:
    """A ``tf.train.Checkpoint(model=..., optimizer=opt)`` of a built slotopt Keras 3 optimizer laid out as
    Keras 3 on TensorFlow writes it: trainable variables under ``optimizer/_trainable_variables/<i>``, the
    optimizer's variables under ``optimizer/_variables/<n>`` (iterations and learning rate under their own names),
    other model variables (``model_extra``: name → tensor) under the model."""
    graph, tensors = Graph(), {}
    model = graph.add(0, "model")
    optimizer = graph.add(0, "optimizer")
    counter = graph.add(0, "save_counter")
    graph.variable(counter, "save_counter", "save_counter" + SUFFIX)
    tensors["save_counter" + SUFFIX] = torch.tensor(1, dtype=torch.int64)
    variables = graph.add(optimizer, "_variables")
    trainable = graph.add(optimizer, "_trainable_variables")
    for i, (name, param) in enumerate(zip(names, opt._trainable_variables)):
        node = graph.add(trainable, str(i))
        key = f"optimizer/_trainable_variables/{i}{SUFFIX}"
        graph.variable(node, name, key)
        tensors[key] = param.detach().clone()
    for n, var in enumerate(opt.variables):
        special = {0: "_iterations", 1: "_learning_rate"}.get(n) if n < 2 and str(var.path).endswith(
            ("iteration", "learning_rate")) else None
        if special:
            node = graph.add(optimizer, special)
            graph.link(variables, str(n), node)
            key = f"optimizer/{special}{SUFFIX}"
        else:
            node = graph.add(variables, str(n))
            key = f"optimizer/_variables/{n}{SUFFIX}"
        graph.variable(node, str(var.path), key)
        tensors[key] = var.detach().clone()
    ops = graph.add(graph.add(model, "_functional"), "_operations")
    for i, (name, value) in enumerate((model_extra or {}).items()):
        node = graph.add(graph.add(ops, str(i)), name.rsplit("/", 1)[-1])
        key = f"model/_functional/_operations/{i}/{name.rsplit('/', 1)[-1]}{SUFFIX}"
        graph.variable(node, name, key)
        tensors[key] = value
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    write_bundle(prefix, tensors, **bundle_options)


def write_legacy_checkpoint(prefix: str, opt: Any, names: Sequence[str], params: Sequence[torch.Tensor],
                            **bundle_options: Any) -> None:
    """A ``tf.train.Checkpoint(model=..., optimizer=opt)`` of a built slotopt.legacy optimizer laid out as tf.keras
    writes it: ``iter`` and hyperparameter variables as children of the optimizer, slots in ``slot_variables``
    keyed ``<variable key>/.OPTIMIZER_SLOT/optimizer/<slot>``."""
    graph, tensors = Graph(), {}
    model = graph.add(0, "model")
    optimizer = graph.add(0, "optimizer")
    var_nodes = {}
    for name, param in zip(names, params):
        layer, var = name.rsplit("/", 1)
        layer_node = next((c for c, n in graph.nodes[model]["children"] if n == layer), None)
        if layer_node is None:
            layer_node = graph.add(model, layer)
        node = graph.add(layer_node, var)
        key = f"model/{layer}/{var}{SUFFIX}"
        graph.variable(node, name, key)
        tensors[key] = param.detach().clone()
        var_nodes[name] = (node, f"model/{layer}/{var}")
    node = graph.add(optimizer, "iter")
    graph.variable(node, f"{opt._name}/iter", "optimizer/iter" + SUFFIX)
    tensors["optimizer/iter" + SUFFIX] = opt.iterations.detach().clone()
    for hyper in ("learning_rate", "beta_1", "beta_2", "decay", "momentum", "rho"):
        if hyper in opt.get_config():
            node = graph.add(optimizer, hyper)
            graph.variable(node, f"{opt._name}/{hyper}", f"optimizer/{hyper}{SUFFIX}")
            tensors[f"optimizer/{hyper}{SUFFIX}"] = torch.tensor(float(opt.get_config()[hyper]), dtype=torch.float32)
    for name, param in zip(names, params):
        for slot_name in opt.get_slot_names():
            slot = opt.get_slot(param, slot_name)
            node_id, path = var_nodes[name]
            slot_node = len(graph.nodes)  # reached only through the optimizer's slot_variables, as in TF
            graph.nodes.append({"children": [], "attributes": [], "slots": []})
            key = f"{path}/.OPTIMIZER_SLOT/optimizer/{slot_name}{SUFFIX}"
            graph.variable(slot_node, f"{opt._name}/{name}/{slot_name}", key)
            graph.nodes[optimizer]["slots"].append((node_id, slot_name, slot_node))
            tensors[key] = slot.detach().clone()
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    write_bundle(prefix, tensors, **bundle_options)


def write_meta_graph(path: str, consts: dict[str, float], trainable: Sequence[str]) -> None:
    """A ``MetaGraphDef`` with scalar float32 ``Const`` nodes and a ``trainable_variables`` collection."""
    nodes = b""
    for name, value in consts.items():
        tensor = f_varint(1, 1) + f_bytes(2, b"") + varint(5 << 3 | 2) + varint(4) + np.float32(value).tobytes()
        attr = f_bytes(1, "value") + f_bytes(2, f_bytes(8, tensor))
        nodes += f_bytes(1, f_bytes(1, name) + f_bytes(2, "Const") + f_bytes(5, attr))
    variable_defs = b"".join(f_bytes(1, f_bytes(1, f"{n}:0")) for n in trainable)
    collection = f_bytes(1, "trainable_variables") + f_bytes(2, f_bytes(2, variable_defs))
    with open(path, "wb") as f:
        f.write(f_bytes(2, nodes) + f_bytes(4, collection))
