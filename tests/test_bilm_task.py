"""``keras-seq train --task bilm``: ELMo's biLM trained on a text, its held-out losses.

The reference for the held-out losses is a NumPy recomputation with the saved
model: consecutive windows of the held-out tokens (characters, or WordPiece
tokens), forward logits at t scoring the next token, backward logits at t the
previous one of the window; a token's characters are its vocabulary entry's
(without the ``##`` of a suffix piece).
"""

import json

import keras
import numpy as np
import pytest

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import text
from keras_seq.cli import main
from keras_seq.recipes.language_model import bidirectional_targets
from keras_seq.run_config import TrainingConfig

_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 4
# WordPiece's learner keeps a piece seen at least 10 times: three times the
# text, so that the vocabulary holds words, not only characters.
_WORDPIECE_TEXT = _TEXT * 3
_TINY = ["--task", "bilm", "--units", "8", "--layers", "2", "--context", "8",
         "--batch-size", "4", "--steps-per-epoch", "3", "--epochs", "2",
         "--validation-size", "4", "--verbose", "0"]


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _held_out_nats(model, ids, context):
    """Forward and backward ``(nats, scored positions of ids)`` over consecutive
    windows of ``context`` inputs, one window at a time."""
    forward, backward = ([], []), ([], [])
    for start in range(0, len(ids) - 1, context):
        window = ids[start : start + context + 1]
        x = window[:-1]
        out = model(x[None].astype("int32"))
        f = _log_softmax(np.asarray(out["forward"])[0].astype(np.float64))
        b = _log_softmax(np.asarray(out["backward"])[0].astype(np.float64))
        t = np.arange(len(x))
        forward[0].extend(-f[t, window[1:]])
        forward[1].extend(start + t + 1)
        backward[0].extend(-b[t[1:], x[:-1]])  # t − 1 within the window
        backward[1].extend(start + t[:-1])
    return forward, backward


def _token_characters(vocabulary):
    """Characters per id, from the vocabulary entries: a ``##`` suffix piece
    stands for what follows its marker, ``[UNK]`` for one U+FFFD."""
    lengths = [len(token[2:] if token.startswith("##") and len(token) > 2 else token)
               for token in vocabulary]
    lengths[text.UNK_ID] = 1
    return np.array(lengths)


def test_bidirectional_targets_are_the_next_and_the_previous_ids():
    inputs = np.array([[5, 6, 7, 8]], "int32")
    targets = np.array([[6, 7, 8, 9]], "int32")
    x, y = bidirectional_targets(inputs, targets)
    np.testing.assert_array_equal(x, inputs)
    np.testing.assert_array_equal(y["forward"], targets)
    np.testing.assert_array_equal(y["backward"], [[0, 5, 6, 7]])  # 0: nothing before t = 0
    _, y = bidirectional_targets(np.array([[5, 6, 0, 0]], "int32"), np.array([[6, 7, 0, 0]]))
    np.testing.assert_array_equal(y["backward"], [[0, 5, 0, 0]])  # padding predicts nothing


@pytest.fixture(scope="module")
def bilm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bilm")
    data = root / "text.txt"
    data.write_text(_TEXT, encoding="utf-8")
    assert main(["train", *_TINY, "--data", str(data), "--out", str(root), "--name", "b"]) == 0
    return root / "b"


@pytest.mark.slow
def test_held_out_losses_are_each_directions_mean_cross_entropy(bilm_run):
    metrics = json.loads((bilm_run / "metrics.json").read_text())
    assert metrics["task"] == "bilm" and metrics["config"]["cell"] == "coupled"
    model = keras.saving.load_model(bilm_run / "model.keras", safe_mode=True)
    vocabulary = text.load_tokenizer(bilm_run).vocabulary
    held_out = _TEXT[int(len(_TEXT) * 0.9):]
    assert (bilm_run / "test.txt").read_text(encoding="utf-8") == held_out
    ids = np.array([vocabulary.index(c) for c in held_out])
    (forward, _), (backward, _) = _held_out_nats(model, ids, metrics["config"]["context"])
    np.testing.assert_allclose(metrics["val_forward_loss"], np.mean(forward), rtol=1e-5)
    np.testing.assert_allclose(metrics["val_backward_loss"], np.mean(backward), rtol=1e-5)
    assert metrics["val_characters"] == metrics["val_tokens"] == len(forward)
    assert metrics["val_backward_characters"] == metrics["val_backward_tokens"] == len(backward)
    np.testing.assert_allclose(
        metrics["val_loss"], (metrics["val_forward_loss"] + metrics["val_backward_loss"]) / 2
    )
    # A character is a token: the per-character losses are the per-token ones.
    assert metrics["loss_unit"] == "nats per character"
    assert metrics["config"]["tokenizer"] == "char" and metrics["config"]["vocab_size"] is None
    for direction in ("forward", "backward"):
        np.testing.assert_allclose(metrics[f"val_{direction}_loss_per_character"],
                                   metrics[f"val_{direction}_loss"], rtol=1e-12)
    # Trained: better than a uniform guess over the characters.
    assert metrics["val_forward_loss"] < np.log(len(vocabulary))


@pytest.mark.slow
def test_a_bilm_run_is_refused_by_translate_generate_and_export(bilm_run, capsys, tmp_path):
    for argv in (["translate", str(bilm_run), "abc"],
                 ["generate", str(bilm_run), "--prompt", "a"],
                 ["export", str(bilm_run), str(tmp_path / "out")]):
        assert main(argv) == 1
        assert "holds a bidirectional language model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bilm_options_are_checked(tmp_path, capsys):
    data = tmp_path / "short.txt"
    data.write_text("abcdefghij" * 3, encoding="utf-8")
    assert main(["train", "--task", "bilm", "--context", "64", "--data", str(data),
                 "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "keras-seq train:" in err and "--task bilm with --context 64 needs more than 64" in err
    assert not any(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["short.txt"]
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--task", "bilm", "--model", "transformer"])
    assert exit_.value.code == 2
    assert "invalid value for --model: expected 'rnn' for --task bilm, received transformer." in capsys.readouterr().err


@pytest.fixture(scope="module")
def wordpiece_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bilm_wordpiece")
    data = root / "text.txt"
    data.write_text(_WORDPIECE_TEXT, encoding="utf-8")
    assert main(["train", *_TINY, "--tokenizer", "wordpiece", "--vocab-size", "200",
                 "--data", str(data), "--out", str(root), "--name", "w"]) == 0
    return root / "w"


@pytest.mark.slow
def test_wordpiece_run_saves_a_tokenizer_that_round_trips_the_text(wordpiece_run):
    tokenizer = text.load_tokenizer(wordpiece_run)
    assert isinstance(tokenizer, text.WordPieceTokenizer) and tokenizer.keep_newlines
    round_trip = tokenizer.detokenize(tokenizer.tokenize([_WORDPIECE_TEXT]))
    assert round_trip.numpy()[0].decode() == _WORDPIECE_TEXT
    # Pieces longer than a character were learned: these are not characters.
    assert any(len(token) > 1 for token in tokenizer.vocabulary[len(text.RESERVED_TOKENS):]
               if not token.startswith("##"))
    metrics = json.loads((wordpiece_run / "metrics.json").read_text())
    config = metrics["config"]
    assert (config["tokenizer"], config["vocab_size"]) == ("wordpiece", 200)
    assert config["vocabulary_size"] == tokenizer.vocabulary_size <= 200
    assert metrics["loss_unit"] == "nats per token" and metrics["val_unknown_tokens"] == 0
    train_text = _WORDPIECE_TEXT[: int(len(_WORDPIECE_TEXT) * 0.9)]
    assert metrics["train_characters"] == len(train_text)
    assert metrics["train_tokens"] == len(tokenizer.tokenize([train_text])[0])


@pytest.mark.slow
def test_wordpiece_losses_per_token_and_per_character_match_numpy(wordpiece_run):
    metrics = json.loads((wordpiece_run / "metrics.json").read_text())
    model = keras.saving.load_model(wordpiece_run / "model.keras", safe_mode=True)
    tokenizer = text.load_tokenizer(wordpiece_run)
    held_out = (wordpiece_run / "test.txt").read_text(encoding="utf-8")
    ids = tokenizer.tokenize([held_out]).flat_values.numpy()
    characters = _token_characters(tokenizer.vocabulary)[ids]
    assert characters.sum() == len(held_out)  # the tokens spell the text
    assert len(ids) < len(held_out)  # pieces longer than a character
    scored = _held_out_nats(model, ids, metrics["config"]["context"])
    for direction, (nats, positions) in zip(("forward", "backward"), scored):
        tokens = "val_tokens" if direction == "forward" else "val_backward_tokens"
        chars = "val_characters" if direction == "forward" else "val_backward_characters"
        assert metrics[tokens] == len(nats)
        assert metrics[chars] == characters[positions].sum()
        np.testing.assert_allclose(metrics[f"val_{direction}_loss"], np.mean(nats), rtol=1e-5)
        np.testing.assert_allclose(metrics[f"val_{direction}_loss_per_character"],
                                   np.sum(nats) / characters[positions].sum(), rtol=1e-5)
    np.testing.assert_allclose(
        metrics["val_loss_per_character"],
        (metrics["val_forward_loss_per_character"] + metrics["val_backward_loss_per_character"]) / 2,
    )


def test_tokenizer_options_are_checked(tmp_path, capsys):
    for argv, message in (
        (["--task", "bilm", "--vocab-size", "500"], "--vocab-size 500 is the size of a learned "
         "vocabulary (a character vocabulary is every character of the text): it needs "
         "--tokenizer wordpiece."),
        (["--task", "lm", "--tokenizer", "wordpiece"], "--tokenizer wordpiece is an option of "
         "--task bilm or --task classify; received --task lm."),
        (["--tokenizer", "wordpiece"], "--tokenizer wordpiece is an option of --task bilm or "
         "--task classify; received --task dates."),
        (["--task", "bilm", "--tokenizer", "wordpiece", "--vocab-size", "5"],
         "invalid value for --vocab-size: expected an integer >= 6, received 5."),
        (["--task", "bilm", "--tokenizer", "wordpiece", "--vocab-size", "0"],
         "--vocab-size must be positive"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["train", *argv, "--out", str(tmp_path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "usage: keras-seq train" in err and message in err, err
    with pytest.raises(ValueError, match="`tokenizer`: expected one of 'char', 'wordpiece'"):
        TrainingConfig(task="bilm", tokenizer="bpe").resolved()
    resolved = TrainingConfig(task="bilm", tokenizer="wordpiece").resolved()
    assert resolved.vocab_size == 1000
    assert not any(tmp_path.iterdir())


def test_wordpiece_data_errors_leave_nothing_behind(tmp_path, capsys):
    """Found once the vocabulary is learned, still before the run folder exists:
    a vocabulary larger than asked, a text too short in tokens."""
    data = tmp_path / "text.txt"
    data.write_text(_TEXT, encoding="utf-8")
    out = tmp_path / "runs"
    base = ["train", "--task", "bilm", "--tokenizer", "wordpiece", "--data", str(data),
            "--out", str(out), "--name", "w", "--verbose", "0"]
    assert main([*base, "--vocab-size", "20"]) == 1
    assert "needs at least" in capsys.readouterr().err
    # 532 training characters, fewer than 500 tokens.
    assert main([*base, "--context", "500"]) == 1
    err = capsys.readouterr().err
    assert "wordpiece tokens in its first 90%" in err and "--context 500 needs more than 500" in err
    assert not out.exists()
