"""Argument checks shared by the export modules, on `keras_seq._validation`.

Messages name the function, the argument and the value received; a bad value
is a `ValueError`, a bad type a `TypeError`.
"""

from __future__ import annotations

from keras_seq._validation import check_choice, invalid_type, invalid_value

QUANTIZATIONS = ("dynamic", "float16", "int8", "int16x8")


def check_quantize(where: str, quantize, integer: bool = True) -> str | None:
    """`None`, ``"dynamic"``, ``"float16"`` or (where ``integer``) ``"int8"``
    or ``"int16x8"``."""
    return check_choice(where, "quantize", quantize,
                        (None, *(QUANTIZATIONS if integer else QUANTIZATIONS[:2])))


def check_seq2seq(where: str, model) -> str:
    """The `keras_seq.models.seq2seq_kind` of ``model``; an error if it has none."""
    import keras

    from keras_seq.models import seq2seq_kind

    if not isinstance(model, keras.Model):
        raise invalid_type(where, "model", "a keras.Model", model)
    kind = seq2seq_kind(model)
    if kind is None:
        raise invalid_value(
            where,
            "model",
            "a translation model built by keras_seq.models.rnn_seq2seq or "
            "transformer_seq2seq",
            model,
        )
    return kind


def check_tokenizer(where: str, arg: str, tokenizer) -> None:
    from keras_seq.text import CharTokenizer, WordPieceTokenizer

    if not isinstance(tokenizer, CharTokenizer | WordPieceTokenizer):
        raise invalid_type(
            where, arg, "a keras_seq.text CharTokenizer or WordPieceTokenizer", tokenizer
        )
