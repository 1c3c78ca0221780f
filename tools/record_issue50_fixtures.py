"""Records the issue-50 fixtures with the real Keras 3 (run in the TensorFlow venv, never by the tests):
``tests/data/issue50/nested_keras3_adam.keras``, a functional model holding a Sequential submodel (nested
layers: ``model.weights.h5`` has groups inside groups), trained 3 steps with Adam, saved by ``model.save``.

    /work/tfvenv/bin/python tools/record_issue50_fixtures.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "issue50"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(50)
    inner = keras.Sequential([keras.layers.Dense(6, activation="relu", name="inner_dense"),
                              keras.layers.Dense(5, name="inner_out")], name="block")
    inputs = keras.Input((4,), name="x")
    hidden = keras.layers.Dense(8, activation="tanh", name="stem")(inputs)
    outputs = keras.layers.Dense(2, name="head")(inner(hidden))
    model = keras.Model(inputs, outputs, name="nested")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    rng = np.random.default_rng(50)
    x, y = rng.normal(size=(12, 4)).astype("float32"), rng.normal(size=(12, 2)).astype("float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.save(OUT / "nested_keras3_adam.keras")
    values = {"iterations": int(model.optimizer.iterations.numpy()),
              "weights": {w.path: np.asarray(w.numpy()).reshape(-1)[:3].tolist() for w in model.weights}}
    (OUT / "nested_keras3_adam.json").write_text(json.dumps(values, indent=1) + "\n")
    print(values["iterations"], sorted(values["weights"]))


if __name__ == "__main__":
    main()
