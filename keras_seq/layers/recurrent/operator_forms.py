"""The standard recurrences a cell can declare, so that exporters write them as one operator.

ONNX (``LSTM``, ``GRU``, ``RNN``) and TFLite (``UNIDIRECTIONAL_SEQUENCE_LSTM``)
have single operators for a whole recurrent layer of a few standard cells.
A cell that computes one of them says so with ``operator_form()``,
returning its weights in Keras' layout and its activations:

- `LSTMForm`: Keras' LSTM (gate blocks i, f, c, o), with optional
  peepholes, or the coupled input-forget gate (CIFG: blocks f, c, o and
  i = 1 − f);
- `GRUForm`: Keras' GRU (blocks z, r, h; ``reset_after`` as Keras);
- `SimpleRNNForm`: the Elman recurrence h_t = act(x W + h U + b).

The exporters (`keras_seq.export`) check what the operators cannot do
(activations other than tanh and sigmoid, zoneout, another compute dtype,
``training=True``) and find the form through `operator_form`, which also
knows Keras' own ``LSTMCell``, ``GRUCell`` and ``SimpleRNNCell``. A form
holds for the step it describes: a subclass that redefines ``step``,
``project`` or ``call`` without redefining ``operator_form`` has none
(`keras_seq.layers.recurrent.fast_paths.declared_form`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras

from keras_seq.layers.recurrent.fast_paths import declared_form

__all__ = ["GRUForm", "LSTMForm", "SimpleRNNForm", "operator_form"]


@dataclasses.dataclass(frozen=True)
class LSTMForm:
    """An LSTM in Keras' layout: ``kernel (in, G·u)``, ``recurrent_kernel
    (u, G·u)``, ``bias (G·u,)`` or None, gate blocks i, f, c, o (G = 4), or
    f, c, o with ``coupled_input_forget`` (G = 3, i = 1 − f); peepholes
    ``(u,)`` or None (i's is None when coupled):

    i = σ(z_i + p_i ⊙ c_{t−1}), f = σ(z_f + p_f ⊙ c_{t−1}),
    c_t = f ⊙ c_{t−1} + i ⊙ tanh(z_c), o = σ(z_o + p_o ⊙ c_t), h_t = o ⊙ tanh(c_t),

    with z = x W + h_{t−1} U + b, σ = ``recurrent_activation`` and tanh =
    ``activation``. Values are Keras variables or arrays.
    """

    kernel: Any
    recurrent_kernel: Any
    bias: Any = None
    input_peephole: Any = None
    forget_peephole: Any = None
    output_peephole: Any = None
    coupled_input_forget: bool = False
    activation: Callable = keras.activations.tanh
    recurrent_activation: Callable = keras.activations.sigmoid

    @property
    def has_peepholes(self) -> bool:
        return self.forget_peephole is not None or self.output_peephole is not None


@dataclasses.dataclass(frozen=True)
class GRUForm:
    """A GRU in Keras' layout: ``kernel (in, 3u)``, ``recurrent_kernel
    (u, 3u)``, blocks z, r, h; ``bias`` ``(2, 3u)`` (input row, recurrent row)
    with ``reset_after``, else ``(3u,)``, or None; as `keras.layers.GRU`."""

    kernel: Any
    recurrent_kernel: Any
    bias: Any = None
    reset_after: bool = True
    activation: Callable = keras.activations.tanh
    recurrent_activation: Callable = keras.activations.sigmoid


@dataclasses.dataclass(frozen=True)
class SimpleRNNForm:
    """h_t = activation(x W + h_{t−1} U + b): ``kernel (in, u)``,
    ``recurrent_kernel (u, u)``, ``bias (u,)`` or None."""

    kernel: Any
    recurrent_kernel: Any
    bias: Any = None
    activation: Callable = keras.activations.tanh


def _keras_cell_form(cell):
    """The form of Keras' own cells (and subclasses that keep their ``call``)."""
    for base in (keras.layers.LSTMCell, keras.layers.GRUCell, keras.layers.SimpleRNNCell):
        if isinstance(cell, base):
            break
    else:
        return None
    if type(cell).call is not base.call:
        return None
    bias = cell.bias if cell.use_bias else None
    if base is keras.layers.LSTMCell:
        return LSTMForm(cell.kernel, cell.recurrent_kernel, bias, activation=cell.activation,
                        recurrent_activation=cell.recurrent_activation)
    if base is keras.layers.GRUCell:
        return GRUForm(cell.kernel, cell.recurrent_kernel, bias, reset_after=cell.reset_after,
                       activation=cell.activation,
                       recurrent_activation=cell.recurrent_activation)
    return SimpleRNNForm(cell.kernel, cell.recurrent_kernel, bias, activation=cell.activation)


def operator_form(cell) -> LSTMForm | GRUForm | SimpleRNNForm | None:
    """The standard recurrence ``cell`` computes, or None.

    A `RecurrentCell`'s own ``operator_form()`` where it holds for the
    cell's step; Keras' ``LSTMCell``, ``GRUCell`` and ``SimpleRNNCell``
    (and their subclasses that keep ``call``) as they are.
    """
    if not getattr(cell, "built", False):
        return None
    make = declared_form(cell, "operator_form") if hasattr(cell, "step") else None
    if make is not None:
        return make()
    return _keras_cell_form(cell)
