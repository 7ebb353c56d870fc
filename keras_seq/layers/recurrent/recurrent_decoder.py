"""The recurrent decoder of `rnn_seq2seq`, with Bahdanau or Luong attention fed at every step."""

from __future__ import annotations

import keras

from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    check_bool,
    check_choice,
    check_positive_int,
    check_zoneout,
    invalid_type,
    invalid_value,
)
from keras_seq.layers.attention.bahdanau_attention import BahdanauAttention
from keras_seq.layers.attention.luong_attention import LuongAttention
from keras_seq.layers.attention.monotonic import (
    BahdanauMonotonicAttention,
    LuongMonotonicAttention,
)
from keras_seq.layers.recurrent import registry
from keras_seq.layers.recurrent.attention_wrapper import AttentionWrapper, refuse_masks_of_its_own
from keras_seq.layers.recurrent.rnn import RNN, LoopHints, RecurrentCell
from keras_seq.layers.recurrent.zoneout import apply_zoneout, zoneout_masks, zoneout_rates

ATTENTION_KINDS = ("bahdanau", "luong", "monotonic_bahdanau", "monotonic_luong")

# Monotonic attention: the noise on the energy in training (Raffel et al.
# 2017 use 1, which pushes p towards 0 or 1 so that the hard decisions of
# decoding match training) and the energy's starting bias: positive, the
# decoder starts out stopping early and learns to move on (copying 8
# tokens, 15 epochs, 3 seeds: loss 0.18-0.24 from +1 against 0.29-0.64 from
# -1, benchmarks/RESULTS.md).
MONOTONIC_SIGMOID_NOISE = 1.0
MONOTONIC_SCORE_BIAS = 1.0

# Statically known target lengths up to this run unrolled (training
# batches): TensorFlow schedules the steps' independent ops together, and
# the gradient pays no while-loop iterations.
_MAX_UNROLL = 32


class _DecoderStep(RecurrentCell):
    """`RecurrentDecoder`'s step as a cell that reads a memory (the encoder's
    outputs), for `keras_seq.layers.RNN`: the attention on s_{i-1}, then the
    cell on [y_{i-1}; c_i], then the decoder's zoneout; output [s_i; c_i].

    States: the cell's, then α (the monotonic attention's previous
    alignment, or, with ``alignments=True``, the last step's α, carried for
    `RecurrentDecoder`'s ``return_attention_scores``). Its layers are the
    decoder's (it owns no weights). Without attention it reads no memory:
    `_PlainDecoderStep`.
    """

    loop_hints = LoopHints(steps_per_iteration=1, unroll_up_to=_MAX_UNROLL)

    def __init__(self, cell, attention, wrapper, zoneout_rates, monotonic, alignments=False,
                 fed_masks=False, **kwargs):
        super().__init__(**kwargs)
        self.cell, self.attention, self.wrapper = cell, attention, wrapper
        self.rates, self.monotonic = zoneout_rates, monotonic
        # Training with zoneout: every step's keep-masks are drawn before the
        # loop and arrive after the step's input features (`split_fed_masks`).
        self.fed_masks = fed_masks
        self.alignments = monotonic or alignments
        self.alignment_history = alignments
        self._memory_width = None

    @property
    def cell_state_sizes(self) -> list:
        size = self.cell.state_size
        return list(size) if isinstance(size, (list, tuple)) else [size]

    @property
    def state_size(self) -> list:
        return self.cell_state_sizes + ([None] if self.alignments else [])

    @property
    def output_size(self):
        return self.cell_state_sizes[0] + (self._memory_width or 0)

    @property
    def seed_generator(self):
        return self.cell.seed_generator

    def build(self, input_shape, memory_shape=None):
        self._memory_width = None if memory_shape is None else int(memory_shape[-1])
        self.built = True

    def prepare_memory(self, memory, memory_mask=None, processed_key=None):
        return self.wrapper.prepare_memory(memory, memory_mask, processed_key)

    @property
    def mask_widths(self) -> list[int]:
        """The width of each state's keep-mask that a fed step reads (its zoning states)."""
        return [size for rate, size in zip(self.rates, self.cell_state_sizes) if rate > 0]

    def split_fed_masks(self, inputs, keep_masks):
        """``(inputs, keep_masks)`` of a fed step: its masks cut off the end of
        its inputs (one per state, None where the rate is 0)."""
        if not self.fed_masks:
            return inputs, keep_masks
        width = keras.ops.shape(inputs)[-1] - sum(self.mask_widths)
        masks, start = [], width
        for rate, size in zip(self.rates, self.cell_state_sizes):
            if rate > 0:
                masks.append(inputs[:, start : start + size])
                start += size
            else:
                masks.append(None)
        return inputs[:, :width], masks

    def get_initial_state(self, batch_size=None, memory=None, cell_states=None):
        """``cell_states`` (else zeros), then α_0 over ``memory``: the monotonic
        attention's start, or zeros."""
        if cell_states is None:
            cell_states = [keras.ops.zeros((batch_size, size), self.compute_dtype)
                           for size in self.cell_state_sizes]
        states = list(cell_states)
        if self.alignments:
            if self.monotonic:
                alpha = self.attention.initial_alignments(memory)
            else:
                alpha = keras.ops.zeros(keras.ops.shape(memory)[:2], self.compute_dtype)
            states.append(keras.ops.cast(alpha, self.compute_dtype))
        return states

    def step(self, inputs, states, training=False, memory=None, keep_masks=None):
        """One decoder step: ``(o_i, new_states)``; ``keep_masks``: this step's
        zoneout masks (training; drawn here when None)."""
        inputs, keep_masks = self.split_fed_masks(inputs, keep_masks)
        states = list(states)
        n = len(self.cell_state_sizes)
        cell_states = states[:n]
        previous = states[n] if self.monotonic else None
        # a_{i-1} of the wrapper's step, from its query s_{i-1} (the hidden
        # state h for every cell family); monotonic attention is the
        # expected alignment in training, hard (moving only forward) otherwise.
        context, alpha = self.wrapper.attend(
            cell_states[0], memory, previous, training=training,
            mode=(None if training else "hard") if self.monotonic else None)
        s, new_states = self.wrapper.cell_step(inputs, context, cell_states, training=training)
        new_states = self._zoned(cell_states, new_states, training, keep_masks)
        o = keras.ops.concatenate([new_states[0], keras.ops.cast(context, s.dtype)], axis=-1)
        if self.alignments:
            new_states.append(keras.ops.cast(alpha, new_states[0].dtype))
        return o, new_states

    def _zoned(self, states, new_states, training, keep_masks):
        """The decoder's zoneout of the cell's new states (none when every rate is 0)."""
        new_states = list(new_states)
        if not any(rate > 0 for rate in self.rates):
            return new_states
        if training and keep_masks is None:
            keep_masks = zoneout_masks(self.rates, self.cell_state_sizes,
                                       (keras.ops.shape(new_states[0])[0],),
                                       self.cell.seed_generator, self.cell.compute_dtype)
        return apply_zoneout(self.rates, states, new_states, keep_masks if training else None)


class _PlainDecoderStep(_DecoderStep):
    """The step of a `RecurrentDecoder` without attention: the cell, then the
    decoder's zoneout; output s_i. It reads no memory."""

    prepare_memory = None  # not a cell that reads a memory (`reads_memory`)

    @property
    def output_size(self):
        return self.cell_state_sizes[0]

    def get_initial_state(self, batch_size=None):
        return [keras.ops.zeros((batch_size, size), self.compute_dtype)
                for size in self.cell_state_sizes]

    def step(self, inputs, states, training=False, memory=None, keep_masks=None):
        inputs, keep_masks = self.split_fed_masks(inputs, keep_masks)
        states = list(states)
        structure = self.cell.state_size
        packed = states if isinstance(structure, (list, tuple)) else states[0]
        kwargs = {"training": training} if self.cell._call_has_training_arg else {}
        _, new_states = self.cell(inputs, packed, **kwargs)
        new_states = new_states if isinstance(new_states, (list, tuple)) else [new_states]
        new_states = self._zoned(states, new_states, training, keep_masks)
        return new_states[0], new_states


@keras.saving.register_keras_serializable(package="keras_seq")
class RecurrentDecoder(keras.layers.Layer):
    """Recurrent decoder that reads an attention context at every step.

    With attention (Bahdanau et al., 2015, with the decoder state as query):

        e_ij = vᵀ tanh(W_q s_{i-1} + W_k h_j)       α_ij = softmax_j(e_ij)
        c_i  = Σ_j α_ij h_j
        s_i  = cell([y_{i-1}; c_i], s_{i-1})
        o_i  = [s_i; c_i]

    With ``attention="luong"`` the score is Luong et al.'s (2015) "general"
    one, e_ij = s_{i-1} · (h_j W_a) (`LuongAttention`), in the same place.
    With ``"monotonic_bahdanau"`` / ``"monotonic_luong"`` the weights are
    Raffel et al.'s (2017) monotonic alignment of that energy
    (`BahdanauMonotonicAttention`, `LuongMonotonicAttention`, noise
    ``MONOTONIC_SIGMOID_NOISE`` in training, bias starting at
    ``MONOTONIC_SCORE_BIAS``): the expected alignment in training, the hard
    one (never moving left) otherwise; the previous alignment α_{i-1} is then
    the decoder's last state, after the cell's (`initial_alignments` of the
    source before the first step).

    With attention it is `AttentionWrapper` (``output_attention=False``,
    no ``attention_layer_size``) around its cell, whose previous attention
    is recomputed at the start of a step from its query rather than carried:
    the wrapper's a_{i-1} = attention(s_{i-1}) is c_i above, so each step
    runs the wrapper's `attend` then its `cell_step`, the states stay the
    cell's (and α), a_0 = attention(s_0), and the output adds c_i to the
    wrapper's y_i = s_i.

    Without attention (``attention_units=None``) it is the plain encoder-decoder
    of Sutskever et al. (2014) / Cho et al. (2014): ``s_i = cell(y_{i-1},
    s_{i-1})`` and ``o_i = s_i``; the encoder reaches it only through the
    initial state.

    One step, `step`, serves everything: the whole-sequence call (teacher
    forcing) runs it over the targets in `keras_seq.layers.RNN`, the loop of
    every recurrent layer, and decoding, scheduled sampling and the exports
    call it one step at a time, so greedy decoding computes exactly what
    training computed. The cell has no dropout of its own (dropout masks
    cannot be drawn inside the step loop); put `Dropout` layers around the
    decoder instead. Zoneout (``zoneout=``) is the decoder's, whatever the
    cell: after the cell's step, with fresh masks at every step in training.

    Args:
        units: int, width of the decoder state s.
        cell: the recurrent cell: a cell object (a `RecurrentCell` of this
            package or a user's, or a Keras cell; of ``units`` units, without
            dropout or zoneout of its own), or a registered ``cell=`` name
            (`keras_seq.models.register_cell`): ``"gru"`` (default),
            ``"lstm"`` (Keras' LSTM), ``"peephole"``, ``"coupled"``,
            ``"simple"`` (Keras' SimpleRNN, an Elman RNN), ...
        attention_units: int or None, width of the additive attention's hidden
            layer; None disables attention. With ``attention="luong"`` any
            int switches attention on (the Luong kernel maps keys to
            ``units``, the width of the query s). Default None.
        attention_normalize: bool, weight-normalised attention (Bahdanau's).
            Default False.
        attention: ``"bahdanau"`` (default), ``"luong"``,
            ``"monotonic_bahdanau"`` or ``"monotonic_luong"``.
        zoneout: float or one per state: the cell's zoneout (see
            `keras_seq.layers.PeepholeLSTM`). Default 0.

    Call arguments:
        inputs: ``(B, T, E)`` embedded previous tokens y_{i-1}.
        encoder_outputs: ``(B, S, D)`` annotations h_j (needed with attention).
        initial_state: list of ``(B, units)`` tensors, s_0 (zeros if None);
            with monotonic attention, optionally α_0 ``(B, S)`` after them.
        encoder_outputs_mask: ``(B, S)`` bool, True for real source tokens;
            taken from the Keras mask of ``encoder_outputs`` when not given.
        return_attention_scores: also return α, ``(B, T, S)``.

    Returns:
        ``(B, T, units + D)`` with attention, ``(B, T, units)`` without
        (and α when asked).

    Examples:
        >>> decoder = RecurrentDecoder(16, cell="gru", attention_units=8)
        >>> o = decoder(keras.ops.ones((2, 5, 4)), keras.ops.ones((2, 7, 6)))
        >>> tuple(o.shape)
        (2, 5, 22)

    References:
        Bahdanau, Cho, Bengio. Neural Machine Translation by Jointly Learning
        to Align and Translate. ICLR 2015.
        Sutskever, Vinyals, Le. Sequence to Sequence Learning with Neural
        Networks. NeurIPS 2014.
    """

    def __init__(
        self,
        units: int,
        cell="gru",
        attention_units: int | None = None,
        attention_normalize: bool = False,
        attention: str = "bahdanau",
        zoneout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        where = "RecurrentDecoder"
        self.attention_kind = check_choice(where, "attention", attention, ATTENTION_KINDS)
        self.zoneout = check_zoneout(where, zoneout)
        self.units = check_positive_int(where, "units", units)
        self.attention_units = check_positive_int(
            where, "attention_units", attention_units, allow_none=True
        )
        if isinstance(cell, dict):  # a cell object, in a saved config
            cell = keras.saving.deserialize_keras_object(cell)
        if isinstance(cell, str):
            self.cell_name = registry.check_cell(cell, where)
        else:
            _check_cell_object(where, cell)
            self.cell_name = None
            self.cell = cell
        # One rate per state of the cell, checked before any call.
        zoneout_rates(self.zoneout, [1] * self._cell_states, where)
        self.attention_normalize = check_bool(where, "attention_normalize", attention_normalize)
        self.supports_masking = True

    @property
    def monotonic(self) -> bool:
        """Whether the attention is monotonic (α_{i-1} is then the last state)."""
        return self.attention_units is not None and self.attention_kind.startswith("monotonic")

    @property
    def num_states(self) -> int:
        """The states of a step: the cell's, then α with monotonic attention."""
        return self._cell_states + int(self.monotonic)

    @property
    def _cell_states(self) -> int:
        if getattr(self, "cell", None) is not None:
            state_size = self.cell.state_size
            return len(state_size) if isinstance(state_size, (list, tuple)) else 1
        return registry.num_states(self.cell_name)

    def build(self, inputs_shape, encoder_outputs_shape=None, initial_state_shape=None):
        if self.attention_units is not None and encoder_outputs_shape is None:
            raise ArgumentValueError(
                "RecurrentDecoder", "with attention the layer needs ", Arg("encoder_outputs"),
                "; call it as decoder(inputs, encoder_outputs).")
        input_dim = inputs_shape[-1]
        if self.attention_units is not None:
            value_dim = encoder_outputs_shape[-1]
            monotonic = {"sigmoid_noise": MONOTONIC_SIGMOID_NOISE,
                         "score_bias_init": MONOTONIC_SCORE_BIAS}
            if self.attention_kind == "luong":
                self.attention = LuongAttention(
                    self.units, dtype=self.dtype_policy, name="attention"
                )
            elif self.attention_kind == "monotonic_luong":
                self.attention = LuongMonotonicAttention(
                    self.units, dtype=self.dtype_policy, name="attention", **monotonic)
            elif self.attention_kind == "monotonic_bahdanau":
                self.attention = BahdanauMonotonicAttention(
                    self.attention_units, normalize=self.attention_normalize,
                    dtype=self.dtype_policy, name="attention", **monotonic)
            else:
                self.attention = BahdanauAttention(
                    self.attention_units,
                    normalize=self.attention_normalize,
                    dtype=self.dtype_policy,
                    name="attention",
                )
            self.attention.build((None, self.units), (None, None, value_dim))
            input_dim += value_dim
        else:
            self.attention = None
        if self.cell_name is not None:
            # The decoder applies the zoneout (`step`), whatever the cell.
            cell_class = registry.cell_class(self.cell_name)
            self.cell = cell_class(self.units, dtype=self.dtype_policy, name="cell")
        if not self.cell.built:
            self.cell.build((None, input_dim))
        rates = zoneout_rates(self.zoneout, self.cell.state_size, self)
        wrapper = None
        if self.attention is not None:
            # The step's two halves; the wrapper owns no weights of its
            # own, and the decoder's `cell` and `attention` keep their paths.
            wrapper = AttentionWrapper(self.cell, self.attention, output_attention=False,
                                       dtype=self.dtype_policy, name="attention_wrapper")
            wrapper.build((None, inputs_shape[-1]), (None, None, value_dim))
        self._wrapper = wrapper
        step_class = _PlainDecoderStep if wrapper is None else _DecoderStep
        memory_shape = None if wrapper is None else (None, None, value_dim)

        def loop(alignments, fed_masks=False):
            step = step_class(self.cell, self.attention, wrapper, rates, self.monotonic,
                              alignments=alignments, fed_masks=fed_masks,
                              dtype=self.dtype_policy)
            width = inputs_shape[-1] + (sum(step.mask_widths) if fed_masks else 0)
            step.build((None, width), memory_shape)
            return RNN(step, return_sequences=True, dtype=self.dtype_policy)

        # The loops of the whole-sequence call and of one that also returns α;
        # with zoneout, the same two in training, fed their keep-masks.
        self._loop = loop(alignments=False)
        self._scores_loop = loop(alignments=wrapper is not None)
        zones = any(rate > 0 for rate in rates)
        self._fed_loop = loop(alignments=False, fed_masks=True) if zones else None
        self._fed_scores_loop = (loop(alignments=wrapper is not None, fed_masks=True)
                                 if zones else None)
        self.built = True

    @property
    def _step(self) -> _DecoderStep:
        return self._loop.cell

    def _run(self, inputs, scores, training, **kwargs):
        """The loop over ``inputs``; in training with zoneout, every step's
        keep-masks drawn first (nothing random runs inside the loop, as in
        every layer of `keras_seq.layers.RNN`) and fed beside the inputs."""
        step = self._step
        if not (training and self._fed_loop is not None):
            loop = self._scores_loop if scores else self._loop
            return loop(inputs, training=training, **kwargs)
        shape = keras.ops.shape(inputs)
        keep = zoneout_masks(step.rates, step.cell_state_sizes, (shape[1], shape[0]),
                             self.cell.seed_generator, self.compute_dtype)  # (T, B, size)
        fed = [keras.ops.transpose(keras.ops.cast(m, inputs.dtype), (1, 0, 2))
               for m in keep if m is not None]
        loop = self._fed_scores_loop if scores else self._fed_loop
        return loop(keras.ops.concatenate([inputs, *fed], axis=-1), training=training, **kwargs)

    def get_initial_state(self, batch_size, encoder_outputs=None):
        """Zeros for the cell's states; with monotonic attention, then α_0
        over ``encoder_outputs`` (all at the first source position)."""
        states = [
            keras.ops.zeros((batch_size, self.units), dtype=self.compute_dtype)
            for _ in range(self._cell_states)
        ]
        if self.monotonic:
            states.append(self.initial_alignments(encoder_outputs))
        return states

    def first_states(self, batch_size, encoder_outputs=None, initial_state=None):
        """The states of the first step: ``initial_state`` (the cell's; zeros
        when None or empty) and, with monotonic attention, α_0 after them
        unless ``initial_state`` holds it already."""
        if initial_state is None or (isinstance(initial_state, (list, tuple))
                                     and not initial_state):
            return self.get_initial_state(batch_size, encoder_outputs)
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [
            initial_state]
        if self.monotonic and len(states) == self._cell_states:
            states.append(self.initial_alignments(encoder_outputs))
        if len(states) != self.num_states:
            expected = f"{self._cell_states} tensor(s) for the decoder's cell"
            if self.monotonic:
                expected += ", then optionally the alignments"
            raise invalid_value(self, "initial_state", expected, f"{len(states)} tensor(s)")
        return states

    def initial_alignments(self, encoder_outputs):
        """α_0 of monotonic attention: ``(B, S)``, one-hot at the first position."""
        if encoder_outputs is None:
            raise invalid_value(self, "encoder_outputs", "the encoder outputs, to start "
                                "the monotonic alignment", None)
        return keras.ops.cast(self.attention.initial_alignments(encoder_outputs),
                              self.compute_dtype)

    def precompute_keys(self, encoder_outputs):
        """W_k h_j for all j, computed once per source batch (attention only)."""
        if self.attention is None:
            return None
        return self.attention.precompute_keys(encoder_outputs)

    def step(
        self,
        y,
        states,
        encoder_outputs=None,
        processed_key=None,
        encoder_mask=None,
        training=None,
        keep_masks=None,
    ):
        """One decoder step: ``(B, E)`` input y_{i-1} and states s_{i-1}.

        ``keep_masks``: the zoneout masks of this step (training); without
        them a training step draws its own.

        Returns ``(o_i, new_states, alpha_i)``; ``alpha_i`` is ``(B, S)``, or
        None without attention.
        """
        step = self._step
        if self.attention is None:
            o, new_states = step.step(y, states, training=training, keep_masks=keep_masks)
            return o, new_states, None
        memory = step.prepare_memory(encoder_outputs, encoder_mask, processed_key)
        o, new_states = step.step(y, states, training=training, memory=memory,
                                  keep_masks=keep_masks)
        alpha = new_states[-1] if self.monotonic else None
        return o, new_states, alpha

    def call(
        self,
        inputs,
        encoder_outputs=None,
        initial_state=None,
        encoder_outputs_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        batch_size = keras.ops.shape(inputs)[0]
        if self.attention is None:
            states = self.first_states(batch_size, encoder_outputs, initial_state)
            outputs = self._run(inputs, False, training, initial_state=states)
            if return_attention_scores:
                return outputs, keras.ops.zeros((batch_size, keras.ops.shape(inputs)[1], 0),
                                                self.compute_dtype)
            return outputs
        states = self.first_states(batch_size, encoder_outputs, initial_state)
        if return_attention_scores:
            # The α of every step rides with the outputs (the loop's last
            # state, zeros at first without monotonic attention).
            return tuple(self._run(inputs, True, training, memory=encoder_outputs,
                                   memory_mask=encoder_outputs_mask, initial_state=states))
        return self._run(inputs, False, training, memory=encoder_outputs,
                         memory_mask=encoder_outputs_mask, initial_state=states)

    def compute_output_shape(self, inputs_shape, encoder_outputs_shape=None,
                             initial_state_shape=None):
        o_dim = self.units
        if self.attention_units is not None:
            o_dim += encoder_outputs_shape[-1]
        return (inputs_shape[0], inputs_shape[1], o_dim)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "cell": (self.cell_name if self.cell_name is not None
                         else keras.saving.serialize_keras_object(self.cell)),
                "attention_units": self.attention_units,
                "attention_normalize": self.attention_normalize,
            }
        )
        # Left out at their defaults: files saved before they existed load.
        if self.attention_kind != "bahdanau":
            config["attention"] = self.attention_kind
        if self.zoneout:
            config["zoneout"] = self.zoneout
        return config


def _check_cell_object(where, cell) -> None:
    """A cell the decoder can step: a layer with ``state_size``, without
    dropout or zoneout of its own (the decoder's zoneout is ``zoneout=``)."""
    if not (isinstance(cell, keras.layers.Layer) and hasattr(cell, "state_size")):
        raise invalid_type(where, "cell", "a registered cell name or a recurrent cell (a "
                           "layer with `state_size`)", cell)
    refuse_masks_of_its_own(where, cell, "give the decoder zoneout=, and put Dropout layers "
                            "around it")
