"""Keras' LSTM and SimpleRNN with an inference loop that converts to TFLite
builtins and ONNX, and zoneout (the builders' ``cell="lstm"`` and ``cell="simple"``)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_zoneout
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.rnn import export_lowered, run_loop
from keras_seq.layers.recurrent.zoneout import (
    apply_zoneout,
    has_zoneout,
    zoneout_masks,
    zoneout_rates,
)


class _ConvertibleInference:
    """Mixin for a Keras recurrent layer: its inference loop converts to TFLite
    builtins and ONNX, and it takes ``zoneout=``.

    At inference (``training`` not True) the layer runs this package's sequence
    driver instead of Keras' loop: the input projection ``x @ kernel`` hoisted
    out of the loop, and the loop form that ``model.export(format="litert" |
    "onnx")`` converts. Keras' own loop uses TensorArrays, which need the Flex
    delegate in TFLite when the batch or length is dynamic and which tf2onnx
    cannot convert. In every other case
    (training, ``unroll=True``, JAX and PyTorch), Keras' own loop runs, so training (cuDNN
    included) is untouched.

    With zoneout (a rate above 0) every call runs the driver: at inference
    on TensorFlow the convertible step followed by the zoneout mix; in
    every other case the Keras cell's own ``call`` (its dropout included)
    over the loop `choose_loop` picks, with the training keep-masks of all
    steps drawn before the loop and fed to it beside the inputs. Keras'
    cuDNN kernel, which knows no zoneout, never runs then.

    A subclass supplies `inference_step`: the per-step recurrence of its
    cell at inference, given the cast recurrent kernel and bias (no dropout:
    Keras applies it only in training, where the cell's own ``call`` runs).
    Without zoneout, JAX and PyTorch run Keras' own loop.
    """

    # `inner_loop` asks the lowering of an export being traced (`export_lowered`).
    asks_export_lowering = True

    def __init__(self, units, *args, zoneout=0.0, **kwargs):
        super().__init__(units, *args, **kwargs)
        # Whatever keras.layers.RNN sets (Keras 3.16 turns it off): the mask
        # flows on with return_sequences=True, as from this package's RNN.
        self.supports_masking = True
        self.zoneout = check_zoneout(self, zoneout)
        self.zoneout_rates()  # one value per state, checked before any call

    def zoneout_rates(self) -> list[float]:
        """One zoneout rate per state of the cell, in state order."""
        return zoneout_rates(self.zoneout, self.cell.state_size, self)

    def inference_step(self, recurrent_kernel, bias):
        """``step(xw_t, states) -> (h, new_states)``: the cell's recurrence at
        inference, given ``x @ kernel`` of the step (each subclass defines it)."""
        raise TypeError(f"{type(self).__name__} must define `inference_step`.")

    def inner_loop(self, sequences, initial_state, mask, training=False):
        lowered = export_lowered(self, sequences, initial_state, mask, training)
        if lowered is not None:
            return lowered
        convertible = backend.convertible_inference(training) and not self.unroll
        rates = self.zoneout_rates()
        zoned = has_zoneout(rates)
        if not convertible and not zoned:
            return super().inner_loop(sequences, initial_state, mask, training=training)
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [
            initial_state
        ]
        states = backend.fresh_states(states, self.stateful)
        xs = ops.transpose(sequences, (1, 0, 2))  # (T, B, in)
        if convertible:
            xs, step = self._convertible_step(xs)  # xs: (T, B, P), x @ kernel
        else:
            step = self._cell_step(training)
        inputs = [xs]
        if zoned:
            inputs, step = self._zoned(xs, step, rates, training)
        return run_loop(
            step,
            inputs,
            states,
            mask=mask,
            go_backwards=self.go_backwards,
            return_sequences=self.return_sequences,
            zero_output_for_mask=self.zero_output_for_mask,
            training=training,
            unroll=self.unroll,
        )

    def _convertible_step(self, xs):
        """The hoisted projection ``x @ kernel`` of ``xs`` and `inference_step`."""
        cell = self.cell
        kernel = ops.cast(cell.kernel, self.compute_dtype)
        recurrent_kernel = ops.cast(cell.recurrent_kernel, self.compute_dtype)
        bias = ops.cast(cell.bias, self.compute_dtype) if cell.use_bias else None
        step = self.inference_step(recurrent_kernel, bias)
        return backend.project(xs, kernel), lambda xs_t, states: step(xs_t[0], states)

    def _cell_step(self, training):
        """One step through the Keras cell's ``call``, as Keras' own loop runs it."""

        def step(xs_t, states):
            output, new_states = self.cell(xs_t[0], states, training=training)
            if not isinstance(new_states, (list, tuple)):
                new_states = [new_states]
            return output, list(new_states)

        return step

    def _zoned(self, xs, step, rates, training):
        """The loop's inputs and ``step`` with zoneout after each step; the
        output is the new h. In training, fresh keep-masks for every step,
        drawn here (nothing random runs inside the loop) and read beside the
        inputs."""
        keep = []
        if training:
            keep = zoneout_masks(rates, self.cell.state_size, tuple(ops.shape(xs)[:2]),
                                 self.cell.seed_generator,
                                 keras.backend.standardize_dtype(xs.dtype))

        def zoned_step(xs_t, states):
            drawn = iter(xs_t[1:])
            keep_masks = [None if m is None else next(drawn) for m in keep] if keep else None
            _, new_states = step(xs_t[:1], states)
            new_states = apply_zoneout(rates, states, new_states, keep_masks)
            return new_states[0], new_states

        return [xs, *(m for m in keep if m is not None)], zoned_step

    def get_config(self):
        config = super().get_config()
        if self.zoneout:  # left out at 0, as Keras' own layer has no such argument
            config["zoneout"] = self.zoneout
        return config


@keras.saving.register_keras_serializable(package="keras_seq")
class ConvertibleLSTM(_ConvertibleInference, keras.layers.LSTM):
    """`keras.layers.LSTM` whose inference loop converts to TFLite builtins and ONNX.

    The ``cell="lstm"`` layer of the model builders: Keras' LSTM (same
    arguments, cell, weights and training path, cuDNN included), except that
    at inference on TensorFlow it runs this package's sequence driver, whose
    loop ``model.export(format="litert" | "onnx")`` converts with a dynamic
    batch and length. On JAX and PyTorch it is Keras' LSTM. With
    ``zoneout`` it runs Keras' cell in this package's loop.

    Args:
        units: int, size of h and c.
        zoneout: float in [0, 1), or one per state ``(z_h, z_c)``: zoneout
            (Krueger et al. 2017). The cell computes its ordinary update
            (h̃, c̃) from (h_{t−1}, c_{t−1}); in training each unit of each
            state keeps its previous value with probability z (fresh masks
            at every step of every call, from ``seed``); at inference
            s_t = z·s_{t−1} + (1 − z)·s̃_t. The output at a step is the new
            h. Above 0, Keras' cuDNN kernel is not used. Default 0.
        **kwargs: the other arguments of `keras.layers.LSTM`.

    Examples:
        >>> import numpy as np
        >>> lstm = ConvertibleLSTM(3, return_state=True)
        >>> h, *states = lstm(np.ones((2, 5, 4), "float32"))
        >>> tuple(h.shape), len(states)
        ((2, 3), 2)
        >>> zoned = ConvertibleLSTM(3, zoneout=(0.1, 0.3), return_sequences=True)
        >>> tuple(zoned(np.ones((2, 5, 4), "float32"), training=True).shape)
        (2, 5, 3)

    References:
        Krueger et al. Zoneout: Regularizing RNNs by Randomly Preserving
        Hidden Activations. ICLR 2017.
    """

    def inference_step(self, recurrent_kernel, bias):
        cell = self.cell

        def step(xw_t, states):
            h_tm1, c_tm1 = states
            z = xw_t + backend.recurrent_matmul(h_tm1, recurrent_kernel, bias)
            z_i, z_f, z_c, z_o = backend.split(z, 4)
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

    Args:
        units: int, size of h.
        zoneout: float in [0, 1) (or a list of one): zoneout of h, as in
            `ConvertibleLSTM`. Default 0.
        **kwargs: the other arguments of `keras.layers.SimpleRNN`.

    Examples:
        >>> import numpy as np
        >>> rnn = ConvertibleSimpleRNN(3, return_sequences=True)
        >>> tuple(rnn(np.ones((2, 5, 4), "float32")).shape)
        (2, 5, 3)

    References:
        Elman. Finding Structure in Time. Cognitive Science 14(2), 1990.
        Krueger et al. Zoneout: Regularizing RNNs by Randomly Preserving
        Hidden Activations. ICLR 2017.
    """

    def inference_step(self, recurrent_kernel, bias):
        activation = self.cell.activation or (lambda z: z)

        def step(xw_t, states):
            h = activation(xw_t + backend.recurrent_matmul(states[0], recurrent_kernel, bias))
            return h, [h]

        return step
