"""Plumbing shared by the recurrent cells and layers (arguments, config, driver).

A cell splits its step into ``_project_inputs`` (``x @ W``, no recurrence)
and ``_recurrent_step`` (everything that depends on the previous state). The
cell's own ``call`` runs both for one step, so ``keras.layers.RNN(cell)`` works;
the layer projects the whole sequence in one matmul and hands only
``_recurrent_step`` to the shared sequence driver.
"""

from __future__ import annotations

import numbers

import keras
import tensorflow as tf
from keras import activations, constraints, initializers, ops, regularizers

# keras.layers.RNN pre-creates and resets per-batch dropout masks only for cells
# that derive from this mixin, so our cells use it too.
from keras.src.layers.rnn.dropout_rnn_cell import DropoutRNNCell

from keras_seq.layers._recurrent_driver import (
    project,
    recurrent_matmul,
    run_fused_recurrence,
    run_recurrence,
)

# Odd rational approximation of tanh on [-c, c] (c = 7.9053111, where float32
# tanh is ±1): tanh(x) ≈ x·P(x²)/Q(x²). These are the coefficients of the
# float32 tanh in Eigen, which TensorFlow's CPU kernels use. Max error
# against tf.tanh: 4e-7 over [-20, 20].
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (
    -2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)


def fast_tanh(x):
    """tanh from multiplies, adds and one division (float64: exact ``tf.tanh``).

    Inside the XLA-compiled training loops XLA's own tanh and sigmoid cost
    ~3x the rest of a step's elementwise work on CPU; this fuses with it.
    Low-precision inputs are evaluated in float32.
    """
    if x.dtype == tf.float64:
        return tf.tanh(x)
    y = tf.clip_by_value(tf.cast(x, tf.float32), -_TANH_CLAMP, _TANH_CLAMP)
    y2 = y * y
    p = _TANH_P[0]
    for coefficient in _TANH_P[1:]:
        p = p * y2 + coefficient
    q = _TANH_Q[0]
    for coefficient in _TANH_Q[1:]:
        q = q * y2 + coefficient
    return tf.cast(y * p / q, x.dtype)


def fast_sigmoid(x):
    """σ(x) = (1 + tanh(x / 2)) / 2 with `fast_tanh`."""
    return 0.5 + 0.5 * fast_tanh(0.5 * x)


def sigmoid_grad(y, dy):
    """``dy ⊙ y ⊙ (1 − y)`` for ``y = σ(x)``, in one op."""
    return tf.raw_ops.SigmoidGrad(y=y, dy=dy)


def tanh_grad(y, dy):
    """``dy ⊙ (1 − y²)`` for ``y = tanh(x)``, in one op."""
    return tf.raw_ops.TanhGrad(y=y, dy=dy)


def _check_units(owner: str, units) -> int:
    if isinstance(units, bool) or not isinstance(units, numbers.Integral) or units <= 0:
        raise ValueError(f"{owner}: argument `units` must be a positive integer, got {units!r}.")
    return int(units)


def _check_rate(owner: str, name: str, rate) -> float:
    if not isinstance(rate, numbers.Real) or not 0.0 <= rate < 1.0:
        raise ValueError(f"{owner}: argument `{name}` must be a float in [0, 1), got {rate!r}.")
    return float(rate)


def _get_activation(owner: str, name: str, identifier):
    try:
        return activations.get(identifier)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{owner}: argument `{name}` must be a Keras activation name or callable, "
            f"got {identifier!r}."
        ) from error


def _validate_recurrent_args(owner: str, units, activation, recurrent_activation, dropout,
                             recurrent_dropout) -> None:
    """Raises a clear error for bad constructor arguments (before anything is built)."""
    _check_units(owner, units)
    _get_activation(owner, "activation", activation)
    _get_activation(owner, "recurrent_activation", recurrent_activation)
    _check_rate(owner, "dropout", dropout)
    _check_rate(owner, "recurrent_dropout", recurrent_dropout)


class _RecurrentCell(keras.layers.Layer, DropoutRNNCell):
    """Arguments, validation and config common to the recurrent cells.

    Subclasses implement ``build``, ``_project_inputs(x, bias=True)`` (``x @
    W``, plus the bias with ``bias=True``; with ``bias=False`` only the part of
    the bias that ``_recurrent_step`` does not add itself),
    ``_recurrent_params(batch_size)`` (weights the loop needs, read once before
    it) and ``_recurrent_step(xw_t, states, params, recurrent_mask)``, which
    takes ``xw_t`` from ``_project_inputs(x, bias=False)``.
    """

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        **kwargs,
    ):
        owner = type(self).__name__
        _validate_recurrent_args(owner, units, activation, recurrent_activation, dropout,
                                 recurrent_dropout)
        super().__init__(**kwargs)
        self.units = _check_units(owner, units)
        self.activation = _get_activation(owner, "activation", activation)
        self.recurrent_activation = _get_activation(
            owner, "recurrent_activation", recurrent_activation
        )
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.recurrent_constraint = constraints.get(recurrent_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.dropout = float(dropout)
        self.recurrent_dropout = float(recurrent_dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed=seed)
        self.output_size = self.units

    def _fused_supported(self) -> bool:
        """Whether the layer may train with the cell's hand-written gradient.

        Cells that implement the `FusedCell` methods return True for the
        activations their derivative is written for (tanh and sigmoid).
        """
        return False

    def _standard_activations(self) -> bool:
        return (
            self.activation is activations.tanh
            and self.recurrent_activation is activations.sigmoid
        )

    def _check_input_shape(self, input_shape) -> int:
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} '{self.name}': the input must be (batch, features) "
                f"with a known feature size, got shape {tuple(input_shape)}."
            )
        return int(input_shape[-1])

    def _add_kernels(self, input_dim: int, gates: int) -> None:
        self.kernel = self.add_weight(
            shape=(input_dim, gates * self.units),
            name="kernel",
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, gates * self.units),
            name="recurrent_kernel",
            initializer=self.recurrent_initializer,
            regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
        )

    def _read(self, variable):
        """A variable's value in the compute dtype (float16 etc. under mixed precision)."""
        return ops.cast(variable, self.compute_dtype)

    def _read_per_example(self, vector, batch_size):
        """A ``(units,)`` weight broadcast to ``(batch_size, units)`` once, before the loop.

        Same-shape products in the loop have a cheap gradient; a broadcast one
        would reduce over the batch at every step of the backward loop.
        """
        vector = self._read(vector)
        if batch_size is None:
            return vector
        return ops.broadcast_to(vector, (batch_size, self.units))

    def call(self, inputs, states, training=False):
        """One time step: ``(output, new_states)`` as in the Keras cells."""
        nested = isinstance(states, (list, tuple))
        states = list(states) if nested else [states]
        if training and self.dropout > 0.0:
            inputs = inputs * self.get_dropout_mask(inputs)
        recurrent_mask = None
        if training and self.recurrent_dropout > 0.0:
            recurrent_mask = self.get_recurrent_dropout_mask(states[0])
        output, new_states = self._recurrent_step(
            self._project_inputs(inputs, bias=False), states, self._recurrent_params(None),
            recurrent_mask,
        )
        if not nested and len(new_states) == 1:
            return output, new_states[0]
        return output, new_states

    def get_initial_state(self, batch_size=None):
        sizes = self.state_size if isinstance(self.state_size, (list, tuple)) else [self.state_size]
        return [ops.zeros((batch_size, size), dtype=self.compute_dtype) for size in sizes]

    def get_config(self):
        config = {
            "units": self.units,
            "activation": activations.serialize(self.activation),
            "recurrent_activation": activations.serialize(self.recurrent_activation),
            "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "recurrent_regularizer": regularizers.serialize(self.recurrent_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": constraints.serialize(self.kernel_constraint),
            "recurrent_constraint": constraints.serialize(self.recurrent_constraint),
            "bias_constraint": constraints.serialize(self.bias_constraint),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed,
        }
        return {**super().get_config(), **config}


class _LSTMCellBase(_RecurrentCell):
    """Adds what the LSTM variants share: (h, c) state, forget bias, peepholes."""

    def __init__(
        self,
        units: int,
        unit_forget_bias: bool = True,
        peephole_initializer="glorot_uniform",
        peephole_regularizer=None,
        peephole_constraint=None,
        **kwargs,
    ):
        super().__init__(units, **kwargs)
        self.unit_forget_bias = unit_forget_bias
        self.peephole_initializer = initializers.get(peephole_initializer)
        self.peephole_regularizer = regularizers.get(peephole_regularizer)
        self.peephole_constraint = constraints.get(peephole_constraint)
        self.state_size = [units, units]

    def _add_bias(self, gates: int, forget_gate: int) -> None:
        """Bias of ``gates * units``; the forget gate's part starts at 1 (Jozefowicz et al.)."""
        if not self.use_bias:
            self.bias = None
            return
        initializer = self.bias_initializer
        if self.unit_forget_bias:
            def initializer(shape, dtype=None):
                parts = [self.bias_initializer((self.units,), dtype=dtype) for _ in range(gates)]
                parts[forget_gate] = ops.ones((self.units,), dtype=dtype)
                return ops.concatenate(parts)

        self.bias = self.add_weight(
            shape=(gates * self.units,),
            name="bias",
            initializer=initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )

    def _add_peephole(self, name: str):
        return self.add_weight(
            shape=(self.units,),
            name=name,
            initializer=self.peephole_initializer,
            regularizer=self.peephole_regularizer,
            constraint=self.peephole_constraint,
        )

    def _project_inputs(self, x, bias=True):
        bias = self._read(self.bias) if bias and self.use_bias else None
        return project(x, self._read(self.kernel), bias)

    def _recurrent_bias(self):
        """The bias the step adds after ``h @ U`` (zeros without a bias: see
        `recurrent_matmul`)."""
        if self.use_bias:
            return self._read(self.bias)
        return ops.zeros((self.recurrent_kernel.shape[1],), dtype=self.compute_dtype)

    def _gate_inputs(self, xw_t, h_in, U, b):
        """``x W + h U + b`` of every gate: ``xw_t`` holds ``x W`` (no bias)."""
        return xw_t + recurrent_matmul(h_in, U, b)

    def get_config(self):
        config = {
            "unit_forget_bias": self.unit_forget_bias,
            "peephole_initializer": initializers.serialize(self.peephole_initializer),
            "peephole_regularizer": regularizers.serialize(self.peephole_regularizer),
            "peephole_constraint": constraints.serialize(self.peephole_constraint),
        }
        return {**super().get_config(), **config}


class _RecurrentLayer(keras.layers.RNN):
    """A ``keras.layers.RNN`` whose time loop is the shared sequence driver.

    ``keras.layers.RNN`` supplies the Keras conventions (``initial_state``,
    ``stateful``, ``return_state`` ordering, mask propagation, ``Bidirectional``
    support); ``inner_loop`` hoists the input projection out of the loop.
    """

    def __init__(self, cell, return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, unroll=False, **kwargs):
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            **kwargs,
        )

    def _check_inputs_shape(self, shape) -> None:
        owner = f"{type(self).__name__} '{self.name}'"
        if len(shape) != 3:
            raise ValueError(
                f"{owner}: `inputs` must have rank 3 (batch, time, features), "
                f"got shape {tuple(shape)}."
            )
        if shape[-1] is None:
            raise ValueError(f"{owner}: the feature size of `inputs` must be known, got {tuple(shape)}.")
        if self.cell.built and shape[-1] != self.cell.kernel.shape[0]:
            raise ValueError(
                f"{owner}: `inputs` has {shape[-1]} features but the layer was built for "
                f"{self.cell.kernel.shape[0]}."
            )

    def build(self, inputs_shape, initial_state_shape=None):
        self._check_inputs_shape(inputs_shape)
        super().build(inputs_shape, initial_state_shape)

    def compute_output_shape(self, inputs_shape, initial_state_shape=None):
        return super().compute_output_shape(inputs_shape, initial_state_shape)

    def call(self, inputs, initial_state=None, mask=None, training=None):
        self._check_inputs_shape(tuple(inputs.shape))
        return super().call(inputs, initial_state=initial_state, mask=mask, training=training)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        cell = self.cell
        if training and cell.dropout > 0.0:
            # One input dropout mask per sequence, shared by all steps (as in Keras).
            sequences = sequences * cell.get_dropout_mask(sequences[:, 0, :])[:, None, :]
        recurrent_mask = None
        if training and cell.recurrent_dropout > 0.0:
            recurrent_mask = cell.get_recurrent_dropout_mask(initial_state[0])
        fused = training is True and not self.unroll and cell._fused_supported()
        # Time-major before projecting: transposing x is cheaper than transposing x @ W.
        # (T, B, gates * units); the step adds (part of) the bias itself, the
        # hand-written training loop expects it in the projection.
        xw = cell._project_inputs(ops.transpose(sequences, (1, 0, 2)), bias=fused)
        if fused:
            # Training: the same recurrence with the cell's hand-written gradient.
            kernel, params = cell._fused_params()
            return run_fused_recurrence(
                cell,
                xw,
                list(initial_state),
                kernel,
                params,
                mask=mask,
                recurrent_mask=recurrent_mask,
                go_backwards=self.go_backwards,
                return_sequences=self.return_sequences,
                zero_output_for_mask=self.zero_output_for_mask,
            )
        params = cell._recurrent_params(ops.shape(sequences)[0])

        def step(xw_t, states):
            return cell._recurrent_step(xw_t, states, params, recurrent_mask)

        return run_recurrence(
            step,
            xw,
            list(initial_state),
            mask=mask,
            go_backwards=self.go_backwards,
            unroll=self.unroll,
            return_sequences=self.return_sequences,
            zero_output_for_mask=self.zero_output_for_mask,
            training=training is True,
        )

    def get_config(self):
        config = super().get_config()
        del config["cell"]
        cell_config = self.cell.get_config()
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key, None)
        return {**config, **cell_config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _delegate_to_cell(name: str) -> property:
    return property(lambda self: getattr(self.cell, name), doc=f"The cell's `{name}`.")


for _name in (
    "units", "activation", "recurrent_activation", "use_bias", "kernel_initializer",
    "recurrent_initializer", "bias_initializer", "kernel_regularizer", "recurrent_regularizer",
    "bias_regularizer", "kernel_constraint", "recurrent_constraint", "bias_constraint",
    "dropout", "recurrent_dropout", "seed",
):
    setattr(_RecurrentLayer, _name, _delegate_to_cell(_name))
del _name
