"""`RecurrentLayer`: the ``keras.layers.RNN`` that drives a `RecurrentCell` over time.

It projects the whole sequence in one matmul (``cell.project_inputs``) and
hands the recurrent part (``cell.zoned_step``) to the loop that
`keras_seq.layers._recurrent_driver.choose_loop` picks for the backend; on
TensorFlow a cell with a hand-written derivative trains through
`keras_seq.layers._bptt`. The cell protocol is in
`keras_seq.layers._recurrent_base`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import float_inputs, invalid_value, shape_error
from keras_seq.layers._recurrent_driver import (
    choose_loop,
    hoist_projection,
    run_recurrence,
    split,
)

__all__ = ["RecurrentLayer", "delegate_to_cell"]


class RecurrentLayer(keras.layers.RNN):
    """A ``keras.layers.RNN`` whose time loop is this package's driver.

    ``keras.layers.RNN`` supplies the Keras conventions (``initial_state``,
    ``stateful``, ``return_state`` ordering, mask propagation, ``Bidirectional``
    support); ``inner_loop`` hoists the input projection out of the loop and
    runs the loop `choose_loop` picks. ``call`` checks the inputs, the mask
    and the initial state against the cell before any computation.
    """

    def __init__(self, cell, **kwargs):
        # Accepted and ignored, as keras.layers.LSTM and GRU do (old configs
        # pass it; like Keras, get_config does not return it).
        kwargs.pop("implementation", None)
        super().__init__(cell, **kwargs)
        cell.zoneout_rates(owner=self)  # one value per state, checked before any call

    def _check_inputs_shape(self, shape) -> None:
        shape = tuple(shape)
        if len(shape) != 3:
            raise shape_error(self, "inputs", "rank 3 (batch, time, features)", shape)
        if shape[-1] is None:
            raise shape_error(self, "inputs", "a known feature size (last axis)", shape)
        if self.cell.built and shape[-1] != self.cell.kernel.shape[0]:
            raise shape_error(
                self, "inputs",
                f"{self.cell.kernel.shape[0]} features, as the layer was built for "
                f"(received {shape[-1]} features)",
                shape,
            )
        # The state variables are created for the first batch size; later
        # calls (e.g. a tf.function over a dynamic batch) may leave it open.
        if self.stateful and shape[0] is None and getattr(self, "states", None) is None:
            raise shape_error(
                self, "inputs",
                "a static batch size with `stateful=True` (e.g. keras.Input(batch_size=...))",
                shape,
            )

    def _check_mask(self, inputs_shape, mask) -> None:
        """The mask must be ``(batch, time)`` like the inputs (static dimensions)."""
        if mask is None or isinstance(mask, (list, tuple)):
            return  # a Keras-propagated mask (lists come from Bidirectional)
        shape = tuple(mask.shape)
        if len(shape) != 2 or any(
            m is not None and i is not None and m != i for m, i in zip(shape, inputs_shape[:2])
        ):
            batch, time = ("?" if d is None else d for d in inputs_shape[:2])
            raise shape_error(
                self, "mask", f"(batch, time) = ({batch}, {time}), as `inputs` has", shape
            )

    def _check_initial_state(self, inputs_shape, initial_state) -> None:
        """One ``(batch, size)`` tensor per state, of the cell's state sizes."""
        if initial_state is None:
            return
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [
            initial_state
        ]
        sizes = list(self.state_size)
        if len(states) != len(sizes):
            raise invalid_value(
                self, "initial_state",
                f"{len(sizes)} tensor(s) (one per state, sizes {sizes})",
                f"{len(states)} tensor(s)",
            )
        batch = inputs_shape[0]
        for i, (state, size) in enumerate(zip(states, sizes)):
            shape = tuple(getattr(state, "shape", ()))
            if (
                len(shape) != 2
                or (shape[-1] is not None and shape[-1] != size)
                or (shape[0] is not None and batch is not None and shape[0] != batch)
            ):
                rows = "batch" if batch is None else str(batch)
                raise shape_error(self, "initial_state", f"state {i} of shape ({rows}, {size})",
                                  shape)

    def build(self, inputs_shape, initial_state_shape=None):
        self._check_inputs_shape(inputs_shape)
        super().build(inputs_shape, initial_state_shape)

    def compute_output_shape(self, inputs_shape, initial_state_shape=None):
        # Not a pass-through: Keras matches the `*_shape` argument names to
        # `call`'s arguments, and `call` names its first one `inputs` (as
        # docs/contract.md does), not `sequences` as keras.layers.RNN.
        return super().compute_output_shape(inputs_shape, initial_state_shape)

    def _check_call(self, inputs, initial_state, mask) -> None:
        shape = tuple(inputs.shape)
        self._check_inputs_shape(shape)
        self._check_mask(shape, mask)
        self._check_initial_state(shape, initial_state)

    def compute_output_spec(self, inputs, *args, **kwargs):
        # Symbolic calls (functional models) do not run `call`: check here too.
        self._check_call(inputs, kwargs.get("initial_state"), kwargs.get("mask"))
        return super().compute_output_spec(inputs, *args, **kwargs)

    def call(self, inputs, initial_state=None, mask=None, training=None):
        self._check_call(inputs, initial_state, mask)
        # Integer inputs, as keras.layers.LSTM/GRU take them (before the
        # dropout masks, which take the dtype of the inputs).
        inputs = float_inputs(self, inputs)
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
        # Zoneout in training: fresh keep-masks for every step, drawn before
        # the loop and fed to it beside the inputs (the hand-written gradient
        # does not know them: autodiff of the loop trains it).
        zoneout_training = bool(training) and any(r > 0.0 for r in cell.zoneout_rates())
        loop = choose_loop(training, self.unroll, cell.bptt_supported() and not zoneout_training)
        bptt = loop == "bptt"
        # Time-major before projecting: transposing x is cheaper than transposing x @ W.
        # (T, B, gates * units); the step adds (part of) the bias itself, the
        # hand-written training loop expects it in the projection.
        hoisted = hoist_projection(loop, cell.projects_in_step_under_xla)
        xs = ops.transpose(sequences, (1, 0, 2))
        xw = cell.project_inputs(xs, bias=bptt) if hoisted else xs
        initial_state = list(initial_state)
        if self.stateful and keras.backend.backend() == "torch":
            # As keras.layers.RNN: the state variables' tensors must not be
            # modified in place under autograd.
            initial_state = [ops.copy(s) for s in initial_state]
        if bptt:
            from keras_seq.layers._bptt import run_bptt_recurrence  # TensorFlow only

            kernel, *params = cell.recurrent_weights(bptt=True)
            return run_bptt_recurrence(
                cell,
                xw,
                initial_state,
                kernel,
                params,
                mask=mask,
                recurrent_mask=recurrent_mask,
                go_backwards=self.go_backwards,
                return_sequences=self.return_sequences,
                zero_output_for_mask=self.zero_output_for_mask,
            )
        batch_size = ops.shape(sequences)[0]
        weights = cell.recurrent_weights(batch_size)
        initial_output = None
        if not cell.output_is_first_state:
            initial_output = ops.zeros((batch_size, cell.output_size), dtype=cell.compute_dtype)

        keep_widths = []
        if zoneout_training:
            masks = cell.zoneout_masks((ops.shape(xs)[0], batch_size))
            kept = [m for m in masks if m is not None]
            keep_widths = [int(m.shape[-1]) for m in kept]
            width = int(xw.shape[-1])
            xw = ops.concatenate([xw, *(ops.cast(m, xw.dtype) for m in kept)], axis=-1)

        def step(xw_t, states):
            keep_masks = None
            if keep_widths:
                pieces = split(xw_t, [width, *keep_widths])
                xw_t, kept_t = pieces[0], iter(pieces[1:])
                keep_masks = [None if m is None else next(kept_t) for m in masks]
            if not hoisted:  # xw_t is x_t
                xw_t = cell.project_inputs(xw_t, bias=False)
            return cell.zoned_step(xw_t, states, weights, recurrent_mask, keep_masks)

        return run_recurrence(
            step,
            xw,
            initial_state,
            mask=mask,
            go_backwards=self.go_backwards,
            loop=loop,
            return_sequences=self.return_sequences,
            zero_output_for_mask=self.zero_output_for_mask,
            initial_output=initial_output,
            steps_per_iteration=cell.steps_per_iteration,
        )

    def get_config(self):
        config = super().get_config()
        del config["cell"]
        cell_config = self.cell.get_config()
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key, None)
        if not cell_config.get("zoneout"):
            # Left out at its default: a layer written before zoneout (or
            # outside this package) need not accept it.
            cell_config.pop("zoneout", None)
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
    setattr(RecurrentLayer, _name, delegate_to_cell(_name))
del _name
