"""Every case recorded from the real Keras / tf.keras / TF1 / TFRS optimizers replays within tolerance."""

import pytest

from slotopt.reference import load_cases, replay

CASES = load_cases()

# Recorded cases whose implementation is in progress on its own branch; each branch removes its ids from here.
PENDING = {
    "keras3/adam_sparse_dup": "issue 11: Keras 3 semantics on repeated sparse indices",
    "keras3/rmsprop_sparse_dup": "issue 11: Keras 3 semantics on repeated sparse indices",
    "keras3/adagrad_sparse_dup": "issue 11: Keras 3 semantics on repeated sparse indices",
}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reference_case_replays_within_tolerance(case):
    if case["id"] in PENDING:
        pytest.xfail(PENDING[case["id"]])
    result = replay(case)
    assert result.ok, "\n".join(result.failures)
