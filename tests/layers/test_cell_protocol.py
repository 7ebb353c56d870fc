"""A new recurrent cell is one class plus one registry line (the checklist of
`RecurrentCell`): a minimal Elman cell written here runs as a layer, inside
`keras.layers.RNN`, and in the model builders, on every backend, and agrees
with a NumPy reference of its equation."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq import models
from keras_seq.layers._recurrent_base import RecurrentCell
from keras_seq.layers._recurrent_layer import RecurrentLayer


class ElmanCell(RecurrentCell):
    """h_t = tanh(x_t W + h_{t-1} U + b): the hooks and nothing else."""

    def __init__(self, units, **kwargs):
        super().__init__(units, **kwargs)
        self.state_size = self.units

    def build(self, input_shape):
        self.add_kernels(self.check_input_shape(input_shape), gates=1)
        self.add_bias(gates=1)
        self.built = True

    def recurrent_weights(self, batch_size=None, bptt=False):
        return [self.read_weight(self.recurrent_kernel), self.recurrent_bias()]

    def recurrent_step(self, xw_t, states, weights, recurrent_mask=None):
        U, b = weights
        h_in = states[0] if recurrent_mask is None else states[0] * recurrent_mask
        h = ops.tanh(self.gate_inputs(xw_t, h_in, U, b))
        return h, [h]


class Elman(RecurrentLayer):
    def __init__(self, units, return_sequences=False, return_state=False, go_backwards=False,
                 **kwargs):
        for key in ("activation", "recurrent_activation", "use_bias", "dropout",
                    "recurrent_dropout", "seed"):
            kwargs.pop(key, None)  # the base cell's config, given back by get_config
        cell_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k.endswith(
            ("_initializer", "_regularizer", "_constraint"))}
        super().__init__(ElmanCell(units, **cell_kwargs), return_sequences=return_sequences,
                         return_state=return_state, go_backwards=go_backwards, **kwargs)


models.register_cell("test_elman", Elman, ElmanCell)


def _numpy_elman(x, kernel, recurrent_kernel, bias, mask=None):
    batch, steps, _ = x.shape
    h = np.zeros((batch, recurrent_kernel.shape[0]))
    outputs = []
    for t in range(steps):
        new = np.tanh(x[:, t] @ kernel + h @ recurrent_kernel + bias)
        keep = np.ones((batch, 1), bool) if mask is None else mask[:, t : t + 1]
        h = np.where(keep, new, h)
        outputs.append(h)
    return np.stack(outputs, 1), h


@pytest.mark.parametrize("training", [False, True])
def test_minimal_cell_layer_matches_numpy_with_a_mask(training, rng):
    layer = Elman(5, return_sequences=True, return_state=True)
    x = rng.normal(size=(3, 7, 4)).astype("float32")
    mask = np.ones((3, 7), bool)
    mask[0, 4:] = False
    layer.build(x.shape)
    weights = [rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    sequence, h = layer(x, mask=mask, training=training)
    expected_sequence, expected_h = _numpy_elman(x, *weights, mask=mask)
    np.testing.assert_allclose(np.asarray(h), expected_h, atol=1e-5)
    # Masked steps repeat the previous output (Keras' rule).
    np.testing.assert_allclose(np.asarray(sequence), expected_sequence, atol=1e-5)


def test_minimal_cell_in_keras_rnn_equals_its_layer(rng):
    cell = ElmanCell(4)
    rnn = keras.layers.RNN(cell, return_sequences=True)
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    rnn.build(x.shape)
    weights = [rng.normal(0, 0.5, w.shape).astype("float32") for w in rnn.get_weights()]
    rnn.set_weights(weights)
    np.testing.assert_allclose(np.asarray(rnn(x)), _numpy_elman(x, *weights)[0], atol=1e-5)


def test_registered_cell_builds_a_language_model_that_trains_and_reloads(tmp_path):
    keras.utils.set_random_seed(0)
    model = models.language_model(9, kind="rnn", num_layers=1, units=6, cell="test_elman")
    assert any(isinstance(layer, Elman) for layer in model.layers)
    ids = np.random.default_rng(0).integers(1, 9, size=(4, 5))
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(ids[:, :-1], ids[:, 1:], epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert models._cells.num_states("test_elman") == 1  # from state_size, not the name
    path = tmp_path / "elman.keras"
    model.save(path)
    reloaded = keras.saving.load_model(
        path, safe_mode=True, custom_objects={"Elman": Elman, "ElmanCell": ElmanCell}
    )
    np.testing.assert_allclose(np.asarray(reloaded.predict(ids, verbose=0)),
                               np.asarray(model.predict(ids, verbose=0)), atol=1e-6)
