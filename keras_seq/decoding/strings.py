"""Decoding strings: a traced greedy or beam decoding function of a translator
(`make_decoder`), and strings decoded with it in batches (`translate_strings`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_int
from keras_seq.model_kinds import GREEDY_ZERO_DEPRECATED

__all__ = ["checked_beam_width", "make_decoder", "translate_strings"]

_DECODE_BATCH = 1000


def make_decoder(
    model, source_length: int, target_length: int, beam_width: int = 1,
    length_penalty: float = 0.0,
):
    """A traced decoding function: ``(B, source_length)`` ids -> ``(B, target_length)`` ids.

    Greedy for ``beam_width=1`` (`keras_seq.decoding.greedy_decode`), else
    `keras_seq.decoding.beam_search` with that width and GNMT length
    penalty: the meaning ``beam_width`` has everywhere in keras-seq.
    ``beam_width=0``, the old spelling of greedy, still means greedy and
    warns (`DeprecationWarning`).
    """
    require_tensorflow("keras_seq.decoding.make_decoder")
    import tensorflow as tf

    from keras_seq import decoding

    beam_width = checked_beam_width("make_decoder", beam_width)
    spec = tf.TensorSpec([None, source_length], tf.int32)
    if beam_width > 1:

        @tf.function(input_signature=[spec], autograph=False)
        def decode(source_ids):
            ids, _ = decoding.beam_search(
                model, source_ids, target_length, beam_width, length_penalty
            )
            return ids

    else:

        @tf.function(input_signature=[spec], autograph=False)
        def decode(source_ids):
            return decoding.greedy_decode(model, source_ids, target_length)

    return decode


def checked_beam_width(where: str, beam_width) -> int:
    """``beam_width`` checked: 1 is greedy; 0, its old spelling, warns and means 1."""
    beam_width = check_int(where, "beam_width", beam_width, minimum=0)
    if beam_width == 0:
        warnings.warn(f"{where}: {GREEDY_ZERO_DEPRECATED}.", DeprecationWarning, stacklevel=3)
        return 1
    return beam_width


def translate_strings(decode, tokenizer, strings: Sequence[str], source_length: int) -> list[str]:
    """Decodes ``strings`` with a `make_decoder` function, in batches of 1000."""
    outputs = []
    for start in range(0, len(strings), _DECODE_BATCH):
        chunk = list(strings[start : start + _DECODE_BATCH])
        ids = decode(tokenizer.encode(chunk, source_length))
        outputs.extend(s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy())
    return outputs
