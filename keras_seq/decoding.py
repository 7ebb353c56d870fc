"""Greedy and beam-search decoding for the seq2seq models of `keras_seq.models`,
and sampling from its language models.

Everything here is TensorFlow graph code that can be wrapped in `tf.function`
and saved in a SavedModel: the output is a fixed ``(B, max_length)`` buffer
updated inside one `tf.while_loop` (no `TensorArray`, no Python loop over
time), and the loop stops early once every sequence has produced ``[END]``.

The decoder runs one step at a time from the model's named parts (see
`keras_seq.models.seq2seq`): the recurrent decoder carries its state and reuses
the attention keys W_k h computed once per batch; the Transformer decoder
carries a self-attention key/value cache per block and reads cross-attention
keys/values computed once from the encoder output. `decoder_steps` returns
that one-step view (`DecoderSteps`); `keras_seq.export` converts it into an
encoder and a decoder-step model for decoding loops outside TensorFlow.
`language_model_steps` is the same view of a `models.language_model` (the
Transformer's blocks with the same caches, without cross-attention), which
`sample` drives.

Examples:
    >>> import tensorflow as tf
    >>> from keras_seq import models, decoding
    >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
    >>> decode = tf.function(lambda ids: decoding.greedy_decode(model, ids, max_length=5))
    >>> tuple(decode(tf.constant([[5, 6, 7, 0], [4, 4, 0, 0]])).shape)
    (2, 5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, invalid_type, shape_error
from keras_seq.models.language_model import language_model_kind
from keras_seq.models.seq2seq import seq2seq_kind
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

_NEG_INF = -1e9  # finite, so that -inf - -inf never turns into NaN


class _RecurrentSteps:
    """One-step view of an `rnn_seq2seq` model."""

    def __init__(self, model):
        self.encoder = model.get_layer("encoder")
        self.embedding = model.get_layer("target_embedding")
        self.decoder = model.get_layer("decoder")
        self.logits = model.get_layer("logits")

    def start(self, encoder_inputs, max_length):
        h, *s0 = self.encoder(encoder_inputs, training=False)
        constants = {"h": h, "mask": tf.not_equal(encoder_inputs, PAD_ID)}
        if self.decoder.attention is not None:
            constants["processed_key"] = self.decoder.precompute_keys(h)
        return constants, {"s": list(s0)}

    def attention(self, encoder_inputs, decoder_inputs):
        if self.decoder.attention is None:
            raise ValueError(
                "keras_seq.decoding.attention_weights: this rnn_seq2seq model was built "
                "with attention=None; it has no attention weights."
            )
        h, *s0 = self.encoder(encoder_inputs, training=False)
        y = self.embedding(decoder_inputs)
        _, alpha = self.decoder(y, h, initial_state=s0, return_attention_scores=True)
        return alpha

    def step(self, tokens, t, constants, state):
        # tf.identity drops the Keras mask of the embedding: the cell has no use
        # for it (finished rows are handled by the search) and would warn.
        y = tf.identity(self.embedding(tokens))  # (B, E)
        o, s, _ = self.decoder.step(
            y,
            state["s"],
            constants["h"],
            constants.get("processed_key"),
            constants["mask"],
            training=False,
        )
        return self.logits(o), {"s": s}


class _TransformerSteps:
    """One-step view of a `transformer_seq2seq` model, with key/value caches.

    With ``decoder_only=True``, of a Transformer `models.language_model`: no
    encoder and no cross-attention; ``start`` reads only the batch size of
    its input (the prompt).
    """

    def __init__(self, model, decoder_only=False):
        prefix = "token" if decoder_only else "target"
        self.encoder = None if decoder_only else model.get_layer("encoder")
        self.embedding = model.get_layer(f"{prefix}_embedding")
        self.position = model.get_layer(f"{prefix}_position")
        self.blocks = []
        while True:
            try:
                self.blocks.append(model.get_layer(f"decoder_layer_{len(self.blocks)}"))
            except ValueError:
                break
        names = {layer.name for layer in model.layers}
        self.final_norm = (
            model.get_layer("decoder_final_norm") if "decoder_final_norm" in names else None
        )
        logits = model.get_layer("logits")
        self.output_dense = logits if isinstance(logits, keras.layers.Dense) else None
        self.num_heads = self.blocks[0].num_heads
        self.head_dim = self.embedding.output_dim // self.num_heads

    def _empty_cache(self, batch_size, length):
        return tf.zeros(
            [batch_size, 2, length, self.num_heads, self.head_dim], self.embedding.compute_dtype
        )

    def start(self, encoder_inputs, max_length):
        if self.encoder is None:
            batch_size = tf.shape(encoder_inputs)[0]
            return {}, {"self": [self._empty_cache(batch_size, max_length) for _ in self.blocks]}
        h = self.encoder(encoder_inputs, training=False)
        mask = tf.not_equal(encoder_inputs, PAD_ID)
        batch_size, source_length = tf.shape(h)[0], tf.shape(h)[1]
        # Cross-attention keys/values depend only on h: write them once, at
        # index 0, from a throwaway query (its self-attention result is unused).
        dummy = tf.zeros([batch_size, 1, self.embedding.output_dim], h.dtype)
        cross = []
        for block in self.blocks:
            _, _, c = block(
                dummy,
                h,
                encoder_padding_mask=mask,
                self_attention_cache=self._empty_cache(batch_size, max_length),
                self_attention_cache_update_index=0,
                cross_attention_cache=self._empty_cache(batch_size, source_length),
                cross_attention_cache_update_index=0,
                training=False,
            )
            cross.append(c)
        constants = {"h": h, "mask": mask, "cross": cross}
        state = {"self": [self._empty_cache(batch_size, max_length) for _ in self.blocks]}
        return constants, state

    def attention(self, encoder_inputs, decoder_inputs):
        h = self.encoder(encoder_inputs, training=False)
        masks = {
            "encoder_padding_mask": tf.not_equal(encoder_inputs, PAD_ID),
            "decoder_padding_mask": tf.not_equal(decoder_inputs, PAD_ID),
        }
        x = self.position(self.embedding(decoder_inputs))
        for block in self.blocks[:-1]:
            x = block(x, h, **masks, training=False)
        _, scores = self.blocks[-1](x, h, **masks, training=False, return_attention_scores=True)
        return tf.reduce_mean(tf.cast(scores, "float32"), axis=1)  # mean over heads

    def step(self, tokens, t, constants, state):
        x = self.embedding(tokens[:, None])  # (B, 1, d)
        # A fresh tensor without the Keras mask of the embedding: with a cache,
        # a (B, 1) implicit mask would reach the self-attention as a mask over
        # the S cache positions, where causal masking already does the job.
        x = tf.identity(self.position(x, start_index=t))
        caches = []
        for i, (block, cache) in enumerate(zip(self.blocks, state["self"])):
            if self.encoder is None:
                x, cache = block(
                    x, self_attention_cache=cache, self_attention_cache_update_index=t,
                    training=False,
                )
            else:
                x, cache, _ = block(
                    x,
                    constants["h"],
                    encoder_padding_mask=constants["mask"],
                    self_attention_cache=cache,
                    self_attention_cache_update_index=t,
                    cross_attention_cache=constants["cross"][i],
                    cross_attention_cache_update_index=None,
                    training=False,
                )
            caches.append(cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = x[:, 0]
        if self.output_dense is not None:
            logits = self.output_dense(x)
        else:
            logits = tf.cast(self.embedding(x, reverse=True), "float32")
        return logits, {"self": caches}


class DecoderSteps(Protocol):
    """The one-step view of a translation model that decoding runs on.

    `decoder_steps` returns one for a model built by `models.rnn_seq2seq` or
    `models.transformer_seq2seq`; `greedy_decode`, `beam_search` and the
    encoder/decoder-step exports of `keras_seq.export` all drive it. Write
    one for a model of your own (an image encoder, say) and
    `greedy_decode_steps` decodes with it.
    ``constants`` and ``state`` are nests of tensors (dicts and lists); their
    structure is fixed for a given model.
    """

    def start(self, encoder_inputs: tf.Tensor, max_length: int) -> tuple[dict, dict]:
        """Encodes ``(B, S)`` int32 source ids once.

        Returns ``(constants, state)``: what every step reads (encoder
        outputs, source mask, precomputed attention keys or cross-attention
        caches) and what each step updates (the recurrent state, or
        self-attention key/value caches holding ``max_length`` steps).
        """

    def step(
        self, tokens: tf.Tensor, t: tf.Tensor, constants: dict, state: dict
    ) -> tuple[tf.Tensor, dict]:
        """One decoder step: ``(B,)`` int32 tokens at position ``t`` ->
        ``((B, V) logits, new state)``."""

    def attention(self, encoder_inputs: tf.Tensor, decoder_inputs: tf.Tensor) -> tf.Tensor:
        """Teacher-forced attention weights ``(B, T, S)`` (see `attention_weights`)."""


def decoder_steps(model: keras.Model) -> DecoderSteps:
    """The `DecoderSteps` of a translation model: encode once, then decode step by step.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.

    Returns:
        An object with ``start(encoder_inputs, max_length) -> (constants, state)``
        and ``step(tokens, t, constants, state) -> (logits, state)``.

    Raises:
        ValueError: the model lacks the named layers of those builders.

    Examples:
        >>> from keras_seq import models, decoding
        >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
        >>> steps = decoding.decoder_steps(model)
        >>> constants, state = steps.start(tf.constant([[5, 6, 7]]), max_length=4)
        >>> logits, state = steps.step(tf.constant([2]), tf.constant(0), constants, state)
        >>> tuple(logits.shape)
        (1, 12)
    """
    require_tensorflow("keras_seq.decoding.decoder_steps")
    kind = seq2seq_kind(model)
    if kind == "rnn":
        return _RecurrentSteps(model)
    if kind == "transformer":
        return _TransformerSteps(model)
    raise ValueError(
        f"keras_seq.decoding: model {getattr(model, 'name', model)!r} was not built by "
        "keras_seq.models.rnn_seq2seq or keras_seq.models.transformer_seq2seq "
        "(it lacks the named encoder/decoder layers decoding steps through)."
    )


class _RecurrentLanguageModelSteps:
    """One-step view of a recurrent `models.language_model`: each layer's cell."""

    def __init__(self, model):
        self.embedding = model.get_layer("embedding")
        self.cells = []
        while True:
            try:
                self.cells.append(model.get_layer(f"recurrent_{len(self.cells)}").cell)
            except ValueError:
                break
        self.logits = model.get_layer("logits")

    def start(self, prompt_ids, max_length):
        batch_size = tf.shape(prompt_ids)[0]
        return {}, {"s": [list(cell.get_initial_state(batch_size)) for cell in self.cells]}

    def step(self, tokens, t, constants, state):
        x = tf.identity(self.embedding(tokens))  # (B, E), without the Keras mask
        states = []
        for cell, s in zip(self.cells, state["s"]):
            x, s = cell(x, s, training=False)
            states.append(list(s))
        return self.logits(x), {"s": states}


def language_model_steps(model: keras.Model) -> DecoderSteps:
    """The `DecoderSteps` of a `models.language_model`: one token at a time.

    ``start(prompt_ids, max_length)`` reads only the batch size of the
    ``(B, P)`` prompt and returns empty constants and the initial state: zero
    recurrent states, or one empty key/value cache of ``max_length``
    positions per Transformer block (the cache of `decoder_steps`).
    ``step(tokens, t, constants, state)`` feeds the ``(B,)`` tokens at cache
    position ``t`` (the Transformer's position encoding uses ``t``; the
    recurrent model ignores it) and returns the ``(B, V)`` logits of the next
    token.

    Raises:
        ValueError: the model was not built by `models.language_model`.

    Examples:
        >>> from keras_seq import models, decoding
        >>> model = models.language_model(20, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> steps = decoding.language_model_steps(model)
        >>> constants, state = steps.start(tf.constant([[5, 6]]), max_length=4)
        >>> logits, state = steps.step(tf.constant([5]), tf.constant(0), constants, state)
        >>> tuple(logits.shape)
        (1, 20)
    """
    require_tensorflow("keras_seq.decoding.language_model_steps")
    kind = language_model_kind(model)
    if kind == "transformer":
        return _TransformerSteps(model, decoder_only=True)
    if kind == "rnn":
        return _RecurrentLanguageModelSteps(model)
    raise ValueError(
        f"keras_seq.decoding: model {getattr(model, 'name', model)!r} was not built by "
        "keras_seq.models.language_model (it lacks the named layers sampling steps through)."
    )


def sample(
    model: keras.Model,
    prompt_ids,
    length: int,
    temperature: float = 1.0,
    seed: int | None = None,
    context: int | None = None,
    return_logits: bool = False,
    suppress_ids: Sequence[int] = (),
):
    """Samples ``length`` tokens after a prompt from a language model, in one loop.

    Token by token, y_i ~ softmax(z_i / T), where z_i are the logits of the
    model for the preceding tokens; ``temperature=0`` takes the argmax
    (greedy decoding). The padding id 0 is never drawn (the models read it
    as padding, not as a token), nor any id of ``suppress_ids``. Everything runs in one `tf.while_loop` over a fixed
    ``(B, P + length)`` buffer, one token per iteration: first the prompt's
    tokens are fed, then each sampled token. The Transformer reuses its
    key/value caches (`language_model_steps`), so each step costs one
    position, not the whole prefix.

    ``context`` (Transformer) bounds what the model sees to the positions it
    was trained on: a cache of ``W = context`` positions; when it is full,
    it restarts with the last ``W // 2`` tokens fed again, so each token is
    predicted from the tokens since the last restart, at least ``W // 2`` and
    at most ``W`` of them (fewer only at the start). Precisely: the token at
    position k (the prompt is positions 0 .. P − 1) is predicted from
    positions s .. k − 1 with s = 0 for k ≤ W, else
    s = d·⌊(k − 1 − W // 2) / d⌋ with d = W − W // 2. None: one cache for the
    whole sequence (a recurrent model always carries its state over the
    whole sequence and ignores ``context``).

    Args:
        model: a model built by `models.language_model`.
        prompt_ids: ``(B, P)`` int token ids, P ≥ 1, no padding.
        length: int ≥ 1, tokens to sample after the prompt.
        temperature: float T ≥ 0. Default 1 (the model's distribution).
        seed: int or None. With an int, the samples are a function of the
            seed, the prompt and the weights (stateless sampling, the
            token at position k drawn with the seed ``(seed, k)``); None draws a
            fresh seed.
        context: int ≥ 2 or None, the Transformer's window W (see above).
        return_logits: bool, also return the logits each token was drawn from.
        suppress_ids: further ids never drawn (e.g. the reserved tokens a
            character model never saw as targets).

    Returns:
        ``(B, length)`` int32 ids; with ``return_logits``, also the
        ``(B, length, V)`` float32 logits z_i (before the temperature).

    Examples:
        >>> from keras_seq import models
        >>> model = models.language_model(20, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> run = tf.function(lambda ids: sample(model, ids, length=6, seed=1, context=4))
        >>> tuple(run(tf.constant([[5, 6, 7]])).shape)
        (1, 6)
    """
    require_tensorflow("keras_seq.decoding.sample")
    from keras_seq._validation import check_bool, check_int

    where = "sample"
    length = check_positive_int(where, "length", length)
    temperature = check_float(where, "temperature", temperature, low=0.0)
    seed = check_int(where, "seed", seed, allow_none=True)
    context = check_int(where, "context", context, minimum=2, allow_none=True)
    return_logits = check_bool(where, "return_logits", return_logits)
    never = sorted({PAD_ID, *(check_int(where, "suppress_ids", i, minimum=0) for i in suppress_ids)})
    prompt_ids = tf.convert_to_tensor(prompt_ids)
    if not prompt_ids.dtype.is_integer:
        raise invalid_type(
            where, "prompt_ids", "integer token ids", f"a tensor of dtype {prompt_ids.dtype.name}"
        )
    if prompt_ids.shape.rank != 2 or prompt_ids.shape[1] == 0:
        raise shape_error(where, "prompt_ids", "(batch, length) with length >= 1", prompt_ids.shape)
    steps = language_model_steps(model)
    if isinstance(steps, _RecurrentLanguageModelSteps):
        context = None  # the state carries everything; no restarts
    ids, logits = _sample(
        steps, tf.cast(prompt_ids, tf.int32), length, temperature, seed, context,
        vocabulary_size=model.outputs[0].shape[-1], never=never,
    )
    return (ids, logits) if return_logits else ids


def _sample(steps, prompt_ids, length, temperature, seed, context, vocabulary_size, never):
    batch_size, prompt_length = tf.shape(prompt_ids)[0], tf.shape(prompt_ids)[1]
    total = prompt_length + length
    # Without a context, one cache holds the whole sequence (never restarted).
    window = total if context is None else tf.constant(context)
    keep = window // 2
    constants, state = steps.start(prompt_ids, total if context is None else context)
    ids = tf.concat([prompt_ids, tf.zeros([batch_size, length], tf.int32)], axis=1)
    if seed is None:
        seed = tf.random.uniform([], maxval=tf.int32.max, dtype=tf.int32)
    seed = tf.cast(seed, tf.int32)

    def draw(logits, position):
        excluded = tf.reduce_any(
            tf.equal(tf.range(vocabulary_size)[:, None], tf.constant(never)[None, :]), axis=-1
        )
        logits = tf.where(excluded, _NEG_INF, logits)
        if temperature == 0.0:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        return tf.random.stateless_categorical(
            logits / temperature, 1, seed=tf.stack([seed, position]), dtype=tf.int32
        )[:, 0]

    # i: the index of the token fed next, at cache position t; filled: tokens known.
    def cond(i, t, filled, ids, logits_buffer, state):
        return filled < total

    def body(i, t, filled, ids, logits_buffer, state):
        logits, state = steps.step(tf.gather(ids, i, axis=1), t, constants, state)
        logits = tf.cast(logits, tf.float32)
        new = tf.equal(i + 1, filled)  # the next token is not known yet: draw it
        token = draw(logits, filled)
        ids = tf.where(new, _write_column(ids, filled, token), ids)
        at = tf.equal(tf.range(length), filled - prompt_length)[None, :, None]
        logits_buffer = tf.where(tf.logical_and(new, at), logits[:, None, :], logits_buffer)
        filled += tf.cast(new, tf.int32)
        i, t = i + 1, t + 1
        full = tf.equal(t, window)  # restart the cache from the last `keep` tokens
        i = tf.where(full, i - keep, i)
        t = tf.where(full, 0, t)
        return i, t, filled, ids, logits_buffer, state

    logits_buffer = tf.zeros([batch_size, length, vocabulary_size], tf.float32)
    _, _, _, ids, logits_buffer, _ = tf.while_loop(
        cond, body, (tf.constant(0), tf.constant(0), prompt_length, ids, logits_buffer, state)
    )
    return ids[:, prompt_length:], logits_buffer


def attention_weights(model, encoder_inputs, decoder_inputs):
    """Where each target position looks in the source, teacher-forced.

    Args:
        model: a model built by `keras_seq.models.rnn_seq2seq` (with
            attention) or `keras_seq.models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` source token ids.
        decoder_inputs: ``(B, T)`` target ids shifted right (``[START]``
            first), e.g. ``[START]`` followed by a decoded output.

    Returns:
        ``(B, T, S)`` float weights; each row sums to 1 over the non-padding
        source positions. The recurrent model gives its Bahdanau α; the
        Transformer gives the cross-attention of its last decoder block,
        averaged over the heads.
    """
    require_tensorflow("keras_seq.decoding.attention_weights")
    return decoder_steps(model).attention(
        tf.cast(encoder_inputs, "int32"), tf.cast(decoder_inputs, "int32")
    )


def _check_decode_args(where, encoder_inputs, max_length):
    """``(encoder_inputs as int32, max_length as int)``, or the error naming the bad one."""
    max_length = check_positive_int(where, "max_length", max_length)
    encoder_inputs = tf.convert_to_tensor(encoder_inputs)
    if not encoder_inputs.dtype.is_integer:
        raise invalid_type(
            where, "encoder_inputs", "integer token ids",
            f"a tensor of dtype {encoder_inputs.dtype.name}",
        )
    if encoder_inputs.shape.rank != 2:
        raise shape_error(where, "encoder_inputs", "(batch, length)", encoder_inputs.shape)
    return tf.cast(encoder_inputs, "int32"), max_length


def _write_column(buffer, t, values):
    """buffer[..., t] = values, as a select so it lowers to simple ops."""
    at_t = tf.equal(tf.range(tf.shape(buffer)[-1]), t)
    return tf.where(at_t, values[..., None], buffer)


def _greedy(steps, encoder_inputs, max_length, start_id, end_id):
    batch_size = tf.shape(encoder_inputs)[0]
    constants, state = steps.start(encoder_inputs, max_length)
    ids = tf.zeros([batch_size, max_length], tf.int32)
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)

    def cond(t, tokens, finished, ids, state):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(t, tokens, finished, ids, state):
        logits, state = steps.step(tokens, t, constants, state)
        tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        tokens = tf.where(finished, tf.constant(PAD_ID, tf.int32), tokens)
        ids = _write_column(ids, t, tokens)
        finished = tf.logical_or(finished, tf.equal(tokens, end_id))
        return t + 1, tokens, finished, ids, state

    _, _, _, ids, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, finished, ids, state)
    )
    return ids


def greedy_decode(
    model: keras.Model,
    encoder_inputs,
    max_length: int,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """Greedy decoding: y_i = argmax_y p(y | y_<i, x), until ``[END]``.

    Args:
        model: a model built by `models.rnn_seq2seq` or
            `models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` int source ids, 0-padded (rows may have
            different lengths). ``B`` may be 0.
        max_length: int, size of the output buffer (``[END]`` included).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(B, max_length)`` int32 ids; each row holds its tokens up to and
        including ``[END]``, then ``[PAD]`` (0).
    """
    require_tensorflow("keras_seq.decoding.greedy_decode")
    encoder_inputs, max_length = _check_decode_args("greedy_decode", encoder_inputs, max_length)
    return _greedy(decoder_steps(model), encoder_inputs, max_length, start_id, end_id)


def greedy_decode_steps(
    steps: DecoderSteps,
    inputs,
    max_length: int,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """`greedy_decode` for any `DecoderSteps`, e.g. a model with an image encoder.

    The loop of `greedy_decode`, driving ``steps`` (an object with the
    ``start`` and ``step`` methods of `DecoderSteps`) instead of a model made
    by the seq2seq builders. ``inputs`` go to ``steps.start`` unchanged, so
    they may be anything with a leading batch axis (images for a captioning
    model); only their batch size is read here.

    Args:
        steps: the one-step view of the model.
        inputs: a tensor ``(B, ...)``, what ``steps.start`` encodes.
        max_length: int, size of the output buffer (``[END]`` included).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(B, max_length)`` int32 ids laid out as in `greedy_decode`.
    """
    require_tensorflow("keras_seq.decoding.greedy_decode_steps")
    max_length = check_positive_int("greedy_decode_steps", "max_length", max_length)
    inputs = tf.convert_to_tensor(inputs)
    if inputs.shape.rank == 0:
        raise shape_error("greedy_decode_steps", "inputs", "(batch, ...)", inputs.shape)
    return _greedy(steps, inputs, max_length, start_id, end_id)


def _length_penalty(lengths, alpha):
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016)."""
    return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, alpha)


def _sequence_lengths(ids, end_id):
    """Tokens up to and including the first END; the whole buffer if none."""
    max_length = tf.shape(ids)[-1]
    is_end = tf.equal(ids, end_id)
    first_end = tf.argmax(tf.cast(is_end, tf.int32), axis=-1, output_type=tf.int32)
    return tf.where(tf.reduce_any(is_end, axis=-1), first_end + 1, max_length)


def _beam_search(steps, encoder_inputs, max_length, beam_width, length_penalty, start_id, end_id):
    batch_size = tf.shape(encoder_inputs)[0]
    k = beam_width
    constants, state = steps.start(encoder_inputs, max_length)
    # Beams of one example sit next to each other: row b * k + j.
    tile = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731
    constants = tf.nest.map_structure(tile, constants)
    state = tf.nest.map_structure(tile, state)

    # Only beam 0 is alive at first, so the k beams do not start as copies.
    log_probs = tf.tile(
        tf.concat([[0.0], tf.fill([k - 1], _NEG_INF)], axis=0)[None, :], [batch_size, 1]
    )  # (B, k)
    ids = tf.zeros([batch_size, k, max_length], tf.int32)
    finished = tf.zeros([batch_size, k], tf.bool)
    tokens = tf.fill([batch_size * k], tf.constant(start_id, tf.int32))

    def cond(t, tokens, log_probs, finished, ids, state):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(t, tokens, log_probs, finished, ids, state):
        logits, state = steps.step(tokens, t, constants, state)
        vocabulary_size = tf.shape(logits)[-1]
        step_log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        step_log_probs = tf.reshape(step_log_probs, [batch_size, k, vocabulary_size])
        # A finished beam may only be extended by PAD, at no cost.
        pad_only = tf.where(tf.equal(tf.range(vocabulary_size), PAD_ID), 0.0, _NEG_INF)
        step_log_probs = tf.where(finished[:, :, None], pad_only, step_log_probs)
        scores = tf.reshape(log_probs[:, :, None] + step_log_probs, [batch_size, -1])
        log_probs, flat = tf.math.top_k(scores, k)  # (B, k)
        beam = flat // vocabulary_size
        tokens = flat % vocabulary_size
        ids = _write_column(tf.gather(ids, beam, batch_dims=1), t, tokens)
        finished = tf.logical_or(
            tf.gather(finished, beam, batch_dims=1), tf.equal(tokens, end_id)
        )
        rows = tf.reshape(beam + k * tf.range(batch_size)[:, None], [-1])
        state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
        return t + 1, tf.reshape(tokens, [-1]), log_probs, finished, ids, state

    _, _, log_probs, _, ids, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, log_probs, finished, ids, state)
    )
    normalized = log_probs / _length_penalty(_sequence_lengths(ids, end_id), length_penalty)
    best = tf.argmax(normalized, axis=-1, output_type=tf.int32)
    return tf.gather(ids, best, batch_dims=1), tf.gather(log_probs, best, batch_dims=1)


def beam_search(
    model: keras.Model,
    encoder_inputs,
    max_length: int,
    beam_width: int = 4,
    length_penalty: float = 0.0,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search: keeps the ``beam_width`` most probable prefixes per step.

    Each step extends every live beam by every token and keeps the k best
    sums of log-probabilities; a beam that produced ``[END]`` is carried on
    unchanged. The answer is the beam maximising log p(Y|x) / lp(Y), with the
    GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (α = 0: plain log-probability;
    α > 0 favours longer outputs). ``beam_width=1`` is greedy decoding.

    Args:
        model: a model built by `models.rnn_seq2seq` or
            `models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` int source ids, 0-padded. ``B`` may be 0.
        max_length: int, size of the output buffer (``[END]`` included).
        beam_width: int, beams kept per example. Default 4.
        length_penalty: float α ≥ 0. Default 0.
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(ids, log_probs)``: ``(B, max_length)`` int32 ids laid out as in
        `greedy_decode`, and ``(B,)`` float32 log p(ids | x).

    References:
        Wu et al. Google's Neural Machine Translation System. arXiv:1609.08144, 2016.
    """
    require_tensorflow("keras_seq.decoding.beam_search")
    beam_width = check_positive_int("beam_search", "beam_width", beam_width)
    length_penalty = check_float("beam_search", "length_penalty", length_penalty, low=0.0)
    encoder_inputs, max_length = _check_decode_args("beam_search", encoder_inputs, max_length)
    return _beam_search(
        decoder_steps(model),
        encoder_inputs,
        max_length,
        beam_width,
        length_penalty,
        start_id,
        end_id,
    )


def sequence_log_probability(
    model: keras.Model,
    encoder_inputs,
    output_ids,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """log p(Y | x) of given outputs under the teacher-forced model.

    Sums log-probabilities of the tokens of each row of ``output_ids`` up to
    and including its first ``[END]`` (everything, if there is none), feeding
    ``[START] + Y`` to the whole model in one call (no decoding loop).

    Returns:
        ``(B,)`` float32.
    """
    require_tensorflow("keras_seq.decoding.sequence_log_probability")
    output_ids = tf.cast(output_ids, tf.int32)
    batch_size = tf.shape(output_ids)[0]
    decoder_inputs = tf.concat(
        [tf.fill([batch_size, 1], tf.constant(start_id, tf.int32)), output_ids[:, :-1]], axis=1
    )
    logits = model(
        {"encoder_inputs": tf.cast(encoder_inputs, tf.int32), "decoder_inputs": decoder_inputs},
        training=False,
    )
    token_log_probs = tf.gather(
        tf.nn.log_softmax(tf.cast(logits, tf.float32)), output_ids, batch_dims=2
    )
    positions = tf.range(tf.shape(output_ids)[1])[None, :]
    counted = positions < _sequence_lengths(output_ids, end_id)[:, None]
    return tf.reduce_sum(tf.where(counted, token_log_probs, 0.0), axis=-1)
