"""The slotopt program of docs/tf1_migration.md runs and trains."""

import contextlib
import io
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tf1_migration.md"


def test_migration_example_runs():
    text = DOC.read_text()
    block = re.search(r"<!-- slotopt-example[^>]*-->\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(block, str(DOC), "exec"), namespace)
    assert int(namespace["global_step"]) == 200
    assert namespace["loss_value"] < 0.6
    names = [v.name for v in namespace["optimizer"].variables()]
    assert names == ["beta1_power", "beta2_power", "bias/Adam", "bias/Adam_1", "embeddings/Adam",
                     "embeddings/Adam_1", "kernel/Adam", "kernel/Adam_1"]
