"""Using a trained run: decoding strings (``keras-seq translate``), sampling
text (``keras-seq generate``) and classifying texts (``keras-seq classify``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import (
    ArgumentValueError,
    check_float,
    check_int,
    check_positive_int,
    invalid_type,
    invalid_value,
)
from keras_seq.run_config import GREEDY_ZERO_DEPRECATED
from keras_seq.training.run_folder import read_run

__all__ = [
    "InputWarning",
    "classify_texts",
    "generate_text",
    "make_decoder",
    "translate_strings",
    "translate_texts",
    "warn_about_inputs",
]

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
    require_tensorflow("keras_seq.training.make_decoder")
    import tensorflow as tf

    from keras_seq import decoding

    beam_width = _beam_width("make_decoder", beam_width)
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


def _beam_width(where: str, beam_width) -> int:
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


def translate_texts(
    run_dir: str | os.PathLike,
    texts: Sequence[str],
    beam_width: int = 1,
    length_penalty: float = 0.0,
) -> list[str]:
    """The outputs of the model in a run folder for ``texts`` (``keras-seq translate``).

    Args:
        run_dir: a folder written by `train`.
        texts: the inputs.
        beam_width: 1 (greedy, the default) or a beam width; 0, the old
            spelling of greedy, warns (`DeprecationWarning`) and means 1.
        length_penalty: GNMT length penalty α for beam search.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
    """
    require_tensorflow("keras_seq.training.translate_texts", START_UNDER_TENSORFLOW)
    where = "translate_texts"
    beam_width = _beam_width(where, beam_width)
    length_penalty = check_float(where, "length_penalty", length_penalty, low=0.0)
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise invalid_type(where, "texts", "a sequence of str", texts)
    run = read_run(run_dir, where, task="translate")
    translator = run.load_task()
    preprocessor = translator.preprocessor
    texts = list(texts)
    warn_about_inputs(preprocessor.tokenizer, texts, preprocessor.sequence_length)
    from keras_seq.samplers import BeamSampler

    sampler = "greedy" if beam_width == 1 else BeamSampler(beam_width, length_penalty)
    return translator.generate(texts, sampler=sampler) if texts else []


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
    from keras_seq.reserved_tokens import UNK_ID

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


def classify_texts(
    run_dir: str | os.PathLike, texts: Sequence[str], batch_size: int = _DECODE_BATCH
) -> list[tuple[str, float]]:
    """The label and its probability for each text, by a classifier run (``keras-seq classify``).

    Each text is tokenized as in training (its first ``source_length``
    tokens; `warn_about_inputs` warns about a longer text, characters outside
    the vocabulary and an empty text); the label is the most probable class,
    its probability the softmax of the logits there.

    Args:
        run_dir: a folder written by `train` with ``task="classify"``.
        texts: the texts.
        batch_size: texts per forward pass.

    Returns:
        One ``(label, probability)`` per text, in order.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: the run is not a classifier.
    """
    require_tensorflow("keras_seq.training.classify_texts", START_UNDER_TENSORFLOW)
    where = "classify_texts"
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise invalid_type(where, "texts", "a sequence of str", texts)
    batch_size = check_positive_int(where, "batch_size", batch_size)
    run = read_run(run_dir, where, task="classify")
    length = int(run.config["source_length"])
    tokenizer = run.load_tokenizer()
    texts = list(texts)
    warn_about_inputs(tokenizer, texts, length, done="classified")
    if not texts:
        return []
    return run.load_task().classify(texts, batch_size=batch_size)


def generate_text(
    run_dir: str | os.PathLike,
    prompt: str,
    length: int = 500,
    temperature: float = 1.0,
    seed: int | None = None,
) -> str:
    """Samples ``length`` characters after ``prompt`` from a language-model run (``keras-seq generate``).

    `keras_seq.decoding.sample` in one `tf.function` (one `tf.while_loop`,
    cached for the Transformer, with the run's training ``context`` as its
    window).

    Args:
        run_dir: a folder written by `train` with ``task="lm"``.
        prompt: str, at least one character, every one of them in the run's
            vocabulary.
        length: int, characters to sample.
        temperature: float T ≥ 0: logits / T are sampled; 0 is greedy
            (the most probable character each time). Default 1.
        seed: int or None: the same seed, prompt and run give the same text;
            None samples afresh.

    Returns:
        The ``length`` sampled characters (without the prompt).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: the run is not a language model, the prompt is empty or
            has characters outside the vocabulary, or a bad argument.
    """
    require_tensorflow("keras_seq.training.generate_text", START_UNDER_TENSORFLOW)
    import tensorflow as tf

    from keras_seq import decoding
    from keras_seq.reserved_tokens import RESERVED_TOKENS

    where = "generate_text"
    run = read_run(run_dir, where, task="lm")
    config = run.config
    if not isinstance(prompt, str):
        raise invalid_type(where, "prompt", "a str", prompt)
    if not prompt:
        raise invalid_value(where, "prompt", "at least one character", prompt)
    tokenizer = run.load_tokenizer()
    vocabulary = tokenizer.vocabulary
    unknown = sorted(set(prompt) - set(vocabulary[len(RESERVED_TOKENS):]))
    if unknown:
        raise ArgumentValueError(
            where, f"the prompt {prompt!r} has characters the run's vocabulary lacks: "
            f"{''.join(unknown)!r}."
        )
    length = check_positive_int(where, "length", length)
    temperature = check_float(where, "temperature", temperature, low=0.0)
    seed = check_int(where, "seed", seed, allow_none=True)
    model = run.load_task()  # for inference: no optimizer

    @tf.function(autograph=False)
    def run(prompt_ids):
        # The reserved ids never occur in the text: only its characters are drawn.
        return decoding.sample(
            model, prompt_ids, length, temperature, seed, context=config["context"],
            suppress_ids=range(1, len(RESERVED_TOKENS)),
        )

    ids = run(tokenizer.tokenize([prompt]).to_tensor())[0].numpy()
    return "".join(vocabulary[i] for i in ids)
