"""Every case recorded from the real Keras / tf.keras / TF1 / TFRS optimizers replays within tolerance."""

import pytest

from slotopt.reference import load_cases, replay

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reference_case_replays_within_tolerance(case):
    result = replay(case)
    assert result.ok, "\n".join(result.failures)
