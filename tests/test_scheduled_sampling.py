"""Scheduled sampling (Bengio et al. 2015) against the teacher-forced model and the paper's decays.

The reference for the sampled forward pass is the model itself run
teacher-forced on the tokens that were fed (the logits must be the same),
the draws are checked against the softmax they come from, and the schedules
against Bengio et al.'s formulas for ε_i, the probability of the reference.
"""

import json
import math

import keras
import numpy as np
import pytest

from keras_seq import models
from keras_seq.cli import main
from keras_seq.training import ScheduledSampling, sampled_decoding, sampling_probability

V = 12


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(0)
    return models.rnn_seq2seq(V, V, units=8, embedding_dim=4)


def _inputs(rng, batch=8, steps=6):
    encoder_inputs = rng.integers(3, V, size=(batch, 5)).astype("int32")
    decoder_inputs = rng.integers(3, V, size=(batch, steps)).astype("int32")
    encoder_inputs[0, 3:] = 0
    decoder_inputs[1, 4:] = 0  # padding stays padding
    decoder_inputs[:, 0] = 1  # the start token
    return {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}


def test_without_sampling_it_is_teacher_forcing(seq2seq, rng):
    inputs = _inputs(rng)
    logits, fed = sampled_decoding(seq2seq, inputs, 0.0, keras.random.SeedGenerator(1),
                                   training=False)
    np.testing.assert_array_equal(np.asarray(fed), inputs["decoder_inputs"])
    np.testing.assert_allclose(np.asarray(logits),
                               np.asarray(seq2seq(inputs, training=False)), atol=1e-5)


def test_the_logits_are_the_models_on_the_tokens_fed(seq2seq, rng):
    inputs = _inputs(rng)
    logits, fed = sampled_decoding(seq2seq, inputs, 0.5, keras.random.SeedGenerator(2),
                                   training=False)
    fed = np.asarray(fed)
    gold = inputs["decoder_inputs"]
    assert (fed[:, 0] == gold[:, 0]).all() and (fed[gold == 0] == 0).all()
    assert (fed != gold).any()  # 40 coins at p = 0.5 (and 12 tokens to draw from)
    teacher_forced = seq2seq({**inputs, "decoder_inputs": fed}, training=False)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(teacher_forced), atol=1e-5)


def test_the_tokens_fed_are_drawn_from_the_previous_steps_softmax(rng):
    keras.utils.set_random_seed(0)
    model = models.rnn_seq2seq(V, V, units=8, embedding_dim=4)
    dense = model.get_layer("logits")
    kernel, bias = dense.get_weights()
    bias[:] = -30.0
    bias[[4, 7]] = [math.log(3.0), 0.0]  # p(4) = 3/4, p(7) = 1/4, whatever the state
    dense.set_weights([np.zeros_like(kernel), bias])
    inputs = _inputs(rng, batch=64, steps=9)
    inputs["decoder_inputs"][1, 4:] = 0
    _, fed = sampled_decoding(model, inputs, 1.0, keras.random.SeedGenerator(3), training=False)
    fed = np.asarray(fed)[:, 1:]
    drawn = fed[inputs["decoder_inputs"][:, 1:] != 0]
    assert set(np.unique(drawn)) == {4, 7}
    # 507 draws of a Bernoulli(3/4): 5 standard deviations are ±0.096.
    assert abs(np.mean(drawn == 4) - 0.75) < 0.1


@pytest.mark.parametrize("total", [100, 2000])
def test_the_schedules_are_bengio_et_al_s_decays(total):
    def k_of(n):  # k ln k = n / 2, by Newton's method
        k = 10.0
        for _ in range(100):
            k -= (k * math.log(k) - n / 2) / (math.log(k) + 1.0)
        return k

    k = k_of(total)
    for step in (0, total // 4, total // 2, total - 1, 3 * total):
        epsilon = {"constant": 0.0, "linear": max(0.0, 1.0 - step / (total - 1)),
                   "inverse_sigmoid": k / (k + math.exp(step / k))}
        for schedule, eps in epsilon.items():
            expected = 0.6 if schedule == "constant" else 0.6 * (1.0 - eps)
            got = float(sampling_probability(schedule, 0.6, step, total))
            assert got == pytest.approx(expected, abs=1e-5), (schedule, step)
    # Half of P halfway, by construction of k.
    assert float(sampling_probability("inverse_sigmoid", 0.6, total / 2, total)) == (
        pytest.approx(0.3, abs=1e-4))


def test_the_wrapper_refuses_other_models_and_bad_probabilities(seq2seq):
    transformer = models.transformer_seq2seq(V, V, num_layers=1, model_dim=8, num_heads=2,
                                             intermediate_dim=8)
    with pytest.raises(ValueError, match="ScheduledSampling.*rnn_seq2seq"):
        ScheduledSampling(transformer, 0.5)
    with pytest.raises(ValueError, match="ScheduledSampling.*probability"):
        ScheduledSampling(seq2seq, 1.5)
    with pytest.raises(ValueError, match="ScheduledSampling.*schedule"):
        ScheduledSampling(seq2seq, 0.5, "exponential")


def test_a_run_with_scheduled_sampling_keeps_the_plain_model(tmp_path):
    # Pairs of 2-3 letters: the sampled decoder loop traces in half the time of the dates'.
    data = tmp_path / "pairs.tsv"
    data.write_text("ab\tba\nabc\tcba\nbca\tacb\ncab\tbac\n" * 10, encoding="utf-8")
    code = main(["train", "--out", str(tmp_path), "--name", "sampled", "--scheduled-sampling",
                 "0.5", "--sampling-schedule", "linear", "--data", str(data), "--units", "8",
                 "--batch-size", "32", "--epochs", "1", "--verbose", "0"])
    assert code == 0
    run = tmp_path / "sampled"
    config = json.loads((run / "metrics.json").read_text())["config"]
    assert (config["scheduled_sampling"], config["sampling_schedule"]) == (0.5, "linear")
    model = keras.saving.load_model(run / "model.keras", safe_mode=True)
    assert models.seq2seq_kind(model) == "rnn"


def test_the_command_lines_monotonic_attention_builds_a_monotonic_decoder():
    import dataclasses

    from keras_seq import recipes, text
    from keras_seq.recipes.translation import PreparedData
    from keras_seq.training import TrainingConfig

    config = TrainingConfig(attention="monotonic_luong", units=8).resolved()
    prepared = PreparedData(*[None] * len(dataclasses.fields(PreparedData)))
    prepared.tokenizer = text.CharTokenizer.from_corpus(["abcdefgh"])
    prepared.source_length = prepared.target_length = 8
    decoder = recipes.get(config.task).build(config, prepared).decoder
    assert decoder.monotonic and decoder.attention_kind == "monotonic_luong"


@pytest.mark.parametrize("args, message", [
    (["--scheduled-sampling", "1.5"], "scheduled-sampling"),
    (["--model", "transformer", "--scheduled-sampling", "0.2"], "scheduled-sampling"),
    (["--sampling-schedule", "linear"], "sampling-schedule"),
])
def test_bad_scheduled_sampling_options_are_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
