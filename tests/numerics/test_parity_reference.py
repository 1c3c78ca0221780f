"""Every case recorded from the real Keras / tf.keras / TF1 / TFRS optimizers replays within tolerance."""

import pytest

from slotopt.cli.reference import load_cases, replay

CASES = load_cases()

# Recorded cases whose implementation is in progress on its own branch; each branch removes its ids from here.
PENDING = {
}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reference_case_replays_within_tolerance(case):
    if case["id"] in PENDING:
        pytest.xfail(PENDING[case["id"]])
    result = replay(case)
    assert result.ok, "\n".join(result.failures)
