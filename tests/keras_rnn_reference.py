"""NumPy steps of Keras' LSTM and SimpleRNN cells, written from their equations.

Shared by the tests of `ConvertibleLSTM` / `ConvertibleSimpleRNN`
(``tests/models/test_cells.py``, ``tests/layers/test_convertible_zoneout.py``);
``tests/`` is put on ``sys.path`` by ``conftest.py``.
"""

import numpy as np


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_step(z, states):
    """``[h, c]`` from z = x W + h_{t-1} U + b and ``[h_{t-1}, c_{t-1}]``.

    Keras' gate order i, f, c, o; sigmoid gates, tanh activation.
    """
    z_i, z_f, z_c, z_o = np.split(z, 4, axis=-1)
    c = sigmoid(z_f) * states[1] + sigmoid(z_i) * np.tanh(z_c)
    h = sigmoid(z_o) * np.tanh(c)
    return [h, c]


def elman_step(z, states):
    """``[h]`` = [tanh(z)] (SimpleRNN's default activation)."""
    return [np.tanh(z)]
