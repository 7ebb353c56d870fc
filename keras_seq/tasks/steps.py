"""A task's cached step as the `keras_seq.decoding.DecoderSteps` that the
samplers (`keras_seq.samplers`) drive: `Seq2SeqSteps` for a translator,
`LanguageModelSteps` for a language model over a prompt.

The tasks' ``generate`` and `keras_seq.decoding` (`decoder_steps`,
`language_model_steps`) use these; they call the task's own
``build_cache`` and ``call_with_cache`` and know no layer.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["LanguageModelSteps", "Seq2SeqSteps"]


class Seq2SeqSteps:
    """A translator's `DecoderSteps`: its `Seq2SeqLM.build_cache` split into the
    memory (constants) and the state, and its `Seq2SeqLM.call_with_cache`."""

    def __init__(self, task):
        self.task = task
        self.vocabulary_size = task.vocabulary_size

    def start(self, encoder_inputs, max_length):
        cache = self.task.build_cache(encoder_inputs, max_length)
        return cache["memory"], cache["state"]

    def step(self, tokens, t, constants, state):
        logits, _, cache = self.task.call_with_cache(tokens, {"memory": constants,
                                                              "state": state}, t)
        return logits, cache["state"]

    def attention(self, encoder_inputs, decoder_inputs):
        """Teacher-forced attention weights ``(B, T, S)`` (see `attention_weights`)."""
        return self.task.attention_weights(encoder_inputs, decoder_inputs)


class LanguageModelSteps:
    """A language model's `DecoderSteps` over a prompt: `CausalLM.call_with_cache`
    one token at a time, with the Transformer's bounded context.

    ``start(prompt_ids, max_length)`` feeds the prompt ``(B, P)`` but its last
    token and returns no constants and the state; the loop then feeds the
    last prompt token (`first_tokens`) at position P − 1 and each chosen one
    after it. A recurrent model carries its states over the whole sequence.
    A Transformer with ``context`` W keeps a cache of W positions: when it is
    full, it restarts from the last ``W // 2`` tokens fed again, so each token
    is predicted from the tokens since the last restart, at least ``W // 2``
    and at most ``W`` of them; without ``context`` its cache holds the prompt
    and ``max_length`` tokens.
    """

    def __init__(self, task, context: int | None = None):
        self.task = task
        self.vocabulary_size = task.vocabulary_size
        self.context = context if task.positional_cache else None
        self.keep = None if self.context is None else self.context // 2

    def first_tokens(self, prompt_ids):
        prompt_ids = tf.cast(prompt_ids, tf.int32)
        return prompt_ids[:, -1], tf.shape(prompt_ids)[1] - 1

    def start(self, prompt_ids, max_length):
        prompt_ids = tf.cast(prompt_ids, tf.int32)
        prompt_length = tf.shape(prompt_ids)[1]
        window = prompt_length + max_length if self.context is None else self.context
        state = self.task.build_cache(prompt_ids, window)
        if self.context is not None:
            batch_size = tf.shape(prompt_ids)[0]
            state = {"cache": state, "history": tf.zeros([batch_size, self.keep], tf.int32),
                     "position": tf.zeros([batch_size], tf.int32)}

        def feed(t, state):
            _, state = self.step(tf.gather(prompt_ids, t, axis=1), t, {}, state)
            return t + 1, state

        _, state = tf.while_loop(lambda t, _: t < prompt_length - 1, feed,
                                 (tf.constant(0), state))
        return {}, state

    def step(self, tokens, t, constants, state):
        if self.context is None:
            logits, _, state = self.task.call_with_cache(tokens, state, t)
            return logits, state
        cache, history = state["cache"], state["history"]
        position = state["position"][0]

        def restart():
            # The last `keep` tokens again, at positions 0 .. keep - 1.
            def refeed(i, cache):
                _, _, cache = self.task.call_with_cache(history[:, i], cache, i)
                return i + 1, cache

            _, cache_ = tf.while_loop(lambda i, _: i < self.keep, refeed, (tf.constant(0), cache))
            return cache_, tf.constant(self.keep)

        cache, position = tf.cond(tf.equal(position, self.context), restart,
                                  lambda: (cache, position))
        logits, _, cache = self.task.call_with_cache(tokens, cache, position)
        history = tf.concat([history[:, 1:], tokens[:, None]], axis=1)
        return logits, {"cache": cache, "history": history,
                        "position": tf.fill(tf.shape(tokens), position + 1)}
