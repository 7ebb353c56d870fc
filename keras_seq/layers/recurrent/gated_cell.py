"""What the package's own cells and layers share: Keras' LSTM/GRU arguments.

`GatedCell` is a `RecurrentCell` with the constructor arguments of
``keras.layers.LSTMCell`` (units, activations, initializers, regularizers,
constraints, dropout, seed) plus ``zoneout``, their validation and config,
and the weight helpers of a gated cell (``kernel (in, P)``,
``recurrent_kernel (units, P)``, ``bias (P,)``). `LSTMCellBase` adds the
LSTM family's (h, c) state, forget-gate bias and peepholes. `GatedRNN` is
the layer that builds its cell from its own arguments
(`cell_and_rnn_arguments`, the one rule of every layer around a cell) and
whose config is its cell's arguments, as ``keras.layers.LSTM``'s is.
"""

from __future__ import annotations

import re

import keras
from keras import activations, constraints, dtype_policies, initializers, ops, regularizers

from keras_seq._validation import (
    check_activation,
    check_bool,
    check_positive_int,
    check_rate,
    check_zoneout,
    shape_error,
)
from keras_seq.layers.recurrent.rnn import RNN, RecurrentCell


def validate_recurrent_args(owner: str, units, activation, recurrent_activation, dropout,
                            recurrent_dropout, zoneout=0.0, **flags) -> None:
    """Raises a clear error for bad constructor arguments (before anything is built).

    ``flags`` are boolean arguments (``use_bias=...``), checked with `check_bool`.
    """
    check_positive_int(owner, "units", units)
    check_zoneout(owner, zoneout)
    check_activation(owner, "activation", activation)
    check_activation(owner, "recurrent_activation", recurrent_activation)
    check_rate(owner, "dropout", dropout)
    check_rate(owner, "recurrent_dropout", recurrent_dropout)
    for name, value in flags.items():
        check_bool(owner, name, value)


class GatedCell(RecurrentCell):
    """A `RecurrentCell` with the arguments of Keras' LSTM and GRU cells.

    Args:
        units: int, width of h.
        activation, recurrent_activation: default ``"tanh"``, ``"sigmoid"``.
        use_bias: bool, default True.
        kernel_initializer, recurrent_initializer, bias_initializer:
            defaults ``"glorot_uniform"``, ``"orthogonal"``, ``"zeros"``.
        kernel_regularizer, recurrent_regularizer, bias_regularizer,
        kernel_constraint, recurrent_constraint, bias_constraint: optional.
        dropout: float in [0, 1), input dropout (one mask per sequence).
        recurrent_dropout: float in [0, 1), dropout on h_{t-1} before U.
        seed: int, seed of the dropout and zoneout masks.
        zoneout: float in [0, 1), or one per state (Krueger et al. 2017).
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
        zoneout=0.0,
        **kwargs,
    ):
        owner = type(self).__name__
        validate_recurrent_args(owner, units, activation, recurrent_activation, dropout,
                                recurrent_dropout, use_bias=use_bias)
        zoneout = check_zoneout(owner, zoneout)
        # Accepted and ignored, as Keras' LSTM and GRU cells do (old configs pass it).
        kwargs.pop("implementation", None)
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = activations.get(activation)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.use_bias = bool(use_bias)
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
        self.zoneout = zoneout
        self.output_size = self.units

    def standard_activations(self) -> bool:
        """tanh and sigmoid: what the hand-written gradients are derived for."""
        return (
            self.activation is activations.tanh
            and self.recurrent_activation is activations.sigmoid
        )

    def check_input_shape(self, input_shape) -> int:
        """The feature size of ``(..., features)``, which must be known."""
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise shape_error(self, "inputs", "(batch, features) with a known feature size",
                              input_shape)
        return int(input_shape[-1])

    def add_kernels(self, input_dim: int, gates: int) -> None:
        """``kernel (input_dim, gates·units)`` and ``recurrent_kernel (units, gates·units)``."""
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

    def add_bias(self, gates: int, forget_gate: int | None = None) -> None:
        """``bias (gates·units,)`` (None without ``use_bias``); the part of
        gate ``forget_gate`` (when given) starts at 1 (Jozefowicz et al.)."""
        if not self.use_bias:
            self.bias = None
            return
        initializer = self.bias_initializer
        if forget_gate is not None:
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
            "zoneout": self.zoneout,
        }
        return {**super().get_config(), **config}


class LSTMCellBase(GatedCell):
    """Adds what the LSTM variants share: (h, c) state, forget bias, peepholes.

    Args:
        unit_forget_bias: bool, default True: the forget-gate bias starts at 1.
        peephole_initializer, peephole_regularizer, peephole_constraint: of
            the ``(units,)`` peephole weights.
    """

    def __init__(
        self,
        units: int,
        unit_forget_bias: bool = True,
        peephole_initializer="glorot_uniform",
        peephole_regularizer=None,
        peephole_constraint=None,
        **kwargs,
    ):
        check_bool(type(self).__name__, "unit_forget_bias", unit_forget_bias)
        super().__init__(units, **kwargs)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.peephole_initializer = initializers.get(peephole_initializer)
        self.peephole_regularizer = regularizers.get(peephole_regularizer)
        self.peephole_constraint = constraints.get(peephole_constraint)
        self.state_size = [self.units, self.units]

    def add_bias(self, gates: int, forget_gate: int | None = None) -> None:
        super().add_bias(gates, forget_gate if self.unit_forget_bias else None)

    def add_peephole(self, name: str):
        return self.add_weight(
            shape=(self.units,),
            name=name,
            initializer=self.peephole_initializer,
            regularizer=self.peephole_regularizer,
            constraint=self.peephole_constraint,
        )

    def get_config(self):
        config = {
            "unit_forget_bias": self.unit_forget_bias,
            "peephole_initializer": initializers.serialize(self.peephole_initializer),
            "peephole_regularizer": regularizers.serialize(self.peephole_regularizer),
            "peephole_constraint": constraints.serialize(self.peephole_constraint),
        }
        return {**super().get_config(), **config}


RNN_ARGUMENTS = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll",
                 "zero_output_for_mask", "implementation", "name", "dtype", "trainable",
                 "autocast", "activity_regularizer", "input_shape", "input_dim",
                 "batch_input_shape")
"""The arguments of a layer built around a cell that go to `RNN` (Keras' RNN
and layer arguments); all others are the cell's (`cell_and_rnn_arguments`)."""


def cell_and_rnn_arguments(cell_class: type, units: int, arguments: dict):
    """``(cell, rnn_arguments)``: ``cell_class(units, ...)`` built from a layer's
    ``arguments``, and the arguments of the `RNN` that drives it.

    The one rule of every layer built around a cell (`GatedRNN` and the
    registry's ``recurrent_layer``): `RNN_ARGUMENTS` go to `RNN`, the others
    to the cell, which computes in the layer's dtype policy, is trainable
    when the layer is, and is named after its class (``GRUCell``:
    ``"gru_cell"``, as in Keras), so that weight paths do not depend on how
    many layers a process made before.
    """
    rnn_arguments = {k: v for k, v in arguments.items() if k in RNN_ARGUMENTS}
    cell_arguments = {k: v for k, v in arguments.items() if k not in RNN_ARGUMENTS}
    for key in ("dtype", "trainable"):
        if key in rnn_arguments:
            cell_arguments[key] = rnn_arguments[key]
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", cell_class.__name__)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return cell_class(units, name=name, **cell_arguments), rnn_arguments


class GatedRNN(RNN):
    """`RNN` over a cell that the layer builds from its own arguments.

    A layer names its cell class (``cell_class``) and passes its arguments
    on; the cell is built in one place (`cell_and_rnn_arguments`). Its
    config is the cell's arguments and the RNN's (as ``keras.layers.LSTM``'s
    is), not a nested cell; the cell's arguments read as the layer's
    attributes (`delegate_to_cell`).

    Args:
        units: int, the cell's ``units``.
        return_sequences, return_state, go_backwards, stateful, unroll: as
            in `RNN`.
        **kwargs: the cell's arguments, and `RNN_ARGUMENTS` (``name``,
            ``dtype``, ``trainable``, ``activity_regularizer``, ...).
    """

    cell_class: type = RecurrentCell

    def __init__(self, units: int, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 **kwargs):
        # A cell quantized by `keras.Model.quantize` (its int8 policy, saved
        # as "cell_dtype"): built with its int8 weights.
        cell_dtype = kwargs.pop("cell_dtype", None)
        cell, rnn_arguments = cell_and_rnn_arguments(self.cell_class, units, kwargs)
        if cell_dtype is not None:
            cell.dtype_policy = dtype_policies.deserialize(cell_dtype)
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll,
                         **rnn_arguments)

    def get_config(self):
        config = super().get_config()
        del config["cell"]
        cell_config = self.cell.get_config()
        cell_dtype = cell_config.get("dtype")
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key, None)
        if not cell_config.get("zoneout"):
            # Left out at its default: a layer written before zoneout (or
            # outside this package) need not accept it.
            cell_config.pop("zoneout", None)
        if self.cell.quantization_mode is not None:
            cell_config["cell_dtype"] = cell_dtype
        return {**config, **cell_config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def delegate_to_cell(name: str) -> property:
    """A layer property that reads the cell's attribute ``name``."""
    return property(lambda self: getattr(self.cell, name), doc=f"The cell's `{name}`.")


for _name in (
    "units", "activation", "recurrent_activation", "use_bias", "kernel_initializer",
    "recurrent_initializer", "bias_initializer", "kernel_regularizer", "recurrent_regularizer",
    "bias_regularizer", "kernel_constraint", "recurrent_constraint", "bias_constraint",
    "dropout", "recurrent_dropout", "seed", "zoneout",
):
    setattr(GatedRNN, _name, delegate_to_cell(_name))
del _name
