"""The recurrent decoder of `rnn_seq2seq`, with Bahdanau or Luong attention fed at every step."""

from __future__ import annotations

import keras

from keras_seq._validation import (
    check_bool,
    check_choice,
    check_positive_int,
    check_zoneout,
    invalid_value,
)
from keras_seq.layers.attention.bahdanau_attention import BahdanauAttention
from keras_seq.layers.attention.luong_attention import LuongAttention
from keras_seq.layers.attention.monotonic import (
    BahdanauMonotonicAttention,
    LuongMonotonicAttention,
)
from keras_seq.layers.recurrent import registry
from keras_seq.layers.recurrent.attention_wrapper import AttentionWrapper
from keras_seq.layers.recurrent.rnn import scan
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

# Longer statically known target lengths run in a loop instead of unrolled.
_MAX_UNROLL = 32


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

    The whole-sequence call (teacher forcing) and one-step decoding share
    `step()`, so greedy decoding computes exactly what training computed.
    The cell has no dropout of its own (dropout masks cannot be drawn inside
    the step loop); put `Dropout` layers around the decoder instead. Zoneout
    (``zoneout=``) draws its masks for every step before the loop; with
    Keras' own cells (``"lstm"``, ``"simple"``) the decoder applies it after
    the cell's step, as this package's cells do in theirs.

    Args:
        units: int, width of the decoder state s.
        cell: str, one of ``"gru"``, ``"lstm"`` (Keras' LSTM), ``"peephole"``,
            ``"coupled"``, ``"simple"`` (Keras' SimpleRNN, an Elman RNN).
            Default ``"gru"``.
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
        cell: str = "gru",
        attention_units: int | None = None,
        attention_normalize: bool = False,
        attention: str = "bahdanau",
        zoneout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_kind = check_choice("RecurrentDecoder", "attention", attention,
                                           ATTENTION_KINDS)
        self.zoneout = check_zoneout("RecurrentDecoder", zoneout)
        self.units = check_positive_int("RecurrentDecoder", "units", units)
        self.attention_units = check_positive_int(
            "RecurrentDecoder", "attention_units", attention_units, allow_none=True
        )
        self.cell_name = registry.check_cell(cell, "RecurrentDecoder")
        # One rate per state of the cell, checked before any call.
        zoneout_rates(self.zoneout, [1] * registry.num_states(self.cell_name),
                      "RecurrentDecoder")
        self.attention_normalize = check_bool(
            "RecurrentDecoder", "attention_normalize", attention_normalize
        )
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
            raise ValueError(
                "RecurrentDecoder: with attention the layer needs `encoder_outputs`; "
                "call it as decoder(inputs, encoder_outputs)."
            )
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
        # The decoder applies the zoneout (`step`), whatever the cell.
        cell_class = registry.cell_class(self.cell_name)
        self.cell = cell_class(self.units, dtype=self.dtype_policy, name="cell")
        self.cell.build((None, input_dim))
        self._wrapper = None
        if self.attention is not None:
            # The step's two halves; the wrapper owns no weights of its
            # own, and the decoder's `cell` and `attention` keep their paths.
            self._wrapper = AttentionWrapper(self.cell, self.attention, output_attention=False,
                                             dtype=self.dtype_policy, name="attention_wrapper")
            self._wrapper.build((None, inputs_shape[-1]), (None, None, value_dim))
        self._zoneout_rates = zoneout_rates(self.zoneout, self.cell.state_size, self)
        self.built = True

    def _zoneout_masks(self, shape_prefix) -> list:
        """Fresh zoneout keep-masks (one per state, None where z = 0), from the cell's seed."""
        cell = self.cell
        return zoneout_masks(self._zoneout_rates, cell.state_size, shape_prefix,
                             cell.seed_generator, cell.compute_dtype)

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
            expected = f"{self._cell_states} tensor(s) for cell {self.cell_name!r}"
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

        ``keep_masks``: the zoneout masks of this step (training), drawn by
        ``call`` before its loop; without them a training step draws its own.

        Returns ``(o_i, new_states, alpha_i)``; ``alpha_i`` is ``(B, S)``, or
        None without attention.
        """
        states = list(states)
        if self.attention is None:
            s, new_states = self.cell(y, states, training=training)
            new_states = list(new_states) if isinstance(new_states, (list, tuple)) else [
                new_states]
            alpha = None
        else:
            if self.monotonic:
                states, previous = states[:-1], states[-1]
            else:
                previous = None
            # a_{i-1} of the wrapper's step, from its query s_{i-1} (the
            # hidden state h for every cell family); monotonic attention is
            # the expected alignment in training, hard (moving only
            # forward) otherwise.
            memory = self._wrapper.prepare_memory(encoder_outputs, encoder_mask, processed_key)
            context, alpha = self._wrapper.attend(
                states[0], memory, previous, training=training,
                mode=(None if training else "hard") if self.monotonic else None)
            s, new_states = self._wrapper.cell_step(y, context, states, training=training)
        if self.zoneout:
            if training and keep_masks is None:
                keep_masks = self._zoneout_masks((keras.ops.shape(y)[0],))
            new_states = apply_zoneout(self._zoneout_rates, states, new_states,
                                       keep_masks if training else None)
            s = new_states[0]
        o = s if self.attention is None else keras.ops.concatenate(
            [s, keras.ops.cast(context, s.dtype)], axis=-1)
        if self.monotonic:
            new_states = [*new_states, alpha]
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
        states = self.first_states(batch_size, encoder_outputs, initial_state)
        processed_key = self.precompute_keys(encoder_outputs)
        if self.attention is not None and encoder_outputs_mask is not None:
            encoder_outputs_mask = keras.ops.cast(encoder_outputs_mask, "bool")

        # A known, short length (as in training batches) runs unrolled: that
        # lets TensorFlow schedule the steps' independent ops together and
        # avoids the while-loop's per-iteration overhead in the gradient.
        steps = inputs.shape[1]
        unroll = steps is not None and steps <= _MAX_UNROLL
        y_seq = keras.ops.transpose(inputs, (1, 0, 2))  # (T, B, E): the loops run over the first axis
        o_dim = self.units + (0 if self.attention is None else encoder_outputs.shape[-1])
        o0 = keras.ops.zeros((batch_size, o_dim), dtype=self.compute_dtype)
        alpha0 = (
            keras.ops.zeros((batch_size, keras.ops.shape(encoder_outputs)[1]),
                            dtype=self.compute_dtype)
            if self.attention is not None
            else keras.ops.zeros((batch_size, 0), dtype=self.compute_dtype)
        )
        templates = [o0, alpha0] if return_attention_scores else [o0]
        sequences, masks = [y_seq], []
        if training and self.zoneout:
            # Fresh zoneout masks for every step, drawn here: not inside the loop.
            masks = self._zoneout_masks((keras.ops.shape(y_seq)[0], batch_size))
            sequences += [m for m in masks if m is not None]

        def body(y_t, carry):
            keep_masks = None
            if masks:
                drawn = iter(y_t[1:])
                keep_masks = [None if m is None else next(drawn) for m in masks]
            o, new_states, alpha = self.step(
                y_t[0], carry, encoder_outputs, processed_key, encoder_outputs_mask, training,
                keep_masks,
            )
            if not return_attention_scores:
                return [o], list(new_states)
            return [o, alpha0 if alpha is None else keras.ops.cast(alpha, self.compute_dtype)], list(
                new_states
            )

        # Training runs one step per loop iteration, as the decoder's tf.scan
        # did; more per iteration were not measured here.
        outputs, _ = scan(body, sequences, states, templates, training=training, unroll=unroll,
                          steps_per_iteration=1 if training is True else None)
        # (B, T, o_dim) and (B, T, S)
        return tuple(outputs) if return_attention_scores else outputs[0]

    def compute_output_shape(self, inputs_shape, encoder_outputs_shape=None, initial_state_shape=None):
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
                "cell": self.cell_name,
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
