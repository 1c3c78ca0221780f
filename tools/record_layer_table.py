"""Records, from the layers themselves, the variables every built-in Keras 3 and tf-keras layer creates: each
class of ``keras.layers`` / ``tf_keras.layers`` is built on a small input with small arguments and its own
variables (not those of its sub-layers) listed in creation order with their name, trainable flag and dtype.
The table is data for the readers (``src/slotopt/data/keras_layer_variables.json``): a layer the reader has no
spec for takes its variables' names and trainability from it, so a preprocessing layer's statistics (a
``Normalization``'s mean, variance and int64 count) are never taken for trainable weights.

Run once in an environment with TensorFlow, tf-keras and Keras (never a dependency of slotopt)::

    /work/tfvenv/bin/python tools/record_layer_table.py
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "slotopt" / "data" / "keras_layer_variables.json"
#: Small values for the required constructor arguments of the built-in layers.
ARGUMENTS = {"units": 2, "filters": 2, "kernel_size": 2, "input_dim": 5, "output_dim": 3, "num_heads": 2,
             "key_dim": 2, "rate": 0.5, "stddev": 0.1, "factor": 0.1, "height": 2, "width": 2, "size": 2,
             "scale": 0.5, "n": 2, "target_shape": (4,), "dims": (1,), "axis": -1, "equation": "ab,bc->ac",
             "output_shape": (2,), "num_bins": 3, "num_tokens": 4, "max_tokens": 4, "groups": 1,
             "depth_multiplier": 1, "max_value": 1.0, "alpha": 0.1, "theta": 1.0, "cropping": 1, "padding": 1,
             "pool_size": 2, "mask_value": 0.0, "l1": 0.0, "l2": 0.0, "seed": 1, "value_range": (0, 1),
             "vocabulary": ["a", "b"], "bin_boundaries": [0.0, 1.0], "data_format": None, "sparse": False}
#: Inputs tried, smallest first, until one builds.
SHAPES = [(2, 4), (2, 3, 4), (2, 4, 4, 2), (2, 3, 4, 4, 2)]


def _table(layers, backend_layer) -> dict:
    import numpy as np

    out = {}
    for name in sorted(dir(layers)):
        cls = getattr(layers, name)
        if not (isinstance(cls, type) and issubclass(cls, backend_layer)) or name.startswith("_"):
            continue
        try:
            params = inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            continue
        kwargs = {}
        for p in list(params.values())[1:]:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.default is not p.empty:
                continue
            if p.name not in ARGUMENTS:
                kwargs = None
                break
            kwargs[p.name] = ARGUMENTS[p.name]
        if kwargs is None:
            continue
        for shape in SHAPES:
            try:
                layer = cls(**kwargs)
                layer.build(shape)
                break
            except Exception:  # noqa: BLE001  (a class that does not build on this input: the next one)
                layer = None
        if layer is None:
            continue
        # Keras 3 saves a layer's own variables as ``vars/<i>`` in this order (``save_own_variables``)
        own = getattr(layer, "_trainable_variables", None) is not None
        variables = [*getattr(layer, "_trainable_variables", []), *getattr(layer, "_non_trainable_variables", [])] \
            if own else []
        if not own:  # tf-keras: the layer's own weights (sub-layers' excluded)
            subs = {id(w) for sub in layer._flatten_layers(include_self=False) for w in sub.weights}
            variables = [w for w in layer.weights if id(w) not in subs]
        variables = [v for v in variables if hasattr(v, "name") and hasattr(v, "dtype")]
        out[name] = [{"name": (v.name.split(":")[0]).rsplit("/", 1)[-1], "trainable": bool(v.trainable),
                      "dtype": str(np.dtype(v.dtype.name if hasattr(v.dtype, "name") else v.dtype))}
                     for v in variables]
    return out


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    if len(sys.argv) > 1:
        if sys.argv[1] == "keras3":
            import keras

            table = _table(keras.layers, keras.layers.Layer)
            version = keras.__version__
        else:
            import tf_keras

            table = _table(tf_keras.layers, tf_keras.layers.Layer)
            version = tf_keras.__version__
        print(json.dumps({"version": version, "layers": table}))
        return
    result = {}
    for generation in ("keras3", "tf_keras"):  # one process each (one Keras per process)
        done = subprocess.run([sys.executable, __file__, generation], check=True, capture_output=True, text=True)
        result[generation] = json.loads(done.stdout.strip().splitlines()[-1])
    OUT.write_text(json.dumps(result, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
