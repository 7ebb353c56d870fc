"""Warnings about inputs that a model reads otherwise than they are written.

Without TensorFlow: the commands that apply a run to texts import this
before anything heavy, and `keras_seq.text` re-exports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from keras_seq.reserved_tokens import UNK_ID

__all__ = ["InputWarning", "warn_about_inputs"]


class InputWarning(UserWarning):
    """An input that the model reads otherwise than it is written: cut to the
    run's source length, with characters outside the vocabulary, or empty
    (`warn_about_inputs`)."""


def warn_about_inputs(
    tokenizer, texts: Sequence[str], source_length: int, done: str = "translated"
) -> list[str]:
    """Warns (`InputWarning`, one per input) about inputs that the model does not
    see as written, and returns the messages.

    The model reads ``source_length`` tokens: a longer input is cut there. A
    character outside the run's vocabulary becomes ``[UNK]``. An empty input
    still gives an output. Each is ``done`` anyway (``"translated"``,
    ``"classified"``); the warning says what the model read.
    """
    messages = []
    ids = tokenizer.tokenize(list(texts)).to_list() if texts else []
    for number, (text, text_ids) in enumerate(zip(texts, ids), 1):
        shown = text if len(text) <= 40 else text[:37] + "..."
        problems = []
        if not text:
            problems.append("is empty: the output is the model's guess for no input")
        if len(text_ids) > source_length:
            kept = tokenizer.detokenize([text_ids[:source_length]]).numpy()[0].decode("utf-8")
            problems.append(
                f"has {len(text_ids)} tokens, more than the run's source length "
                f"{source_length}: only {kept!r} is {done}"
            )
        unknown = sorted({c for c, i in zip(text, text_ids) if i == UNK_ID}) if (
            len(text) == len(text_ids)) else None
        if UNK_ID in text_ids:
            where = f" ({''.join(unknown)!r})" if unknown else ""
            problems.append(f"has characters outside the run's vocabulary{where}, read as [UNK]")
        for problem in problems:
            message = f"input {number} {shown!r} {problem}"
            warnings.warn(message, InputWarning, stacklevel=2)
            messages.append(message)
    return messages
