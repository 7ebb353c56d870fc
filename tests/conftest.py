"""Shared test setup: TensorFlow backend, quiet logs, and a clean dtype policy."""

import os
import socket

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


@pytest.fixture
def local_workers():
    """``local_workers(n)``: ``n`` free ``127.0.0.1:port`` addresses for a
    multi-worker TF_CONFIG (local processes only)."""

    def addresses(n):
        sockets = [socket.socket() for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in sockets]
        for s in sockets:
            s.close()
        return [f"127.0.0.1:{port}" for port in ports]

    return addresses
