"""The one registry of recurrent cells by name: the model builders, the
training options, the command line and the tests all read it.

Two kinds of name: the ``cell=`` of the model builders (`cell_names`,
`register_cell`; also `TrainingConfig.cell` and ``keras-seq train --cell``),
each a cell class and, for the package's own cells, the layer class that
drives it with the cell's arguments (a cell registered alone runs in
`keras_seq.layers.RNN`); and the ``cell=`` of `RecurrentBlock`
(`block_cell_names`), the cells of the block language models, whose kinds
and cells are `keras_seq.model_kinds.BLOCK_MODELS` (a module without Keras:
the command line reads it before loading Keras). What a cell carries is
read from its class, never from its name: the number of states from its
``state_size`` (`num_states`; two, h and c, make the LSTM family,
`is_lstm_family`), the heads from its ``num_heads`` argument
(`takes_num_heads`).
"""

from __future__ import annotations

import functools
import inspect

import keras

from keras_seq._validation import (
    ArgumentTypeError,
    check_choice,
)
from keras_seq.layers.recurrent.convertible_rnn import ConvertibleLSTM, ConvertibleSimpleRNN
from keras_seq.layers.recurrent.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell
from keras_seq.layers.recurrent.gated_cell import cell_and_rnn_arguments
from keras_seq.layers.recurrent.gru import GRU, GRUCell
from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell
from keras_seq.layers.recurrent.m_lstm import MLSTMCell
from keras_seq.layers.recurrent.min_gru import MinGRU, MinGRUCell
from keras_seq.layers.recurrent.min_lstm import MinLSTM, MinLSTMCell
from keras_seq.layers.recurrent.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell
from keras_seq.layers.recurrent.rg_lru import RGLRUCell
from keras_seq.layers.recurrent.rnn import RNN
from keras_seq.layers.recurrent.s_lstm import SLSTMCell
from keras_seq.model_kinds import BUILT_IN_CELLS

# ``cell=`` name of the builders -> (layer class or None, cell class), in
# registration order; None: the cell runs in `RNN`.
_CELLS: dict[str, tuple[type | None, type]] = {}
# ``cell=`` name of `RecurrentBlock` -> cell class: the temporal mixing of
# the block language models (`keras_seq.model_kinds.BLOCK_MODELS`). Fixed: a
# block's saved config names its cell, which must keep meaning that class.
_BLOCK_CELLS: dict[str, type] = {"mingru": MinGRUCell, "minlstm": MinLSTMCell,
                                 "rglru": RGLRUCell, "mlstm": MLSTMCell, "slstm": SLSTMCell}


def register_cell(name: str, *classes: type) -> None:
    """Makes ``cell=name`` build the cell ``cell_class`` in the model builders.

    ``register_cell(name, cell_class)``: the builders run ``cell_class(units,
    ...)`` in `keras_seq.layers.RNN`. ``register_cell(name, layer_class,
    cell_class)``: they build ``layer_class(units, return_sequences=...,
    return_state=...)`` for a sequence and ``cell_class(units)`` in the
    seq2seq decoder. The name is then also a `TrainingConfig.cell` (`train`)
    and a ``keras-seq train --cell``. Together with the cell's own file, its
    test and its line in `keras_seq.layers`, this is all a new cell needs.

    Args:
        name: the ``cell=`` name, e.g. ``"mgu"``.
        *classes: ``cell_class``, or ``layer_class, cell_class``.

    Examples:
        >>> from keras_seq import layers, models
        >>> models.register_cell("peephole", layers.PeepholeLSTM, layers.PeepholeLSTMCell)
    """
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError('register_cell', f'`name` must be a non-empty str, received {name!r}.')
    if len(classes) not in (1, 2) or not all(isinstance(c, type) for c in classes):
        raise ArgumentTypeError('register_cell', f'expected register_cell(name, cell_class) or register_cell(name, layer_class, cell_class) with classes, received {len(classes)} argument(s) after the name: {classes!r}.')
    layer_class, cell_class = (None, *classes) if len(classes) == 1 else classes
    if issubclass(cell_class, keras.layers.RNN):
        raise ArgumentTypeError('register_cell', f'{cell_class.__name__} is a layer; pass the cell class (register_cell(name, cell_class)) or both (register_cell(name, layer_class, cell_class)).')
    _CELLS[name] = (layer_class, cell_class)
    num_states.cache_clear()


def cell_names() -> tuple[str, ...]:
    """The ``cell=`` names of the builders, in registration order."""
    return tuple(_CELLS)


def block_cell_names() -> tuple[str, ...]:
    """The cells a `RecurrentBlock` holds (its ``cell=``)."""
    return tuple(_BLOCK_CELLS)


def check_cell(cell: str, where: str) -> str:
    """``cell`` if it is a registered ``cell=`` name, else a ``ValueError`` naming ``where``."""
    return check_choice(where, "cell", cell, cell_names())


def cell_class(cell: str) -> type:
    """The cell class of a registered ``cell=`` name."""
    return _CELLS[check_cell(cell, "cell_class")][1]


def recurrent_layer(cell: str, units: int, **kwargs):
    """A recurrent layer of the registered cell ``cell`` with ``units``.

    ``kwargs`` are the layer's arguments (``return_sequences``,
    ``return_state``, ``go_backwards``, ``name``, ...) and the cell's
    (``zoneout``, ``dropout``, ...). A cell registered without a layer runs
    in `keras_seq.layers.RNN`, its arguments split from the RNN's as every
    layer of the package splits them (`cell_and_rnn_arguments`).
    """
    layer_class, cls = _CELLS[check_cell(cell, "recurrent_layer")]
    if layer_class is not None:
        return layer_class(units, **kwargs)
    cell_instance, rnn_arguments = cell_and_rnn_arguments(cls, units, kwargs)
    return RNN(cell_instance, **rnn_arguments)


@functools.cache
def num_states(cell: str) -> int:
    """The number of states of the registered cell ``cell`` (from its ``state_size``).

    Read from a one-unit instance of its cell class, once per name (a cell
    creates a seed variable: not inside a traced function).
    """
    state_size = cell_class(cell)(1).state_size
    return len(state_size) if isinstance(state_size, (list, tuple)) else 1


def is_lstm_family(cell: str) -> bool:
    """Whether the registered cell carries an LSTM's two states, h and c (from
    its ``state_size``): the LSTM family, which shares the translation
    defaults `keras_seq.run_config.LSTM_FAMILY_DEFAULTS`."""
    return num_states(cell) == 2


def takes_num_heads(cell: str) -> bool:
    """Whether the `RecurrentBlock` cell ``cell`` takes ``num_heads`` (the
    xLSTM cells), from its class's arguments."""
    cls = _BLOCK_CELLS[check_choice("takes_num_heads", "cell", cell, block_cell_names())]
    return "num_heads" in inspect.signature(cls).parameters


def block_cell(cell: str, units: int, num_heads: int = 1, **kwargs):
    """The `RecurrentBlock` cell ``cell`` with ``units`` (and ``num_heads``
    when it takes heads); ``kwargs`` are Keras' layer arguments (``dtype``,
    ``name``)."""
    heads = {"num_heads": num_heads} if takes_num_heads(cell) else {}
    return _BLOCK_CELLS[cell](units, **heads, **kwargs)


_BUILT_IN = {
    "gru": (GRU, GRUCell),
    "lstm": (ConvertibleLSTM, keras.layers.LSTMCell),
    "peephole": (PeepholeLSTM, PeepholeLSTMCell),
    "coupled": (CoupledGateLSTM, CoupledGateLSTMCell),
    "simple": (ConvertibleSimpleRNN, keras.layers.SimpleRNNCell),
    "layernorm_lstm": (LayerNormLSTM, LayerNormLSTMCell),
    "mingru": (MinGRU, MinGRUCell),
    "minlstm": (MinLSTM, MinLSTMCell),
}
for _name in BUILT_IN_CELLS:  # the names the command line knows without Keras
    register_cell(_name, *_BUILT_IN[_name])
# The builders' cells are also the seq2seq decoder's: its states are (B,
# units) tensors with h first, each a Dense layer of the encoder's final
# states. The RG-LRU (input width = units), the mLSTM (a matrix state, no h)
# and the sLSTM (its normaliser n must stay positive: a bridged n divides by
# anything, NaN within a few steps) do not fit it: they are block cells only
# (`models.language_model(kind="rglru" | "xlstm")`).
