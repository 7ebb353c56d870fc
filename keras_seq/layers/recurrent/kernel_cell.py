"""What the parallel recurrences and the xLSTM cells share: their weight arguments and layer.

`KernelCell` is a `RecurrentCell` with the arguments of ``docs/contract.md``'s
"Parallel recurrences" (``units``, the kernel and bias initializers,
regularizers and constraints, ``seed``), their validation, config and weight
helpers. `KernelRNN` is the layer over such a cell whose config is its
cell's arguments (a `GatedRNN`, which builds the class's ``cell_class``).
`positive_candidate` is the g(·) of Feng et al.'s log-space form,
`exponential_gates` the stabilised gates of the xLSTM cells.
"""

from __future__ import annotations

import keras
from keras import constraints, initializers, ops, regularizers

from keras_seq._validation import check_positive_int, shape_error
from keras_seq.layers.recurrent.gated_cell import GatedRNN
from keras_seq.layers.recurrent.rnn import RecurrentCell

__all__ = ["KernelCell", "KernelRNN", "exponential_gates", "positive_candidate"]


def positive_candidate(v):
    """g(v) = v + 0.5 for v ≥ 0 and σ(v) for v < 0 (Feng et al. 2024): positive,
    continuous with a continuous slope, and linear for large v."""
    return ops.where(v >= 0, v + 0.5, ops.sigmoid(v))


def negated(v):
    """−v, written ``0 - v``: the same numbers, and an op TFLite's integer
    quantizer computes in integers (it leaves a negation, NEG, in float)."""
    return 0.0 - v


def exponential_gates(i_pre, f_pre, m):
    """xLSTM's stabilised gates (Beck et al. 2024): ``(i', f', m_t)``.

    log f_t = −softplus(−f̃_t), m_t = max(log f_t + m_{t-1}, ĩ_t),
    i' = exp(ĩ_t − m_t), f' = exp(log f_t + m_{t-1} − m_t): both ≤ 1, so no
    exponential overflows whatever the pre-activations ĩ and f̃.
    """
    log_f = negated(ops.softplus(negated(f_pre)))
    m_t = ops.maximum(log_f + m, i_pre)
    return ops.exp(i_pre - m_t), ops.exp(log_f + m - m_t), m_t


class KernelCell(RecurrentCell):
    """A `RecurrentCell` whose weights are kernels and biases of its own.

    Args:
        units: int, width of the output and of each state.
        kernel_initializer: default ``"glorot_uniform"``.
        bias_initializer: default ``"zeros"``.
        kernel_regularizer, bias_regularizer, kernel_constraint,
        bias_constraint: optional.
        seed: int or None, seed of the random initial values drawn by the
            cell itself (as Keras' seeded layers).
    """

    def __init__(
        self,
        units: int,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed: int | None = None,
        **kwargs,
    ):
        units = check_positive_int(type(self).__name__, "units", units)
        super().__init__(**kwargs)
        self.units = units
        self.output_size = units
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed=seed)

    def input_width(self, input_shape) -> int:
        """The feature size of ``(..., features)``, which must be known."""
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise shape_error(self, "inputs", "(batch, features) with a known feature size",
                              input_shape)
        return int(input_shape[-1])

    def add_kernel(self, name: str, shape) -> keras.Variable:
        """A weight with the kernel initializer, regularizer and constraint."""
        return self.add_weight(shape=shape, name=name, initializer=self.kernel_initializer,
                               regularizer=self.kernel_regularizer,
                               constraint=self.kernel_constraint)

    def add_bias(self, name: str, shape, initializer=None) -> keras.Variable:
        """A weight with the bias regularizer and constraint, and the bias
        initializer unless ``initializer`` is given."""
        return self.add_weight(shape=shape, name=name,
                               initializer=initializer or self.bias_initializer,
                               regularizer=self.bias_regularizer,
                               constraint=self.bias_constraint)

    def get_config(self):
        config = {
            "units": self.units,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": constraints.serialize(self.kernel_constraint),
            "bias_constraint": constraints.serialize(self.bias_constraint),
            "seed": self.seed,
        }
        return {**super().get_config(), **config}


class KernelRNN(GatedRNN):
    """`RNN` over a new ``cell_class(units, **cell_arguments)`` (a `KernelCell`),
    built as every `GatedRNN` builds its cell; its config is the cell's
    arguments and the RNN's.

    Args:
        units: int, the cell's ``units``.
        return_sequences, return_state, go_backwards, stateful, unroll: as
            in `RNN` (``unroll`` applies to the step form).
        **kwargs: the cell's arguments, and Keras' layer arguments
            (``name``, ``dtype``, ``trainable``, ``activity_regularizer``).
    """

    cell_class: type = KernelCell
