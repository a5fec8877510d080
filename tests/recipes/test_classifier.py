from __future__ import annotations

from fastweights.recipes.classifier import VALIDATION_MAX_BATCH, VALIDATION_SEED, validation_sampling


def test_validation_sampling_is_one_fixed_seed_in_batches_of_at_most_50():
    assert (VALIDATION_SEED, VALIDATION_MAX_BATCH) == (12345, 50)
    assert validation_sampling(200) == {"batch_size": 50, "seed": 12345}
    assert validation_sampling(8) == {"batch_size": 8, "seed": 12345}
    assert validation_sampling(200, seed_offset=1) == {"batch_size": 50, "seed": 12346}
