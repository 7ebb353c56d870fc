"""Sequence tagging: `keras_seq.tasks.SequenceTagger`, its preprocessor, and
``keras-seq train --task tag``, ``tag``, ``export`` and ``verify``.

References: the ids from the vocabularies in plain Python, the character CNN
in NumPy, each sentence tagged alone, a synthetic tagging rule that needs
the words, their spelling and their context, and the run's own test file
scored again here.
"""

import json

import keras
import numpy as np
import pytest

from keras_seq import models
from keras_seq.cli import main
from keras_seq.recipes.tagging import read_tagged
from keras_seq.tasks import SequenceTagger, SequenceTaggerPreprocessor, from_run
from keras_seq.tasks.sequence_tagger import CharacterCNN, WordDropout, tagger_vocabularies

WIDTH = 16


def _reference_ids(preprocessor, tokens):
    """Word and character ids of one token list, from the vocabularies in Python."""
    words = {w: i for i, w in enumerate(preprocessor.words) if i >= 2}
    chars = {c: i for i, c in enumerate(preprocessor.characters) if i >= 2}
    word_ids = [words.get(t.lower(), 1) for t in tokens]
    char_ids = []
    for t in tokens:
        kept = t if len(t) <= WIDTH else t[: WIDTH // 2] + t[-(WIDTH - WIDTH // 2):]
        char_ids.append([chars.get(c, 1) for c in kept] + [0] * (WIDTH - len(kept)))
    return word_ids, char_ids


def test_preprocessor_ids_match_the_vocabularies():
    sentences = [[("The", "DET"), ("cat", "NOUN")], [("the", "DET"), ("Dog", "NOUN")],
                 [("cat", "NOUN"), ("ran", "VERB")]]
    words, characters, tags = tagger_vocabularies(sentences)
    # Lower-cased, most frequent first: "the" and "cat" twice, then "dog" and "ran" once.
    assert words[:4] == ["[PAD]", "[UNK]", "the", "cat"] and set(words[4:]) == {"dog", "ran"}
    assert tags == ["DET", "NOUN", "VERB"]
    assert "Dog" in tagger_vocabularies(sentences, lowercase=False)[0]
    assert tagger_vocabularies(sentences, min_word_count=2)[0] == ["[PAD]", "[UNK]", "the",
                                                                   "cat"]
    preprocessor = SequenceTaggerPreprocessor(words, characters, tags, word_length=WIDTH)
    texts = ["The  CAT ran", "internationalization-wise cat", "", "Über Cat"]
    word_ids, char_ids = preprocessor.token_ids(preprocessor.split(texts))
    word_ids, char_ids = np.asarray(word_ids), np.asarray(char_ids)
    assert word_ids.shape == (4, 3) and char_ids.shape == (4, 3, WIDTH)
    for row, text in enumerate(texts):
        tokens = text.split()
        expected_words, expected_chars = _reference_ids(preprocessor, tokens)
        n = len(tokens)
        np.testing.assert_array_equal(word_ids[row, :n], expected_words)
        np.testing.assert_array_equal(word_ids[row, n:], 0)
        np.testing.assert_array_equal(char_ids[row, :n].reshape(n, WIDTH),
                                      np.reshape(expected_chars, (n, WIDTH)))
        np.testing.assert_array_equal(char_ids[row, n:], 0)


def test_preprocessor_rejects_a_vocabulary_without_its_reserved_ids():
    with pytest.raises(ValueError, match=r"SequenceTaggerPreprocessor.*`words`.*\[PAD\]"):
        SequenceTaggerPreprocessor(["a", "b"], ["[PAD]", "[UNK]"], ["X"])
    with pytest.raises(ValueError, match="`tags`"):
        SequenceTaggerPreprocessor(["[PAD]", "[UNK]"], ["[PAD]", "[UNK]"], [])


def test_character_cnn_matches_numpy():
    rng = np.random.default_rng(0)
    layer = CharacterCNN(12, embedding_dim=5, filters=7, widths=(3, 5))
    char_ids = rng.integers(1, 12, size=(2, 4, 6)).astype("int32")
    char_ids[0, 1, 3:] = 0  # a short token: its windows reach the padding character
    char_ids[1, 3] = 0  # a padding token
    out = np.asarray(layer(char_ids))
    table = np.asarray(layer.embedding.embeddings)
    expected = np.zeros((2, 4, 14))
    for j, (width, convolution) in enumerate(zip((3, 5), layer.convolutions)):
        kernel = np.asarray(convolution.kernel)[0]  # (width, e, filters)
        bias = np.asarray(convolution.bias)
        side = width // 2
        for b in range(2):
            for t in range(4):
                # "same": zero vectors beyond the C positions, id 0's embedding inside.
                x = np.pad(table[char_ids[b, t]], [(side, side), (0, 0)])
                features = [np.maximum(0, sum(x[c + k] @ kernel[k] for k in range(width)) + bias)
                            for c in range(6)]
                real = [f for f, i in zip(features, char_ids[b, t]) if i != 0]
                expected[b, t, 7 * j : 7 * j + 7] = np.max(real, axis=0) if real else 0.0
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # The output's mask: the tokens with a character (the padding tokens' mask
    # must survive the concatenation with the word embeddings).
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(char_ids)),
                                  (char_ids != 0).any(-1))


def test_word_dropout_drops_real_words_in_training_only():
    ids = np.tile(np.arange(2, 52, dtype="int32"), (200, 1))
    ids[:, 40:] = 0  # padding
    layer = WordDropout(0.3, seed=1)
    dropped = np.asarray(layer(ids, training=True))
    assert np.all(dropped[:, 40:] == 0)
    share = np.mean(dropped[:, :40] == 1)
    assert abs(share - 0.3) < 0.02, share
    kept = dropped[:, :40] != 1
    np.testing.assert_array_equal(dropped[:, :40][kept], ids[:, :40][kept])
    np.testing.assert_array_equal(np.asarray(layer(ids, training=False)), ids)


# A synthetic language: the tag of "run", "fly" and "watch" is decided by the
# word before them (NOUN after a determiner, VERB after "to" or a pronoun);
# words ending in "ing" are VERB whatever their stem, so an unseen one is
# tagged by its spelling; numbers are NUM.
_DETERMINERS, _PRONOUNS = ["the", "a", "this"], ["we", "they", "I"]
_NOUNS = ["cat", "dog", "house", "tree", "car", "bird"]
_AMBIGUOUS = ["run", "fly", "watch"]
_STEMS = ["walk", "talk", "jump", "sing", "read", "cook", "swim", "play", "draw", "paint"]


def _sentence(rng, stems):
    tokens = []
    for _ in range(rng.integers(2, 5)):
        kind = rng.integers(5)
        if kind == 0:
            tokens += [(str(rng.choice(_DETERMINERS)).capitalize() if not tokens else
                        str(rng.choice(_DETERMINERS)), "DET"),
                       (str(rng.choice(_NOUNS + _AMBIGUOUS)), "NOUN")]
        elif kind == 1:
            tokens += [(str(rng.choice(_PRONOUNS)), "PRON"),
                       (str(rng.choice(_AMBIGUOUS)), "VERB")]
        elif kind == 2:
            tokens += [("to", "PART"), (str(rng.choice(_AMBIGUOUS)), "VERB")]
        elif kind == 3:
            tokens += [(str(rng.choice(stems)) + "ing", "VERB")]
        else:
            tokens += [(str(rng.integers(1, 2000)), "NUM")]
    return tokens + [(".", "PUNCT")]


def _write_tagged(path, sentences, comment=False):
    with open(path, "w", encoding="utf-8") as f:
        for sentence in sentences:
            if comment:
                f.write("# sent_id = x\n")
            f.write("".join(f"{t}\t{g}\n" for t, g in sentence) + "\n")
    return path


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """A run of ``keras-seq train --task tag`` on the synthetic language (test
    sentences with stems never seen in training) and its export."""
    root = tmp_path_factory.mktemp("tag")
    rng = np.random.default_rng(0)
    train = [_sentence(rng, _STEMS[:6]) for _ in range(600)]
    test = [_sentence(rng, _STEMS[6:]) for _ in range(60)]
    data = _write_tagged(root / "train.tsv", train, comment=True)
    test_data = _write_tagged(root / "test.tsv", test)
    assert main(["train", "--task", "tag", "--data", str(data), "--test-data", str(test_data),
                 "--units", "16", "--layers", "1", "--epochs", "6", "--batch-size", "16",
                 "--verbose", "0", "--out", str(root), "--name", "run"]) == 0
    return root


@pytest.mark.slow
def test_tagger_learns_words_spelling_and_context(tagged):
    metrics = json.loads((tagged / "run" / "metrics.json").read_text())
    assert metrics["task"] == "tag" and metrics["test_sentences"] == 60
    # Scored again here from the run's test file and the tagger's own tags.
    test = read_tagged(tagged / "run" / "test.tsv")
    tagger = from_run(tagged / "run")
    pairs = tagger.tag([" ".join(t for t, _ in s) for s in test])
    gold = [g for s in test for _, g in s]
    predicted = [tag for sentence in pairs for _, tag in sentence]
    assert [t for s in pairs for t, _ in s] == [t for s in test for t, _ in s]
    accuracy = np.mean(np.array(gold) == np.array(predicted))
    assert metrics["token_accuracy"] == pytest.approx(accuracy)
    assert accuracy >= 0.95, accuracy
    # The ambiguous words, by their context; the unseen -ing words, by their spelling.
    tokens = [t for s in test for t, _ in s]
    ambiguous = [p == g for t, p, g in zip(tokens, predicted, gold) if t in _AMBIGUOUS]
    unseen = [p == g for t, p, g in zip(tokens, predicted, gold) if t.endswith("ing")]
    assert np.mean(ambiguous) >= 0.9 and np.mean(unseen) >= 0.9, (np.mean(ambiguous),
                                                                  np.mean(unseen))
    assert metrics["unknown_words"] >= len(unseen)


@pytest.mark.slow
def test_a_sentence_is_tagged_alike_alone_and_in_a_batch(tagged):
    tagger = from_run(tagged / "run")
    texts = ["we run to the house .", "a dog .", "They fly 12 cooking ."]
    together = tagger.predict(texts)
    for text, probabilities in zip(texts, together):
        (alone,) = tagger.predict([text])
        assert probabilities.shape == (len(text.split()), tagger.num_tags)
        np.testing.assert_allclose(probabilities, alone, atol=1e-5)
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert [tag for _, tag in tagger.tag("we run")[0]] == ["PRON", "VERB"]


@pytest.mark.slow
def test_the_keras_file_keeps_the_preprocessor(tagged, tmp_path):
    tagger = from_run(tagged / "run")
    path = str(tmp_path / "tagger.keras")
    tagger.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, SequenceTagger)
    assert loaded.preprocessor.tags == tagger.preprocessor.tags
    assert loaded.preprocessor.words == tagger.preprocessor.words
    texts = ["the fly .", "to watch 7 ."]
    for a, b in zip(loaded.predict(texts), tagger.predict(texts)):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_tag_command_prints_token_tag_lines(tagged, capsys):
    capsys.readouterr()
    assert main(["tag", str(tagged / "run"), "we fly", "the   cat ."]) == 0
    out = capsys.readouterr().out
    expected = "".join(f"{t}\t{g}\n" for t, g in from_run(tagged / "run").tag("we fly")[0])
    assert out.startswith(expected + "\n")
    assert out.endswith("\n\n") and out.count("\n\n") == 2
    assert [line.split("\t")[0] for line in out.split("\n\n")[1].splitlines()] == [
        "the", "cat", "."]


@pytest.mark.slow
def test_export_and_verify(tagged, capsys):
    import tensorflow as tf

    out = tagged / "export"
    assert main(["export", str(tagged / "run"), str(out)]) == 0
    assert (out / "tagger" / "1" / "saved_model.pb").is_file()
    assert (out / "tflite" / "tagger.tflite").is_file()
    assert (out / "tflite" / "vocabularies.json").is_file()
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    table = capsys.readouterr().out
    assert "tagger/1" in table and "100.00%" in table
    # The SavedModel: strings in, a tag per whitespace token ("" past a text's end).
    serve = tf.saved_model.load(str(out / "tagger" / "1")).signatures["serving_default"]
    texts = ["we run to the house .", "a dog ."]
    outputs = serve(inputs=tf.constant(texts))
    expected = from_run(tagged / "run").tag(texts)
    for row, pairs in zip(outputs["tags"].numpy(), expected):
        assert [t.decode() for t in row] == [tag for _, tag in pairs] + [""] * (
            6 - len(pairs))
    from keras_seq.export import tflite_op_names

    ops = tflite_op_names((out / "tflite" / "tagger.tflite").read_bytes())
    assert not any(op.startswith(("CUSTOM", "FlexOp", "DELEGATE")) for op in ops), ops


@pytest.mark.slow
def test_an_int8_export_tags_long_sentences_in_windows_as_keras(tagged, tmp_path):
    import shutil

    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export import export_run, verify

    # Held-out sentences of three test sentences each (up to 27 tokens),
    # longer than every training sentence: the int8 file takes windows.
    run = shutil.copytree(tagged / "run", tmp_path / "run")
    test = read_tagged(run / "test.tsv")
    long = [test[i] + test[i + 1] + test[i + 2] for i in range(0, len(test) - 2, 3)]
    _write_tagged(run / "test.tsv", long)
    longest_training = max(len(s) for s in read_tagged(tagged / "train.tsv"))
    out = tmp_path / "out"
    written = export_run(run, out, formats=("tflite",), quantize=("int8",), examples=20)
    host = json.loads((out / "tflite_int8" / "export.json").read_text())
    assert host["window"] == longest_training < max(len(s) for s in long[:20])
    details = Interpreter(model_path=written["tflite_int8"]).get_input_details()
    assert sorted(tuple(d["shape_signature"][:2]) for d in details) == [
        (1, longest_training)] * 2
    rows = {r["quantize"]: r for r in verify(out)["artifacts"]}
    # Keras tags each whole sentence; the int8 file its windows.
    assert rows["int8"]["token_agreement"] >= 0.95, rows["int8"]
    assert rows["int8"]["exact_match"] >= rows[None]["exact_match"] - 0.02


def test_window_spans_cover_each_token_once_with_context_on_cut_sides():
    import sys

    # The verify worker blocks keras_seq imports in its process: not in this one.
    finders = list(sys.meta_path)
    try:
        from keras_seq.export._verify_worker import window_spans, windowed
    finally:
        sys.meta_path[:] = finders

    for window in (2, 3, 4, 7, 8):
        for length in range(1, 40):
            spans = window_spans(length, window)
            assert [t for _, first, end in spans for t in range(first, end)] == list(
                range(length))
            for start, first, end in spans:
                assert 0 <= start <= first < end <= start + window <= max(length, window)
                for t in range(first, end):  # context on each side that is a cut
                    if start > 0:
                        assert t - start >= (window // 2 - 1) // 2, (window, length, t)
                    if start + window < length:
                        assert start + window - 1 - t >= (window // 2 - 1) // 2
            if length > window:
                assert len(spans) <= (length - window) // (window // 2) + 2  # half overlaps
    # A "tagger" whose tag is the token: the windows stitch back the sentence.
    tokens = [str(i) for i in range(23)]
    eye = np.eye(23)

    def one_hot(token_lists):
        (only,) = token_lists
        assert len(only) <= 5
        return eye[[int(t) for t in only]][None]

    np.testing.assert_array_equal(windowed(one_hot, tokens, 5).argmax(-1), np.arange(23))


def test_read_tagged_skips_comments_and_names_a_bad_line(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_bytes(b"# text = a b\r\na\tX\r\nb\tY\r\n\r\n\r\nc\tZ\n#\tSYM\n#1\tNUM\n")
    # A "#" that is a token is kept: the comments are the other lines starting with #.
    assert read_tagged(path) == [[("a", "X"), ("b", "Y")], [("c", "Z"), ("#", "SYM"),
                                                           ("#1", "NUM")]]
    path.write_text("a\tX\nb Y\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a\.tsv, line 2: expected token<TAB>tag"):
        read_tagged(path)
    path.write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no tagged sentence"):
        read_tagged(path)


def test_tag_options_are_checked_before_tensorflow(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "tag"])
    assert exit_info.value.code == 2
    assert "--task tag needs --data, a token<TAB>tag file" in capsys.readouterr().err
    data = _write_tagged(tmp_path / "d.tsv", [[("a", "X")]] * 5)
    with pytest.raises(SystemExit):
        main(["train", "--task", "tag", "--data", str(data), "--pooling", "mean"])
    assert ("--pooling mean is an option of --task classify; received --task tag"
            in capsys.readouterr().err)
    assert main(["train", "--task", "tag", "--data", str(tmp_path / "missing.tsv")]) == 1
    assert "--data takes a token<TAB>tag file" in capsys.readouterr().err


def test_the_builder_names_a_bad_cell():
    with pytest.raises(ValueError, match="sequence_tagger.*cell"):
        models.sequence_tagger(30, 10, 4, cell="no_such_cell")
