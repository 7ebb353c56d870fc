"""`models.classifier_from_language_model`: GPT's fine-tuning model.

The reference is the language model itself: its last block run on each row
alone, without padding, read at the row's last position, and the head's
weights applied in NumPy.
"""

import os

import keras
import numpy as np
import pytest

from keras_seq import models

V, C = 12, 3
# Rows of 5, 3 and 1 real tokens, then padding.
IDS = np.array([[5, 6, 7, 8, 9], [4, 9, 6, 0, 0], [7, 0, 0, 0, 0]], "int32")


def _lm(kind):
    keras.utils.set_random_seed(0)
    if kind == "transformer":
        return models.language_model(V, num_layers=2, units=8, num_heads=2, intermediate_dim=16,
                                     dropout=0.0)
    if kind == "rnn":
        return models.language_model(V, kind="rnn", num_layers=2, units=8, cell="peephole",
                                     dropout=0.0)
    # The residual recurrent blocks (causal, no padding mask).
    return models.language_model(V, kind=kind, num_layers=2, units=8, num_heads=2,
                                 intermediate_dim=16, dropout=0.0)


@pytest.mark.parametrize("kind", ["transformer", "rnn", "xlstm", "mingru"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_logits_are_the_head_on_the_last_or_mean_real_hidden_state(kind, pooling):
    lm = _lm(kind)
    classifier = models.classifier_from_language_model(lm, C, dropout=0.0, pooling=pooling)
    body = keras.Model(lm.inputs[0], models.language_model_hidden_states(lm))
    kernel, bias = classifier.get_layer("class_logits").get_weights()
    expected = []
    for row in IDS:
        real = row[row != 0][None, :]  # alone, unpadded
        h = keras.ops.convert_to_numpy(body(real))[0]
        expected.append((h[-1] if pooling == "last" else h.mean(axis=0)) @ kernel + bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(classifier(IDS)), expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["rnn", "xlstm", "mingru"])
def test_the_hidden_states_are_what_the_output_layer_reads(kind):
    # The blocks' residual stream grows with depth; the head must read it
    # after the final norm, as the language model's own output layer does.
    lm = _lm(kind)
    h = keras.Model(lm.inputs[0], models.language_model_hidden_states(lm))(IDS)
    kernel, bias = lm.get_layer("logits").get_weights()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(h) @ kernel + bias,
                               keras.ops.convert_to_numpy(lm(IDS)), atol=1e-5)


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_the_body_is_the_language_models_own_layers_and_logits(kind):
    lm = _lm(kind)
    both = models.classifier_from_language_model(lm, C, lm_logits=True)
    outputs = both(IDS)
    assert set(outputs) == {"classes", "next_tokens"}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(outputs["next_tokens"]),
                               keras.ops.convert_to_numpy(lm(IDS)), atol=1e-6)
    lm_variables = {id(v) for v in lm.weights}
    head = [v for v in both.trainable_weights if id(v) not in lm_variables]
    assert [v.path for v in head] == ["class_logits/kernel", "class_logits/bias"]
    # A linear probe, the Keras way: the frozen body leaves the head alone trainable.
    lm.trainable = False
    probe = models.classifier_from_language_model(lm, C)
    assert [v.path for v in probe.trainable_weights] == ["class_logits/kernel", "class_logits/bias"]


def test_the_classifier_round_trips_through_a_keras_file(tmp_path):
    classifier = models.classifier_from_language_model(_lm("transformer"), C)
    path = os.path.join(tmp_path, "classifier.keras")
    classifier.save(path)
    again = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(IDS)),
                               keras.ops.convert_to_numpy(classifier(IDS)), atol=1e-6)


def test_a_model_that_is_not_a_language_model_is_refused():
    with pytest.raises(TypeError, match="classifier_from_language_model: invalid type for "
                       "argument `lm_model`: expected a keras.Model built by"):
        models.classifier_from_language_model(models.sequence_classifier(V, C, units=4), C)
    with pytest.raises(ValueError, match="`num_classes`"):
        models.classifier_from_language_model(_lm("rnn"), 0)
    with pytest.raises(ValueError, match="`pooling`: expected one of 'last', 'mean'"):
        models.classifier_from_language_model(_lm("rnn"), C, pooling="max")
    with pytest.raises(TypeError, match="language_model_hidden_states: invalid type"):
        models.language_model_hidden_states(keras.Sequential([keras.Input((3,))]))


def test_a_row_of_padding_gives_finite_logits_in_both_classifiers():
    padding = np.zeros((2, 4), "int32")
    for model in (models.classifier_from_language_model(_lm("transformer"), C),
                  models.sequence_classifier(V, C, units=4, cell="gru")):
        assert np.isfinite(keras.ops.convert_to_numpy(model(padding))).all()
