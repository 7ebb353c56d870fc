"""Scheduled sampling (Bengio, Vinyals, Jaitly & Shazeer 2015) for `rnn_seq2seq` training.

Teacher forcing feeds the decoder the reference token y_{t-1} at every step;
at inference it reads its own predictions, which it never saw in training.
Scheduled sampling feeds, at each decoder step t ≥ 1 of training, a token
sampled from the model's own distribution at step t−1 instead of y_{t-1},
with probability p (one coin per sentence and step), no gradient through the
sample; p follows a schedule over the training steps. Evaluation, decoding
and export are unchanged: the model a run keeps is the plain `rnn_seq2seq`.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_seq._validation import check_choice, check_float, check_positive_int, invalid_value
from keras_seq.layers.recurrent.rnn import scan
from keras_seq.model_kinds import SAMPLING_SCHEDULES
from keras_seq.reserved_tokens import PAD_ID
from keras_seq.tasks import Seq2SeqLM

__all__ = ["ScheduledSampling", "inverse_sigmoid_k", "sampled_decoding", "sampling_probability"]


def inverse_sigmoid_k(total_steps: int) -> float:
    """Bengio et al.'s k of the inverse sigmoid decay ε_i = k / (k + exp(i/k)),
    chosen so that ε = 1/2 halfway through training: k ln k = total_steps / 2
    (k ≥ e; solved by bisection)."""
    half = max(float(total_steps) / 2.0, math.e)
    low, high = math.e, max(half, math.e) + 1.0
    for _ in range(100):
        middle = (low + high) / 2.0
        if middle * math.log(middle) < half:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def sampling_probability(schedule: str, probability: float, step, total_steps: int):
    """The probability of feeding the model's own token at training step
    ``step`` (0-based, a number or a tensor) of ``total_steps``.

    Bengio et al. decay ε_i, the probability of the reference token; this is
    p_i = P (1 − ε_i) rescaled to reach ``probability`` P:

    - ``"constant"``: p_i = P;
    - ``"linear"``: ε_i = max(0, 1 − i / (N − 1)), so p rises linearly from 0
      at the first step to P at the last;
    - ``"inverse_sigmoid"``: ε_i = k / (k + exp(i / k)) with `inverse_sigmoid_k`
      (ε = 1/2 halfway).
    """
    check_choice("sampling_probability", "schedule", schedule, SAMPLING_SCHEDULES)
    step = ops.cast(step, "float32")
    if schedule == "constant":
        return ops.cast(probability, "float32") + 0.0 * step
    if schedule == "linear":
        return probability * ops.minimum(1.0, step / float(max(1, total_steps - 1)))
    k = inverse_sigmoid_k(total_steps)
    # 1 − k/(k + e^{i/k}) = σ(i/k − ln k): no overflow for large i.
    return probability * ops.sigmoid(step / k - math.log(k))


def _split_inputs(inputs):
    if isinstance(inputs, dict):
        return inputs["encoder_inputs"], inputs["decoder_inputs"]
    return inputs[0], inputs[1]


def sampled_decoding(model, inputs, probability, seed_generator, training=True):
    """The logits of a recurrent translator (`keras_seq.tasks.Seq2SeqLM`) when
    each decoder input after the first is, with probability ``probability``,
    a token drawn from the model's own softmax at the step before
    (Gumbel-max: argmax(logits + g), the noise drawn before the loop), and
    the reference token otherwise; padding stays padding. Each step is the
    translator's own (`Seq2SeqLM.call_with_cache`, in training). Returns
    ``(logits (B, T, V), tokens fed (B, T))``: the logits are those of the
    model run teacher-forced on the tokens fed.
    """
    encoder_inputs, decoder_inputs = _split_inputs(inputs)
    decoder_inputs = ops.cast(decoder_inputs, "int32")
    batch, steps = ops.shape(decoder_inputs)[0], ops.shape(decoder_inputs)[1]
    cache = model.build_cache(encoder_inputs, 1, training=training)
    vocabulary = model.vocabulary_size
    reference = ops.transpose(decoder_inputs)  # (T, B): the loop runs over the first axis
    coins = keras.random.uniform((steps, batch), seed=seed_generator)
    after_first = ops.expand_dims(ops.arange(steps) > 0, 1)
    replace = ops.logical_and(ops.logical_and(coins < probability, after_first),
                              ops.not_equal(reference, PAD_ID))
    uniform = keras.random.uniform((steps, batch, vocabulary), minval=1e-7, maxval=1.0,
                                   seed=seed_generator)
    gumbel = -ops.log(-ops.log(uniform))
    zero_logits = ops.zeros((batch, vocabulary), "float32")
    memory = cache["memory"]

    def body(xs_t, carry):
        reference_t, replace_t, gumbel_t = xs_t
        previous = ops.stop_gradient(carry[-1])
        drawn = ops.cast(ops.argmax(ops.cast(previous, "float32") + gumbel_t, axis=-1), "int32")
        token = ops.where(replace_t, drawn, reference_t)
        logits, _, step_cache = model.call_with_cache(
            token, {"memory": memory, "state": {"s": carry[:-1]}}, 0, training=training)
        return [logits, token], [*step_cache["state"]["s"], logits]

    outputs, _ = scan(body, [reference, replace, gumbel], [*cache["state"]["s"], zero_logits],
                      [zero_logits, reference[0]], training=training)
    return outputs[0], outputs[1]


class ScheduledSampling(keras.Model):
    """A recurrent translator (`rnn_seq2seq`) that trains with scheduled sampling.

    ``model(inputs, training=True)`` is `sampled_decoding` at this step's
    probability (`sampling_probability` of the optimizer's step count);
    anything else (evaluation, prediction) is the teacher-forced ``model``.
    Fit this; keep ``self.seq2seq``, whose weights it trains.

    Args:
        seq2seq: an `rnn_seq2seq` model.
        probability: float in [0, 1], the largest probability P of feeding
            the model's own token.
        schedule: ``"constant"``, ``"linear"`` or ``"inverse_sigmoid"``.
        total_steps: int, the training steps the schedule spans.
        seed: int or None, seed of the coins and samples.
    """

    def __init__(self, seq2seq, probability: float, schedule: str = "constant",
                 total_steps: int = 1, seed: int | None = None, **kwargs):
        super().__init__(name=kwargs.pop("name", seq2seq.name), **kwargs)
        where = "ScheduledSampling"
        if not (isinstance(seq2seq, Seq2SeqLM) and seq2seq.recurrent):
            raise invalid_value(where, "seq2seq", "an rnn_seq2seq model (scheduled sampling "
                                "feeds the recurrent decoder its own tokens)",
                                getattr(seq2seq, "name", type(seq2seq).__name__))
        self.seq2seq = seq2seq
        self.probability = check_float(where, "probability", probability, low=0.0, high=1.0)
        self.schedule = check_choice(where, "schedule", schedule, SAMPLING_SCHEDULES)
        self.total_steps = check_positive_int(where, "total_steps", total_steps)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def current_probability(self):
        """P at the optimizer's current step (0 before it is compiled)."""
        step = 0 if self.optimizer is None else self.optimizer.iterations
        return sampling_probability(self.schedule, self.probability, step, self.total_steps)

    def call(self, inputs, training=None):
        if not training or self.probability == 0.0:
            return self.seq2seq(inputs, training=training)
        logits, _ = sampled_decoding(self.seq2seq, inputs, self.current_probability(),
                                     self.seed_generator, training=True)
        return logits
