"""Tokenizers: ids against pure-Python references, exact round trips, edge cases, saving."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_seq import data, text

RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]
ISSUE_EXAMPLES = [
    "Saturday, 21 November 2026",
    "21 Nov 2026",
    "November 21, 2026",
    "Nov 21st, 2026",
    "2026 11 21",
    "21.11.2026",
    "21/11/26",
    "2026-11-21",
]


@pytest.fixture(scope="module")
def date_pairs():
    return data.date_task(train_size=4000, validation_size=0, test_size=1000, seed=3)


@pytest.fixture(scope="module")
def char_tokenizer(date_pairs):
    corpus = [s for s, _ in date_pairs["train"]] + ["日本語 😀 é", " \t\n\\"]
    return text.CharTokenizer.from_corpus(corpus)


@pytest.fixture(scope="module")
def wordpiece_tokenizer(date_pairs):
    corpus = [s for s, _ in date_pairs["train"]] + [
        "日本語 😀 é",
        "x-y (1) leading and trailing",
    ] * 5
    return text.WordPieceTokenizer.from_corpus(corpus, vocab_size=400)


def _decode(strings):
    return [s.decode("utf-8") for s in strings.numpy()]


# ---------------------------------------------------------------------------
# Pure-Python references, written from the definitions rather than the code.


def _reference_char_ids(s, vocabulary):
    index = {token: i for i, token in enumerate(vocabulary) if i >= 4}
    return [index.get(ch, 1) for ch in s]


# BERT's basic splitting for ASCII text: whitespace runs (kept here), single
# punctuation characters (the ASCII ranges BERT counts as punctuation), and the rest.
_ASCII_PUNCTUATION = r"!-/:-@\[-`{-~"
_REFERENCE_WORDS = re.compile(rf"\s+|[{_ASCII_PUNCTUATION}]|[^\s{_ASCII_PUNCTUATION}]+")


def _reference_wordpiece_ids(s, vocabulary):
    """Greedy longest-match-first WordPiece (Wu et al. 2016) over BERT words."""
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = []
    for word in _REFERENCE_WORDS.findall(s):
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in index:
                    pieces.append(index[piece])
                    start = end
                    break
            else:
                pieces = [1]  # the whole word is unknown
                break
        ids.extend(pieces)
    return ids


def _reference_encode(ids, max_length, add_start, add_end):
    body = ids[: max_length - add_start - add_end]
    out = [2] * add_start + body + [3] * add_end
    return out + [0] * (max_length - len(out))


# ---------------------------------------------------------------------------
# Vocabularies


def test_reserved_tokens_have_fixed_ids(char_tokenizer, wordpiece_tokenizer):
    assert (text.PAD_ID, text.UNK_ID, text.START_ID, text.END_ID) == (0, 1, 2, 3)
    assert list(text.RESERVED_TOKENS) == RESERVED
    for tokenizer in (char_tokenizer, wordpiece_tokenizer):
        assert tokenizer.vocabulary[:4] == RESERVED
        assert tokenizer.vocabulary_size == len(tokenizer.vocabulary)


def test_char_vocabulary_is_sorted_set_of_corpus_characters():
    corpus = ["b a", "😀c", "日a"]
    tokenizer = text.CharTokenizer.from_corpus(corpus)
    assert tokenizer.vocabulary == RESERVED + sorted(set("".join(corpus)))


def test_wordpiece_vocabulary_holds_every_corpus_character(wordpiece_tokenizer, date_pairs):
    characters = set("".join(s for s, _ in date_pairs["train"]))
    vocabulary = set(wordpiece_tokenizer.vocabulary)
    assert characters <= vocabulary
    assert {"##" + ch for ch in characters if not ch.isspace()} <= vocabulary
    assert wordpiece_tokenizer.vocabulary_size <= 400


# ---------------------------------------------------------------------------
# Ids against the references


def test_char_ids_match_reference(char_tokenizer, date_pairs):
    strings = [s for s, _ in date_pairs["test"][:200]] + ["日本語 😀", "x?ZQ"]
    ids = char_tokenizer.tokenize(strings)
    assert ids.dtype == tf.int32
    for row, s in zip(ids.to_list(), strings):
        assert row == _reference_char_ids(s, char_tokenizer.vocabulary)


def test_wordpiece_ids_match_greedy_longest_match_reference(wordpiece_tokenizer, date_pairs):
    strings = [s for s, _ in date_pairs["test"][:300]] + ISSUE_EXAMPLES + ["Nov  21st,2026 QQQ"]
    ids = wordpiece_tokenizer.tokenize(strings)
    assert ids.dtype == tf.int32
    for row, s in zip(ids.to_list(), strings):
        assert row == _reference_wordpiece_ids(s, wordpiece_tokenizer.vocabulary), s


@pytest.mark.parametrize(
    "add_start,add_end", [(False, False), (True, False), (False, True), (True, True)]
)
def test_encode_truncates_pads_and_keeps_end_last(char_tokenizer, add_start, add_end):
    strings = ["21 Nov 2026", "", "Saturday, 21 November 2026"]
    max_length = 12
    encoded = char_tokenizer.encode(strings, max_length, add_start=add_start, add_end=add_end)
    assert encoded.dtype == tf.int32 and encoded.shape == (3, max_length)
    for row, s in zip(encoded.numpy().tolist(), strings):
        reference = _reference_encode(
            _reference_char_ids(s, char_tokenizer.vocabulary), max_length, add_start, add_end
        )
        assert row == reference


def test_detokenize_drops_pad_and_start_and_stops_at_first_end(char_tokenizer):
    vocabulary = char_tokenizer.vocabulary
    a, b, c = (vocabulary.index(ch) for ch in "abc")
    dense = [[2, a, 0, b, 3, c, 0], [a, 1, c, 0, 0, 0, 0], [3, a, b, 0, 0, 0, 0]]
    ragged = tf.ragged.constant([[2, a, b, 3, c], [a, 1, c], [3, a]])
    assert _decode(char_tokenizer.detokenize(np.array(dense))) == ["ab", "a\ufffdc", ""]
    assert _decode(char_tokenizer.detokenize(ragged)) == ["ab", "a\ufffdc", ""]
    assert _decode(char_tokenizer.detokenize(ragged.to_list())) == ["ab", "a\ufffdc", ""]
    # Ids outside the vocabulary are unknown, not an error.
    out_of_range = [[a, len(vocabulary), -5, b]]
    assert _decode(char_tokenizer.detokenize(out_of_range)) == ["a\ufffd\ufffdb"]


# ---------------------------------------------------------------------------
# Round trips


def test_char_round_trip_is_exact_on_date_task(char_tokenizer, date_pairs):
    strings = [s for split in date_pairs.values() for pair in split for s in pair]
    assert _decode(char_tokenizer.detokenize(char_tokenizer.tokenize(strings))) == strings


def test_wordpiece_round_trip_restores_spacing_on_date_task(wordpiece_tokenizer, date_pairs):
    strings = [s for split in date_pairs.values() for pair in split for s in pair]
    strings += ISSUE_EXAMPLES + ["a  b", "  leading and trailing  ", "x-y", "(1)"]
    assert _decode(wordpiece_tokenizer.detokenize(wordpiece_tokenizer.tokenize(strings))) == strings


def test_round_trip_through_encode_with_start_and_end(wordpiece_tokenizer):
    ids = wordpiece_tokenizer.encode(ISSUE_EXAMPLES, 40, add_start=True, add_end=True)
    assert _decode(wordpiece_tokenizer.detokenize(ids)) == ISSUE_EXAMPLES


def test_wordpiece_lower_case_round_trip_returns_normalised_text():
    tokenizer = text.WordPieceTokenizer.from_corpus(
        ["Ça va, Élise?"], vocab_size=60, lower_case=True
    )
    ids = tokenizer.tokenize(["ÇA VA, ÉLISE?"])
    assert _decode(tokenizer.detokenize(ids)) == ["ca va, elise?"]


# ---------------------------------------------------------------------------
# Edge cases


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_empty_and_whitespace_only_strings(kind, char_tokenizer, wordpiece_tokenizer):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    strings = ["", " ", "   "]
    ids = tokenizer.tokenize(strings)
    assert ids.row_lengths().numpy()[0] == 0
    assert _decode(tokenizer.detokenize(ids)) == strings
    encoded = tokenizer.encode(strings, 4, add_start=True, add_end=True)
    assert encoded.numpy()[0].tolist() == [2, 3, 0, 0]


def test_char_tabs_and_newlines_round_trip_exactly(char_tokenizer):
    strings = ["\t\n", "a\tb\n"]
    assert _decode(char_tokenizer.detokenize(char_tokenizer.tokenize(strings))) == strings


def test_wordpiece_tabs_and_newlines_become_spaces(wordpiece_tokenizer):
    out = _decode(
        wordpiece_tokenizer.detokenize(wordpiece_tokenizer.tokenize(["\t\n", "21\tNov\n"]))
    )
    assert out == ["  ", "21 Nov "]


def test_wordpiece_keep_newlines_makes_each_newline_a_token(tmp_path):
    corpus = "First Citizen:\nBefore we proceed,\n\nhear me speak.\n" * 3
    tokenizer = text.WordPieceTokenizer.from_corpus([corpus], vocab_size=60, keep_newlines=True)
    assert tokenizer.vocabulary[4] == "\n" and tokenizer.vocabulary_size <= 60
    strings = [corpus, "", "\n", "speak\n\nFirst\n", "me\tspeak\n"]
    ids = tokenizer.tokenize(strings)
    assert _decode(tokenizer.detokenize(ids)) == [*strings[:4], "me speak\n"]  # a tab: a space
    # The same ids as tokenizing line by line and putting the newline between.
    lines = corpus.split("\n")
    per_line = tokenizer.tokenize(lines).to_list()
    joined = [i for row in per_line for i in [*row, 4]][:-1]
    assert ids[0].numpy().tolist() == joined
    assert 4 not in sum(per_line, [])
    tokenizer.save(tmp_path)
    loaded = text.load_tokenizer(tmp_path)
    assert loaded.keep_newlines and loaded.tokenize(strings).to_list() == ids.to_list()
    with pytest.raises(ValueError, match="`keep_newlines=True` needs the token"):
        text.WordPieceTokenizer(RESERVED + ["a"], keep_newlines=True)
    with pytest.raises(TypeError, match="keep_newlines"):
        text.WordPieceTokenizer(RESERVED + ["\n"], keep_newlines=1)


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_invalid_utf8_is_replaced_not_raised(kind, char_tokenizer, wordpiece_tokenizer):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    raw = [b"21 Nov \xff2026", b"\xfe\xff", b"ab\xe6\x97cd", b"21"]
    out = _decode(tokenizer.detokenize(tokenizer.tokenize(tf.constant(raw))))
    if kind == "char":
        # Each invalid sequence becomes U+FFFD, as Python's own decoder does.
        assert out == [b.decode("utf-8", errors="replace") for b in raw]
    else:
        # U+FFFD is not a character of the vocabulary, so its word becomes one [UNK].
        assert out == ["21 Nov \ufffd", "\ufffd", "\ufffd", "21"]


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_emoji_and_cjk_round_trip(kind, char_tokenizer, wordpiece_tokenizer):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    strings = ["日本語 😀 é", "😀日"]
    assert _decode(tokenizer.detokenize(tokenizer.tokenize(strings))) == strings


def test_unknown_characters_become_unk(char_tokenizer, wordpiece_tokenizer):
    assert char_tokenizer.tokenize(["Ω"]).to_list() == [[1]]
    assert wordpiece_tokenizer.tokenize(["Ω"]).to_list() == [[1]]
    assert _decode(wordpiece_tokenizer.detokenize([[1]])) == ["\ufffd"]


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_very_long_input_is_truncated(kind, char_tokenizer, wordpiece_tokenizer):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    long = " ".join(["21 Nov 2026"] * 2000)  # 23,999 characters
    ids = tokenizer.tokenize([long]).to_list()[0]
    reference = (
        _reference_char_ids(long, tokenizer.vocabulary)
        if kind == "char"
        else _reference_wordpiece_ids(long, tokenizer.vocabulary)
    )
    assert ids == reference
    encoded = tokenizer.encode([long], 32, add_start=True, add_end=True).numpy()[0].tolist()
    assert encoded == [2] + reference[:30] + [3]


def test_wordpiece_overlong_word_is_one_unk(wordpiece_tokenizer):
    ids = wordpiece_tokenizer.tokenize(["1" * 500 + " 21"]).to_list()[0]
    assert ids[0] == 1 and len(ids) == 3


def test_empty_batch(char_tokenizer, wordpiece_tokenizer):
    for tokenizer in (char_tokenizer, wordpiece_tokenizer):
        empty = tf.constant([], dtype=tf.string)
        assert tokenizer.encode(empty, 5).shape == (0, 5)
        assert tokenizer.detokenize(tf.zeros((0, 5), tf.int32)).shape == (0,)
        assert tokenizer.tokenize([]).to_list() == []
        assert tokenizer.detokenize([]).shape == (0,)


# ---------------------------------------------------------------------------
# Graph use


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_works_inside_tf_function_and_tf_data(kind, char_tokenizer, wordpiece_tokenizer):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    reference = _reference_char_ids if kind == "char" else _reference_wordpiece_ids

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        ids = tokenizer.encode(strings, 30, add_end=True)
        return ids, tokenizer.detokenize(ids)

    ids, back = round_trip(tf.constant(ISSUE_EXAMPLES))
    for row, s in zip(ids.numpy().tolist(), ISSUE_EXAMPLES):
        assert row == _reference_encode(reference(s, tokenizer.vocabulary), 30, False, True)
    assert _decode(back) == ISSUE_EXAMPLES

    dataset = tf.data.Dataset.from_tensor_slices(ISSUE_EXAMPLES).batch(3).map(tokenizer.tokenize)
    rows = [row for batch in dataset for row in batch.to_list()]
    assert rows == [reference(s, tokenizer.vocabulary) for s in ISSUE_EXAMPLES]


def test_saved_model_serves_encode_and_detokenize(tmp_path, wordpiece_tokenizer, char_tokenizer):
    class Serving(tf.Module):
        def __init__(self, source, target):
            super().__init__()
            self.source = source
            self.target = target

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def encode(self, strings):
            return self.source.encode(strings, 24, add_end=True)

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def detokenize(self, ids):
            return self.target.detokenize(ids)

    tf.saved_model.save(Serving(wordpiece_tokenizer, char_tokenizer), str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    ids = loaded.encode(tf.constant(ISSUE_EXAMPLES)).numpy().tolist()
    for row, s in zip(ids, ISSUE_EXAMPLES):
        expected = _reference_wordpiece_ids(s, wordpiece_tokenizer.vocabulary)
        assert row == _reference_encode(expected, 24, False, True)
    char_ids = [_reference_char_ids(s, char_tokenizer.vocabulary) + [3] for s in ISSUE_EXAMPLES]
    padded = tf.ragged.constant(char_ids).to_tensor()
    assert _decode(loaded.detokenize(padded)) == ISSUE_EXAMPLES


# ---------------------------------------------------------------------------
# Saving


@pytest.mark.parametrize("kind", ["char", "wordpiece"])
def test_save_and_load_restore_vocabulary_and_ids(
    tmp_path, kind, char_tokenizer, wordpiece_tokenizer
):
    tokenizer = char_tokenizer if kind == "char" else wordpiece_tokenizer
    tokenizer.save(tmp_path)
    loaded = text.load_tokenizer(tmp_path)
    assert type(loaded) is type(tokenizer)
    assert loaded.vocabulary == tokenizer.vocabulary
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == tokenizer.vocabulary_size
    assert lines[tokenizer.vocabulary.index(" ")] == "\\s"
    strings = ISSUE_EXAMPLES + ["日本語 😀 é"]
    assert loaded.tokenize(strings).to_list() == tokenizer.tokenize(strings).to_list()


def test_vocab_file_escapes_whitespace_backslash_and_control_characters(tmp_path):
    corpus = ["a b\\c\td\ne\r\u2028\x00\u00a0"]
    tokenizer = text.CharTokenizer.from_corpus(corpus)
    tokenizer.save(tmp_path)
    raw = (tmp_path / "vocab.txt").read_bytes().decode("utf-8")
    assert raw.count("\n") == tokenizer.vocabulary_size  # one line per token
    assert {"\\s", "\\\\", "\\u0009", "\\u000a", "\\u000d", "\\u2028", "\\u0000", "\\u00a0"} <= set(
        raw.split("\n")
    )
    assert text.load_tokenizer(tmp_path).vocabulary == tokenizer.vocabulary


# ---------------------------------------------------------------------------
# Bad input


def test_bad_arguments_raise_clear_errors(tmp_path, char_tokenizer):
    with pytest.raises(ValueError, match="max_length"):
        char_tokenizer.encode(["a"], 1, add_start=True, add_end=True)
    with pytest.raises(ValueError, match="CharTokenizer.encode: invalid value for argument `max_length`"):
        char_tokenizer.encode(["a"], 3.0)
    with pytest.raises(TypeError, match="CharTokenizer.encode: invalid type for argument `max_length`"):
        char_tokenizer.encode(["a"], True)
    with pytest.raises(ValueError, match=r"CharTokenizer.tokenize.*shape \(B,\)"):
        char_tokenizer.tokenize("a single string")
    with pytest.raises(ValueError, match=r"shape \(B,\)"):
        char_tokenizer.tokenize([["a"]])
    with pytest.raises(TypeError, match="string"):
        char_tokenizer.tokenize([1, 2])
    with pytest.raises(ValueError, match="reserved tokens"):
        text.CharTokenizer(["a", "b"])
    with pytest.raises(ValueError, match="one character"):
        text.CharTokenizer(RESERVED + ["ab"])
    with pytest.raises(ValueError, match="vocab_size"):
        text.WordPieceTokenizer.from_corpus(["a"], vocab_size=4)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        text.load_tokenizer(tmp_path)
    char_tokenizer.save(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"type": "bpe"}')
    with pytest.raises(ValueError, match="bpe"):
        text.load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"type": "char", "format_version": 2}')
    with pytest.raises(ValueError, match="format_version"):
        text.load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"type": "char", "format_version": 1}')
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\n\\q\n")
    with pytest.raises(ValueError, match=r"vocab\.txt, line 5: unknown escape"):
        text.load_tokenizer(tmp_path)


def test_numpy_integers_are_accepted_as_lengths(char_tokenizer):
    encoded = char_tokenizer.encode(["21 Nov 2026"], np.int64(4), add_end=True)
    assert encoded.numpy().tolist() == [
        _reference_encode(
            _reference_char_ids("21 Nov 2026", char_tokenizer.vocabulary), 4, False, True
        )
    ]


def test_a_tokenizer_missing_an_abstract_method_cannot_be_instantiated():
    class NoSurface(text._Tokenizer):
        def _tokenize(self, strings):
            return tf.ragged.constant([[]], tf.int32)

    with pytest.raises(TypeError, match="abstract"):
        NoSurface(RESERVED)

    class Complete(NoSurface):
        def _surface(self, token_id, token):
            return token

    assert Complete(RESERVED).vocabulary_size == len(RESERVED)


def test_load_tokenizer_fills_options_missing_from_the_file_with_the_defaults(tmp_path):
    tokenizer = text.WordPieceTokenizer(RESERVED + ["a", "##b"], lower_case=True,
                                        max_bytes_per_word=7)
    tokenizer.save(tmp_path)
    loaded = text.load_tokenizer(tmp_path)
    assert (loaded.lower_case, loaded.max_bytes_per_word) == (True, 7)
    (tmp_path / "tokenizer.json").write_text('{"type": "wordpiece", "format_version": 1}')
    loaded = text.load_tokenizer(tmp_path)
    assert (loaded.lower_case, loaded.max_bytes_per_word) == (False, 100)
