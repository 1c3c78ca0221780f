"""Issue 40: a file is bounded by its bytes, its values are checked as ``load_state_dict`` checks them, a refused
load changes nothing, names are decoded strictly, and configs cannot make a step or a parse run without bound.

Each test here failed before the change it names (hostile files found by probing the readers): it builds the
hostile file with the test writer (tests/_tf_bundle_writer.py), no TensorFlow involved.
"""

from __future__ import annotations

import io
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import slotopt
from slotopt.io import crc32c as crc
from slotopt.io.tensor_bundle import TensorBundle, TFCheckpointError

sys.path.insert(0, str(Path(__file__).parents[1]))
import _tf_bundle_writer as writer  # noqa: E402

SUFFIX = writer.SUFFIX


def _tf1_adam(tmp_path, **override):
    """A TF1 Saver checkpoint of an AdamOptimizer after 2 steps; ``override`` replaces tensors by key."""
    w = slotopt.Variable(torch.ones(3, 2), name="w")
    opt = slotopt.v1.AdamOptimizer(0.01)
    for _ in range(2):
        opt.apply_gradients([(torch.full((3, 2), 0.5), w)])
    tensors = {v.name: v.detach().clone() for v in opt.variables()} | {"w": w.detach().clone()}
    tensors.update(override)
    prefix = str(tmp_path / "model.ckpt-2")
    writer.write_bundle(prefix, tensors)
    return prefix


def _keras3(tmp_path, iterations=None, name="ckpt-1"):
    w = torch.ones(2, 2)
    opt = slotopt.Adam(0.01)
    opt.build([("dense/kernel", w)])
    prefix = str(tmp_path / name)
    writer.write_keras3_checkpoint(prefix, opt, ["dense/kernel"])
    if iterations is not None:  # rewrite the bundle with another iterations tensor
        bundle = TensorBundle(prefix)
        tensors = {k: (bundle.read_strings(k)[0] if e.dtype == "string" else bundle.read(k))
                   for k, e in bundle.entries.items()}
        tensors["optimizer/_iterations" + SUFFIX] = iterations
        writer.write_bundle(prefix, tensors)
    return prefix


# ------------------------------------------------------------------------------------------- amplification
def test_object_graph_names_of_one_tensor_are_refused(tmp_path):
    graph, tensors = writer.Graph(), {"big" + SUFFIX: torch.zeros(1024)}
    for i in range(200):
        graph.variable(graph.add(0, f"v{i}"), f"v{i}", "big" + SUFFIX)
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.serialize()
    writer.write_bundle(str(tmp_path / "c"), tensors)
    with pytest.raises(TFCheckpointError, match="two object graph nodes name checkpoint key 'big"):
        slotopt.load_tf_checkpoint(tmp_path / "c")


def test_index_entries_sharing_the_bytes_of_one_tensor_are_refused(tmp_path):
    data = np.zeros(1024, np.float32).tobytes()
    entry = writer.entry_proto(1, (1024,), 0, 0, len(data), writer.mask(crc.crc32c(data)))
    entries = [(b"", writer.header_proto(1))] + [(f"v{i:03d}".encode(), entry) for i in range(200)]
    (tmp_path / "c.data-00000-of-00001").write_bytes(data)
    (tmp_path / "c.index").write_bytes(writer.table(entries))
    with pytest.raises(TFCheckpointError, match="share bytes"):
        TensorBundle(str(tmp_path / "c"))


def test_a_flood_of_empty_object_graph_nodes_is_refused_before_any_is_built(tmp_path):
    graph = b"".join([writer.f_bytes(1, b"")] * 200_000)  # 400 KB of empty nodes (the file: 1M)
    writer.write_bundle(str(tmp_path / "c"), {"_CHECKPOINTABLE_OBJECT_GRAPH": graph})
    tracemalloc.start()
    try:
        with pytest.raises(TFCheckpointError, match="would make the reader allocate"):
            slotopt.load_tf_checkpoint(tmp_path / "c")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * len(graph)  # the file's bytes a few times, not ~190 times (375 MB)


def test_a_meta_graph_of_tiny_fields_is_read_within_a_bound(tmp_path):
    prefix = _tf1_adam(tmp_path)
    writer.write_meta_graph(prefix + ".meta", {"Adam/learning_rate": 0.01}, ["w"])
    junk = writer.f_bytes(2, b"".join([writer.f_bytes(1, b"")] * 50_000))  # 100 KB of empty graph nodes
    with open(prefix + ".meta", "ab") as f:
        f.write(junk + b"".join([writer.f_varint(9, 1)] * 25_000))  # and 50 KB of 2-byte top-level fields
    size = os.path.getsize(prefix + ".meta")
    tracemalloc.start()
    try:
        ck = slotopt.load_tf_checkpoint(prefix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ck.variable_names == ["w"] and ck.kind == "v1"
    assert peak < 4 * size + (4 << 20)  # was ~35x the file


# ------------------------------------------------------------------------------------------- values
@pytest.mark.parametrize("key, value", [("beta1_power", 1.0), ("beta1_power", float("nan")),
                                        ("beta2_power", 1.5), ("beta2_power", -0.5)])
def test_tf1_beta_powers_out_of_range_are_refused_naming_the_entry(tmp_path, key, value):
    prefix = _tf1_adam(tmp_path, **{key: torch.tensor(value, dtype=torch.float32)})
    with pytest.raises(TFCheckpointError, match=rf"entry '{key}'.*in \[0, 1\)"):
        slotopt.load_tf_checkpoint(prefix)


@pytest.mark.parametrize("value", [torch.tensor(3 + 1j, dtype=torch.complex64), torch.tensor(float("inf")),
                                   torch.tensor(float("nan")), torch.tensor(-1, dtype=torch.int64),
                                   torch.tensor(2 ** 62 + 1, dtype=torch.int64), torch.tensor(2.5)])
def test_keras3_iterations_not_a_count_are_refused_naming_the_entry(tmp_path, value, capsys):
    prefix = _keras3(tmp_path, iterations=value)
    with pytest.raises(TFCheckpointError, match=r"entry 'optimizer/_iterations.*integer in \[0, 2\*\*62\]"):
        slotopt.load_tf_checkpoint(prefix)
    from slotopt.cli import command as cli
    assert cli.main(["inspect", prefix]) != 0  # a message, not a traceback
    assert "_iterations" in capsys.readouterr().err


def test_a_refused_load_module_leaves_the_module_and_optimizer_untouched(tmp_path):
    ck = slotopt.load_tf_checkpoint(_keras3(tmp_path))
    iterations = next(v for v in ck.optimizer_variables if v.name.endswith("iteration"))
    iterations.value.fill_(-1)  # changed after the read: set_weights refuses it
    module = torch.nn.Linear(2, 2, bias=False)
    before = module.weight.detach().clone()
    opt = slotopt.Adam(0.01)
    with pytest.raises(ValueError, match="iteration"):
        ck.load_module(module, {"dense/kernel": "weight"}, optimizer=opt)
    assert torch.equal(module.weight, before) and not opt.built


# ------------------------------------------------------------------------------------------- names and files
def test_a_key_that_is_not_utf8_is_refused_not_guessed(tmp_path):
    writer.write_bundle(str(tmp_path / "c"), {"é": torch.ones(2)})  # the UTF-8 name (b"\xc3\xa9") reads
    data = b"\x01" * 8
    entry = writer.entry_proto(1, (2,), 0, 0, 8, writer.mask(crc.crc32c(data)))
    (tmp_path / "d.data-00000-of-00001").write_bytes(data)
    (tmp_path / "d.index").write_bytes(writer.table([(b"", writer.header_proto(1)), (b"\xe9", entry)]))
    assert torch.equal(TensorBundle(str(tmp_path / "c")).read("é"), torch.ones(2))
    with pytest.raises(TFCheckpointError, match="not UTF-8"):
        TensorBundle(str(tmp_path / "d"))


def test_a_duplicated_legacy_slot_is_refused(tmp_path):
    opt = slotopt.legacy.SGD(0.1, momentum=0.9)
    params = [torch.ones(2)]
    opt.build([("dense/kernel", params[0])])
    writer.write_legacy_checkpoint(str(tmp_path / "c"), opt, ["dense/kernel"], params)
    bundle = TensorBundle(str(tmp_path / "c"))
    tensors = {k: (bundle.read_strings(k)[0] if e.dtype == "string" else bundle.read(k))
               for k, e in bundle.entries.items()}
    graph = tensors["_CHECKPOINTABLE_OBJECT_GRAPH"]
    # Re-serialize with the optimizer node's slot reference repeated (pointing at another node: the last won).
    g = writer.Graph()
    from slotopt.io import protowire as pw
    g.nodes = []
    for node in pw.get_messages(pw.decode(graph), 1):
        g.nodes.append({"children": [(pw.get_int(c, 1), pw.get_str(c, 2)) for c in pw.get_messages(node, 1)],
                        "attributes": [(pw.get_str(a, 1), pw.get_str(a, 2), pw.get_str(a, 3))
                                       for a in pw.get_messages(node, 2)],
                        "slots": [(pw.get_int(s, 1), pw.get_str(s, 2), pw.get_int(s, 3))
                                  for s in pw.get_messages(node, 3)]})
    owner = next(n for n in g.nodes if n["slots"])
    original, name, _ = owner["slots"][0]
    owner["slots"].append((original, name, 0))
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = g.serialize()
    writer.write_bundle(str(tmp_path / "c"), tensors)
    with pytest.raises(TFCheckpointError, match="twice"):
        slotopt.load_tf_checkpoint(tmp_path / "c")


@pytest.mark.parametrize("part", [".index", ".data-00000-of-00001"])
def test_symlinks_out_of_the_checkpoint_directory_are_refused(tmp_path, part):
    _tf1_adam(tmp_path / "elsewhere")
    (tmp_path / "ck").mkdir()
    for suffix in (".index", ".data-00000-of-00001"):
        source = tmp_path / "elsewhere" / f"model.ckpt-2{suffix}"
        target = tmp_path / "ck" / f"model.ckpt-2{suffix}"
        if suffix == part:
            target.symlink_to(source)
        else:
            target.write_bytes(source.read_bytes())
    with pytest.raises(TFCheckpointError, match="outside the checkpoint's directory"):
        slotopt.load_tf_checkpoint(tmp_path / "ck" / "model.ckpt-2")
    (tmp_path / "ck" / "inside").write_bytes((tmp_path / "elsewhere" / f"model.ckpt-2{part}").read_bytes())
    os.remove(tmp_path / "ck" / f"model.ckpt-2{part}")
    (tmp_path / "ck" / f"model.ckpt-2{part}").symlink_to(tmp_path / "ck" / "inside")  # inside: followed
    assert slotopt.load_tf_checkpoint(tmp_path / "ck" / "model.ckpt-2").kind == "v1"


def test_errors_name_the_file_and_entry(tmp_path):
    data = b""
    entry = writer.entry_proto(1, (1,) * 100, 0, 0, 4, writer.mask(crc.crc32c(b"\0" * 4)))
    (tmp_path / "c.data-00000-of-00001").write_bytes(b"\0" * 4 + data)
    (tmp_path / "c.index").write_bytes(writer.table([(b"", writer.header_proto(1)), (b"deep", entry)]))
    with pytest.raises(TFCheckpointError, match=r"c\.index: entry 'deep' has 100 dimensions"):
        slotopt.load_tf_checkpoint(tmp_path / "c")
    graph = writer.Graph()
    opt = graph.add(0, "optimizer")
    listing = graph.add(opt, "_variables")
    graph.add(opt, "_trainable_variables")
    iterations = graph.add(opt, "_iterations")
    graph.variable(iterations, "adam/iteration", "it" + SUFFIX)
    graph.link(listing, "١", iterations)  # an Arabic-Indic digit one: isdigit() but not int()-able as ASCII
    writer.write_bundle(str(tmp_path / "g"), {"_CHECKPOINTABLE_OBJECT_GRAPH": graph.serialize(),
                                              "it" + SUFFIX: torch.tensor(1)})
    with pytest.raises(TFCheckpointError, match="non-numeric children"):
        slotopt.load_tf_checkpoint(tmp_path / "g")


# ------------------------------------------------------------------------------------------- configs
def test_a_backtracking_key_does_not_stall_a_step():
    from slotopt.engine.pattern import PathPattern

    w = slotopt.Variable(torch.ones(2), name="a" * 30)
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(0.1), {"(a+)+b": slotopt.Adam(0.1)}))
    start = time.perf_counter()
    opt.apply_gradients([(torch.ones(2), w)])
    assert time.perf_counter() - start < 5  # re.fullmatch: over 20 s
    assert torch.allclose(w.detach(), torch.full((2,), 0.9))  # the default (SGD) took it
    assert PathPattern("(a+)+b").fullmatch("a" * 40 + "b") and not PathPattern("(a|aa)*c").search("a" * 3000)
    with pytest.raises(ValueError, match="backreference"):
        slotopt.OptimizerMap(slotopt.SGD(0.1), {r"(a)\1": slotopt.Adam(0.1)})


@pytest.mark.parametrize("pattern", ["encoder/.*", "(?i)DENSE_\\d+/kernel", "^a.*$", r"\bdense\b", "x{2,4}", "[^/]+",
                                     "a*?b", "(ab|a)*c?", "", "(?s).*", "é+", "(?i:ab)c", r"a\Z", "a|", "(a|b){0,3}"])
def test_the_pattern_matcher_agrees_with_python_re(pattern):
    import random
    import re

    from slotopt.engine.pattern import PathPattern

    rng = random.Random(pattern)
    compiled = PathPattern(pattern)
    for _ in range(300):
        text = "".join(rng.choice("abcxAB/_1é\nDENSE") for _ in range(rng.randint(0, 8)))
        assert compiled.fullmatch(text) == (re.fullmatch(pattern, text) is not None), text
        assert compiled.search(text) == (re.search(pattern, text) is not None), text


def test_deep_configs_are_refused_with_a_clear_error():
    deep: dict = {"learning_rate": 0.1}
    for _ in range(5000):
        deep = {"x": deep}
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        slotopt.deserialize({"class_name": "Adam", "config": deep})
    from slotopt.cli.demo import OptimizerSpecError, parse_optimizer_arg

    text = '{"class_name": "Adam", "config": {"x": ' + "[" * 50_000 + "]" * 50_000 + "}}"
    with pytest.raises(OptimizerSpecError, match="nests deeper"):
        parse_optimizer_arg(text)
    assert parse_optimizer_arg('{"class_name": "Adam", "config": {"name": "[[[{"}}')["class_name"] == "Adam"


def test_a_step_past_two_to_the_62_is_refused():
    w = torch.nn.Parameter(torch.ones(2))
    opt = slotopt.SGD(learning_rate=0.1, params=[w])
    with pytest.raises(ValueError, match=r"\[0, 2\*\*62\]"):
        opt.state[w]["step"] = torch.tensor(2 ** 62 + 1)
    opt.state[w]["step"] = torch.tensor(2 ** 62)
    assert int(opt.state[w]["step"]) == 2 ** 62


# ------------------------------------------------------------------------------------------- CRC-32C
@pytest.mark.parametrize("size", [0, 1, 7, 9, 4095, 3 * 8192 - 1, 3 * 8192 + 5, 200_003])
def test_the_c_crc32c_agrees_with_the_table_and_numpy_versions_and_extends(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    expected = crc.crc32c_python(data)
    assert crc.crc32c(data) == expected == crc.crc32c_extend(0, data, table_only=True)
    assert crc.crc32c(memoryview(data)[1:]) == crc.crc32c_python(data[1:])  # unaligned
    cut = size // 3
    assert crc.crc32c_extend(crc.crc32c(data[:cut]), data[cut:]) == expected
    assert crc.crc32c(torch.frombuffer(bytearray(data), dtype=torch.uint8)) == expected if size else True
    if size > 100_000:
        saved = crc._LIBRARY, crc._NATIVE
        crc._LIBRARY = crc._NATIVE = None  # the numpy fallback's extend joins two CRCs
        try:
            assert crc.crc32c_extend(crc.crc32c(data[:cut]), data[cut:]) == expected
        finally:
            crc._LIBRARY, crc._NATIVE = saved


def test_the_c_crc32c_is_used_where_it_was_built():
    built = os.path.isfile(Path(slotopt.__file__).parent / "kernels" / "native" / "libslotopt_crc32c.so.1")
    if not built:
        pytest.skip("the C CRC-32C was not built here (no compiler): the numpy version runs")
    assert crc.implementation() in ("sse4.2", "c-table")


# ------------------------------------------------------------------------------------------- HDF5 (.keras / .h5)
KERAS = Path(__file__).parents[1] / "data" / "migration" / "a_keras3_conv_bn_adam.keras"


def _rewritten_keras(tmp_path, h5_fn, compression=0):
    import zipfile

    import h5py

    with zipfile.ZipFile(KERAS) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buffer = io.BytesIO(members["model.weights.h5"])
    with h5py.File(buffer, "r+") as f:
        h5_fn(f)
    members["model.weights.h5"] = buffer.getvalue()
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_an_integer_trainable_weight_is_refused_naming_its_entry(tmp_path):
    def to_int(f):
        values = f["layers/dense/vars/0"][()]
        del f["layers/dense/vars/0"]
        f["layers/dense/vars/0"] = values.astype(np.int32)

    with pytest.raises(slotopt.io.CheckpointFormatError, match="entry 'layers/dense/vars/0'.*int32"):
        slotopt.load_keras_checkpoint(_rewritten_keras(tmp_path, to_int))


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in_process"])
def test_a_keras_member_stored_in_the_zip_is_read_in_place_without_a_size_cap(monkeypatch, tmp_path, isolate):
    import tempfile
    import zipfile

    from slotopt.io import _h5safe

    reference = slotopt.load_keras_checkpoint(KERAS, isolate=isolate)
    assert _h5safe.MAX_BYTES >= 2 ** 40  # a 4 GiB model is no longer refused by default

    def no_temporary_file(*args, **kwargs):
        raise AssertionError("the stored member went through a temporary file")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_temporary_file)
    ck = slotopt.load_keras_checkpoint(KERAS, isolate=isolate)
    assert all(torch.equal(ck.weights[n], reference.weights[n]) for n in reference.weights)
    # The child (or the walk) sends where the contiguous datasets lie, not their values.
    with zipfile.ZipFile(KERAS) as z:
        info = z.getinfo("model.weights.h5")
    walked = _h5safe._walk_guarded(str(KERAS), (str(KERAS), (info.header_offset + 30 + len(info.filename)
                                                            + len(info.extra), info.file_size)), 2 ** 40)
    assert walked.located and "layers/dense/vars/0" in walked.located
    monkeypatch.undo()
    deflated = _rewritten_keras(tmp_path, lambda f: None, compression=zipfile.ZIP_DEFLATED)
    ck = slotopt.load_keras_checkpoint(deflated, isolate=isolate)  # through a temporary file, same values
    assert all(torch.equal(ck.weights[n], reference.weights[n]) for n in reference.weights)


def test_a_dataset_located_past_the_end_of_its_file_is_refused(tmp_path):
    from slotopt.io import _h5safe

    snap = _h5safe.H5Snapshot(located={"layers/x": (100, (4,), "<f4")})
    (tmp_path / "f").write_bytes(b"\0" * 110)
    with pytest.raises(slotopt.io.CheckpointFormatError, match="past the end"):
        _h5safe._fill("f.keras", snap, str(tmp_path / "f"), 0, 110)
    aliased = _h5safe.H5Snapshot(located={f"layers/x{i}": (0, (4,), "<f4") for i in range(3)})
    with pytest.raises(slotopt.io.CheckpointFormatError, match="shares bytes"):
        _h5safe._fill("f.keras", aliased, str(tmp_path / "f"), 0, 110)
    big_endian = _h5safe.H5Snapshot(located={"x": (0, (2,), ">f4")})
    (tmp_path / "g").write_bytes(np.array([1.5, -2.0], ">f4").tobytes())
    assert _h5safe._fill("g", big_endian, str(tmp_path / "g"), 0, 8).datasets["x"].tolist() == [1.5, -2.0]


def test_inspect_reads_the_metadata_only(tmp_path, capsys):
    prefix = _tf1_adam(tmp_path)
    shard = Path(prefix + ".data-00000-of-00001")
    data = bytearray(shard.read_bytes())
    data[-30] ^= 0xFF  # a byte of a tensor's data (the last entries are the 3x2 tensors): its CRC now fails
    shard.write_bytes(bytes(data))
    with pytest.raises(TFCheckpointError, match="CRC"):
        slotopt.load_tf_checkpoint(prefix)
    ck = slotopt.load_tf_checkpoint(prefix, metadata_only=True)
    assert ck.weights["w"].is_meta and ck.weights["w"].shape == (3, 2)
    assert float(next(v.value for v in ck.optimizer_variables if v.name == "beta1_power")) == pytest.approx(0.9 ** 3)
    from slotopt.cli import command as cli

    assert cli.main(["inspect", prefix]) == 0
    assert "beta1_power" in capsys.readouterr().out


@pytest.mark.parametrize("entry, value", [("optimizer/vars/0", np.int64(-1)), ("optimizer/vars/1", np.float32(np.nan))])
def test_keras_optimizer_scalars_are_checked_at_read(tmp_path, entry, value):
    def bad(f):
        del f[entry]
        f[entry] = value

    with pytest.raises(slotopt.io.CheckpointFormatError, match=f"optimizer variable {entry[-1]}.*must be"):
        slotopt.load_keras_checkpoint(_rewritten_keras(tmp_path, bad))


def test_a_refused_keras_load_module_leaves_the_module_untouched():
    ck = slotopt.load_keras_checkpoint(KERAS)
    ck.optimizer_state[0] = np.array(-1, dtype=np.int64)  # changed after the read: set_weights refuses it
    model = torch.nn.ModuleDict({"conv": torch.nn.Conv2d(3, 4, 3, padding=1), "bn": torch.nn.BatchNorm2d(4),
                                 "dense": torch.nn.Linear(4, 3)})
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"iteration.*\[0, 2\*\*62\]"):
        ck.load_module(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("path", ["c", "numpy"])
def test_a_tensor_of_several_chunks_reads_back_exactly_with_each_crc32c(tmp_path, monkeypatch, path):
    values = torch.randn(3 * (1 << 20) // 2 + 7, dtype=torch.float64)  # 12 MiB: three 4 MiB chunks and a tail
    writer.write_bundle(str(tmp_path / "c"), {"big": values, "small": torch.arange(5)}, big_endian=path == "numpy")
    if path == "numpy":
        monkeypatch.setattr(crc, "_LIBRARY", None)
        monkeypatch.setattr(crc, "_NATIVE", None)
    bundle = TensorBundle(str(tmp_path / "c"))
    assert torch.equal(bundle.read("big"), values) and torch.equal(bundle.read("small"), torch.arange(5))


def test_the_keras_optimizer_takes_the_checkpoints_state_and_a_second_use_after_training_is_refused():
    # One copy (issue 40, and issue 46's one build): the saved slots become the optimizer's, packed ones too (the
    # checkpoint then holds the packed slot in the file's place); until a step the checkpoint still shows the
    # file's values, and once training has written them a second use is refused by name instead of handing out
    # trained values as the file's.
    ck = slotopt.load_keras_checkpoint(KERAS)
    saved = [np.array(s, copy=True) for s in ck.optimizer_state]
    params = ck.parameters()
    opt = ck.optimizer(params)
    assert all(np.array_equal(a, b) for a, b in zip(saved, ck.optimizer_state))
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert not all(np.array_equal(a, b) for a, b in zip(saved, ck.optimizer_state))
    with pytest.raises(ValueError, match="handed over without a copy .* has been written since"):
        ck.optimizer([torch.nn.Parameter(torch.tensor(np.array(ck.weights[n]))) for n in ck.variable_names])


# ------------------------------------------------------------------------------- with issue 37's checkpoints
_DATA = Path(__file__).parents[1] / "data"
_COMPOSITE = _DATA / "migration2" / "c11_tfrs_ranking_composite" / "ckpts" / "ckpt-1"
_TFKERAS_NEW = _DATA / "migration2" / "c14_tfckpt_tfkeras_nonlegacy_adam" / "ckpts"
_ITERATOR = _DATA / "migration2" / "c09a_tfckpt_keras3_guide_step_iterator" / "ckpts" / "ckpt-2"


def _rewritten(source, tmp_path, **override):
    """The checkpoint at ``source`` written again (same keys and values), ``override`` replacing tensors by key."""
    source = slotopt.io.tf_checkpoint.latest_checkpoint(source) if os.path.isdir(source) else str(source)
    bundle = TensorBundle(source)
    tensors = {k: (bundle.read_strings(k)[0] if e.dtype == "string" else bundle.read(k))
               for k, e in bundle.entries.items()}
    tensors.update(override)
    prefix = str(tmp_path / "ckpt-1")
    writer.write_bundle(prefix, tensors)
    return prefix


@pytest.mark.parametrize("part", ["Optimizer0", "Optimizer1"])
def test_each_part_of_a_composite_checkpoint_has_its_iterations_checked(tmp_path, part):
    key = f"optimizer/{part}/iter" + SUFFIX
    prefix = _rewritten(_COMPOSITE, tmp_path, **{key: torch.tensor(-3, dtype=torch.int64)})
    with pytest.raises(TFCheckpointError, match=rf"ckpt-1.index: entry '{key}'.*integer in \[0, 2\*\*62\]"):
        slotopt.load_tf_checkpoint(prefix)
    with pytest.raises(TFCheckpointError, match=key):
        slotopt.load_tf_checkpoint(prefix, metadata_only=True)


def test_a_refused_composite_part_leaves_every_optimizer_unbuilt(tmp_path):
    ck = slotopt.load_tf_checkpoint(_COMPOSITE)
    assert ck.kind == "composite" and len(ck.parts) == 2
    iterations = next(v for v in ck.parts[1].optimizer_variables if v.slot == "iter")
    iterations.value.fill_(-1)  # changed after the read: set_weights refuses it, on the second part's probe
    params = ck.parameters()
    before = [p.detach().clone() for p in params]
    first, second = slotopt.legacy.Adagrad(0.1), slotopt.legacy.Adam(0.01)
    with pytest.raises(ValueError, match="iter"):
        ck.optimizer(params, optimizer=[first, second])
    assert not first.weights and not second.weights
    assert all(torch.equal(p, b) for p, b in zip(params, before))


def test_tf_keras_new_iterations_are_checked(tmp_path):
    key = "optimizer/_iterations" + SUFFIX
    prefix = _rewritten(_TFKERAS_NEW, tmp_path, **{key: torch.tensor(2 ** 62 + 1, dtype=torch.int64)})
    with pytest.raises(TFCheckpointError, match=rf"entry '{key}'.*integer in \[0, 2\*\*62\]"):
        slotopt.load_tf_checkpoint(prefix)


def test_an_iterators_state_is_listed_and_left_also_when_reading_the_metadata_only():
    full, meta = slotopt.load_tf_checkpoint(_ITERATOR), slotopt.load_tf_checkpoint(_ITERATOR, metadata_only=True)
    assert full.skipped and meta.skipped.keys() == full.skipped.keys()
    assert any("variant" in reason for reason in meta.skipped.values())
    assert meta.iterations == full.iterations and meta.variable_names == full.variable_names
    assert all(w.device.type == "meta" for w in meta.weights.values() if w.numel() > 1)
