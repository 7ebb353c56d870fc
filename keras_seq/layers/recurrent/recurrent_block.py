"""The residual block of the recurrent language models (Griffin's recurrent block, any of the new cells)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import (
    ArgumentValueError,
    check_choice,
    check_float,
    check_int,
    check_positive_int,
    invalid_type,
    invalid_value,
)
from keras_seq.layers.quantization import SublayerQuantization
from keras_seq.layers.recurrent import registry
from keras_seq.layers.recurrent.rnn import RNN, RecurrentCell


@keras.saving.register_keras_serializable(package="keras_seq")
class RecurrentBlock(SublayerQuantization, RecurrentCell):
    """A pre-norm residual block around a recurrent cell, as a cell (run it with `RNN`).

    Griffin's residual block (De et al. 2024), with the recurrence ``cell``
    in place of the RG-LRU if asked; on the width-d stream x, one step:

    ```
    y = RMSNorm(x)
    u = conv(Dense(y))              causal depthwise convolution over conv_width steps
    r = cell(u)                     the recurrence (RG-LRU, minGRU, minLSTM, mLSTM, sLSTM)
    x = x + Dense(r ⊙ GELU(Dense(y)))
    x = x + Dense(GELU(Dense(RMSNorm(x))))        the MLP (none with intermediate_dim=0)
    ```

    GELU in its tanh form; every Dense is d → d except the MLP's hidden one
    (d → intermediate_dim).
    States: the convolution's last ``conv_width − 1`` inputs ``(B, (conv_width
    − 1)·d)``, then the cell's states, all starting at zero. In training
    `RNN` runs `parallel`: each part over the whole sequence (the cell in its
    own parallel form when it has one: every cell but the sLSTM); at
    inference, in streaming and in export, ``step`` runs the block one step
    at a time. A masked step carries every state (the convolution reads the
    valid steps only).

    Args:
        units: int, the width d of the stream (input and output).
        cell: the recurrence: a cell object of ``units`` units (a
            `RecurrentCell` of this package or a user's, or a Keras cell), or
            a name: ``"rglru"`` (default), ``"mingru"``, ``"minlstm"``,
            ``"mlstm"`` or ``"slstm"`` (the registry's block cells,
            `keras_seq.layers.recurrent.registry.block_cell_names`), or a
            builders' cell name (`keras_seq.models.register_cell`).
        num_heads: int, heads of the cells that take them (the xLSTM cells;
            must divide ``units``). Default 1.
        conv_width: int ≥ 2, steps of the causal convolution. Default 4.
        intermediate_dim: int ≥ 0, width of the MLP's hidden layer; 0: no
            MLP; None (default): 3·units.
        epsilon: float, the RMS norms' epsilon. Default 1e-6.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import RNN, RecurrentBlock
        >>> RNN(RecurrentBlock(8, cell="mingru"), return_sequences=True)(
        ...     np.ones((2, 5, 8), "float32")).shape
        TensorShape([2, 5, 8])

    References:
        De et al., "Griffin: Mixing Gated Linear Recurrences with Local
        Attention for Efficient Language Models", 2024. Beck et al.,
        "xLSTM: Extended Long Short-Term Memory", 2024.
    """

    def __init__(self, units: int, cell="rglru", num_heads: int = 1,
                 conv_width: int = 4, intermediate_dim: int | None = None,
                 epsilon: float = 1e-6,
                 **kwargs):
        owner = type(self).__name__
        units = check_positive_int(owner, "units", units)
        if isinstance(cell, dict):  # a cell object, in a saved config
            cell = keras.saving.deserialize_keras_object(cell)
        if isinstance(cell, str):
            check_choice(owner, "cell", cell,
                         (*registry.block_cell_names(), *registry.cell_names()))
        num_heads = check_positive_int(owner, "num_heads", num_heads)
        conv_width = check_int(owner, "conv_width", conv_width, minimum=2)
        intermediate_dim = check_int(owner, "intermediate_dim", intermediate_dim, minimum=0,
                                     allow_none=True)
        epsilon = check_float(owner, "epsilon", epsilon, low=0.0, low_inclusive=False)
        super().__init__(**kwargs)
        self.units, self.num_heads = units, num_heads
        self.cell_name = cell if isinstance(cell, str) else None
        self.conv_width, self.epsilon = conv_width, epsilon
        self.intermediate_dim = 3 * units if intermediate_dim is None else intermediate_dim
        if self.cell_name is None:
            inner = _checked_cell(owner, cell, units)
        elif cell in registry.block_cell_names():
            inner = registry.block_cell(cell, units, num_heads, dtype=self.dtype_policy,
                                        name="cell")
        else:  # a builder's cell (`register_cell`), a user's included
            inner = registry.cell_class(cell)(units, dtype=self.dtype_policy, name="cell")
        self.recurrence = RNN(inner, return_sequences=True, return_state=True,
                              dtype=self.dtype_policy, name="recurrence")
        self.state_size = [(conv_width - 1) * units, *_sizes(inner.state_size)]
        self.output_size = units

    def build(self, input_shape):
        d = self.units
        if input_shape[-1] != d:
            raise ArgumentValueError(type(self).__name__, f"invalid shape for argument `inputs`: expected {d} features (the block's `units`), received shape {tuple(input_shape)}.")

        def dense(width, name, inputs=d):
            layer = keras.layers.Dense(width, dtype=self.dtype_policy, name=name)
            layer.build((None, inputs))
            return layer

        self.norm = keras.layers.RMSNormalization(epsilon=self.epsilon, dtype=self.dtype_policy,
                                                  name="norm")
        self.norm.build((None, d))
        self.recurrent_input = dense(d, "recurrent_input")
        self.gate_input = dense(d, "gate_input")
        self.conv_kernel = self.add_weight(shape=(self.conv_width, d), name="conv_kernel",
                                           initializer="glorot_uniform")
        self.conv_bias = self.add_weight(shape=(d,), name="conv_bias", initializer="zeros")
        self.recurrence.build((None, None, d))
        self.recurrent_output = dense(d, "recurrent_output")
        if self.intermediate_dim:
            self.mlp_norm = keras.layers.RMSNormalization(
                epsilon=self.epsilon, dtype=self.dtype_policy, name="mlp_norm")
            self.mlp_norm.build((None, d))
            hidden = self.intermediate_dim
            self.mlp_hidden = dense(hidden, "mlp_hidden")
            self.mlp_output = dense(d, "mlp_output", inputs=hidden)
        self.built = True

    def _mix(self, x, r, gate):
        """The residual stream after the recurrence ``r`` and the MLP."""
        x = x + self.recurrent_output(r * gate)
        if self.intermediate_dim:
            x = x + self.mlp_output(_gelu(self.mlp_hidden(self.mlp_norm(x))))
        return x

    def step(self, inputs, states, training=False):
        x = inputs
        width = self.conv_width - 1
        y = self.norm(x)
        u = self.recurrent_input(y)  # (B, d)
        history = ops.reshape(states[0], (-1, width, self.units))
        window = ops.concatenate([history, u[:, None]], axis=1)  # (B, conv_width, d)
        u = ops.sum(window * self.conv_kernel, axis=1) + self.conv_bias
        r, cell_states = self.recurrence.cell.call(u, list(states[1:]), training=training)
        cell_states = cell_states if isinstance(cell_states, (list, tuple)) else [cell_states]
        x = self._mix(x, r, _gelu(self.gate_input(y)))
        return x, [ops.reshape(window[:, 1:], (-1, width * self.units)), *cell_states]

    def parallel(self, inputs, states, mask=None, training=False):
        x = inputs  # (B, T, d)
        y = self.norm(x)
        u, conv_state = self._convolve(self.recurrent_input(y), states[0], mask)
        r, *cell_states = self.recurrence(u, initial_state=list(states[1:]), mask=mask,
                                          training=training)
        return self._mix(x, r, _gelu(self.gate_input(y))), [conv_state, *cell_states]

    def _convolve(self, u, history, mask):
        """The causal convolution over the valid steps of ``u (B, T, d)``,
        after the inputs in ``history``; and the new history."""
        width, steps = self.conv_width - 1, ops.shape(u)[1]
        if mask is not None:
            # The valid steps first, in order: the convolution skips masked steps.
            position = ops.arange(steps)[None, :]
            order = ops.argsort(ops.where(mask, position, position + steps), axis=1)
            u = ops.take_along_axis(u, order[..., None], axis=1)
        full = ops.concatenate([ops.reshape(history, (-1, width, self.units)), u], axis=1)
        out = self.conv_bias + sum(full[:, k : k + steps] * self.conv_kernel[k]
                                   for k in range(self.conv_width))
        if mask is None:
            return out, ops.reshape(full[:, steps:], (-1, width * self.units))
        valid = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)  # (B, 1)
        rows = valid + ops.arange(width)[None, :]  # the last `width` entries read
        history = ops.take_along_axis(full, rows[..., None], axis=1)
        rank = ops.maximum(ops.cumsum(ops.cast(mask, "int32"), axis=1) - 1, 0)
        return (ops.take_along_axis(out, rank[..., None], axis=1),
                ops.reshape(history, (-1, width * self.units)))

    def get_config(self):
        cell = self.cell_name
        if cell is None:
            cell = keras.saving.serialize_keras_object(self.recurrence.cell)
        return {**super().get_config(), "units": self.units, "cell": cell,
                "num_heads": self.num_heads, "conv_width": self.conv_width,
                "intermediate_dim": self.intermediate_dim, "epsilon": self.epsilon}


def _checked_cell(owner, cell, units):
    """A cell object that the block can hold: a recurrent cell whose output is ``units`` wide."""
    if not (isinstance(cell, keras.layers.Layer) and hasattr(cell, "state_size")):
        raise invalid_type(owner, "cell", "a cell name or a recurrent cell (a layer with "
                           "`state_size`)", cell)
    size = getattr(cell, "output_size", None)
    if size is None:
        size = _sizes(cell.state_size)[0]
    if size != units:
        raise invalid_value(owner, "cell", f"a cell of {units} units (the block's width)",
                            f"{type(cell).__name__} with output size {size}")
    return cell


def _gelu(x):
    """GELU in its tanh form (as Griffin's): the exact form's erfc has no
    ONNX conversion."""
    return ops.gelu(x, approximate=True)


def _sizes(state_size) -> list[int]:
    return list(state_size) if isinstance(state_size, (list, tuple)) else [state_size]
