"""Argument checks shared by the export modules: one rule, one wording.

Messages name the function, the argument and the value received; a bad value
is a `ValueError`, a bad type a `TypeError`.
"""

from __future__ import annotations

import numbers

QUANTIZATIONS = ("dynamic", "float16")


def check_positive_int(where: str, **values) -> None:
    """NumPy integers are accepted, bools are not."""
    for arg, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"{where}: `{arg}` must be a positive int; received {arg}={value!r}.")


def check_quantize(where: str, quantize) -> str | None:
    """`None`, ``"dynamic"`` or ``"float16"``."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(
            f"{where}: `quantize` must be None, 'dynamic' or 'float16'; "
            f"received quantize={quantize!r}."
        )
    return quantize


def check_seq2seq(where: str, model) -> None:
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(f"{where}: `model` must be a keras.Model; received {type(model).__name__}.")
    names = {t.name for t in model.inputs} if getattr(model, "inputs", None) else set()
    if not {"encoder_inputs", "decoder_inputs"} <= names:
        raise ValueError(
            f"{where}: `model` must be a translation model built by "
            "keras_seq.models.rnn_seq2seq or transformer_seq2seq, with inputs "
            f"'encoder_inputs' and 'decoder_inputs'; received inputs {sorted(names)}."
        )


def check_tokenizer(where: str, arg: str, tokenizer) -> None:
    from keras_seq.text import CharTokenizer, WordPieceTokenizer

    if not isinstance(tokenizer, CharTokenizer | WordPieceTokenizer):
        raise TypeError(
            f"{where}: `{arg}` must be a keras_seq.text CharTokenizer or WordPieceTokenizer; "
            f"received {type(tokenizer).__name__}."
        )
