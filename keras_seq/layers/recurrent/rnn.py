"""The recurrent protocol: `RecurrentCell` (one time step) and `RNN` (the layer that runs it over time).

A cell says what one step computes; `RNN` runs any cell over a sequence
with Keras' semantics (masks, ``initial_state``, ``go_backwards``,
``stateful``, ``return_state``, ``Bidirectional``) in one loop that is the
same on every backend (`run_loop`: carry, mask, direction, the per-step
inputs); the loop's few backend-specific operations are in
`keras_seq.layers.recurrent.backend`. The package's own recurrent layers
(`PeepholeLSTM`, `GRU`, ...) are `RNN`s of their cells.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops, tree

# keras.layers.RNN pre-creates and resets per-batch dropout masks only for
# cells that derive from this mixin, so ours do too.
from keras.src.layers.rnn.dropout_rnn_cell import DropoutRNNCell

from keras_seq._validation import check_bool, float_inputs, invalid_value, shape_error
from keras_seq.layers.quantization import KernelQuantization
from keras_seq.layers.recurrent import backend, fast_paths
from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence, run_parallel
from keras_seq.layers.recurrent.masking import mask_step
from keras_seq.layers.recurrent.zoneout import (
    apply_zoneout,
    has_zoneout,
    zoneout_masks,
    zoneout_rates,
)

__all__ = ["LoopHints", "RNN", "RecurrentCell", "export_lowered", "output_is_first_state",
           "reads_memory", "run_loop", "scan"]


@dataclasses.dataclass(frozen=True)
class LoopHints:
    """What a cell tells the loop so that it may take a faster path; the
    numbers stay the same. Every field is optional (a user's cell needs
    none); `keras_seq.layers.recurrent.fast_paths` reads them.

    Attributes:
        pointwise_projection: ``project`` acts on each step alone (a product
            over the feature axis, any leading axes): the layer may project
            a time-major sequence, or each step inside the loop.
        output_is_first_state: ``step``'s output is always its first new
            state, so the loop need not carry the previous output when there
            is no mask (a linear cell's is, without saying so).
        steps_per_iteration: steps per iteration of TensorFlow's while loops,
            for a cell whose step is so large that copies of it only make
            the graph bigger (default: the backend's).
        projects_in_step_under_xla: on TensorFlow, at inference under XLA
            with no GPU, project each step inside the loop (measured faster
            for `LayerNormLSTMCell`; needs ``pointwise_projection``).
        steps_fuse_on_cpu: the cell's parallel form is a scan of a step
            that is a few elementwise operations: where a compiled loop
            fuses them (JAX's CPU), the step loop trains faster than the
            parallel form, and `RNN` trains with it there.
        unroll_up_to: a sequence of a static length up to this many steps
            runs unrolled (a Python loop): for a step so large that a
            while loop's per-iteration cost matters (`RecurrentDecoder`'s).
    """

    pointwise_projection: bool = False
    output_is_first_state: bool = False
    steps_per_iteration: int | None = None
    projects_in_step_under_xla: bool = False
    steps_fuse_on_cpu: bool = False
    unroll_up_to: int | None = None


@keras.saving.register_keras_serializable(package="keras_seq")
class RecurrentCell(KernelQuantization, keras.layers.Layer, DropoutRNNCell):
    """Base class of a recurrent cell: one time step, in ``keras.ops``.

    A cell is a layer that defines, in ``keras.ops`` (so that it runs on
    every backend):

    - ``state_size``: an int, or a list of ints (one width per state);
    - ``build(input_shape)``: its weights, with ``add_weight``;
    - ``step(inputs, states, training=False) -> (output, new_states)``: one
      time step; ``inputs`` is the ``(batch, k)`` slice at that step of
      ``project(sequence)``, ``states`` and ``new_states`` lists;
    - optionally ``project(sequence) -> (batch, time, k)``: the part that does
      not depend on the states, computed for every step at once before the
      loop (default: the identity).

    A *linear cell* defines ``coefficients(projected) -> (a, b)`` instead of
    ``step``: it declares h_t = a_t ⊙ h_{t-1} + b_t (output h_t, states
    ``[h]``), for the whole projected sequence ``(B, T, k)`` or one step's
    row ``(B, k)``, and this class derives ``step`` and the parallel
    training form (`linear_recurrence`, Keras' masking rule) from it.

    This class supplies ``call(inputs, states, training=None)`` (``step`` on
    the projected single step), so the cell also works in
    ``keras.layers.RNN``; ``get_initial_state`` (zeros) and Keras' own
    ``get_config``. `RNN` runs it over a sequence with masks,
    ``initial_state``, ``go_backwards``, ``Bidirectional`` and ``.keras``
    saving on every backend; on TensorFlow `keras_seq.export` streams and
    converts it with builtin ops.

    Optional second forms, each for a measured gain and each checked against
    ``step`` by the tests; a subclass that redefines ``step`` or
    ``project`` without redefining a form runs its step loop instead
    (`keras_seq.layers.recurrent.fast_paths`, which also says where each
    form runs):

    - ``parallel(inputs, states, mask=None, training=False) -> (outputs
      (B, T, u), new_states)``: the whole projected sequence ``(B, T, k)``
      at once, in processing order, carrying the states over the steps
      where ``mask`` (``(B, T)`` bool, or None) is False; what `RNN` trains
      with (a linear cell's is derived);
    - ``manual_gradient() -> ManualGradient``: ``step`` with its derivative
      in closed form, what TensorFlow trains with when there is no parallel
      form (`keras_seq.layers.recurrent.manual_gradient`);
    - ``operator_form() -> LSTMForm | GRUForm | SimpleRNNForm | None``: the
      standard recurrence this cell computes, in Keras' weight layout, that
      `keras_seq.export` writes as one ONNX ``LSTM``/``GRU``/``RNN`` node or
      TFLite's fused LSTM (`keras_seq.layers.recurrent.operator_forms`).

    A cell that reads a *memory* (`AttentionWrapper`: an encoder's outputs,
    the same at every step) defines ``prepare_memory(memory, memory_mask)
    -> prepared`` (once per call, before the loop), takes ``memory=prepared``
    in ``step`` and ``get_initial_state(batch_size, memory=memory,
    cell_states=None)``; `RNN` is then called with ``memory=`` (and
    optionally ``memory_mask=``) and runs its step loop.

    Optional too: a ``dropout`` rate (input dropout, one mask per sequence,
    applied before ``project``), ``recurrent_dropout`` (the cell applies
    ``self.get_recurrent_dropout_mask(h)`` in ``step`` when training), both
    with a ``seed_generator``, as Keras' cells have them; a ``zoneout`` rate
    (or one per state): the loop mixes each new state with the previous one
    after ``step`` (`keras_seq.layers.recurrent.zoneout`); ``loop_hints``
    (`LoopHints`).

    Examples:
        >>> import keras, numpy as np
        >>> from keras import ops
        >>> from keras_seq.layers import RNN, RecurrentCell
        >>> class ElmanCell(RecurrentCell):
        ...     def __init__(self, units, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.units, self.state_size = units, units
        ...     def build(self, input_shape):
        ...         self.kernel = self.add_weight(shape=(input_shape[-1], self.units))
        ...         self.recurrent_kernel = self.add_weight(shape=(self.units, self.units))
        ...     def project(self, sequence):
        ...         return ops.matmul(sequence, self.kernel)
        ...     def step(self, inputs, states, training=False):
        ...         h = ops.tanh(inputs + ops.matmul(states[0], self.recurrent_kernel))
        ...         return h, [h]
        >>> RNN(ElmanCell(4))(np.ones((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

        A linear cell, QRNN's f-pooling (Bradbury et al. 2017):

        >>> class QRNNCell(RecurrentCell):
        ...     def __init__(self, units, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.units, self.state_size = units, units
        ...     def build(self, input_shape):
        ...         self.kernel = self.add_weight(shape=(input_shape[-1], 2 * self.units))
        ...     def project(self, sequence):
        ...         return ops.matmul(sequence, self.kernel)
        ...     def coefficients(self, projected):
        ...         f, z = ops.split(projected, 2, axis=-1)
        ...         f = ops.sigmoid(f)
        ...         return f, (1.0 - f) * ops.tanh(z)
        >>> RNN(QRNNCell(4))(np.ones((2, 5, 3), "float32")).shape
        TensorShape([2, 4])
    """

    loop_hints = LoopHints()
    # A linear cell defines coefficients(projected) -> (a, b).
    coefficients = None
    # Class defaults for Keras' dropout mixin: a cell without dropout has none.
    dropout = 0.0
    recurrent_dropout = 0.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if type(self).step is RecurrentCell.step and self.coefficients is None:
            raise TypeError(f"{type(self).__name__} must define `step(inputs, states, "
                            "training=False) -> (output, new_states)`, or `coefficients("
                            "projected) -> (a, b)` for a linear cell.")

    def project(self, sequence):
        """The state-independent part of every step: the identity here."""
        return sequence

    def step(self, inputs, states, training=False):
        """One time step (see the class docstring). A linear cell's:
        h_t = a ⊙ h_{t-1} + b from its ``coefficients``."""
        if self.coefficients is None:
            raise TypeError(f"{type(self).__name__} must define `step`.")
        a, b = self.coefficients(inputs)
        h = a * states[0] + b
        return h, [h]

    def parallel(self, inputs, states, mask=None, training=False):
        """A linear cell's parallel form: `linear_recurrence` of its
        coefficients over the whole sequence (a masked step carries h)."""
        if self.coefficients is None:
            raise TypeError(f"{type(self).__name__} has no parallel form: it defines "
                            "neither `parallel` nor `coefficients`.")
        a, b = self.coefficients(inputs)
        h = linear_recurrence(a, b, states[0], mask)
        return h, [h[:, -1]]

    def manual_gradient(self):
        """None here: no hand-written derivative (see the class docstring)."""
        return None

    def operator_form(self):
        """None here: no standard recurrence declared (see the class docstring)."""
        return None

    def call(self, inputs, states, training=None):
        """One time step as in Keras' cells: ``(output, new_states)``."""
        nested = isinstance(states, (list, tuple))
        states = list(states) if nested else [states]
        inputs = float_inputs(self, inputs)
        if training and self.dropout > 0.0:
            inputs = inputs * self.get_dropout_mask(inputs)
        x = ops.squeeze(self.project(ops.expand_dims(inputs, 1)), 1)
        output, new_states = self.step(x, states, training=training)
        new_states = list(new_states)
        rates = zoneout_rates_of(self)
        if rates:
            keep = None
            if training:
                keep = zoneout_masks(rates, self.state_size, (ops.shape(x)[0],),
                                     self.seed_generator, self.compute_dtype)
            new_states = apply_zoneout(rates, states, new_states, keep)
            if output_is_first_state(self):
                output = new_states[0]
        if not nested and len(new_states) == 1:
            return output, new_states[0]
        return output, new_states

    def get_initial_state(self, batch_size=None):
        return [ops.zeros((batch_size, size), dtype=self.compute_dtype)
                for size in tree.flatten(self.state_size)]


def zoneout_rates_of(cell) -> list[float]:
    """The cell's zoneout rate of each state; empty when no state zones out
    (a cell without ``zoneout``, or all rates 0)."""
    zoneout = getattr(cell, "zoneout", 0.0)
    if not zoneout:
        return []
    rates = zoneout_rates(zoneout, cell.state_size, cell)
    return rates if has_zoneout(rates) else []


@keras.saving.register_keras_serializable(package="keras_seq")
class RNN(keras.layers.RNN):
    """Runs a recurrent cell over a sequence; a drop-in for `keras.layers.RNN`.

    Any cell: a `RecurrentCell` (its ``project`` for all steps at once, then
    its ``step`` in the loop), or any Keras cell, `StackedRNNCells`
    included (its ``call`` is the step, with Keras' semantics). One loop for
    every backend (`run_loop`); on TensorFlow its inference form converts to
    TFLite builtins and ONNX, and a cell with a TensorFlow gradient
    companion (`LoopHints.manual_gradient`) trains with it. Inputs, masks
    and initial states are checked against the cell before any computation.

    Args:
        cell: a `RecurrentCell`, a Keras cell, or a list of cells (stacked).
        return_sequences: bool, return the output of every step ``(B, T, u)``
            instead of the last one ``(B, u)``.
        return_state: bool, also return the final states: ``[output, *states]``.
        go_backwards: bool, process the sequence in reverse (outputs come in
            processing order, as in Keras).
        stateful: bool, carry the final states of a batch into the next one
            (needs a fixed batch size).
        unroll: bool, a Python loop over the static length.
        zero_output_for_mask: bool, masked steps output zeros instead of the
            previous output (`keras.layers.Bidirectional` sets it).

    Call arguments: ``inputs (B, T, in)``, ``mask (B, T)`` bool (True =
    keep; a masked step carries the states and repeats the last output),
    ``training``, ``initial_state`` (one tensor per state); for a cell that
    reads a memory (`AttentionWrapper`), ``memory (B, S, d)`` and
    ``memory_mask (B, S)`` (default: the memory's Keras mask), and
    ``initial_state`` may hold the wrapped cell's states alone. A cell with
    ``alignment_history=True`` makes the layer also return its last state
    (the alignments) at every step, ``(B, T, S)``, after the output.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import RNN, GRUCell
        >>> layer = RNN(GRUCell(8), return_sequences=True, return_state=True)
        >>> sequence, h = layer(np.zeros((2, 5, 3), "float32"))
        >>> sequence.shape, h.shape
        (TensorShape([2, 5, 8]), TensorShape([2, 8]))
    """

    # `inner_loop` asks the lowering of an export being traced (`export_lowered`).
    asks_export_lowering = True

    def __init__(self, cell, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 zero_output_for_mask: bool = False, **kwargs):
        # Accepted and ignored, as keras.layers.LSTM and GRU do (old configs
        # pass it; like Keras, get_config does not return it).
        kwargs.pop("implementation", None)
        owner = type(self).__name__
        backend.check_supported(owner)
        for name, value in (("return_sequences", return_sequences),
                            ("return_state", return_state), ("go_backwards", go_backwards),
                            ("stateful", stateful), ("unroll", unroll)):
            check_bool(owner, name, value)
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll,
                         zero_output_for_mask=zero_output_for_mask, **kwargs)
        # Set here whatever keras.layers.RNN sets (Keras 3.16 turns it off):
        # the mask flows on with return_sequences=True (`compute_mask`).
        self.supports_masking = True
        if isinstance(self.cell, keras.layers.Layer):
            zoneout_rates_of(self.cell)  # one value per state, checked before any call
        if stateful and reads_memory(self.cell):
            raise invalid_value(self, "stateful", f"False for a cell that reads a memory "
                                f"({type(self.cell).__name__})", stateful)

    def compute_mask(self, inputs, mask=None):
        mask = tree.flatten(mask)[0] if mask is not None else None
        output_mask = mask if self.return_sequences else None
        extra = [mask] if _keeps_history(self.cell) else []
        if self.return_state:
            return [output_mask, *extra] + [None] * len(tree.flatten(self.cell.state_size))
        return [output_mask, *extra] if extra else output_mask

    # --- checks, before any computation ---

    def _check_inputs_shape(self, shape) -> None:
        shape = tuple(shape)
        if len(shape) != 3:
            raise shape_error(self, "inputs", "rank 3 (batch, time, features)", shape)
        if shape[-1] is None:
            raise shape_error(self, "inputs", "a known feature size (last axis)", shape)
        if shape[1] == 0:
            raise shape_error(self, "inputs", "at least one time step", shape)
        built = getattr(self, "_features", None)
        if built is not None and shape[-1] != built:
            raise shape_error(
                self, "inputs",
                f"{built} features, as the layer was built for (received {shape[-1]} features)",
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
        if initial_state is None or reads_memory(self.cell):
            return  # a memory cell checks its own (it takes its wrapped cell's alone)
        states = tree.flatten(initial_state)
        sizes = tree.flatten(self.state_size)
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

    def _check_call(self, inputs, initial_state, mask) -> None:
        shape = tuple(inputs.shape)
        self._check_inputs_shape(shape)
        self._check_mask(shape, mask)
        self._check_initial_state(shape, initial_state)

    def build(self, inputs_shape, initial_state_shape=None, memory_shape=None,
              memory_mask_shape=None):
        self._check_inputs_shape(inputs_shape)
        if reads_memory(self.cell) and not self.cell.built:
            if memory_shape is None:
                raise invalid_value(
                    self, "memory", f"the memory its cell {type(self.cell).__name__} reads: "
                    "call the layer as layer(inputs, memory=...)", None)
            self.cell.build((inputs_shape[0], *inputs_shape[2:]), tuple(memory_shape))
        super().build(inputs_shape, initial_state_shape)
        self._features = inputs_shape[-1]

    def compute_output_shape(self, inputs_shape, initial_state_shape=None):
        # Not a pass-through: Keras matches the `*_shape` argument names to
        # `call`'s arguments, and `call` names its first one `inputs` (as
        # docs/contract.md does), not `sequences` as keras.layers.RNN.
        return super().compute_output_shape(inputs_shape, initial_state_shape)

    def compute_output_spec(self, inputs, *args, **kwargs):
        # Symbolic calls (functional models) do not run `call`: check here too.
        self._check_call(inputs, kwargs.get("initial_state"), kwargs.get("mask"))
        memory = kwargs.get("memory")
        self._check_memory(memory)
        if memory is None:
            return super().compute_output_spec(inputs, *args, **kwargs)
        batch, steps, length = inputs.shape[0], inputs.shape[1], memory.shape[1]
        dtype = self.compute_dtype
        size = _output_size(self.cell)
        outputs = [keras.KerasTensor(
            (batch, steps, size) if self.return_sequences else (batch, size), dtype=dtype)]
        if _keeps_history(self.cell):
            outputs.append(keras.KerasTensor((batch, steps, length), dtype=dtype))
        if self.return_state:
            outputs += [keras.KerasTensor((batch, length if s is None else s), dtype=dtype)
                        for s in self.cell.state_size]
        return outputs if len(outputs) > 1 else outputs[0]

    def _check_memory(self, memory) -> None:
        """``memory`` is given exactly when the cell reads one."""
        if reads_memory(self.cell) and memory is None:
            raise invalid_value(self, "memory", f"the memory its cell "
                                f"{type(self.cell).__name__} reads (B, S, d)", None)
        if memory is not None and not reads_memory(self.cell):
            raise invalid_value(self, "memory", f"none: its cell {type(self.cell).__name__} "
                                "reads no memory", "a memory")
        if memory is not None and len(memory.shape) != 3:
            raise shape_error(self, "memory", "(batch, length, features)", memory.shape)

    def call(self, inputs, initial_state=None, mask=None, training=None, memory=None,
             memory_mask=None):
        self._check_call(inputs, initial_state, mask)
        self._check_memory(memory)
        # Integer inputs, as keras.layers.LSTM/GRU take them (before the
        # dropout masks, which take the dtype of the inputs).
        inputs = float_inputs(self, inputs)
        if memory is None:
            return super().call(inputs, initial_state=initial_state, mask=mask, training=training)
        return self._call_with_memory(inputs, initial_state, mask, training, memory, memory_mask)

    def _call_with_memory(self, inputs, initial_state, mask, training, memory, memory_mask):
        """A cell that reads a memory: prepared once, read by every step."""
        cell = self.cell
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        prepared = cell.prepare_memory(memory, memory_mask)
        cell_states = None
        if initial_state is not None:
            initial_state = tree.flatten(initial_state)
            if len(initial_state) != len(cell.state_size):
                cell_states = initial_state  # the wrapped cell's: the wrapper adds its own
        if initial_state is None or cell_states is not None:
            initial_state = cell.get_initial_state(
                batch_size=ops.shape(inputs)[0], memory=memory, cell_states=cell_states)
        states = [ops.cast(s, cell.compute_dtype) for s in tree.flatten(initial_state)]
        last_output, outputs, states = self._cell_loop(inputs, states, mask, training, prepared)
        history = None
        if _keeps_history(cell):
            # The loop's output carries the alignments after the step's output.
            size = _output_size(cell)
            last_output = last_output[:, :size]
            history, outputs = outputs[..., size:], outputs[..., :size]
        output = outputs if self.return_sequences else last_output
        result = [ops.cast(output, self.compute_dtype)]
        if history is not None:
            result.append(ops.cast(history, self.compute_dtype))
        if self.return_state:
            result += [ops.cast(s, self.compute_dtype) for s in states]
        return result if len(result) > 1 else result[0]

    # --- the loop ---

    def inner_loop(self, sequences, initial_state, mask, training=False):
        lowered = export_lowered(self, sequences, initial_state, mask, training)
        if lowered is not None:
            return lowered
        if not isinstance(self.cell, RecurrentCell):
            return cell_call_loop(self, sequences, initial_state, mask, training)
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        states = backend.fresh_states(tree.flatten(initial_state), self.stateful)
        last_output, outputs, states = self._cell_loop(sequences, states, mask, training)
        return last_output, outputs, tree.pack_sequence_as(initial_state, states)

    def _cell_loop(self, sequences, states, mask, training, memory=None):
        """A `RecurrentCell`: projection before the loop, ``step`` in it;
        ``memory``: what a cell that reads a memory prepared for its steps."""
        cell = self.cell
        hints = cell.loop_hints
        if training and cell.dropout > 0.0:
            # One input dropout mask per sequence, shared by all steps (as in Keras).
            sequences = sequences * cell.get_dropout_mask(sequences[:, 0, :])[:, None, :]
        rates = zoneout_rates_of(cell)
        zoneout_training = bool(training) and bool(rates)
        form = fast_paths.STEP_LOOP
        if training is True and memory is None:
            form = fast_paths.training_form(cell, zoneout_training)
        first_state_out = output_is_first_state(cell)
        if form == fast_paths.PARALLEL:
            return run_parallel(
                cell, sequences, states, mask=mask, go_backwards=self.go_backwards,
                return_sequences=self.return_sequences,
                zero_output_for_mask=self.zero_output_for_mask, training=training,
                output_is_first_state=first_state_out,
            )
        if form == fast_paths.MANUAL_GRADIENT:
            recurrent_mask = None
            if cell.recurrent_dropout > 0.0:
                recurrent_mask = cell.get_recurrent_dropout_mask(states[0])
            # (T, B, in): transposing x is cheaper than transposing x W.
            return backend.run_manual_gradient(
                cell.manual_gradient(), ops.transpose(sequences, (1, 0, 2)), states, mask=mask,
                recurrent_mask=recurrent_mask, go_backwards=self.go_backwards,
                return_sequences=self.return_sequences,
                zero_output_for_mask=self.zero_output_for_mask,
            )
        if hints.pointwise_projection:
            xs = ops.transpose(sequences, (1, 0, 2))  # (T, B, in), cheaper than (T, B, k)
            hoisted = fast_paths.projects_before_loop(cell, training)
            if hoisted:
                xs = cell.project(xs)
        else:
            hoisted = True
            xs = ops.transpose(cell.project(sequences), (1, 0, 2))  # (T, B, k)
        inputs = [xs]
        keep = []
        if zoneout_training:
            # Fresh keep-masks for every step, drawn before the loop (nothing
            # random runs inside it) and read beside the inputs.
            keep = zoneout_masks(rates, cell.state_size, tuple(ops.shape(xs)[:2]),
                                 cell.seed_generator, cell.compute_dtype)
            inputs += [m for m in keep if m is not None]
        zoned = bool(rates)
        step_kwargs = {} if memory is None else {"memory": memory}
        history = _keeps_history(cell)

        def step(xs_t, states):
            x_t = xs_t[0] if hoisted else cell.project(xs_t[0])
            output, new_states = cell.step(x_t, states, training=training, **step_kwargs)
            if history:  # the alignments ride with the output; `call` splits them off
                output = ops.concatenate([output, ops.cast(new_states[-1], output.dtype)], -1)
            if not zoned:
                return output, new_states
            drawn = iter(xs_t[1:])
            masks = [None if m is None else next(drawn) for m in keep] if keep else None
            new_states = apply_zoneout(rates, states, list(new_states), masks)
            return (new_states[0] if first_state_out else output), new_states

        initial_output = None
        if not first_state_out:
            size = _output_size(cell)
            if history:
                size = size + ops.shape(states[-1])[1]
            initial_output = ops.zeros((ops.shape(sequences)[0], size), dtype=cell.compute_dtype)
        steps = sequences.shape[1]
        unroll = self.unroll or (hints.unroll_up_to is not None and steps is not None
                                 and steps <= hints.unroll_up_to)
        return run_loop(
            step, inputs, states, mask=mask, go_backwards=self.go_backwards,
            return_sequences=self.return_sequences,
            zero_output_for_mask=self.zero_output_for_mask, initial_output=initial_output,
            training=training, unroll=unroll,
            steps_per_iteration=hints.steps_per_iteration,
        )


def cell_call_loop(layer, sequences, initial_state, mask, training=False):
    """``inner_loop`` of a recurrent ``layer`` whose cell's ``call`` is its
    step (Keras' own cells, a user's Keras cell), in this package's loop.

    `RNN` runs it for any cell that is not a `RecurrentCell`; an export's
    lowering runs it for Keras' own ``LSTM``, ``GRU``, ``SimpleRNN`` and
    ``RNN`` layers, whose TensorArray loop TFLite converts only with Flex ops
    (`keras_seq.export._lowering`). ``layer`` gives the cell and Keras'
    loop arguments (``go_backwards``, ``return_sequences``,
    ``zero_output_for_mask``, ``unroll``, ``stateful``); ``sequences`` is
    ``(B, T, in)``.
    """
    if isinstance(mask, (list, tuple)):
        mask = mask[0]
    cell = layer.cell
    states = backend.fresh_states(tree.flatten(initial_state), layer.stateful)
    kwargs = {}
    if isinstance(cell, keras.layers.Layer) and cell._call_has_training_arg:
        kwargs["training"] = training

    def step(xs_t, flat_states):
        output, new_states = cell(xs_t[0], tree.pack_sequence_as(initial_state, flat_states),
                                  **kwargs)
        if not tree.is_nested(new_states):
            new_states = [new_states]
        return output, tree.flatten(new_states)

    initial_output = ops.zeros((ops.shape(sequences)[0], _output_size(cell)),
                               dtype=getattr(cell, "compute_dtype", layer.compute_dtype))
    last_output, outputs, states = run_loop(
        step, [ops.transpose(sequences, (1, 0, 2))], states, mask=mask,
        go_backwards=layer.go_backwards, return_sequences=layer.return_sequences,
        zero_output_for_mask=layer.zero_output_for_mask, initial_output=initial_output,
        training=training, unroll=layer.unroll,
    )
    return last_output, outputs, tree.pack_sequence_as(initial_state, states)


def _output_size(cell) -> int:
    """A cell's output width: ``output_size``, else its first state's (as Keras)."""
    size = getattr(cell, "output_size", None)
    if size is None:
        size = tree.flatten(cell.state_size)[0]
    return int(size)


def reads_memory(cell) -> bool:
    """Whether ``cell`` reads a memory at every step (`RecurrentCell`'s
    ``prepare_memory`` protocol, e.g. `AttentionWrapper`)."""
    return isinstance(cell, RecurrentCell) and callable(getattr(cell, "prepare_memory", None))


def _keeps_history(cell) -> bool:
    """Whether the layer also returns the cell's last state at every step."""
    return reads_memory(cell) and bool(getattr(cell, "alignment_history", False))


def export_lowered(layer, sequences, initial_state, mask, training):
    """``inner_loop``'s result from the lowering of the export being traced
    (`backend.export_lowering`: one ONNX node, TFLite's fused LSTM, for a
    cell with an operator form), or None: the layer runs its own loop."""
    lowering = backend.export_lowering()
    if lowering is None:
        return None
    return lowering.lower(layer, sequences, initial_state, mask, training)


def output_is_first_state(cell) -> bool:
    """Whether the cell's output is always its first new state: declared in
    its `LoopHints`, or a linear cell with the base class's ``step``."""
    if cell.loop_hints.output_is_first_state:
        return True
    return cell.coefficients is not None and type(cell).step is RecurrentCell.step


# --- the loop, the same on every backend ---


def run_loop(step, sequences, initial_states, mask=None, go_backwards: bool = False,
             return_sequences: bool = False, zero_output_for_mask: bool = False,
             initial_output=None, training=None, unroll: bool = False,
             steps_per_iteration: int | None = None):
    """Runs ``step`` over time with Keras' semantics.

    Args:
        step: ``step(xs_t, states) -> (output, new_states)``: ``xs_t`` the
            list of step-``t`` slices of ``sequences``, ``states`` a list;
            the output is the first new state unless ``initial_output`` is
            given.
        sequences: list of time-major ``(T, B, ...)`` tensors (the projected
            inputs, then any other per-step input, such as zoneout masks).
        initial_states: list of ``(B, size)`` tensors.
        mask: optional ``(B, T)`` mask, True = keep: at a masked step the
            states stay and the output is the previous output (zeros with
            ``zero_output_for_mask``).
        go_backwards: process the sequence in reverse; outputs come in
            processing order, as in Keras.
        return_sequences: collect the output of every step.
        initial_output: zeros of the output's shape ``(B, output_size)``
            for a step whose output need not be its first new state; the
            loop then carries the previous output, with or without a mask.
        training, unroll, steps_per_iteration: choose the loop's form
            (`scan`).

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T, units)``
        with ``return_sequences``, else ``last_output[:, None]``.
    """
    sequences = list(sequences)
    if mask is not None:
        # (T, B, 1) bool, time-major like the inputs.
        mask = ops.expand_dims(ops.transpose(ops.cast(mask, "bool")), -1)
    if go_backwards:
        sequences = [ops.flip(x, 0) for x in sequences]
        if mask is not None:
            mask = ops.flip(mask, 0)

    carry = list(initial_states)
    carries_output = mask is not None or initial_output is not None
    zero_output = None
    if carries_output:
        zero_output = ops.zeros_like(carry[0]) if initial_output is None else initial_output
        carry = [zero_output, *carry]
    n = len(sequences)

    def body(xs_t, carry):
        if not carries_output:
            output, new_states = step(xs_t, carry)
            return [output], list(new_states)
        prev_output, states = carry[0], carry[1:]
        output, new_states = step(xs_t[:n], states)
        if mask is not None:
            output, new_states = mask_step(
                xs_t[n], output, list(new_states), states, prev_output,
                zero_output if zero_output_for_mask else None,
            )
        return [output], [output, *new_states]

    all_sequences = sequences if mask is None else [*sequences, mask]
    outputs, carry = scan(body, all_sequences, carry, [carry[0]], return_sequences, training,
                          unroll, steps_per_iteration)
    last_output = carry[0]
    states = carry[1:] if carries_output else carry
    outputs = outputs[0] if return_sequences else ops.expand_dims(last_output, 1)
    return last_output, outputs, states


def scan(body, sequences, carry, templates, collect: bool = True, training=None,
         unroll: bool = False, steps_per_iteration: int | None = None):
    """Runs ``body(xs_t, carry) -> (outputs_t, carry)`` over the time-major
    ``sequences``: the backend's loop (`backend.scan`), or with ``unroll`` a
    Python loop over the static length (also where the export being traced
    asks for it: an integer lowering, `keras_seq.export._lowering.Lowering`). A static length of 1 needs no loop:
    ``body`` runs once (a streaming step traced one token at a time, as
    exports trace it, is the step's ops alone).

    ``templates``: one ``(B, ...)`` tensor per output, of its shape and dtype
    at one step. Returns ``(outputs, carry)``, ``outputs`` a list of
    batch-major ``(B, T, ...)`` tensors (None without ``collect``).
    """
    steps = sequences[0].shape[0]
    # An export's lowering may give a loop of a static length its own form
    # (integer TFLite's loops), or ask it to run unrolled (an integer
    # quantizer that cannot quantize a loop).
    lowering = backend.export_lowering()
    if lowering is not None and not unroll and steps is not None and steps != 1:
        lowered = lowering.loop(body, sequences, carry, templates, collect)
        if lowered is not None:
            return lowered
    unroll = unroll or (steps is not None and getattr(lowering, "integer", False))
    if not unroll and steps != 1:
        return backend.scan(body, sequences, carry, templates, collect, training,
                            steps_per_iteration)
    if steps is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    collected = []
    for t in range(steps):
        outputs_t, carry = body([x[t] for x in sequences], list(carry))
        collected.append(outputs_t)
    if not collect:
        return None, carry
    return [ops.stack(list(o), axis=1) for o in zip(*collected)], carry
