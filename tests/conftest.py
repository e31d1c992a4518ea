import pytest

from model_helpers import random_ids


@pytest.fixture
def ids():
    """Two sequences of 11 token ids from the tiny test vocabulary (odd length on purpose)."""
    return random_ids()
