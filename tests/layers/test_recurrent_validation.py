"""Argument and shape checks of the recurrent family: clear errors, before any computation."""

import keras
import numpy as np
import pytest
from recurrent_family import NUM_STATES, RECURRENT_CELLS, RECURRENT_LAYERS

from keras_seq import layers

B, T, IN, U = 2, 4, 3, 5

LAYERS, CELLS = RECURRENT_LAYERS, RECURRENT_CELLS


def _x(rng, batch=B, steps=T):
    return rng.normal(size=(batch, steps, IN)).astype("float32")


def _states(layer_cls, batch=B, width=U, count=None):
    count = NUM_STATES[layer_cls] if count is None else count
    return [np.zeros((batch, width), "float32") for _ in range(count)]


# --- constructor arguments ---------------------------------------------------------


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("kwargs, argument, error", [
    ({"units": 0}, "units", ValueError),
    ({"units": 2.5}, "units", ValueError),
    ({"units": "8"}, "units", TypeError),
    ({"units": True}, "units", TypeError),
    ({"units": U, "dropout": 1.0}, "dropout", ValueError),
    ({"units": U, "dropout": None}, "dropout", TypeError),
    ({"units": U, "recurrent_dropout": -0.1}, "recurrent_dropout", ValueError),
    ({"units": U, "activation": "no_such_activation"}, "activation", ValueError),
    ({"units": U, "recurrent_activation": 3}, "recurrent_activation", TypeError),
    ({"units": U, "use_bias": "yes"}, "use_bias", TypeError),
])
def test_bad_constructor_argument_raises_naming_class_and_argument(cls, kwargs, argument, error):
    with pytest.raises(error, match=rf"^{cls.__name__}: invalid \w+ for argument `{argument}`"):
        cls(**kwargs)


@pytest.mark.parametrize("cls", LAYERS + CELLS)
def test_numpy_integer_units_accepted(cls):
    assert cls(np.int64(U)).units == U
    assert type(cls(np.int32(U)).units) is int


@pytest.mark.parametrize("cls, argument", [
    (layers.GRU, "reset_after"), (layers.GRUCell, "reset_after"),
    (layers.CoupledGateLSTM, "use_peepholes"), (layers.CoupledGateLSTMCell, "use_peepholes"),
    (layers.PeepholeLSTM, "unit_forget_bias"), (layers.PeepholeLSTMCell, "unit_forget_bias"),
    (layers.GRU, "return_sequences"), (layers.PeepholeLSTM, "stateful"),
])
def test_non_bool_flag_is_a_type_error(cls, argument):
    with pytest.raises(TypeError, match=rf"{cls.__name__}: .*`{argument}`"):
        cls(U, **{argument: "no"})


# --- legacy `implementation=` ------------------------------------------------------


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("implementation", [0, 1, 2])
def test_legacy_implementation_argument_is_accepted_and_ignored(cls, implementation, rng):
    plain, legacy = cls(U, seed=1), cls(U, seed=1, implementation=implementation)
    # Like keras.layers.LSTM/GRU and their cells, the config does not carry it.
    assert "implementation" not in legacy.get_config()
    assert legacy.get_config() == {**plain.get_config(), "name": legacy.name}
    if cls in CELLS:
        plain, legacy = keras.layers.RNN(plain), keras.layers.RNN(legacy)
    x = _x(rng)
    plain(x)
    legacy(x)
    legacy.set_weights(plain.get_weights())
    np.testing.assert_allclose(legacy(x), plain(x), atol=1e-6)


@pytest.mark.parametrize("cls", LAYERS)
def test_old_config_with_implementation_loads(cls, rng):
    layer = cls(U)
    config = {**layer.get_config(), "implementation": 1}
    restored = cls.from_config(config)
    assert restored(_x(rng)).shape == (B, U)


# --- call shapes -------------------------------------------------------------------


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("mask_steps", [T - 1, T + 2])
def test_mask_of_another_length_raises_naming_layer_and_mask(cls, mask_steps, rng):
    layer = cls(U)
    mask = np.ones((B, mask_steps), bool)
    with pytest.raises(ValueError, match=rf"{cls.__name__} '{layer.name}': .*`mask`.*\({B}, {T}\)"):
        layer(_x(rng), mask=mask)


@pytest.mark.parametrize("cls", LAYERS)
def test_mask_of_another_batch_or_rank_raises(cls, rng):
    layer = cls(U)
    with pytest.raises(ValueError, match=r"`mask`"):
        layer(_x(rng), mask=np.ones((B + 1, T), bool))
    with pytest.raises(ValueError, match=r"`mask`"):
        layer(_x(rng), mask=np.ones((B, T, 1), bool))


@pytest.mark.parametrize("cls", LAYERS)
def test_mask_check_in_functional_model_with_static_lengths(cls):
    x = keras.Input((T, IN))
    mask = keras.Input((T + 1,), dtype="bool")
    with pytest.raises(ValueError, match=rf"{cls.__name__} .*`mask`"):
        cls(U)(x, mask=mask)


@pytest.mark.parametrize("cls", LAYERS)
def test_initial_state_of_wrong_width_raises(cls, rng):
    layer = cls(U)
    with pytest.raises(
        ValueError, match=rf"{cls.__name__} '{layer.name}': .*`initial_state`.*\({B}, {U}\)"
    ):
        layer(_x(rng), initial_state=_states(cls, width=U + 1))


@pytest.mark.parametrize("cls", LAYERS)
def test_initial_state_of_wrong_batch_raises(cls, rng):
    with pytest.raises(ValueError, match=r"`initial_state`"):
        cls(U)(_x(rng), initial_state=_states(cls, batch=B + 1))


@pytest.mark.parametrize("cls", LAYERS)
def test_wrong_number_of_initial_states_raises(cls, rng):
    layer = cls(U)
    count = NUM_STATES[cls] + 1
    with pytest.raises(ValueError, match=rf"{cls.__name__} '{layer.name}': .*`initial_state`"):
        layer(_x(rng), initial_state=_states(cls, count=count))


@pytest.mark.parametrize("cls", LAYERS)
def test_right_initial_state_and_mask_still_work(cls, rng):
    layer = cls(U, return_sequences=True)
    mask = np.ones((B, T), bool)
    mask[1, 2:] = False
    states = _states(cls)
    out = layer(_x(rng), mask=mask, initial_state=states if len(states) > 1 else states[0])
    assert out.shape == (B, T, U)


@pytest.mark.parametrize("cls", LAYERS)
def test_stateful_without_static_batch_raises_naming_layer(cls):
    layer = cls(U, stateful=True)
    with pytest.raises(ValueError, match=rf"{cls.__name__} '{layer.name}': .*`inputs`.*stateful"):
        layer(keras.Input((T, IN)))


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("cls", LAYERS)
def test_dynamic_length_mask_still_runs_in_a_function(cls, rng):
    """Unknown lengths cannot be checked statically; the call must still work
    (a tf.function with unknown batch and length; JAX and PyTorch trace
    static shapes)."""
    import tensorflow as tf

    layer = cls(U)
    x = _x(rng)
    mask = np.ones((B, T), bool)
    expected = layer(x, mask=mask)
    run = tf.function(
        lambda x, m: layer(x, mask=m),
        input_signature=[tf.TensorSpec((None, None, IN)), tf.TensorSpec((None, None), tf.bool)],
    )
    np.testing.assert_allclose(run(x, mask), expected, atol=1e-6)
