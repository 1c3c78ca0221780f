"""TensorFlow checkpoint files read as data: where a checkpoint is (a prefix, a ``CheckpointManager`` directory and
its ``checkpoint`` state file, a SavedModel directory), the object graph (``TrackableObjectGraph``) and a TF1
``.meta`` graph's constants (``tf_meta.py``), and the names TF1 optimizers give their slots. ``tf_checkpoint.py`` interprets them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from . import protowire as pw
from .tensor_bundle import TFCheckpointError

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"

#: TF1 non-slot variables (shared by all variables of one optimizer).
_V1_NON_SLOT = ("beta1_power", "beta2_power")
_SLOT_OP = re.compile(r"^(?P<op>[A-Za-z][\w.\-]*?)(?:_(?P<n>\d+))?$")


@dataclass(frozen=True)
class OptimizerVariable:
    """One optimizer variable of the checkpoint: ``name`` (Keras 3 / tf.keras: the object graph's ``full_name``;
    TF1: the key), ``key`` (the checkpoint key), ``owner`` (the trainable variable it is a slot of, or ``None``
    for the optimizer's own: iterations, learning rate, ``beta1_power``...), ``slot`` (the slot's name when known:
    ``"momentum"``, ``"m"``, ``"Adam_1"``...), ``value``."""

    name: str
    key: str
    owner: Optional[str]
    slot: Optional[str]
    value: torch.Tensor


def _op_base(slot: Optional[str]) -> Optional[str]:
    """A TF1 slot's op name without its ``_<n>`` uniquifier (``Adam_1`` → ``Adam``)."""
    match = _SLOT_OP.match(slot or "")
    return match.group("op") if match else None


# ------------------------------------------------------------------------------------------------ files
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        body = m.group(1)
        if body[0] in _ESCAPES:
            return _ESCAPES[body[0]]
        if body[0] == "x":
            return chr(int(body[1:], 16))
        return chr(int(body, 8))
    return re.sub(r"\\([ntr\"'\\]|x[0-9a-fA-F]{1,2}|[0-7]{1,3})", one, text)


def latest_checkpoint(directory: Union[str, Path]) -> Optional[str]:
    """The prefix of the latest checkpoint in ``directory``, as ``tf.train.latest_checkpoint`` finds it: the
    ``model_checkpoint_path`` of the ``checkpoint`` state file (a text ``CheckpointState``), relative to the
    directory or absolute. A path that leads outside the directory is not followed: an absolute path from a
    moved directory is looked up by its file name inside it. ``None`` without a state file or an index."""
    directory = os.path.realpath(str(directory))
    state = os.path.join(directory, "checkpoint")
    if not os.path.isfile(state):
        return None
    with open(state, "rb") as f:
        raw = f.read(1 << 20)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TFCheckpointError(f"{state}: the checkpoint state file is not UTF-8 text") from None
    found = re.findall(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', text, flags=re.MULTILINE)
    if not found:
        raise TFCheckpointError(f"{state}: no `model_checkpoint_path` in the checkpoint state file")
    named = _unescape(found[-1])
    if "\x00" in named or not named:
        raise TFCheckpointError(f"{state}: invalid model_checkpoint_path {named!r}")
    candidate = os.path.realpath(named if os.path.isabs(named) else os.path.join(directory, named))
    if os.path.dirname(candidate) != directory and not candidate.startswith(directory + os.sep):
        if os.path.isabs(named):  # written with absolute paths, then the directory moved
            candidate = os.path.join(directory, os.path.basename(named))
        else:
            raise TFCheckpointError(
                f"{state}: model_checkpoint_path {named!r} leads outside {directory}; it is not followed")
    return candidate if os.path.isfile(candidate + ".index") else None


def _resolve(prefix_or_directory: Union[str, Path]) -> str:
    path = str(prefix_or_directory)
    saved_model = os.path.join(path, "variables", "variables")
    if os.path.isdir(path) and os.path.isfile(saved_model + ".index") and not os.path.isfile(
            os.path.join(path, "checkpoint")):
        # A SavedModel directory: its variables are a checkpoint (object graph included). Its files are checked
        # against the directory they are in (tensor_bundle.inside_directory); that directory itself must be the
        # SavedModel's, not a symbolic link out of it.
        root, variables = os.path.realpath(path), os.path.realpath(os.path.join(path, "variables"))
        if not variables.startswith(root.rstrip(os.sep) + os.sep):
            raise TFCheckpointError(
                f"{os.path.join(path, 'variables')}: resolves to {variables}, outside the SavedModel directory "
                f"{root}: a symbolic link is not followed out of it", os.path.join(path, "variables"))
        return saved_model
    if os.path.isdir(path):
        found = latest_checkpoint(path)
        if found is None:
            raise FileNotFoundError(
                f"Argument `prefix_or_directory` is a directory without a checkpoint (no `checkpoint` state file "
                f"naming an existing `.index`, and not a SavedModel directory with `variables/variables.index`). "
                f"Received: {path!r}")
        return found
    if path.endswith(".index"):
        path = path[: -len(".index")]
    elif re.search(r"\.data-\d{5}-of-\d{5}$", path):
        path = path.rsplit(".data-", 1)[0]
    if not os.path.isfile(path + ".index"):
        raise FileNotFoundError(
            f"Argument `prefix_or_directory` must be a checkpoint prefix (with `<prefix>.index` next to it) or a "
            f"directory holding a `checkpoint` state file. Received: {str(prefix_or_directory)!r}")
    return path


@dataclass
class _Node:
    children: list[tuple[int, str]]
    attributes: list[tuple[str, str, str]]  # name, full_name, checkpoint_key
    slots: list[tuple[int, str, int]]  # original variable node, slot name, slot node

    def child(self, name: str) -> Optional[int]:
        return next((i for i, n in self.children if n == name), None)

    def value_key(self) -> Optional[tuple[str, str]]:
        return next(((full, key) for name, full, key in self.attributes if name == "VARIABLE_VALUE"), None)


def _object_graph(data: bytes, where: str) -> list[_Node]:
    try:
        nodes = []
        for node in pw.get_messages(pw.decode(data), 1):
            nodes.append(_Node(
                children=[(pw.get_int(c, 1, bits=32), pw.get_str(c, 2)) for c in pw.get_messages(node, 1)],
                attributes=[(pw.get_str(a, 1), pw.get_str(a, 2), pw.get_str(a, 3)) for a in pw.get_messages(node, 2)],
                slots=[(pw.get_int(s, 1, bits=32), pw.get_str(s, 2), pw.get_int(s, 3, bits=32))
                       for s in pw.get_messages(node, 3)]))
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: entry {OBJECT_GRAPH_KEY!r} is not a TrackableObjectGraph: {err}") from None
    for i, node in enumerate(nodes):
        ids = [c for c, _ in node.children] + [x for a, _, b in node.slots for x in (a, b)]
        if any(not 0 <= c < len(nodes) for c in ids):
            raise TFCheckpointError(f"{where}: object graph node {i} refers to a node outside the graph")
    return nodes
