"""``slotopt demo``: the replays it shows are real (Keras's recorded bits, torch.optim's drift), its continuation
of a Keras file reproduces Keras, and the command prints its tables and writes a picture."""

from __future__ import annotations

import importlib.util

import pytest

from slotopt.cli import command, showcase

HAVE_DEPS = all(importlib.util.find_spec(m) is not None for m in ("matplotlib", "h5py"))


@pytest.fixture(scope="module")
def runs():
    return {r.optimizer: r for r in showcase.replay_long_cases()}


@pytest.mark.parametrize("name", ["RMSprop", "Nadam", "Adagrad", "Adam"])
def test_slotopt_replays_keras_bit_for_bit(runs, name):
    run_ = runs[name]
    assert run_.steps == 1000
    assert run_.slotopt_identical_steps == 1000, f"{name}: {run_.slotopt_identical_steps}/1000 steps with Keras's bits"
    assert max(run_.slotopt_relative) == 0.0


@pytest.mark.parametrize("name,at_least", [("RMSprop", 1e-3), ("Nadam", 1e-3), ("Adam", 1e-6), ("Adagrad", 1e-8)])
def test_the_torch_look_alike_drifts(runs, name, at_least):
    assert max(runs[name].torch_relative) > at_least


def test_the_keras_file_continues_like_keras():
    result = showcase.continue_keras_run()
    assert result.iterations_loaded == 5
    assert result.slotopt_identical_steps == 5 and result.slotopt_weight_error == 0.0  # Keras's bits, every step
    assert result.torch_weight_error > 1e-3  # torch.optim.Adam, without the optimizer state


@pytest.mark.skipif(not HAVE_DEPS, reason="needs the demo extra: pip install 'slotopt[demo]'")
def test_slotopt_demo_prints_both_tables_and_writes_the_picture(tmp_path, capsys):
    path = tmp_path / "demo.png"
    code = command.main(["demo", "--out", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 30_000
    assert "Same recorded gradients, 1000 steps" in out and "continued in PyTorch" in out
    assert f"Picture written to {path}" in out


def test_unpack_reverses_the_reference_packing():
    import lzma

    import numpy as np

    values = np.array([[1.0, -2.5], [1.0, 3.25], [0.0, -0.0]], dtype=np.float32)
    bits = values.view(np.uint32).copy()
    bits[1:] ^= values.view(np.uint32)[:-1]
    planes = bits.view(np.uint8).reshape(3, 2, 4).transpose(2, 1, 0)
    blob = np.frombuffer(lzma.compress(np.ascontiguousarray(planes).tobytes()), dtype=np.uint8)
    assert showcase.unpack(blob, "float32", (3, 2), delta=True).tobytes() == values.tobytes()


def test_the_long_table_aligns_every_column_whatever_the_longest_label(runs):
    lines = showcase.format_long_table(list(runs.values())).splitlines()[1:]
    # every column right-aligned to the header's: the Adagrad look-alike's long label once shifted its row
    assert len({len(line) for line in lines}) == 1, "\n".join(lines)


@pytest.mark.skipif(not HAVE_DEPS, reason="needs the demo extra: pip install 'slotopt[demo]'")
def test_the_picture_shows_every_curve(runs):
    import matplotlib.pyplot as plt
    import numpy as np

    figure = showcase.draw(list(runs.values()), showcase.continue_keras_run())
    try:
        figure.canvas.draw()
        left = figure.axes[0]
        box = left.get_legend().get_window_extent()
        for line in left.get_lines():
            if str(line.get_label()).startswith("torch.optim"):  # the legend covers none of their points
                points = left.transData.transform(np.column_stack(line.get_data()))
                inside = (points[:, 0] > box.x0) & (points[:, 0] < box.x1) & (points[:, 1] > box.y0) & (
                    points[:, 1] < box.y1)
                assert not inside.any(), line.get_label()
        floor = next(line for line in left.get_lines() if line.get_color() == "black")
        slotopt_lines = [line for line in left.get_lines() if line.get_linestyle() not in ("-", "None")]
        assert len(slotopt_lines) == len(runs)
        assert all(line.get_zorder() > floor.get_zorder() for line in slotopt_lines)  # drawn over the floor
        assert len({line._dash_pattern[0] for line in slotopt_lines}) == len(runs)  # each dash in its own place
    finally:
        plt.close(figure)
