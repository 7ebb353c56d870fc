"""Shared test setup: TensorFlow backend, quiet logs, and a clean dtype policy."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_dtype_policy():
    """Mixed-precision tests must not leak their global policy into others."""
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
