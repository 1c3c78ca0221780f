"""Issue 50: the short, bounded run of every parser's fuzzer (tools/fuzz.py; ``make fuzz`` is the long,
coverage-guided run with atheris). Seeded mutations of files recorded by the real libraries; the oracle is the
readers' contract: read, or refused with the documented error, within the time and allocation bounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import fuzz  # noqa: E402

pytest.importorskip("h5py")

# executions per target: a few seconds in all on a loaded 2-core machine (the HDF5 walk forks a child per input)
BUDGET = {"protowire": 40, "bundle": 60, "object_graph": 40, "meta": 15, "hdf5": 3, "keras_zip": 4,
          "keras_config": 8}


@pytest.mark.parametrize("target", sorted(fuzz.SEEDS))
def test_fuzz_target_holds_the_readers_contract(target, monkeypatch):
    from slotopt.io import _h5safe

    monkeypatch.setattr(_h5safe, "TIMEOUT_SECONDS", 5.0)
    done, findings = fuzz.run_mutate(target, BUDGET[target], seed=50)
    assert done == BUDGET[target] and findings == []


def test_the_oracle_catches_an_undocumented_exception():
    def broken(data: bytes, scratch: str) -> None:
        raise TypeError("bare")

    with pytest.raises(fuzz.Finding, match="TypeError: bare"):
        fuzz.check_one("bundle", broken, b"x")
    fuzz.check_one("bundle", lambda data, scratch: None, b"x")  # a clean read passes
