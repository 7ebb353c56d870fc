"""The builders' ``cell="lstm"`` and ``cell="simple"`` layers are Keras' LSTM and
SimpleRNN with a convertible inference loop."""

import keras
import numpy as np
import pytest
from keras_rnn_reference import elman_step, lstm_step

from keras_seq.layers import ConvertibleLSTM, ConvertibleSimpleRNN
from keras_seq.layers.recurrent.registry import cell_class, cell_names, num_states

PAIRS = [(keras.layers.LSTM, ConvertibleLSTM), (keras.layers.SimpleRNN, ConvertibleSimpleRNN)]
CASES = [{"return_sequences": True}, {"go_backwards": True, "return_state": True}]


def _numpy_layer(cls, x, mask, weights, return_sequences=False, go_backwards=False,
                 return_state=False):
    """The layer's output from its equations, z_t = x_t W + h_{t-1} U + b, with
    Keras' masking rule: a masked step keeps the states and repeats the last
    output. With ``go_backwards`` the steps run from the last, and the output
    sequence is in the order they ran."""
    kernel, recurrent_kernel, bias = weights
    step = lstm_step if cls is ConvertibleLSTM else elman_step
    units = recurrent_kernel.shape[0]
    states = [np.zeros((x.shape[0], units))] * (2 if cls is ConvertibleLSTM else 1)
    output, outputs = np.zeros((x.shape[0], units)), []
    order = range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])
    for t in order:
        new_states = step(x[:, t] @ kernel + states[0] @ recurrent_kernel + bias, states)
        keep = mask[:, t, None]
        states = [np.where(keep, n, s) for n, s in zip(new_states, states)]
        output = np.where(keep, new_states[0], output)
        outputs.append(output)
    result = np.stack(outputs, axis=1) if return_sequences else output
    return [result, *states] if return_state else [result]


def _random_layers(classes, kwargs, x, rng):
    """One 5-unit layer of each class, built for ``x``, all with the same
    random weights (kernel, recurrent kernel, bias)."""
    layers = [cls(5, **kwargs) for cls in classes]
    for layer in layers:
        layer.build(x.shape)
    weights = [rng.normal(0.0, 0.6, w.shape).astype("float32") for w in layers[0].get_weights()]
    for layer in layers:
        layer.set_weights(weights)
    return layers, weights


@pytest.mark.parametrize("cls", [ConvertibleLSTM, ConvertibleSimpleRNN], ids=["lstm", "simple"])
@pytest.mark.parametrize("kwargs", CASES)
@pytest.mark.parametrize("training", [False, True])
def test_convertible_layer_computes_the_recurrence_equations(cls, kwargs, training, rng):
    # training=False runs our loop on TensorFlow, training=True Keras' own:
    # both must compute the equations, masks and direction included.
    x = rng.normal(size=(3, 11, 4)).astype("float32")
    mask = np.arange(11)[None] < np.array([[11], [7], [1]])
    (layer,), weights = _random_layers([cls], kwargs, x, rng)
    got = keras.tree.flatten(layer(x, mask=mask, training=training))
    expected = _numpy_layer(cls, x.astype("float64"), mask, weights, **kwargs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, atol=1e-5)


@pytest.mark.parametrize("classes", PAIRS, ids=["lstm", "simple"])
@pytest.mark.parametrize("kwargs", CASES)
def test_inference_loop_equals_keras_layer_with_copied_weights(classes, kwargs, rng):
    # At inference our loop runs (on TensorFlow) and Keras' layer runs its own.
    x = rng.normal(size=(3, 11, 4)).astype("float32")
    mask = np.arange(11)[None] < np.array([[11], [7], [1]])
    (reference, ours), _ = _random_layers(classes, kwargs, x, rng)
    expected = keras.tree.flatten(reference(x, mask=mask, training=False))
    got = keras.tree.flatten(ours(x, mask=mask, training=False))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-6)


@pytest.mark.parametrize("cls", [ConvertibleLSTM, ConvertibleSimpleRNN])
def test_convertible_layer_round_trips_through_keras_file(cls, tmp_path, rng):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, cls(4)(inputs))
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert type(loaded.layers[-1]) is cls
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-7)


def test_state_count_matches_the_cell_state_size():
    for cell in cell_names():
        state_size = cell_class(cell)(3).state_size
        expected = len(state_size) if isinstance(state_size, (list, tuple)) else 1
        assert num_states(cell) == expected, cell


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["mingru", "minlstm"])
def test_registered_parallel_recurrences_train_in_the_seq2seq_and_classifier_builders(cell, rng):
    from keras_seq import models

    keras.utils.set_random_seed(0)
    source, target = rng.integers(1, 20, (16, 7)), rng.integers(1, 20, (16, 5))
    source[3, 4:] = 0  # padding: the encoder's masked parallel form
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    seq2seq = models.rnn_seq2seq(20, 20, units=8, embedding_dim=4, cell=cell)
    classifier = models.sequence_classifier(20, 3, units=8, cell=cell)
    for model, inputs, labels in (
        (seq2seq, {"encoder_inputs": source, "decoder_inputs": target}, target),
        (classifier, source, source[:, 0] % 3),  # labels the first token decides
    ):
        model.compile(keras.optimizers.Adam(1e-2), loss)
        history = model.fit(inputs, labels, epochs=3, verbose=0).history["loss"]
        assert np.all(np.isfinite(history)) and history[-1] < history[0], history
