"""Maps the ``cell=`` names accepted by the model builders to layer classes."""

from __future__ import annotations

import keras

CELL_NAMES = ("gru", "lstm", "peephole", "coupled")


def check_cell(cell: str, where: str) -> str:
    if cell not in CELL_NAMES:
        raise ValueError(
            f"{where}: `cell` must be one of {', '.join(map(repr, CELL_NAMES))}; received cell={cell!r}."
        )
    return cell


def recurrent_classes(cell: str):
    """Returns ``(layer_class, cell_class)`` for a cell name.

    ``"lstm"`` is Keras' own LSTM; the others are this package's layers.
    """
    # Imported here: the layer modules import the whole recurrent family, which
    # `keras_seq.models` should not pay for at import time.
    from keras_seq import layers

    if cell == "gru":
        return layers.GRU, layers.GRUCell
    if cell == "peephole":
        return layers.PeepholeLSTM, layers.PeepholeLSTMCell
    if cell == "coupled":
        return layers.CoupledGateLSTM, layers.CoupledGateLSTMCell
    return keras.layers.LSTM, keras.layers.LSTMCell


def num_states(cell: str) -> int:
    """GRU carries one state (h); the LSTM family two (h, c)."""
    return 1 if cell == "gru" else 2
