"""In-graph text pipeline: character-level and WordPiece tokenizers on tensorflow-text.

Both tokenizers are `tf.Module`s whose `tokenize`, `encode` and `detokenize` are
made of TensorFlow ops only, so they run eagerly, inside `tf.function`, inside a
`tf.data` pipeline and inside a SavedModel. Every vocabulary starts with the same
reserved tokens (`keras_seq.reserved_tokens`, re-exported here):

    id 0 "[PAD]"   id 1 "[UNK]"   id 2 "[START]"   id 3 "[END]"

Round trips (`detokenize(tokenize(s))`):

- `CharTokenizer` returns `s` exactly when every character of `s` is in the
  vocabulary; an unknown character comes back as U+FFFD (the Unicode
  replacement character), and so does every invalid UTF-8 byte sequence.
- `WordPieceTokenizer` returns `s` exactly after `FastBertNormalizer`
  normalisation (control characters removed, tabs and newlines turned into
  spaces, optional lower-casing and accent stripping) and with no unknown
  words. BERT's own detokenizer loses the spacing around punctuation
  ("2026-11-21" comes back as "2026 - 11 - 21") because it drops whitespace
  while splitting words and re-inserts one space between all of them. Here the
  splitting keeps whitespace runs as tokens of their own (`keep_whitespace=True`
  in BERT's basic tokenizer, for learning the vocabulary and for tokenizing
  alike), so detokenizing only concatenates pieces and the spacing is restored.
  A word longer than `max_bytes_per_word` or made of unknown characters becomes
  a single "[UNK]" and comes back as U+FFFD. With `keep_newlines=True` a
  newline is a token of its own ("\\n", never merged with its neighbours) and
  survives the round trip; tabs and carriage returns still become spaces.

Vocabulary files (`vocab.txt`) hold one token per line in id order, UTF-8.
Characters that would not survive a line-based text file are escaped: a
backslash is written `\\\\`, a space `\\s`, any other whitespace or non-printable
character `\\uXXXX` (or `\\UXXXXXXXX` above U+FFFF). `tokenizer.json` next to it
records the tokenizer type and options; `load_tokenizer` reads both.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Iterable, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

# BasicTokenizer is the word splitter that `bert_vocab_from_dataset` uses to learn
# the vocabulary; tokenizing with the same splitter keeps vocabulary and input
# consistent (tensorflow-text only exports it through this module).
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset import (
    bert_vocab_from_dataset,
)

from keras_seq._input_warnings import InputWarning, warn_about_inputs
from keras_seq._validation import (
    ArgumentTypeError,
    ArgumentValueError,
    MissingFileError,
    check_bool,
    check_int,
    check_positive_int,
    invalid_value,
)
from keras_seq._vocabulary_escapes import escape_token, unescape_token
from keras_seq.reserved_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID

__all__ = [
    "PAD_ID",
    "UNK_ID",
    "START_ID",
    "END_ID",
    "RESERVED_TOKENS",
    "CharTokenizer",
    "InputWarning",
    "WordPieceTokenizer",
    "load_tokenizer",
    "warn_about_inputs",
]


VOCABULARY_FILE = "vocab.txt"
METADATA_FILE = "tokenizer.json"
_FORMAT_VERSION = 1
# What an unknown id or an invalid byte sequence turns into when detokenized.
_REPLACEMENT_CHARACTER = "\ufffd"
_SUFFIX_INDICATOR = "##"
# The token of a line break (WordPieceTokenizer with keep_newlines=True).
_NEWLINE = "\n"
# Longer words become a single [UNK] (the default of tensorflow-text's WordPiece).
_DEFAULT_MAX_BYTES_PER_WORD = 100

# What `tokenize`/`encode` accept: a string tensor of shape (B,) or a list of str/bytes.
_Strings = tf.Tensor | Sequence[str | bytes]
# What `detokenize` accepts: integer ids (B, T), dense or ragged, or nested lists.
_Ids = tf.Tensor | tf.RaggedTensor | Sequence[Sequence[int]]


# ---------------------------------------------------------------------------
# Shared behaviour


class _Tokenizer(tf.Module, metaclass=abc.ABCMeta):
    """Encoding, detokenizing and saving shared by both tokenizers.

    Subclasses implement `_tokenize` (string tensor (B,) -> ragged int32 ids)
    and `_surface` (the text each id stands for when detokenizing); a subclass
    missing either cannot be instantiated (``TypeError``, as for any
    `abc.ABC`: `tf.Module`'s metaclass is plain ``type``, so the ABCMeta here
    is what enforces them). ``_kind`` names the type in ``tokenizer.json``;
    ``_OPTIONS`` maps each constructor option saved there to the function
    that reads it back.
    """

    _kind = ""
    _OPTIONS: dict = {}

    def __init__(self, vocabulary: Sequence[str], name: str | None = None):
        super().__init__(name=name)
        vocabulary = list(vocabulary)
        cls = type(self).__name__
        for token in vocabulary:
            if not isinstance(token, str):
                raise ArgumentTypeError(cls, f'`vocabulary` must hold strings, received {token!r} ({type(token).__name__}).')
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ArgumentValueError(cls, f'`vocabulary` must start with the reserved tokens {list(RESERVED_TOKENS)}, received {vocabulary[:len(RESERVED_TOKENS)]}.')
        if len(set(vocabulary)) != len(vocabulary):
            seen, duplicates = set(), []
            for token in vocabulary:
                if token in seen:
                    duplicates.append(token)
                seen.add(token)
            raise ArgumentValueError(cls, f'`vocabulary` has duplicate tokens {duplicates[:5]}.')
        self._vocabulary = vocabulary
        surfaces = [self._surface(i, token) for i, token in enumerate(vocabulary)]
        self._surfaces = tf.constant(surfaces, dtype=tf.string)

    # -- to be provided by subclasses --------------------------------------
    @abc.abstractmethod
    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Token ids of each string, ``(B, None)``."""

    @abc.abstractmethod
    def _surface(self, token_id: int, token: str) -> str:
        """The text a token stands for when detokenizing."""

    def _options(self) -> dict:
        return {name: getattr(self, name) for name in self._OPTIONS}

    # -- public API ----------------------------------------------------------
    @property
    def vocabulary(self) -> list[str]:
        """The tokens in id order (a copy)."""
        return list(self._vocabulary)

    @property
    def vocabulary_size(self) -> int:
        """Number of tokens, reserved ones included."""
        return len(self._vocabulary)

    def tokenize(self, strings: _Strings) -> tf.RaggedTensor:
        """Splits a batch of strings into token ids.

        Args:
            strings: string tensor (or list of `str`/`bytes`) of shape `(B,)`.
                Invalid UTF-8 is replaced, never an error.

        Returns:
            `tf.RaggedTensor` of int32 ids, shape `(B, None)`, without
            `[START]`/`[END]` and without any length limit.
        """
        return self._tokenize(self._as_strings(strings, "tokenize"))

    def encode(
        self,
        strings: _Strings,
        max_length: int,
        add_start: bool = False,
        add_end: bool = False,
    ) -> tf.Tensor:
        """Tokenizes, adds `[START]`/`[END]`, truncates and pads to `max_length`.

        `[START]` and `[END]` count in the length: the text keeps at most
        `max_length - add_start - add_end` tokens, so a truncated sequence still
        ends with `[END]` when `add_end`. Shorter sequences are padded with
        `PAD_ID`.

        Args:
            strings: string tensor of shape `(B,)`.
            max_length: output length `T`.
            add_start: prepend `START_ID`.
            add_end: append `END_ID`.

        Returns:
            int32 tensor of shape `(B, max_length)`.
        """
        num_special = int(bool(add_start)) + int(bool(add_end))
        # At least one place, and room for [START]/[END].
        max_length = check_int(
            f"{type(self).__name__}.encode", "max_length", max_length, minimum=max(1, num_special)
        )
        ids = self.tokenize(strings)[:, : max_length - num_special]
        batch = ids.nrows()
        parts = []
        if add_start:
            parts.append(tf.fill(tf.stack([batch, 1]), tf.constant(START_ID, tf.int32)))
        parts.append(ids)
        if add_end:
            parts.append(tf.fill(tf.stack([batch, 1]), tf.constant(END_ID, tf.int32)))
        if len(parts) > 1:
            parts = [
                p if isinstance(p, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(p)
                for p in parts
            ]
            ids = tf.concat(parts, axis=1)
        return ids.to_tensor(default_value=PAD_ID, shape=[None, max_length])

    def detokenize(self, ids: _Ids) -> tf.Tensor:
        """Turns ids back into strings.

        `[PAD]` and `[START]` are dropped, everything from the first `[END]` on
        is dropped, and `[UNK]` or an id outside the vocabulary becomes U+FFFD.

        Args:
            ids: integer ids, dense `(B, T)` or ragged `(B, None)`.

        Returns:
            string tensor of shape `(B,)`.
        """
        cls = type(self).__name__
        if isinstance(ids, list | tuple):
            # Python rows of different lengths are ragged ids.
            ids = tf.ragged.constant(ids, dtype=tf.int32) if ids else tf.zeros((0, 0), tf.int32)
        elif not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise ArgumentTypeError(f'{cls}.detokenize', f'`ids` must be integers, received dtype {ids.dtype}.')
        if ids.shape.rank is not None and ids.shape.rank != 2:
            raise ArgumentValueError(f'{cls}.detokenize', f'`ids` must have shape (batch, time), received shape {ids.shape}.')
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(ids, tf.int32)
        # Everything at or after the first [END] is cut off.
        before_end = tf.cumsum(tf.cast(ids == END_ID, tf.int32), axis=1) == 0
        in_vocabulary = (ids >= 0) & (ids < self.vocabulary_size)
        ids = tf.where(in_vocabulary, ids, UNK_ID)
        pieces = tf.where(before_end, tf.gather(self._surfaces, ids), "")
        return tf.strings.reduce_join(pieces, axis=1)

    def save(self, directory: str | os.PathLike) -> None:
        """Writes `vocab.txt` (escaped, see module docstring) and `tokenizer.json`."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        with open(
            os.path.join(directory, VOCABULARY_FILE), "w", encoding="utf-8", newline="\n"
        ) as f:
            for token in self._vocabulary:
                f.write(escape_token(token) + "\n")
        metadata = {"type": self._kind, "format_version": _FORMAT_VERSION, **self._options()}
        with open(os.path.join(directory, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2)
            f.write("\n")

    # -- internals -------------------------------------------------------------
    def _as_strings(self, strings: _Strings, method: str) -> tf.Tensor:
        cls = type(self).__name__
        if isinstance(strings, str | bytes):
            raise ArgumentValueError(f'{cls}.{method}', f'expected a batch of strings of shape (B,), received a single string {strings!r}; wrap it in a list.')
        strings = tf.convert_to_tensor(strings, dtype_hint=tf.string)
        if strings.dtype != tf.string:
            raise ArgumentTypeError(f'{cls}.{method}', f'expected a string tensor, received dtype {strings.dtype}.')
        if strings.shape.rank is not None and strings.shape.rank != 1:
            raise ArgumentValueError(f'{cls}.{method}', f'expected strings of shape (B,), received shape {strings.shape}.')
        return strings

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocabulary_size={self.vocabulary_size})"


# ---------------------------------------------------------------------------
# Character level


class CharTokenizer(_Tokenizer):
    """Character-level tokenizer: one id per Unicode code point.

    Strings are decoded with `tf.strings.unicode_decode` (invalid UTF-8 becomes
    U+FFFD) and each code point is looked up by binary search in the sorted
    character vocabulary; characters not in it map to `UNK_ID`. The round trip
    `detokenize(tokenize(s)) == s` is exact when no character is unknown.

    Args:
        vocabulary: `RESERVED_TOKENS` followed by single characters in
            increasing code-point order (as `from_corpus` builds it).
        name: module name.

    Examples:
        >>> tokenizer = CharTokenizer.from_corpus(["21 Nov 2026", "2026-11-21"])
        >>> ids = tokenizer.encode(["21 Nov 2026"], max_length=16, add_end=True)
        >>> tokenizer.detokenize(ids).numpy()[0].decode()
        '21 Nov 2026'
    """

    _kind = "char"

    def __init__(self, vocabulary: Sequence[str], name: str | None = None):
        super().__init__(vocabulary, name=name)
        characters = self._vocabulary[len(RESERVED_TOKENS) :]
        codepoints = [ord(ch) for ch in characters]
        if codepoints != sorted(codepoints):
            raise ArgumentValueError('CharTokenizer', 'the characters of `vocabulary` (after the reserved tokens) must be sorted by code point; use CharTokenizer.from_corpus.')
        # A sentinel above U+10FFFF keeps the search table non-empty and matches nothing.
        self._codepoints = tf.constant(codepoints + [0x110000], dtype=tf.int32)

    def _surface(self, token_id: int, token: str) -> str:
        if token_id == UNK_ID:
            return _REPLACEMENT_CHARACTER
        if token_id < len(RESERVED_TOKENS):
            return ""
        if len(token) != 1:
            raise ArgumentValueError('CharTokenizer', f'every non-reserved token must be one character, received {token!r} at id {token_id}.')
        return token

    @classmethod
    def from_corpus(cls, strings: Iterable[str]) -> CharTokenizer:
        """Builds the vocabulary from every character seen in `strings`.

        Args:
            strings: an iterable of `str` (or UTF-8 `bytes`).

        Returns:
            A `CharTokenizer` whose ids 4.. are the characters seen, sorted by
            code point.
        """
        characters: set[str] = set()
        for s in strings:
            if isinstance(s, bytes):
                s = s.decode("utf-8", errors="replace")
            if not isinstance(s, str):
                raise ArgumentTypeError('CharTokenizer.from_corpus', f'`strings` must hold str or bytes, received {type(s).__name__}.')
            characters.update(s)
        return cls(list(RESERVED_TOKENS) + sorted(characters))

    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        codepoints = tf.strings.unicode_decode(
            strings, "UTF-8", errors="replace", replacement_char=0xFFFD
        )  # (B, None) int32
        c = codepoints.flat_values
        position = tf.searchsorted(self._codepoints, c, side="left", out_type=tf.int32)
        position = tf.minimum(position, tf.size(self._codepoints) - 1)
        found = tf.gather(self._codepoints, position) == c
        ids = tf.where(found, position + len(RESERVED_TOKENS), UNK_ID)
        return codepoints.with_flat_values(ids)


# ---------------------------------------------------------------------------
# WordPiece


class WordPieceTokenizer(_Tokenizer):
    """WordPiece tokenizer on tensorflow-text that restores the original spacing.

    Pipeline, all in the graph: invalid UTF-8 is replaced;
    `tensorflow_text.FastBertNormalizer` normalises; BERT's basic splitter cuts
    words at whitespace, punctuation and CJK ideographs, keeping whitespace runs
    as words; `tensorflow_text.FastWordpieceTokenizer` (greedy longest match,
    suffix pieces marked `##`) splits each word into pieces. Detokenizing
    concatenates the pieces without separators, which is exact because the
    whitespace is part of the token stream (see the module docstring).

    Args:
        vocabulary: `RESERVED_TOKENS` followed by word-initial and `##` suffix
            pieces, as `from_corpus` learns them.
        lower_case: lower-case and strip accents before splitting (the
            round trip then returns the normalised text).
        max_bytes_per_word: longer words become one `[UNK]`.
        keep_newlines: each ``"\\n"`` becomes the token ``"\\n"`` (which the
            vocabulary must hold) instead of a space: the text is cut into
            lines, each line is tokenized as above, and the newline ids go
            between them, so line breaks survive the round trip.
        name: module name.

    Examples:
        >>> tokenizer = WordPieceTokenizer.from_corpus(
        ...     ["Nov 21st, 2026", "2026-11-21"], vocab_size=100)
        >>> tokenizer.detokenize(tokenizer.tokenize(["Nov 21st, 2026"])).numpy()[0].decode()
        'Nov 21st, 2026'
        >>> verse = WordPieceTokenizer.from_corpus(["To be,\\nor not"], keep_newlines=True)
        >>> verse.detokenize(verse.tokenize(["or be,\\nto not\\n"])).numpy()[0].decode()
        'or be,\\nto not\\n'

    References:
        Schuster & Nakajima, "Japanese and Korean voice search", ICASSP 2012.
        Song et al., "Fast WordPiece Tokenization", EMNLP 2021.
    """

    _kind = "wordpiece"
    _OPTIONS = {"lower_case": bool, "max_bytes_per_word": int, "keep_newlines": bool}

    def __init__(
        self,
        vocabulary: Sequence[str],
        lower_case: bool = False,
        max_bytes_per_word: int = _DEFAULT_MAX_BYTES_PER_WORD,
        keep_newlines: bool = False,
        name: str | None = None,
    ):
        where = "WordPieceTokenizer"
        max_bytes_per_word = check_positive_int(where, "max_bytes_per_word", max_bytes_per_word)
        keep_newlines = check_bool(where, "keep_newlines", keep_newlines)
        super().__init__(vocabulary, name=name)
        if keep_newlines and _NEWLINE not in self._vocabulary:
            raise ArgumentValueError(where, "`keep_newlines=True` needs the token '\\n' in `vocabulary` (`from_corpus(..., keep_newlines=True)` adds it); it has none.")
        self.lower_case = bool(lower_case)
        self.max_bytes_per_word = max_bytes_per_word
        self.keep_newlines = keep_newlines
        self._newline_id = self._vocabulary.index(_NEWLINE) if keep_newlines else None
        self._normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=self.lower_case)
        self._splitter = BasicTokenizer(keep_whitespace=True)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self._vocabulary,
            suffix_indicator=_SUFFIX_INDICATOR,
            max_bytes_per_word=self.max_bytes_per_word,
            token_out_type=tf.int32,
            unknown_token=RESERVED_TOKENS[UNK_ID],
            no_pretokenization=True,
        )

    def _surface(self, token_id: int, token: str) -> str:
        if token_id == UNK_ID:
            return _REPLACEMENT_CHARACTER
        if token_id < len(RESERVED_TOKENS):
            return ""
        if token.startswith(_SUFFIX_INDICATOR) and len(token) > len(_SUFFIX_INDICATOR):
            return token[len(_SUFFIX_INDICATOR) :]
        return token

    @classmethod
    def from_corpus(
        cls,
        strings: Iterable[str],
        vocab_size: int = 8000,
        lower_case: bool = False,
        max_bytes_per_word: int = _DEFAULT_MAX_BYTES_PER_WORD,
        learn_params: dict | None = None,
        keep_newlines: bool = False,
    ) -> WordPieceTokenizer:
        """Learns a vocabulary with `bert_vocab_from_dataset`.

        The corpus is normalised with the same `FastBertNormalizer` settings and
        split with whitespace kept, exactly as `tokenize` does. The learner
        keeps every character of the corpus (as a word start and as a ``##``
        suffix) even when that makes more than ``vocab_size`` tokens.

        Args:
            strings: an iterable of `str`.
            vocab_size: the largest vocabulary wanted (reserved tokens included);
                the learner may return fewer tokens.
            lower_case: see the class.
            max_bytes_per_word: see the class.
            learn_params: extra arguments for
                `wordpiece_tokenizer_learner_lib.learn`.
            keep_newlines: see the class; the vocabulary gets ``"\\n"`` (right
                after the reserved tokens, counted in ``vocab_size``) and is
                learned from the lines, as `tokenize` sees them.

        Returns:
            A `WordPieceTokenizer`.
        """
        where = "WordPieceTokenizer.from_corpus"
        keep_newlines = check_bool(where, "keep_newlines", keep_newlines)
        # More than the reserved tokens (and the newline).
        fixed = [*RESERVED_TOKENS, _NEWLINE] if keep_newlines else list(RESERVED_TOKENS)
        vocab_size = check_int(where, "vocab_size", vocab_size, minimum=len(fixed) + 1)
        corpus = list(strings)
        if not corpus:
            raise invalid_value(where, "strings", "at least one string", corpus)
        if keep_newlines:
            corpus = [line for string in corpus for line in string.split(_NEWLINE)]
        normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=bool(lower_case))
        dataset = (
            tf.data.Dataset.from_tensor_slices(tf.constant(corpus, dtype=tf.string))
            .batch(1024)
            .map(lambda s: normalizer.normalize(_replace_invalid_utf8(s)))
        )
        vocabulary = bert_vocab_from_dataset(
            dataset,
            vocab_size=vocab_size,
            reserved_tokens=fixed,
            bert_tokenizer_params={"keep_whitespace": True},
            learn_params=learn_params or {},
        )
        return cls(
            vocabulary,
            lower_case=lower_case,
            max_bytes_per_word=max_bytes_per_word,
            keep_newlines=keep_newlines,
        )

    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        if not self.keep_newlines:
            return self._tokenize_lines(strings)
        lines = tf.strings.split(strings, _NEWLINE)  # (B, L) strings
        ids = self._tokenize_lines(lines.flat_values)  # (B·L, P)
        newline = tf.fill(tf.stack([ids.nrows(), 1]), tf.constant(self._newline_id, tf.int32))
        ids = tf.concat([ids, tf.RaggedTensor.from_tensor(newline)], axis=1)  # each line + "\n"
        ids = tf.RaggedTensor.from_row_splits(ids, lines.row_splits).merge_dims(1, 2)
        return ids[:, :-1]  # no newline after the last line

    def _tokenize_lines(self, strings: tf.Tensor) -> tf.RaggedTensor:
        normalized = self._normalizer.normalize(_replace_invalid_utf8(strings))
        words = self._splitter.tokenize(normalized)  # (B, W) strings
        pieces = self._wordpiece.tokenize(words)  # (B, W, P) int32
        return pieces.merge_dims(1, 2)


def _replace_invalid_utf8(strings: tf.Tensor) -> tf.Tensor:
    return tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


# ---------------------------------------------------------------------------
# Loading

# The `tokenizer.json` "type" of each tokenizer class.
_TOKENIZER_TYPES = {cls._kind: cls for cls in (CharTokenizer, WordPieceTokenizer)}


def load_tokenizer(directory: str | os.PathLike) -> CharTokenizer | WordPieceTokenizer:
    """Loads a tokenizer written by `save` (`vocab.txt` + `tokenizer.json`)."""
    directory = os.fspath(directory)
    metadata_path = os.path.join(directory, METADATA_FILE)
    vocabulary_path = os.path.join(directory, VOCABULARY_FILE)
    for path in (metadata_path, vocabulary_path):
        if not os.path.isfile(path):
            raise MissingFileError('load_tokenizer', f'{path} does not exist.')
    with open(metadata_path, encoding="utf-8") as f:
        metadata = json.load(f)
    with open(vocabulary_path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocabulary = [
        unescape_token(line, vocabulary_path, number) for number, line in enumerate(lines, 1)
    ]
    version = metadata.get("format_version", _FORMAT_VERSION)
    if version != _FORMAT_VERSION:
        raise ArgumentValueError('load_tokenizer', f'{metadata_path} has format_version {version!r}; this version of keras-seq reads format_version {_FORMAT_VERSION}.')
    kind = metadata.get("type")
    if kind not in _TOKENIZER_TYPES:
        raise ArgumentValueError('load_tokenizer', f"{metadata_path} has tokenizer type {kind!r}; expected one of {', '.join(map(repr, _TOKENIZER_TYPES))}.")
    cls = _TOKENIZER_TYPES[kind]
    # An option missing from the file keeps the constructor's default.
    options = {
        name: read(metadata[name]) for name, read in cls._OPTIONS.items() if name in metadata
    }
    return cls(vocabulary, **options)
