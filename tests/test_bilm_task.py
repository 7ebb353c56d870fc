"""``keras-seq train --task bilm``: ELMo's biLM trained on a text, its held-out losses.

The reference for the held-out losses is a NumPy recomputation with the saved
model: consecutive windows of the held-out text, forward logits at t scoring
the next character, backward logits at t the previous one of the window.
"""

import json

import keras
import numpy as np
import pytest

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import text
from keras_seq.cli import main
from keras_seq.training.prepare import bidirectional_targets

_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 4
_TINY = ["--task", "bilm", "--units", "8", "--layers", "2", "--context", "8",
         "--batch-size", "4", "--steps-per-epoch", "3", "--epochs", "2",
         "--validation-size", "4", "--verbose", "0"]


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


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
    context = metrics["config"]["context"]
    forward, backward = [], []
    for start in range(0, len(ids) - 1, context):
        window = ids[start : start + context + 1]
        x = window[:-1]
        out = model(x[None].astype("int32"))
        f = _log_softmax(np.asarray(out["forward"])[0].astype(np.float64))
        b = _log_softmax(np.asarray(out["backward"])[0].astype(np.float64))
        forward += list(-f[np.arange(len(x)), window[1:]])
        backward += list(-b[np.arange(1, len(x)), x[:-1]])  # t − 1 within the window
    np.testing.assert_allclose(metrics["val_forward_loss"], np.mean(forward), rtol=1e-5)
    np.testing.assert_allclose(metrics["val_backward_loss"], np.mean(backward), rtol=1e-5)
    assert metrics["val_characters"] == len(forward)
    assert metrics["val_backward_characters"] == len(backward)
    np.testing.assert_allclose(
        metrics["val_loss"], (metrics["val_forward_loss"] + metrics["val_backward_loss"]) / 2
    )
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
    assert "keras-seq train:" in err and "task 'bilm' with context=64 needs more than 64" in err
    assert not any(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["short.txt"]
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--task", "bilm", "--model", "transformer"])
    assert exit_.value.code == 2
    assert "expected 'rnn' for task 'bilm'" in capsys.readouterr().err
