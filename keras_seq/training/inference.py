"""Using a trained run: decoding strings (``keras-seq translate``), sampling
text (``keras-seq generate``) and classifying texts (``keras-seq classify``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._input_warnings import InputWarning, warn_about_inputs
from keras_seq._validation import (
    ArgumentValueError,
    check_float,
    check_int,
    check_positive_int,
    invalid_type,
    invalid_value,
)
from keras_seq.decoding.strings import checked_beam_width, make_decoder, translate_strings

__all__ = [
    "InputWarning",
    "classify_texts",
    "generate_text",
    "tag_texts",
    "make_decoder",
    "translate_strings",
    "translate_texts",
    "warn_about_inputs",
]

_DECODE_BATCH = 1000


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
    beam_width = checked_beam_width(where, beam_width)
    length_penalty = check_float(where, "length_penalty", length_penalty, low=0.0)
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise invalid_type(where, "texts", "a sequence of str", texts)
    from keras_seq.recipes import read_run
    from keras_seq.tasks import from_run

    translator = from_run(read_run(run_dir, where, task="translate"))
    preprocessor = translator.preprocessor
    texts = list(texts)
    warn_about_inputs(preprocessor.tokenizer, texts, preprocessor.sequence_length)
    from keras_seq.samplers import BeamSampler

    sampler = "greedy" if beam_width == 1 else BeamSampler(beam_width, length_penalty)
    return translator.generate(texts, sampler=sampler) if texts else []


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
    from keras_seq import recipes

    return recipes.get("classify").classify_texts(run_dir, texts, batch_size)


def tag_texts(run_dir: str | os.PathLike, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Each text's whitespace-separated tokens with their tags, by a tagger run
    (``keras-seq tag``; `keras_seq.tasks.SequenceTagger.tag`).

    Args:
        run_dir: a folder written by `train` with ``task="tag"``.
        texts: the texts.

    Returns:
        One list of ``(token, tag)`` per text, in order.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: the run is not a tagger.
    """
    from keras_seq import recipes

    return recipes.get("tag").tag_texts(run_dir, texts)


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
    from keras_seq.recipes import read_run
    from keras_seq.reserved_tokens import RESERVED_TOKENS
    from keras_seq.tasks import from_run

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
    model = from_run(run)  # for inference: no optimizer

    @tf.function(autograph=False)
    def run(prompt_ids):
        # The reserved ids never occur in the text: only its characters are drawn.
        return decoding.sample(
            model, prompt_ids, length, temperature, seed, context=config["context"],
            suppress_ids=range(1, len(RESERVED_TOKENS)),
        )

    ids = run(tokenizer.tokenize([prompt]).to_tensor())[0].numpy()
    return "".join(vocabulary[i] for i in ids)
