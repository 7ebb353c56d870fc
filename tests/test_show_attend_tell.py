"""examples/show_attend_tell.py: the digit-strip generator, greedy and beam-search
captions, attention."""

import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_example():
    path = os.path.join(ROOT, "examples", "show_attend_tell.py")
    spec = importlib.util.spec_from_file_location("show_attend_tell", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sat = _load_example()


def _glyph(digit):
    """The 5 x 7 bitmap of a digit, read from the font's row strings."""
    return np.array([[c == "1" for c in row] for row in sat.FONT[digit]])


def _until_end(row):
    row = list(row)
    return row[: row.index(END_ID) + 1] if END_ID in row else row


def test_caption_is_the_digits_left_to_right_of_the_reported_glyphs():
    data = sat.make_dataset(300, seed=5)
    assert data["images"].shape == (300, sat.HEIGHT, sat.WIDTH, 1)
    counts = set()
    for image, caption, glyphs in zip(data["images"], data["captions"], data["glyphs"]):
        counts.add(len(glyphs))
        by_x = sorted(glyphs)
        expected = [4 + d for _, _, d in by_x] + [END_ID]
        assert list(caption) == expected + [PAD_ID] * (sat.MAX_LENGTH - len(expected))
        # Inside the canvas, and at least GAP blank columns between neighbours.
        for x, y, _ in glyphs:
            assert 0 <= x <= sat.WIDTH - 5 and 0 <= y <= sat.HEIGHT - 7
        for (x0, _, _), (x1, _, _) in zip(by_x, by_x[1:]):
            assert x1 >= x0 + 5 + sat.GAP
        # The image is exactly those glyphs at those places.
        canvas = np.zeros((sat.HEIGHT, sat.WIDTH), bool)
        for x, y, d in glyphs:
            canvas[y : y + 7, x : x + 5] |= _glyph(d)
        np.testing.assert_array_equal(image[..., 0], canvas.astype("float32"))
    assert counts == {1, 2, 3, 4}
    # The glyphs are reported in drawing order, not already sorted, in some images.
    assert any(glyphs != sorted(glyphs) for glyphs in data["glyphs"])


def test_dataset_is_deterministic_under_its_seed():
    a, b, c = (sat.make_dataset(20, seed=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["captions"], b["captions"])
    assert a["glyphs"] == b["glyphs"]
    assert not np.array_equal(a["images"], c["images"])


def test_held_out_images_are_never_training_images():
    # One digit per image leaves few distinct images, so draws collide often.
    train = sat.make_dataset(1500, seed=1, max_digits=1)["images"]
    seen = {image.tobytes() for image in train}
    plain = sat.make_dataset(200, seed=2, max_digits=1)["images"]
    assert any(image.tobytes() in seen for image in plain)  # the case being guarded
    held_out = sat.make_dataset(200, seed=2, max_digits=1, exclude=train)["images"]
    assert not any(image.tobytes() in seen for image in held_out)


def test_attention_on_glyph_counts_argmax_cells_inside_the_grown_glyph_box():
    # Grid 4 x 12 of 4 x 4 pixel cells; cell (r, c) has its centre at (4c + 2, 4r + 2).
    # Glyphs from the left: a 1 at x=8, y=4 (box grown by 2: x 6..15, y 2..13),
    # then a 7 at x=30, y=0 (x 28..37, y -2..9).
    glyphs = [[(30, 0, 7), (8, 4, 1)]]
    alpha = np.zeros((1, 2, 48))
    alpha[0, 0, 1 * 12 + 2] = 1.0  # centre (10, 6): on the 1
    alpha[0, 1, 2 * 12 + 8] = 1.0  # centre (34, 10): right column, one row too low
    assert sat.attention_on_glyph(alpha, glyphs, (4, 12)) == 0.5
    alpha[0, 1] = 0.0
    alpha[0, 1, 1 * 12 + 8] = 1.0  # centre (34, 6): on the 7
    assert sat.attention_on_glyph(alpha, glyphs, (4, 12)) == 1.0


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The example's whole run at toy size (a few training steps), and new images."""
    out = tmp_path_factory.mktemp("show_attend_tell")
    args = sat.parse_args(["--out", str(out), "--epochs", "4", "--train-size", "256",
                           "--test-size", "6", "--batch-size", "32", "--units", "16",
                           "--learning-rate", "0.01", "--beam", "3"])
    model, results = sat.run(args)
    return model, results, out, sat.make_dataset(8, seed=4)["images"]


@pytest.mark.slow
def test_greedy_caption_equals_stepwise_argmax_of_the_model(trained):
    model, _, _, images = trained
    ids, _ = sat.greedy_caption(model, images)
    # Reference: the whole model on the growing prefix, argmax of its last step.
    prefix = np.full((len(images), 1), START_ID, "int32")
    for _ in range(sat.MAX_LENGTH):
        logits = model({"images": images, "decoder_inputs": prefix})
        prefix = np.concatenate([prefix, np.argmax(logits[:, -1], -1)[:, None]], 1)
    for got, expected in zip(ids, prefix[:, 1:]):
        n = len(_until_end(expected))
        assert list(got[:n]) == list(expected[:n])
        assert (got[n:] == PAD_ID).all()


@pytest.mark.slow
def test_decoder_steps_give_the_teacher_forced_logits(trained):
    # Fed the true captions (varied tokens, whatever the model would output),
    # one step at a time with precomputed keys, as greedy decoding runs.
    model, _, _, _ = trained
    data = sat.make_dataset(8, seed=6)
    decoder_inputs = sat.shift_right(data["captions"])
    expected = np.asarray(model({"images": data["images"], "decoder_inputs": decoder_inputs}))
    steps = sat.CaptionSteps(model)
    constants, state = steps.start(tf.constant(data["images"]), sat.MAX_LENGTH)
    for t in range(sat.MAX_LENGTH):
        logits, state = steps.step(tf.constant(decoder_inputs[:, t]), tf.constant(t),
                                   constants, state)
        np.testing.assert_allclose(np.asarray(logits), expected[:, t], atol=1e-5)


def _softmax(e):
    e = np.exp(e - e.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.slow
def test_attention_is_bahdanau_over_the_image_cells_and_sums_to_one(trained):
    model, _, _, images = trained
    ids, alpha = sat.greedy_caption(model, images)
    h, w = sat.feature_grid(model)
    assert (h, w) == (sat.HEIGHT // 4, sat.WIDTH // 4)  # two 2 x 2 max-pools
    assert alpha.shape == (len(images), sat.MAX_LENGTH, h * w)
    assert np.isfinite(alpha).all()
    assert (alpha > 0).all()  # every cell is a valid key: none gets zero weight
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)

    # NumPy, from the equations: e_tj = vᵀ tanh(W_q s_{t-1} + W_k a_j), α = softmax_j,
    # c_t = Σ_j α_tj a_j, with s_t and c_t read from the decoder's o_t = [s_t; c_t].
    a, s0 = (np.asarray(x) for x in model.get_layer("encoder")(images))
    decoder = model.get_layer("decoder")
    y = model.get_layer("target_embedding")(sat.shift_right(ids))
    o = np.asarray(decoder(y, a, initial_state=[s0]))
    units = decoder.units
    s_prev = np.concatenate([s0[:, None], o[:, :-1, :units]], axis=1)  # (B, T, units)
    w_q, w_k, v = (np.asarray(x) for x in decoder.attention.get_weights())
    e = np.tanh((s_prev @ w_q)[:, :, None] + (a @ w_k)[:, None]) @ v  # (B, T, L)
    expected_alpha = _softmax(e)
    np.testing.assert_allclose(alpha, expected_alpha, atol=1e-5)
    np.testing.assert_allclose(o[..., units:], expected_alpha @ a, atol=1e-4)


@pytest.mark.slow
def test_run_writes_exact_match_and_attention_figure(trained):
    _, results, out, _ = trained
    saved = json.loads((out / "results.json").read_text())
    assert saved == results
    assert saved["test_images"] == 6
    outputs = [e["output"] for e in saved["examples"]]
    targets = [e["target"] for e in saved["examples"]]
    assert len(targets) == 6
    assert saved["exact_match"] == np.mean([o == t for o, t in zip(outputs, targets)])
    assert (out / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert saved["beam_width"] == 3
    beam_outputs = saved["beam_examples"]
    assert saved["beam_exact_match"] == np.mean([o == t for o, t in zip(beam_outputs, targets)])


def _log_probability(model, images, ids):
    """log p(ids | image) from one teacher-forced call, summed in NumPy up to [END]."""
    ids = np.asarray(ids)
    logits = np.asarray(model({"images": images, "decoder_inputs": sat.shift_right(ids)}),
                        "float64")
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    token_log_p = np.take_along_axis(log_p, ids[..., None].astype("int64"), -1)[..., 0]
    return np.array([token_log_p[b, : len(_until_end(row))].sum() for b, row in enumerate(ids)])


@pytest.mark.slow
def test_beam_of_one_gives_the_greedy_captions(trained):
    model, _, _, images = trained
    greedy, _ = sat.greedy_caption(model, images)
    ids, log_probs = sat.beam_caption(model, images, beam_width=1)
    np.testing.assert_array_equal(ids, greedy)
    np.testing.assert_allclose(log_probs, _log_probability(model, images, greedy), atol=1e-4)


@pytest.mark.slow
def test_beam_captions_score_at_least_the_greedy_captions(trained):
    model, _, _, images = trained
    greedy, _ = sat.greedy_caption(model, images)
    greedy_score = _log_probability(model, images, greedy)
    ids, log_probs = sat.beam_caption(model, images, beam_width=4)
    beam_score = _log_probability(model, images, ids)
    np.testing.assert_allclose(log_probs, beam_score, atol=1e-4)
    # Not a theorem for a narrow beam (the greedy prefix can drop out of it);
    # it holds for this model and these images.
    assert (beam_score >= greedy_score - 1e-5).all()
    # A theorem when the beam holds every prefix but the last token's
    # (V^(T-1) beams): the search is then exhaustive and finds the most
    # probable caption of length T.
    length = 3
    greedy = sat.greedy_caption(model, images, max_length=length)[0]
    ids, log_probs = sat.beam_caption(
        model, images, beam_width=sat.VOCABULARY_SIZE ** (length - 1), max_length=length
    )
    beam_score = _log_probability(model, images, ids)
    np.testing.assert_allclose(log_probs, beam_score, atol=1e-4)
    assert (beam_score >= _log_probability(model, images, greedy) - 1e-5).all()


def test_command_line_rejects_a_non_positive_size(capsys):
    with pytest.raises(SystemExit):
        sat.parse_args(["--train-size", "0"])
    assert "expected a positive integer, received 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sat.parse_args(["--beam", "0"])
    assert "expected a positive integer, received 0" in capsys.readouterr().err
    assert sat.parse_args([]).beam is None
