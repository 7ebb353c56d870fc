"""Keras-layer behaviour of the recurrent family: config, saving, arguments, dtypes."""

import keras
import numpy as np
import pytest
from keras import ops
from recurrent_family import make_recurrent

from keras_seq import layers

B, T, IN, U = 2, 4, 3, 5

# One LSTM, CIFG and GRU case each, of the shared list.
LAYERS = ["peephole", "cifg_peepholes", "gru_reset_before"]


def _layer(case, **kwargs):
    return make_recurrent(case, U, **kwargs)


def _x(rng, batch=B, steps=T):
    return rng.normal(size=(batch, steps, IN)).astype("float32")


@pytest.mark.parametrize("cls, kwargs, expected", [
    # LSTM 4(mn + n² + n) + 3n peepholes; CIFG 3(mn + n² + n) (+ 2n); GRU as Keras.
    (layers.PeepholeLSTM, {}, 4 * (IN * U + U * U + U) + 3 * U),
    (layers.CoupledGateLSTM, {}, 3 * (IN * U + U * U + U)),
    (layers.CoupledGateLSTM, {"use_peepholes": True}, 3 * (IN * U + U * U + U) + 2 * U),
    (layers.GRU, {}, 3 * (IN * U + U * U + 2 * U)),
    (layers.GRU, {"reset_after": False}, 3 * (IN * U + U * U + U)),
])
def test_parameter_counts(cls, kwargs, expected):
    layer = cls(U, **kwargs)
    layer.build((None, None, IN))
    assert layer.count_params() == expected


@pytest.mark.parametrize("cls, kwargs, expected", [
    (layers.PeepholeLSTM, {}, [("kernel", (IN, 4 * U)), ("recurrent_kernel", (U, 4 * U)),
                               ("bias", (4 * U,)), ("input_peephole", (U,)),
                               ("forget_peephole", (U,)), ("output_peephole", (U,))]),
    (layers.CoupledGateLSTM, {"use_peepholes": True},
     [("kernel", (IN, 3 * U)), ("recurrent_kernel", (U, 3 * U)), ("bias", (3 * U,)),
      ("forget_peephole", (U,)), ("output_peephole", (U,))]),
    (layers.GRU, {}, [("kernel", (IN, 3 * U)), ("recurrent_kernel", (U, 3 * U)),
                      ("bias", (2, 3 * U))]),
])
def test_weights_in_contract_order_and_shapes(cls, kwargs, expected):
    layer = cls(U, **kwargs)
    layer.build((None, None, IN))
    assert [(w.name, tuple(w.shape)) for w in layer.weights] == expected
    assert [w.shape for w in layer.get_weights()] == [shape for _, shape in expected]


@pytest.mark.parametrize("cls, forget_slice", [
    (layers.PeepholeLSTM, slice(U, 2 * U)),
    (layers.CoupledGateLSTM, slice(0, U)),
])
def test_unit_forget_bias_initialises_forget_gate_to_one(cls, forget_slice):
    layer = cls(U)
    layer.build((None, None, IN))
    bias = ops.convert_to_numpy(layer.cell.bias)
    expected = np.zeros_like(bias)
    expected[forget_slice] = 1.0
    np.testing.assert_array_equal(bias, expected)


def test_cell_state_sizes_match_keras():
    assert layers.PeepholeLSTMCell(U).state_size == keras.layers.LSTMCell(U).state_size
    assert layers.CoupledGateLSTMCell(U).state_size == [U, U]
    assert layers.GRUCell(U).state_size == keras.layers.GRUCell(U).state_size


@pytest.mark.parametrize("case", list(LAYERS))
def test_get_config_from_config_round_trip(case, rng):
    layer = _layer(case, return_sequences=True, go_backwards=True, dropout=0.1, seed=3,
                   kernel_regularizer="l2", recurrent_constraint="non_neg")
    x = _x(rng)
    expected = layer(x)
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    clone.build((None, None, IN))
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x), expected, atol=1e-6)


# --- arguments --------------------------------------------------------------------


@pytest.mark.parametrize("cls", [layers.PeepholeLSTM, layers.CoupledGateLSTM, layers.GRU,
                                 layers.PeepholeLSTMCell, layers.GRUCell])
@pytest.mark.parametrize("kwargs, argument", [
    ({"units": 0}, "units"),
    ({"units": -3}, "units"),
    ({"units": U, "dropout": 1.0}, "dropout"),
    ({"units": U, "recurrent_dropout": -0.1}, "recurrent_dropout"),
    ({"units": U, "activation": "no_such_activation"}, "activation"),
    ({"units": U, "recurrent_activation": "nope"}, "recurrent_activation"),
])
def test_bad_constructor_arguments_raise_clear_value_error(cls, kwargs, argument):
    with pytest.raises(ValueError, match=rf"{cls.__name__}.*`{argument}`"):
        cls(**kwargs)


@pytest.mark.parametrize("case", ["peephole", "gru_reset_before"])
def test_bad_input_shapes_raise_clear_value_error(case, rng):
    layer = _layer(case)
    with pytest.raises(ValueError, match=rf"{layer.__class__.__name__}.*rank 3"):
        layer(np.zeros((B, IN), "float32"))
    layer(_x(rng))
    with pytest.raises(ValueError, match=rf"{layer.__class__.__name__}.*{IN + 1} features"):
        layer(np.zeros((B, T, IN + 1), "float32"))


@pytest.mark.parametrize("make", [
    lambda: layers.PeepholeLSTM(U), lambda: layers.MinGRU(U),
    lambda: layers.RNN(keras.layers.GRUCell(U)),
], ids=["PeepholeLSTM", "MinGRU", "RNN of Keras' GRUCell"])
def test_a_sequence_of_zero_steps_is_a_value_error_naming_the_layer(make):
    # Keras' own recurrent layers fail here with "slice index 0 of dimension 1
    # out of bounds"; ours say what is wrong.
    layer = make()
    with pytest.raises(ValueError, match=rf"{type(layer).__name__}.*at least one time step"):
        layer(np.zeros((B, 0, IN), "float32"))


@pytest.mark.parametrize("case", list(LAYERS))
def test_stateful_layer_carries_state_between_batches(case, rng):
    x = _x(rng, steps=6)
    whole = _layer(case, return_sequences=True)
    expected = whole(x)
    stateful = _layer(case, return_sequences=True, stateful=True)
    stateful.build((B, None, IN))
    stateful.set_weights(whole.get_weights())
    first, second = stateful(x[:, :2]), stateful(x[:, 2:])
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), expected, atol=1e-6)
    stateful.reset_state()
    np.testing.assert_allclose(stateful(x[:, :2]), expected[:, :2], atol=1e-6)


@pytest.mark.parametrize("case", list(LAYERS))
def test_dropout_is_seeded_and_inactive_at_inference(case, rng):
    x = _x(rng)
    plain = _layer(case)
    expected = np.asarray(plain(x))
    dropped = _layer(case, dropout=0.5, recurrent_dropout=0.5, seed=7)
    dropped.build((None, None, IN))
    dropped.set_weights(plain.get_weights())
    train_a = np.asarray(dropped(x, training=True))
    assert np.all(np.isfinite(train_a))
    assert np.max(np.abs(train_a - expected)) > 1e-3
    np.testing.assert_allclose(dropped(x, training=False), expected, atol=1e-6)
    # Same seed, fresh layer: the same masks.
    again = _layer(case, dropout=0.5, recurrent_dropout=0.5, seed=7)
    again.build((None, None, IN))
    again.set_weights(plain.get_weights())
    np.testing.assert_allclose(again(x, training=True), train_a, atol=1e-6)


def test_input_dropout_matches_manual_mask_reference(rng):
    """With a known input mask, the layer equals the undropped layer on masked inputs."""
    x = _x(rng)
    layer = _layer("peephole", dropout=0.5, seed=11)
    layer.build((None, None, IN))
    got = layer(x, training=True)
    # A fresh generator with the same seed draws the same first (input) mask.
    reference = _layer("peephole", dropout=0.5, seed=11)
    reference.build((None, None, IN))
    reference.set_weights(layer.get_weights())
    mask = keras.random.dropout(ops.ones((B, IN)), 0.5, seed=reference.cell.seed_generator)
    plain = _layer("peephole")
    plain.build((None, None, IN))
    plain.set_weights(layer.get_weights())
    np.testing.assert_allclose(got, plain(x * np.asarray(mask)[:, None, :]), atol=1e-5)


def test_regularizers_add_losses_and_constraints_apply(rng):
    layer = layers.PeepholeLSTM(U, kernel_regularizer=keras.regularizers.L2(0.1),
                                peephole_regularizer=keras.regularizers.L1(0.1),
                                recurrent_constraint="non_neg")
    model = keras.Sequential([keras.Input((T, IN)), layer])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    x, y = _x(rng), rng.normal(size=(B, U)).astype("float32")
    model(x)
    cell = layer.cell
    expected = 0.1 * np.sum(ops.convert_to_numpy(cell.kernel) ** 2) + 0.1 * sum(
        np.sum(np.abs(ops.convert_to_numpy(p)))
        for p in (cell.input_peephole, cell.forget_peephole, cell.output_peephole)
    )
    np.testing.assert_allclose(float(np.asarray(sum(model.losses))), expected, rtol=1e-5)
    model.fit(x, y, epochs=1, verbose=0)
    assert np.all(ops.convert_to_numpy(cell.recurrent_kernel) >= 0.0)


# --- mixed precision -----------------------------------------------------------------


@pytest.mark.parametrize("policy, atol", [("mixed_float16", 2e-2), ("mixed_bfloat16", 6e-2)])
@pytest.mark.parametrize("case", list(LAYERS))
def test_mixed_precision_computes_low_precision_close_to_float32(policy, atol, case, rng):
    x = _x(rng, steps=6)
    mask = np.arange(6)[None, :] < np.array([[6], [3]])
    reference = _layer(case, return_sequences=True, return_state=True)
    expected = reference(x, mask=mask)
    keras.mixed_precision.set_global_policy(policy)
    layer = _layer(case, return_sequences=True, return_state=True)
    layer.build((None, None, IN))
    layer.set_weights(reference.get_weights())
    got = layer(x, mask=mask)
    low = policy.split("_")[1]
    assert all(w.dtype == "float32" for w in layer.weights)
    for g, e in zip(got, expected):
        assert keras.backend.standardize_dtype(g.dtype) == low
        g = ops.convert_to_numpy(ops.cast(g, "float32"))
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, e, atol=atol)


# --- masks with any Keras ----------------------------------------------------------


class _MaskProbe(keras.layers.Layer):
    """Records the Keras mask it is called with."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.seen = []

    def call(self, inputs, mask=None):
        self.seen.append(mask)
        return inputs


@pytest.mark.parametrize("keras_rnn_masks", [True, False])
@pytest.mark.parametrize("make", [
    lambda: layers.PeepholeLSTM(U, return_sequences=True),
    lambda: layers.GRU(U, return_sequences=True),
    lambda: layers.RNN(layers.LayerNormLSTMCell(U), return_sequences=True),
    lambda: layers.ConvertibleLSTM(U, return_sequences=True),
], ids=["PeepholeLSTM", "GRU", "RNN", "ConvertibleLSTM"])
def test_mask_flows_past_the_layer_whatever_keras_rnn_says(make, keras_rnn_masks, monkeypatch):
    """Keras 3.16 sets ``supports_masking = False`` in ``keras.layers.RNN``;
    emulated here, the Embedding's mask must still reach the next layer."""
    if not keras_rnn_masks:
        original = keras.layers.RNN.__init__

        def without_masking(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.supports_masking = False

        monkeypatch.setattr(keras.layers.RNN, "__init__", without_masking)
    ids = np.array([[3, 1, 4, 0, 0], [5, 9, 2, 6, 5]], "int32")
    probe = _MaskProbe()
    inputs = keras.Input((None,), dtype="int32")
    outputs = probe(make()(keras.layers.Embedding(10, 3, mask_zero=True)(inputs)))
    model = keras.Model(inputs, outputs)
    model(ids)
    np.testing.assert_array_equal(ops.convert_to_numpy(probe.seen[-1]), ids != 0)
