"""The recurrent cell protocol (`RecurrentCell`); the layer that drives it is
`keras_seq.layers._recurrent_layer.RecurrentLayer`.

A cell splits its step into ``project_inputs`` (``x @ W``, no recurrence)
and ``recurrent_step`` (everything that depends on the previous state); the
full list of hooks is `RecurrentCell`'s docstring. The cell's own ``call``
runs both for one step, so ``keras.layers.RNN(cell)`` works on every Keras
backend; `RecurrentLayer` projects the whole sequence in one matmul and
hands only the recurrent part to the loop that
`keras_seq.layers._recurrent_driver.choose_loop` picks for the backend
(on TensorFlow, `keras_seq.layers._bptt` for training with a hand-written
gradient).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import activations, constraints, initializers, ops, regularizers

# keras.layers.RNN pre-creates and resets per-batch dropout masks only for cells
# that derive from this mixin, so our cells use it too.
from keras.src.layers.rnn.dropout_rnn_cell import DropoutRNNCell

from keras_seq._validation import (
    check_activation,
    check_bool,
    check_positive_int,
    check_rate,
    check_zoneout,
    float_inputs,
    shape_error,
)
from keras_seq.layers._recurrent_driver import (
    project,
    recurrent_matmul,
)
from keras_seq.layers._zoneout import (
    apply_zoneout,
    has_zoneout,
    state_sizes,
    zoneout_masks,
    zoneout_rates,
)


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


class RecurrentCell(keras.layers.Layer, DropoutRNNCell):
    """Base class of the recurrent cells, and the protocol the loops drive.

    Arguments, validation, config, dropout masks, the default input
    projection and the one-step ``call`` are here. A new cell is one file
    that fills in the hooks below in ``keras.ops`` (so it runs on every Keras
    backend), plus one line in the builders' registry
    (`keras_seq.models.register_cell`). Checklist:

    1. ``__init__(units, <own arguments>, **kwargs)``: validate its own
       arguments with `keras_seq._validation`, call ``super().__init__(units,
       **kwargs)`` and set ``state_size`` (an int, or a list with h first).
       The number of states is read from ``state_size`` everywhere.
    2. ``build(input_shape)``: ``input_dim = self.check_input_shape(...)``;
       ``self.add_kernels(input_dim, gates)`` creates ``kernel (in, P)`` and
       ``recurrent_kernel (units, P)``; ``self.add_bias(gates)`` the
       ``(P,)`` bias; then the cell's own weights (in ``get_weights()``
       order); ``self.built = True``.
    3. ``project_inputs(x, bias=True) -> xw``: ``x @ W`` of a ``(..., in)``
       input (all steps at once, outside the loop). The default is ``x @
       kernel (+ bias)``: ``bias=True`` adds the whole bias (the ``"bptt"``
       loop's convention); ``bias=False`` none of it, the step adds it after
       ``h @ U`` (`recurrent_matmul`). Override it only for another split of
       the bias (`GRUCell`).
    4. ``recurrent_weights(batch_size=None, bptt=False) -> list``: the one
       read of the weights the loop needs, once, before the loop (in the
       compute dtype, `read_weight`). With ``bptt=False``, what
       ``recurrent_step`` unpacks; a ``batch_size`` asks for per-example
       ``(batch_size, units)`` copies of the elementwise weights (see
       `read_per_example`: that is what makes their gradient cheap in the
       loops), ``None`` for them as stored (one step, through ``call``).
       With ``bptt=True``, ``[U, *params]`` for the TensorFlow backend's
       `keras_seq.layers._bptt.run_bptt_recurrence`: the ``(units, P)``
       recurrent kernel, then the weights ``bptt_forward`` and
       ``bptt_backward`` read, as stored (their gradients are summed by
       the loop).
    5. ``recurrent_step(xw_t, states, weights, recurrent_mask=None) ->
       (output, new_states)``: one step, in ``keras.ops``, from ``xw_t`` (a
       row of ``project_inputs(x, bias=False)``), the list ``states`` and
       the ``weights`` of hook 4; ``recurrent_mask`` (recurrent dropout)
       multiplies h before ``U``. Use `recurrent_matmul` for ``h @ U + b``
       (or `gate_inputs`) and `split` for static splits (their
       TensorFlow forms are faster).
       The output must be ``new_states[0]`` (h), unless the cell sets
       ``output_is_first_state = False`` and ``output_size`` (an int):
       then the loop carries the previous output as one more loop variable,
       and the hand-written gradient (hooks 7-11) is not available.
    6. ``get_config()``: the cell's own arguments on top of ``super()``'s.
       Optionally ``steps_per_iteration`` (an int): the steps TensorFlow's
       loops run per iteration (default
       `keras_seq.layers._recurrent_loops.STEPS_PER_ITERATION`), for a cell
       whose step is so large that copies of it only make the graph bigger.
       Optionally ``projects_in_step_under_xla = True``: under XLA on the
       CPU, TensorFlow's inference loop computes each step's ``x_t @ W``
       in the step (``project_inputs`` of a ``(B, in)`` row) instead of
       reading a row of the projection made before the loop, for a cell
       whose step XLA runs faster so (measured: `LayerNormLSTMCell`).

    Optional, for training on TensorFlow with a hand-written gradient
    (backpropagation through time under XLA, `keras_seq.layers._bptt`);
    without them, and on the other backends, the layer trains through
    autodiff of its loop:

    7. ``bptt_supported() -> bool``: whether the derivative below is right
       for this configuration (e.g. only with tanh/sigmoid: see
       `standard_activations`). Default False.
    8. ``bptt_saved_widths``: the width of each ``(B, width)`` tensor that
       ``bptt_forward`` keeps per step.
    9. ``bptt_d_r_is_d_xw``: True when the gradients of ``xw_t`` and of
       ``r_t = h @ U`` are the same tensor (the loop then keeps one).
    10. ``bptt_forward(xw_t, r_t, states, params) -> (new_states, saved)``:
        the step with ``xw_t`` from ``project_inputs(x, bias=True)`` and
        ``r_t = h_in @ U`` computed by the loop; h must be ``new_states[0]``;
        ``saved`` is what ``bptt_backward`` needs (a list of
        ``bptt_saved_widths``). Write it with `fast_sigmoid`/`fast_tanh`.
    11. ``bptt_backward(saved, states_prev, states, d_states, params) ->
        (d_xw_t, d_r_t, d_states_prev, d_params_t)``: from the gradients of
        the step's new states; ``d_r_t`` may be ``d_xw_t`` itself (hook 9),
        an entry of ``d_states_prev`` may be None (no direct path);
        ``d_params_t`` are this step's per-example ``(B, ...)`` contributions
        to the gradients of ``params``.

    Zoneout (``zoneout=``, Krueger et al. 2017) needs nothing from a cell:
    the base class mixes each new state with the previous one after
    ``recurrent_step`` (`apply_zoneout`), in ``call`` and in the layer's loop.

    Then a layer: a `RecurrentLayer` subclass (`keras_seq.layers._recurrent_layer`)
    whose ``__init__`` validates
    with `validate_recurrent_args`, builds the cell and passes the layer
    arguments on (`delegate_to_cell` for the cell's own attributes);
    registered with ``keras.saving.register_keras_serializable``; exported in
    ``keras_seq/layers/__init__.py``; tests that the layer's loops, the
    cell's ``call`` in ``keras.layers.RNN`` and (with hooks 7-11) the
    hand-written gradient agree with a NumPy reference.
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

    # --- hooks (see the class docstring) ---

    def project_inputs(self, x, bias=True):
        """``x @ kernel``, plus the whole bias with ``bias=True`` (hook 3)."""
        bias = self.read_weight(self.bias) if bias and self.use_bias else None
        return project(x, self.read_weight(self.kernel), bias)

    def recurrent_weights(self, batch_size=None, bptt=False) -> list:
        raise NotImplementedError(f"{type(self).__name__} must implement `recurrent_weights`.")

    def recurrent_step(self, xw_t, states, weights, recurrent_mask=None):
        raise NotImplementedError(f"{type(self).__name__} must implement `recurrent_step`.")

    def bptt_supported(self) -> bool:
        return False

    bptt_saved_widths: Sequence[int] = ()
    bptt_d_r_is_d_xw: bool = False
    # Hook 5: False for a cell whose output is not its first state.
    output_is_first_state: bool = True
    # Hook 6: steps per loop iteration (None: the loops' default).
    steps_per_iteration: int | None = None
    # Hook 6: x_t @ W inside each step of TensorFlow's inference loop under
    # XLA on the CPU (`hoist_projection`).
    projects_in_step_under_xla: bool = False

    def bptt_forward(self, xw_t, r_t, states, params):
        raise NotImplementedError(f"{type(self).__name__} has no hand-written gradient.")

    def bptt_backward(self, saved, states_prev, states, d_states, params):
        raise NotImplementedError(f"{type(self).__name__} has no hand-written gradient.")

    # --- helpers for the hooks ---

    def standard_activations(self) -> bool:
        return (
            self.activation is activations.tanh
            and self.recurrent_activation is activations.sigmoid
        )

    def check_input_shape(self, input_shape) -> int:
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise shape_error(self, "inputs", "(batch, features) with a known feature size",
                              input_shape)
        return int(input_shape[-1])

    def add_kernels(self, input_dim: int, gates: int) -> None:
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
        """Bias of ``gates * units``; the part of gate ``forget_gate`` (when
        given) starts at 1 (Jozefowicz et al.)."""
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

    def recurrent_bias(self):
        """The bias the step adds after ``h @ U`` (zeros without a bias: see
        `recurrent_matmul`)."""
        if self.use_bias:
            return self.read_weight(self.bias)
        return ops.zeros((self.recurrent_kernel.shape[1],), dtype=self.compute_dtype)

    def gate_inputs(self, xw_t, h_in, U, b):
        """``x W + h U + b`` of every gate: ``xw_t`` holds ``x W`` (no bias);
        ``h U + b`` in the step's best form (`recurrent_matmul`)."""
        return xw_t + recurrent_matmul(h_in, U, b)

    def read_weight(self, variable):
        """A variable's value in the compute dtype (float16 etc. under mixed precision)."""
        return ops.cast(variable, self.compute_dtype)

    def read_per_example(self, vector, batch_size):
        """A ``(units,)`` weight broadcast to ``(batch_size, units)`` once, before the loop.

        Same-shape products in the loop have a cheap gradient; a broadcast one
        would reduce over the batch at every step of the backward loop.
        """
        vector = self.read_weight(vector)
        if batch_size is None:
            return vector
        return ops.broadcast_to(vector, (batch_size, self.units))

    # --- zoneout (Krueger et al. 2017) ---

    def state_sizes(self) -> list[int]:
        return state_sizes(self.state_size)

    def zoneout_rates(self, owner=None) -> list[float]:
        """One zoneout rate per state, in state order (a float applies to all);
        ``owner`` names who is told about a wrong count (default: the cell)."""
        return zoneout_rates(self.zoneout, self.state_size, owner or self)

    def zoneout_masks(self, shape_prefix) -> list:
        """Fresh keep-masks for training, one per state (`keras_seq.layers._zoneout.zoneout_masks`),
        from the cell's seed; ``shape_prefix``: ``(B,)`` for one step, ``(T, B)`` for a sequence."""
        return zoneout_masks(self.zoneout_rates(), self.state_size, shape_prefix,
                             self.seed_generator, self.compute_dtype)

    def apply_zoneout(self, states, new_states, keep_masks=None) -> list:
        """The zoned-out states (`keras_seq.layers._zoneout.apply_zoneout`): with
        ``keep_masks`` (training) kept or updated unit by unit; without, the
        inference mix."""
        return apply_zoneout(self.zoneout_rates(), states, new_states, keep_masks)

    def zoned_step(self, xw_t, states, weights, recurrent_mask=None, keep_masks=None):
        """``recurrent_step`` then zoneout; the output is the new h (or the
        cell's own output, for a cell whose output is not its first state)."""
        output, new_states = self.recurrent_step(xw_t, states, weights, recurrent_mask)
        if not has_zoneout(self.zoneout_rates()):
            return output, new_states
        new_states = self.apply_zoneout(states, list(new_states), keep_masks)
        if self.output_is_first_state:
            output = new_states[0]
        return output, new_states

    def call(self, inputs, states, training=False):
        """One time step: ``(output, new_states)`` as in the Keras cells."""
        nested = isinstance(states, (list, tuple))
        states = list(states) if nested else [states]
        inputs = float_inputs(self, inputs)
        if training and self.dropout > 0.0:
            inputs = inputs * self.get_dropout_mask(inputs)
        recurrent_mask = None
        if training and self.recurrent_dropout > 0.0:
            recurrent_mask = self.get_recurrent_dropout_mask(states[0])
        keep_masks = None
        if training and has_zoneout(self.zoneout_rates()):
            keep_masks = self.zoneout_masks((ops.shape(states[0])[0],))
        output, new_states = self.zoned_step(
            self.project_inputs(inputs, bias=False), states, self.recurrent_weights(None),
            recurrent_mask, keep_masks,
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
            "zoneout": self.zoneout,
        }
        return {**super().get_config(), **config}


class LSTMCellBase(RecurrentCell):
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
