"""Text for character language models, read in Python (no TensorFlow).

A language model reads one text (`load_text`, by default tiny Shakespeare,
`tiny_shakespeare`), holds out its end (`split_text`), trains on random
windows (`keras_seq.data.pipeline.make_text_dataset`) and is scored on
consecutive windows of the held-out text (`text_windows`).
"""

from __future__ import annotations

import os

import numpy as np

from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    Explained,
    check_float,
    check_int,
    invalid_value,
)

__all__ = [
    "HELD_OUT_FRACTION",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_URL",
    "load_text",
    "split_text",
    "text_windows",
    "tiny_shakespeare",
]

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
HELD_OUT_FRACTION = 0.1
# The copy the package ships (Karpathy's char-rnn file, byte for byte).
_PACKAGED_TINY_SHAKESPEARE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                          "tinyshakespeare.txt")


class _DownloadError(Explained, ConnectionError):
    """A download that failed: one line naming what and how to do without it."""


def tiny_shakespeare(
    cache_dir: str | os.PathLike | None = None,
    origin: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
) -> str:
    """The path of tiny Shakespeare (1,115,394 characters, public domain).

    The package ships the text (``keras_seq/data/tinyshakespeare.txt``): with
    the default ``origin`` and ``sha256`` its path is returned and nothing is
    downloaded. Another ``origin`` (a mirror, a ``file://`` copy) goes through
    `keras.utils.get_file`, which keeps the file in ``cache_dir/datasets/``
    (default ``~/.keras/datasets/``) and downloads it only when it is missing
    or its SHA-256 differs from ``sha256``; a download whose hash differs is
    an error.

    Args:
        cache_dir: the cache folder of a download; None: Keras' default.
        origin: the URL (any scheme `urllib` reads, ``file://`` included).
        sha256: the expected SHA-256 of the file, as hex.

    Raises:
        ValueError: the downloaded file does not have that hash.
        ConnectionError: the file is not cached and cannot be downloaded
            (offline, say); the message says to pass a text of your own.

    References:
        Karpathy. char-rnn, ``data/tinyshakespeare/input.txt``. 2015.
    """
    if origin == TINY_SHAKESPEARE_URL and sha256 == TINY_SHAKESPEARE_SHA256:
        return _PACKAGED_TINY_SHAKESPEARE
    import urllib.error

    import keras

    try:
        return keras.utils.get_file(
            "tinyshakespeare.txt",
            origin=origin,
            file_hash=sha256,
            hash_algorithm="sha256",
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        )
    except Exception as error:
        # Keras reports a failed download as a bare Exception raised while
        # handling urllib's error; anything else (a wrong hash) goes up as it is.
        if not isinstance(error.__context__, urllib.error.URLError):
            raise
        raise _DownloadError(
            "tiny_shakespeare", "tiny Shakespeare is not in the Keras cache and could not be "
            f"downloaded from {origin} ({error.__context__.reason}); pass ",
            Arg("data", "FILE.txt"), " to train on a UTF-8 text of your own."
        ) from None


def load_text(path: str | os.PathLike) -> str:
    """The whole of a UTF-8 text file (a leading byte-order mark is dropped).

    Raises:
        ValueError: naming the file, when it is not UTF-8 or has fewer than
            2 characters.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ArgumentValueError(None, f"{path}: not valid UTF-8 ({error}).") from None
    if len(text) < 2:
        raise ArgumentValueError(
            None, f"{path}: a language model needs at least 2 characters, found {len(text)}.")
    return text


def split_text(text: str, held_out_fraction: float = HELD_OUT_FRACTION) -> tuple[str, str]:
    """``(train, held_out)``: the text cut at ``int(len(text) * (1 - held_out_fraction))``.

    The held-out part is the end of the text, as in nanoGPT's character
    Shakespeare (its first 90% train, the last 10% validate).

    Examples:
        >>> split_text("abcdefghij")
        ('abcdefghi', 'j')
    """
    fraction = check_float("split_text", "held_out_fraction", held_out_fraction,
                           low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    cut = int(len(text) * (1.0 - fraction))
    return text[:cut], text[cut:]


def text_windows(ids, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive windows of ``context + 1`` ids that predict every id but the first once.

    Window k covers ``ids[k·context : k·context + context + 1]``: its first
    ``context`` ids are the inputs and its last ``context`` the targets, so
    consecutive windows share one id and target ``ids[j]`` (j ≥ 1) is
    predicted from ``ids[k·context : j]`` with k = ⌊(j − 1) / context⌋, the
    preceding ids of its window (1 to ``context`` of them). The last window
    may be shorter; its inputs and targets are padded with 0.

    Args:
        ids: ``(N,)`` integer ids, N ≥ 2, none of them 0.
        context: int, the model's training length.

    Returns:
        ``(inputs, targets)``, two ``(⌈(N − 1) / context⌉, context)`` int32
        arrays; the targets hold N − 1 nonzero ids.

    Examples:
        >>> inputs, targets = text_windows([5, 6, 7, 8, 9], context=3)
        >>> inputs.tolist(), targets.tolist()
        ([[5, 6, 7], [8, 0, 0]], [[6, 7, 8], [9, 0, 0]])
    """
    context = check_int("text_windows", "context", context, minimum=1)
    ids = np.asarray(ids, dtype=np.int32).reshape(-1)
    if ids.size < 2:
        raise invalid_value("text_windows", "ids", "at least 2 ids", f"{ids.size} ids")
    count = -(-(ids.size - 1) // context)
    padded = np.zeros(count * context + 1, np.int32)
    padded[: ids.size] = ids
    starts = np.arange(count)[:, None] * context + np.arange(context)[None, :]
    targets = padded[starts + 1]
    # An input whose target is padding predicts nothing: pad it too.
    return np.where(targets != 0, padded[starts], 0), targets
