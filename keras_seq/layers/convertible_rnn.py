"""Keras' LSTM and SimpleRNN with an inference loop that converts to TFLite
builtins and ONNX (the builders' ``cell="lstm"`` and ``cell="simple"``)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq.layers._recurrent_driver import (
    choose_loop,
    project,
    recurrent_matmul,
    run_recurrence,
)


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
    at inference on TensorFlow it runs this package's sequence driver, whose
    loop ``model.export(format="litert" | "onnx")`` converts with a dynamic
    batch and length. On JAX and PyTorch it is Keras' LSTM.

    Examples:
        >>> import numpy as np
        >>> lstm = ConvertibleLSTM(3, return_state=True)
        >>> h, *states = lstm(np.ones((2, 5, 4), "float32"))
        >>> tuple(h.shape), len(states)
        ((2, 3), 2)
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
    h_t = activation(x_t W + h_{t-1} U + b), except that at inference on
    TensorFlow it runs this package's sequence driver, as `ConvertibleLSTM`
    does. On JAX and PyTorch it is Keras' SimpleRNN.

    Examples:
        >>> import numpy as np
        >>> rnn = ConvertibleSimpleRNN(3, return_sequences=True)
        >>> tuple(rnn(np.ones((2, 5, 4), "float32")).shape)
        (2, 5, 3)

    References:
        Elman. Finding Structure in Time. Cognitive Science 14(2), 1990.
    """

    def inference_step(self, recurrent_kernel, bias):
        activation = self.cell.activation or (lambda z: z)

        def step(xw_t, states):
            h = activation(xw_t + recurrent_matmul(states[0], recurrent_kernel, bias))
            return h, [h]

        return step
