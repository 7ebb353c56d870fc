"""The one registry of ``cell=`` names: the model builders, the training
options, the command line and the tests all read it.

A name maps to a cell class and, for the package's own cells, the layer
class that drives it with the cell's arguments; a cell registered alone
runs in `keras_seq.layers.RNN`. How many states a cell carries is read from
its ``state_size``, never from its name.
"""

from __future__ import annotations

import functools

import keras

from keras_seq._validation import check_choice
from keras_seq.layers.recurrent.convertible_rnn import ConvertibleLSTM, ConvertibleSimpleRNN
from keras_seq.layers.recurrent.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell
from keras_seq.layers.recurrent.gru import GRU, GRUCell
from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell
from keras_seq.layers.recurrent.min_gru import MinGRU, MinGRUCell
from keras_seq.layers.recurrent.min_lstm import MinLSTM, MinLSTMCell
from keras_seq.layers.recurrent.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell
from keras_seq.layers.recurrent.rnn import RNN

# name -> (layer class or None, cell class), in registration order.
_CELLS: dict[str, tuple[type | None, type]] = {}

# The arguments of a layer built around a registered cell that go to `RNN`;
# the others go to the cell.
_RNN_ARGUMENTS = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll",
                  "name", "dtype", "trainable", "activity_regularizer")


def register_cell(name: str, *classes: type) -> None:
    """Makes ``cell=name`` build the cell ``cell_class`` in the model builders.

    ``register_cell(name, cell_class)``: the builders run ``cell_class(units,
    ...)`` in `keras_seq.layers.RNN`. ``register_cell(name, layer_class,
    cell_class)``: they build ``layer_class(units, return_sequences=...,
    return_state=...)`` for a sequence and ``cell_class(units)`` in the
    seq2seq decoder. Together with the cell's own file, its test and its
    line in `keras_seq.layers`, this is all a new cell needs.

    Args:
        name: the ``cell=`` name, e.g. ``"mgu"``.
        *classes: ``cell_class``, or ``layer_class, cell_class``.

    Examples:
        >>> from keras_seq import layers, models
        >>> models.register_cell("peephole", layers.PeepholeLSTM, layers.PeepholeLSTMCell)
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_cell: `name` must be a non-empty str, received {name!r}.")
    if len(classes) not in (1, 2) or not all(isinstance(c, type) for c in classes):
        raise TypeError(
            "register_cell: expected register_cell(name, cell_class) or register_cell(name, "
            f"layer_class, cell_class) with classes, received {len(classes)} argument(s) "
            f"after the name: {classes!r}."
        )
    layer_class, cell_class = (None, *classes) if len(classes) == 1 else classes
    if issubclass(cell_class, keras.layers.RNN):
        raise TypeError(
            f"register_cell: {cell_class.__name__} is a layer; pass the cell class "
            "(register_cell(name, cell_class)) or both (register_cell(name, layer_class, "
            "cell_class))."
        )
    _CELLS[name] = (layer_class, cell_class)
    num_states.cache_clear()


def cell_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(_CELLS)


def check_cell(cell: str, where: str) -> str:
    """``cell`` if it is registered, else a ``ValueError`` naming ``where``."""
    return check_choice(where, "cell", cell, cell_names())


def cell_class(cell: str) -> type:
    """The cell class of a registered name."""
    return _CELLS[check_cell(cell, "cell_class")][1]


def recurrent_layer(cell: str, units: int, **kwargs):
    """A recurrent layer of the registered cell ``cell`` with ``units``.

    ``kwargs`` are the layer's arguments (``return_sequences``,
    ``return_state``, ``go_backwards``, ``name``, ...) and the cell's
    (``zoneout``, ``dropout``, ...).
    """
    layer_class, cls = _CELLS[check_cell(cell, "recurrent_layer")]
    if layer_class is not None:
        return layer_class(units, **kwargs)
    rnn_kwargs = {k: kwargs.pop(k) for k in _RNN_ARGUMENTS if k in kwargs}
    if "dtype" in rnn_kwargs:
        kwargs["dtype"] = rnn_kwargs["dtype"]  # the cell computes in the layer's policy
    return RNN(cls(units, **kwargs), **rnn_kwargs)


@functools.cache
def num_states(cell: str) -> int:
    """The number of states of the registered cell ``cell`` (from its ``state_size``).

    Read from a one-unit instance of its cell class, once per name (a cell
    creates a seed variable: not inside a traced function).
    """
    state_size = cell_class(cell)(1).state_size
    return len(state_size) if isinstance(state_size, (list, tuple)) else 1


register_cell("gru", GRU, GRUCell)
register_cell("lstm", ConvertibleLSTM, keras.layers.LSTMCell)
register_cell("peephole", PeepholeLSTM, PeepholeLSTMCell)
register_cell("coupled", CoupledGateLSTM, CoupledGateLSTMCell)
register_cell("simple", ConvertibleSimpleRNN, keras.layers.SimpleRNNCell)
register_cell("layernorm_lstm", LayerNormLSTM, LayerNormLSTMCell)
# Every builder takes a registered cell, the seq2seq decoder too: its states
# are (B, units) tensors with h first, each a Dense layer of the encoder's
# final states. The RG-LRU (input width = units), the mLSTM (a matrix state,
# no h) and the sLSTM (its normaliser n must stay positive: a bridged n
# divides by anything, NaN within a few steps) do not fit it; the language
# models hold them in `RecurrentBlock`s (`models.language_model(kind="rglru"
# | "xlstm")`).
register_cell("mingru", MinGRU, MinGRUCell)
register_cell("minlstm", MinLSTM, MinLSTMCell)
