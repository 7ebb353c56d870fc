"""The registry of ``cell=`` names accepted by the model builders.

`CELLS` maps each name to its ``(layer_class, cell_class)``; a new cell is
one `register_cell` line. How many states a cell carries is read from its
class's ``state_size``, never from its name.
"""

from __future__ import annotations

import functools

import keras

from keras_seq._validation import check_choice

# Layer modules, not the `keras_seq.layers` package: that package holds
# `RecurrentDecoder`, which reads this registry, and imports must not cycle.
from keras_seq.layers.convertible_rnn import ConvertibleLSTM, ConvertibleSimpleRNN
from keras_seq.layers.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell
from keras_seq.layers.gru import GRU, GRUCell
from keras_seq.layers.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell
from keras_seq.layers.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell
from keras_seq.run_config import LSTM_CELLS

# name -> (layer class, cell class); filled by `register_cell` below.
CELLS: dict[str, tuple[type, type]] = {}
# The registered names, in registration order.
CELL_NAMES: tuple[str, ...] = ()


def register_cell(name: str, layer_class: type, cell_class: type) -> None:
    """Makes ``cell=name`` build ``layer_class`` in the model builders (and
    ``cell_class`` in their decoders).

    The one line that a new recurrent cell needs beside its own file (the
    checklist of `keras_seq.layers._recurrent_base.RecurrentCell`); the
    builders read how many states it carries from ``cell_class``'s
    ``state_size``.

    Args:
        name: the ``cell=`` name, e.g. ``"peephole"``.
        layer_class: the recurrent layer; ``layer_class(units,
            return_sequences=..., return_state=...)`` must build it.
        cell_class: its cell; ``cell_class(units)`` must build it and set
            ``state_size``.

    Examples:
        >>> from keras_seq import layers, models
        >>> models.register_cell("peephole", layers.PeepholeLSTM, layers.PeepholeLSTMCell)
    """
    CELLS[name] = (layer_class, cell_class)
    global CELL_NAMES
    CELL_NAMES = tuple(CELLS)


def check_cell(cell: str, where: str) -> str:
    return check_choice(where, "cell", cell, tuple(CELLS))


def recurrent_classes(cell: str):
    """Returns ``(layer_class, cell_class)`` for a registered cell name.

    ``"lstm"`` and ``"simple"`` are Keras' own LSTM and SimpleRNN (Elman)
    cells, driven by `keras_seq.layers.ConvertibleLSTM` and
    `keras_seq.layers.ConvertibleSimpleRNN`; the others are this package's
    layers.
    """
    return CELLS[check_cell(cell, "recurrent_classes")]


@functools.cache
def num_states(cell: str) -> int:
    """The number of states of the registered cell ``cell`` (from its ``state_size``).

    Read from a one-unit instance of its cell class, once per name (a cell
    creates a seed variable: not inside a traced function).
    """
    state_size = recurrent_classes(cell)[1](1).state_size
    return len(state_size) if isinstance(state_size, (list, tuple)) else 1


def is_lstm(cell: str) -> bool:
    """The LSTM family (``"lstm"``, ``"peephole"``, ``"coupled"``): an (h, c)
    state, and TFLite's fused LSTM kernel applies
    (`keras_seq.export.convert_to_tflite`)."""
    return cell in LSTM_CELLS


register_cell("gru", GRU, GRUCell)
register_cell("lstm", ConvertibleLSTM, keras.layers.LSTMCell)
register_cell("peephole", PeepholeLSTM, PeepholeLSTMCell)
register_cell("coupled", CoupledGateLSTM, CoupledGateLSTMCell)
register_cell("simple", ConvertibleSimpleRNN, keras.layers.SimpleRNNCell)
register_cell("layernorm_lstm", LayerNormLSTM, LayerNormLSTMCell)
