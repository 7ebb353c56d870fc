"""The registry of ``cell=`` names accepted by the model builders.

`CELLS` maps each name to its ``(layer_class, cell_class)``; a new cell is
one `register_cell` line. How many states a cell carries is read from its
class's ``state_size``, never from its name.
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from keras_seq import layers
from keras_seq._validation import check_choice
from keras_seq.layers._recurrent_driver import (
    choose_loop,
    project,
    recurrent_matmul,
    run_recurrence,
)
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
    cells, driven by `ConvertibleLSTM` and `ConvertibleSimpleRNN`; the others
    are this package's layers.
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


class _ConvertibleInference:
    """Mixin for a Keras recurrent layer: its inference loop converts to TFLite
    builtins and ONNX.

    At inference (``training`` not True) the layer runs this package's sequence
    driver instead of Keras' loop: the input projection ``x @ kernel`` hoisted
    out of the loop, and the loop form that ``model.export(format="litert" |
    "onnx")`` converts. Keras' own loop uses TensorArrays, which need the Flex
    delegate in TFLite when the batch or length is dynamic and which tf2onnx
    cannot convert. Where the shared `choose_loop` picks any other form
    (training, ``unroll=True``), Keras' own loop runs, so training (cuDNN
    included) is untouched.

    A subclass supplies `inference_step`: the per-step recurrence of its
    cell, given the cast recurrent kernel and bias. On JAX and PyTorch
    Keras' own loop always runs. Dropout is not part of
    it: Keras applies dropout only in training, which Keras' loop runs.
    """

    def inference_step(self, recurrent_kernel, bias):
        """``step(xw_t, states) -> (h, new_states)`` for `run_recurrence`."""
        raise NotImplementedError(f"{type(self).__name__} must implement `inference_step`.")

    def inner_loop(self, sequences, initial_state, mask, training=False):
        loop = choose_loop(training, self.unroll)
        if loop != "convertible":
            return super().inner_loop(sequences, initial_state, mask, training=training)
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        cell = self.cell
        kernel = ops.cast(cell.kernel, self.compute_dtype)
        recurrent_kernel = ops.cast(cell.recurrent_kernel, self.compute_dtype)
        if cell.use_bias:
            bias = ops.cast(cell.bias, self.compute_dtype)
        else:
            bias = ops.zeros((kernel.shape[-1],), self.compute_dtype)
        xw = project(ops.transpose(sequences, (1, 0, 2)), kernel)  # (T, B, P)
        initial_state = initial_state if isinstance(initial_state, (list, tuple)) else [
            initial_state
        ]
        return run_recurrence(
            self.inference_step(recurrent_kernel, bias),
            xw,
            list(initial_state),
            mask=mask,
            go_backwards=self.go_backwards,
            loop=loop,
            return_sequences=self.return_sequences,
            zero_output_for_mask=self.zero_output_for_mask,
        )


@keras.saving.register_keras_serializable(package="keras_seq")
class ConvertibleLSTM(_ConvertibleInference, keras.layers.LSTM):
    """`keras.layers.LSTM` whose inference loop converts to TFLite builtins and ONNX.

    The ``cell="lstm"`` layer of the model builders: Keras' LSTM (same
    arguments, cell, weights and training path, cuDNN included), except that
    at inference it runs this package's sequence driver (see
    `_ConvertibleInference`).
    """

    def inference_step(self, recurrent_kernel, bias):
        cell = self.cell

        def step(xw_t, states):
            h_tm1, c_tm1 = states
            z = xw_t + recurrent_matmul(h_tm1, recurrent_kernel, bias)
            z_i, z_f, z_c, z_o = ops.split(z, 4, axis=-1)
            i = cell.recurrent_activation(z_i)
            f = cell.recurrent_activation(z_f)
            c = f * c_tm1 + i * cell.activation(z_c)
            h = cell.recurrent_activation(z_o) * cell.activation(c)
            return h, [h, c]

        return step


@keras.saving.register_keras_serializable(package="keras_seq")
class ConvertibleSimpleRNN(_ConvertibleInference, keras.layers.SimpleRNN):
    """`keras.layers.SimpleRNN` (Elman) whose inference loop converts to TFLite
    builtins and ONNX.

    The ``cell="simple"`` layer of the model builders: Keras' SimpleRNN, with
    h_t = activation(x_t W + h_{t-1} U + b), except that at inference it runs
    this package's sequence driver (see `_ConvertibleInference`).

    References:
        Elman. Finding Structure in Time. Cognitive Science 14(2), 1990.
    """

    def inference_step(self, recurrent_kernel, bias):
        activation = self.cell.activation or (lambda z: z)

        def step(xw_t, states):
            h = activation(xw_t + recurrent_matmul(states[0], recurrent_kernel, bias))
            return h, [h]

        return step


register_cell("gru", layers.GRU, layers.GRUCell)
register_cell("lstm", ConvertibleLSTM, keras.layers.LSTMCell)
register_cell("peephole", layers.PeepholeLSTM, layers.PeepholeLSTMCell)
register_cell("coupled", layers.CoupledGateLSTM, layers.CoupledGateLSTMCell)
register_cell("simple", ConvertibleSimpleRNN, keras.layers.SimpleRNNCell)
