"""Numerics of the recurrent family against NumPy references and Keras built-ins."""

import keras
import numpy as np
import pytest
from finite_differences import finite_difference_grads
from keras import ops
from recurrent_family import RECURRENT_CASES

from keras_seq import layers

BACKEND = keras.backend.backend()

B, T, IN, U = 3, 5, 4, 6


# --- NumPy references, written from the equations in the cells' docstrings ----


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_peephole_step(weights, x, states):
    W, U_, b, p_i, p_f, p_o = weights
    h, c = states
    z_i, z_f, z_c, z_o = np.split(x @ W + h @ U_ + b, 4, axis=-1)
    i = _sigmoid(z_i + p_i * c)
    f = _sigmoid(z_f + p_f * c)
    c_t = f * c + i * np.tanh(z_c)
    o = _sigmoid(z_o + p_o * c_t)
    h_t = o * np.tanh(c_t)
    return h_t, [h_t, c_t]


def _np_cifg_step(weights, x, states):
    W, U_, b = weights[:3]
    peepholes = weights[3:]
    h, c = states
    z_f, z_c, z_o = np.split(x @ W + h @ U_ + b, 3, axis=-1)
    if peepholes:
        z_f = z_f + peepholes[0] * c
    f = _sigmoid(z_f)
    c_t = f * c + (1.0 - f) * np.tanh(z_c)
    if peepholes:
        z_o = z_o + peepholes[1] * c_t
    o = _sigmoid(z_o)
    h_t = o * np.tanh(c_t)
    return h_t, [h_t, c_t]


def _np_gru_step(weights, x, states):
    W, U_, b = weights
    (h,) = states
    u = h.shape[-1]
    if b.ndim == 2:  # reset_after: r multiplies (U_h h + b_h recurrent)
        x_z, x_r, x_h = np.split(x @ W + b[0], 3, axis=-1)
        h_z, h_r, h_h = np.split(h @ U_ + b[1], 3, axis=-1)
        z = _sigmoid(x_z + h_z)
        r = _sigmoid(x_r + h_r)
        h_tilde = np.tanh(x_h + r * h_h)
    else:
        x_z, x_r, x_h = np.split(x @ W + b, 3, axis=-1)
        z = _sigmoid(x_z + h @ U_[:, :u])
        r = _sigmoid(x_r + h @ U_[:, u : 2 * u])
        h_tilde = np.tanh(x_h + (r * h) @ U_[:, 2 * u :])
    h_t = z * h + (1.0 - z) * h_tilde
    return h_t, [h_t]


def _np_layernorm_lstm_step(weights, x, states, eps=1e-3):
    """TensorFlow Addons' LayerNormLSTMCell: z = LN_x(xW) + LN_h(hU) + b,
    c_t = LN_c(f c + i c~), h = o tanh(c_t)."""
    W, U_, b, g_x, b_x, g_h, b_h, g_c, b_c = weights
    h, c = states

    def ln(v, gamma, beta):
        centred = v - v.mean(-1, keepdims=True)
        return gamma * centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps) + beta

    z_i, z_f, z_c, z_o = np.split(ln(x @ W, g_x, b_x) + ln(h @ U_, g_h, b_h) + b, 4, axis=-1)
    c_t = ln(_sigmoid(z_f) * c + _sigmoid(z_i) * np.tanh(z_c), g_c, b_c)
    h_t = _sigmoid(z_o) * np.tanh(c_t)
    return h_t, [h_t, c_t]


def _np_run(step, weights, x, states, mask=None, go_backwards=False):
    """Keras semantics: masked steps keep the states and repeat the previous output."""
    steps = range(x.shape[1])
    if go_backwards:
        steps = reversed(steps)
    output = np.zeros_like(states[0])
    outputs = []
    for t in steps:
        new_output, new_states = step(weights, x[:, t], states)
        if mask is not None:
            keep = mask[:, t, None]
            new_states = [np.where(keep, n, s) for n, s in zip(new_states, states)]
            new_output = np.where(keep, new_output, output)
        output, states = new_output, new_states
        outputs.append(output)
    return np.stack(outputs, axis=1), states


# The NumPy step of each layer's equations.
_NP_STEPS = {
    layers.PeepholeLSTM: _np_peephole_step,
    layers.CoupledGateLSTM: _np_cifg_step,
    layers.GRU: _np_gru_step,
    layers.LayerNormLSTM: _np_layernorm_lstm_step,
}
# case -> (layer class, constructor arguments, NumPy step, number of states)
CASES = {
    case: (cls, kwargs, _NP_STEPS[cls], states)
    for case, (cls, _, kwargs, states) in RECURRENT_CASES.items()
}


def _randomize(layer, rng, scale=0.5):
    """Random weights everywhere (peepholes and biases included)."""
    weights = [rng.normal(0.0, scale, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    return weights


def _make(case, rng, **kwargs):
    cls, extra, step, n_states = CASES[case]
    layer = cls(U, **extra, **kwargs)
    layer.build((None, None, IN))
    return layer, _randomize(layer, rng), step, n_states


def _inputs(rng, batch=B, steps=T):
    return rng.normal(size=(batch, steps, IN)).astype("float32")


def _ragged_mask(lengths, steps=T):
    return np.arange(steps)[None, :] < np.asarray(lengths)[:, None]


# --- against the NumPy references ----------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("variant", ["plain", "masked_backwards_initial_state"])
def test_layer_and_cell_match_numpy_reference(case, variant, rng):
    layer, weights, step, n_states = _make(case, rng, return_sequences=True, return_state=True)
    x = _inputs(rng)
    mask, initial, go_backwards = None, None, False
    states = [np.zeros((B, U), "float32") for _ in range(n_states)]
    if variant != "plain":
        mask = _ragged_mask([5, 3, 1])
        states = [rng.normal(size=(B, U)).astype("float32") for _ in range(n_states)]
        initial, go_backwards = states, True
        layer = layer.__class__.from_config({**layer.get_config(), "go_backwards": True})
        layer.build((None, None, IN))
        layer.set_weights(weights)
    w64 = [w.astype("float64") for w in weights]
    expected, expected_states = _np_run(
        step, w64, x.astype("float64"), [s.astype("float64") for s in states], mask, go_backwards
    )

    sequence, *final_states = layer(x, mask=mask, initial_state=initial)
    np.testing.assert_allclose(sequence, expected, atol=1e-5)
    for got, want in zip(final_states, expected_states):
        np.testing.assert_allclose(got, want, atol=1e-5)

    # The per-step cell, driven by Keras' own generic loop.
    rnn = keras.layers.RNN(
        layer.cell, return_sequences=True, return_state=True, go_backwards=go_backwards
    )
    cell_sequence, *cell_states = rnn(x, mask=mask, initial_state=initial)
    if BACKEND == "jax" and mask is not None:
        # Keras' JAX loop outputs the initial state h_0, not zeros, at the
        # masked steps before the first valid one: compare the valid steps.
        valid = mask[:, ::-1] if go_backwards else mask  # in processing order
        cell_sequence, expected = np.asarray(cell_sequence)[valid], expected[valid]
    np.testing.assert_allclose(cell_sequence, expected, atol=1e-5)
    for got, want in zip(cell_states, expected_states):
        np.testing.assert_allclose(got, want, atol=1e-5)


# --- against the Keras built-ins -------------------------------------------------


def _grads(gradients, layer, x, mask, probe, training=False):
    """Gradients of ``sum(layer(x) * probe)`` for ``x`` and the layer's trainable weights."""

    def loss(x):
        y = ops.cast(layer(x, mask=mask, training=training), "float32")
        return ops.sum(y * ops.convert_to_tensor(probe))

    return gradients(loss, [x], layer.trainable_weights)[1]


# On TensorFlow training=True takes the hand-written gradient, training=False
# autodiff; elsewhere both are autodiff of the driver's loop.
@pytest.mark.parametrize("training", [False, True])
def test_peephole_lstm_with_zero_peepholes_equals_keras_lstm(training, rng, gradients):
    x = _inputs(rng)
    mask = _ragged_mask([5, 4, 2])
    ours = layers.PeepholeLSTM(U, return_sequences=True)
    ours.build((None, None, IN))
    kernel, recurrent, bias = _randomize(ours, rng)[:3]
    ours.set_weights([kernel, recurrent, bias] + [np.zeros(U, "float32")] * 3)
    reference = keras.layers.LSTM(U, return_sequences=True)
    reference.build((None, None, IN))
    reference.set_weights([kernel, recurrent, bias])

    probe = rng.normal(size=(B, T, U)).astype("float32")
    np.testing.assert_allclose(ours(x, mask=mask), reference(x, mask=mask), atol=1e-6)
    ours_grads = _grads(gradients, ours, x, mask, probe, training)
    reference_grads = _grads(gradients, reference, x, mask, probe, training)
    for got, want in zip(ours_grads[:4], reference_grads):  # x, kernel, recurrent, bias
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_equals_keras_gru_with_copied_weights(reset_after, training, rng, gradients):
    x = _inputs(rng)
    mask = _ragged_mask([5, 4, 2])
    reference = keras.layers.GRU(U, return_sequences=True, reset_after=reset_after)
    reference.build((None, None, IN))
    weights = _randomize(reference, rng)
    ours = layers.GRU(U, return_sequences=True, reset_after=reset_after)
    ours.build((None, None, IN))
    ours.set_weights(reference.get_weights())
    assert [w.shape for w in ours.get_weights()] == [w.shape for w in weights]

    probe = rng.normal(size=(B, T, U)).astype("float32")
    np.testing.assert_allclose(ours(x, mask=mask), reference(x, mask=mask), atol=1e-6)
    for got, want in zip(
        _grads(gradients, ours, x, mask, probe, training),
        _grads(gradients, reference, x, mask, probe, training),
    ):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("keras_layer, ours_layer", [
    (keras.layers.LSTM, layers.PeepholeLSTM),
    (keras.layers.GRU, layers.GRU),
])
def test_bidirectional_stacked_with_embedding_mask_equals_keras(
    keras_layer, ours_layer, training, rng
):
    tokens = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 0, 0], [5, 0, 0, 0, 0]])

    def build(recurrent):
        inputs = keras.Input((None,), dtype="int32")
        h = keras.layers.Embedding(10, IN, mask_zero=True)(inputs)
        h = keras.layers.Bidirectional(recurrent(U, return_sequences=True))(h)
        h = recurrent(U, return_sequences=True)(h)  # stacked: the mask flows on
        return keras.Model(inputs, h)

    reference, ours = build(keras_layer), build(ours_layer)
    for ref_layer, our_layer in zip(reference.layers[1:], ours.layers[1:]):
        subs = ([(ref_layer.forward_layer, our_layer.forward_layer),
                 (ref_layer.backward_layer, our_layer.backward_layer)]
                if isinstance(ref_layer, keras.layers.Bidirectional) else [(ref_layer, our_layer)])
        for ref_sub, our_sub in subs:
            _randomize(ref_sub, rng)
            weights = ref_sub.get_weights()
            weights += [np.zeros(U, "float32")] * (len(our_sub.get_weights()) - len(weights))
            our_sub.set_weights(weights)
    expected = reference(tokens, training=training)
    got = ours(tokens, training=training)
    keep = tokens != 0
    np.testing.assert_allclose(np.asarray(got)[keep], np.asarray(expected)[keep], atol=1e-5)
    np.testing.assert_allclose(got, expected, atol=1e-5)


# --- masking ---------------------------------------------------------------------


@pytest.mark.parametrize("case", ["peephole", "cifg_peepholes", "gru"])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_padded_batch_equals_unpadded(case, go_backwards, rng):
    layer, _, _, n_states = _make(
        case, rng, return_sequences=True, return_state=True, go_backwards=go_backwards
    )
    lengths = [5, 3, 2]
    x = _inputs(rng)
    sequence, *states = layer(x, mask=_ragged_mask(lengths))
    for b, length in enumerate(lengths):
        alone, *alone_states = layer(x[b : b + 1, :length])
        for got, want in zip(states, alone_states):
            np.testing.assert_allclose(got[b], want[0], atol=1e-6)
        # Valid positions in processing order: the first `length` outputs going
        # forwards; going backwards the padded steps come first and repeat zeros.
        valid = sequence[b, :length] if not go_backwards else sequence[b, T - length :]
        np.testing.assert_allclose(valid, alone[0], atol=1e-6)


@pytest.mark.parametrize("case", ["peephole", "cifg", "gru"])
def test_all_masked_sequence_gives_finite_zero_output(case, rng):
    layer, _, _, _ = _make(case, rng, return_sequences=True, return_state=True)
    mask = _ragged_mask([5, 0, 2])
    sequence, *states = (np.asarray(o) for o in layer(_inputs(rng), mask=mask))
    assert np.all(np.isfinite(sequence)) and all(np.all(np.isfinite(s)) for s in states)
    # Nothing was processed: the initial (zero) states come back.
    np.testing.assert_array_equal(sequence[1], 0.0)
    for s in states:
        np.testing.assert_array_equal(s[1], 0.0)


# --- driver forms ----------------------------------------------------------------


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("steps", [5, 16, 37])  # remainder only, blocks only, both
@pytest.mark.parametrize("case", ["peephole", "cifg_peepholes", "gru_reset_before"])
def test_inference_form_equals_training_form_for_any_length(case, steps, rng):
    """The convertible inference loop (blocks of steps + remainder) equals the
    training loop (hand-written gradient under XLA, or the TensorArray loop)."""
    import tensorflow as tf

    layer, weights, step, n_states = _make(
        case, rng, return_sequences=True, return_state=True, go_backwards=True
    )
    x = _inputs(rng, steps=steps)
    mask = _ragged_mask([steps, steps - 2, 1], steps=steps)
    infer = tf.function(lambda x, m: layer(x, mask=m, training=False))
    train = tf.function(lambda x, m: layer(x, mask=m, training=True))
    got, expected = infer(x, mask), train(x, mask)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=2e-6)
    # Against the NumPy reference too: the last output of the full-length row.
    h = [np.zeros((1, U))] * n_states
    for t in reversed(range(steps)):
        out, h = step(weights, x[:1, t].astype("float64"), h)
    np.testing.assert_allclose(got[0][0, -1], out[0], atol=1e-5)
    # The inference loop has no TensorArray (no TFLite builtin form): it
    # writes with scatters; the training loop does not.
    inference_ops = _op_types(infer.get_concrete_function(x, mask))
    assert "TensorScatterUpdate" in inference_ops
    assert not any("TensorList" in op for op in inference_ops)
    assert "TensorScatterUpdate" not in _op_types(train.get_concrete_function(x, mask))


def _op_types(concrete, loops_only=False):
    """Op types of a traced function; ``loops_only``: inside its functions
    (the while loops' bodies) only."""
    graph_def = concrete.graph.as_graph_def()
    types = set() if loops_only else {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


@pytest.mark.parametrize("case", ["peephole", "gru"])
def test_unrolled_equals_loop(case, rng):
    layer, weights, _, _ = _make(case, rng, return_sequences=True, return_state=True)
    unrolled = layer.__class__.from_config({**layer.get_config(), "unroll": True})
    unrolled.build((None, T, IN))
    unrolled.set_weights(weights)
    x, mask = _inputs(rng), _ragged_mask([5, 3, 2])
    for got, want in zip(unrolled(x, mask=mask), layer(x, mask=mask)):
        np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("case", ["peephole", "gru"])
def test_a_static_length_of_one_runs_the_step_once_without_a_loop(case, rng):
    """A streaming step traced one token at a time (as exports trace it) is
    the step's ops alone; a masked row keeps its states."""
    layer, weights, step, n_states = _make(case, rng, return_sequences=True, return_state=True)
    x = _inputs(rng, steps=1)
    mask = _ragged_mask([1, 0, 1], steps=1)
    states = [rng.normal(size=(B, U)).astype("float32") for _ in range(n_states)]
    got = layer(x, mask=mask, initial_state=states)
    w64 = [w.astype("float64") for w in weights]
    expected, expected_states = _np_run(
        step, w64, x.astype("float64"), [s.astype("float64") for s in states], mask=mask)
    # A masked first step outputs zeros (no previous output).
    np.testing.assert_allclose(got[0], np.where(mask[:, :, None], expected, 0.0), atol=1e-5)
    for g, e in zip(got[1:], expected_states):
        np.testing.assert_allclose(g, e, atol=1e-5)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        traced = tf.function(lambda x, m, *s: layer(x, mask=m, initial_state=list(s)))
        concrete = traced.get_concrete_function(
            tf.TensorSpec((None, 1, IN)), tf.TensorSpec((None, 1), tf.bool),
            *[tf.TensorSpec((None, U))] * n_states)
        assert not {"While", "StatelessWhile"} & _op_types(concrete)
        dynamic = traced.get_concrete_function(
            tf.TensorSpec((None, None, IN)), tf.TensorSpec((None, None), tf.bool),
            *[tf.TensorSpec((None, U))] * n_states)
        assert {"While", "StatelessWhile"} & _op_types(dynamic)  # the check can fail


def _xla_grads(layer, x, mask, probe, training):
    """`_grads` taken by a GradientTape inside an XLA-compiled tf.function."""
    import tensorflow as tf

    x, probe = tf.constant(x), tf.constant(probe)

    def grads():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, mask=mask, training=training) * probe)
        return tape.gradient(loss, [x, *layer.trainable_weights])

    return tf.function(grads, jit_compile=True)()


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("training", [False, True])
def test_jit_compiled_gradients_equal_eager(training, rng, gradients):
    layer, _, _, _ = _make("peephole", rng, return_sequences=True)
    x = _inputs(rng)
    mask = _ragged_mask([5, 3, 2])
    probe = rng.normal(size=(B, T, U)).astype("float32")
    expected = _grads(gradients, layer, x, mask, probe)  # eager autodiff
    got = _xla_grads(layer, x, mask, probe, training)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-5)


@pytest.mark.tensorflow_only
def test_distribute_strategy_training_step_matches_plain(rng):
    import tensorflow as tf

    x, y = _inputs(rng, batch=4), rng.normal(size=(4, U)).astype("float32")

    def fit_once():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((T, IN)), layers.CoupledGateLSTM(U)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        return model.get_weights()

    plain = fit_once()
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        distributed = fit_once()
    for d, p in zip(distributed, plain):
        np.testing.assert_allclose(d, p, atol=1e-6)


@pytest.mark.parametrize("keras_layer, ours_layer, kwargs", [
    (keras.layers.LSTM, layers.PeepholeLSTM, {}),
    (keras.layers.GRU, layers.GRU, {"reset_after": True}),
    (keras.layers.GRU, layers.GRU, {"reset_after": False}),
])
def test_layers_without_bias_equal_keras(keras_layer, ours_layer, kwargs, rng):
    x = _inputs(rng)
    reference = keras_layer(U, use_bias=False, return_sequences=True, **kwargs)
    reference.build((None, None, IN))
    weights = _randomize(reference, rng)
    ours = ours_layer(U, use_bias=False, return_sequences=True, **kwargs)
    ours.build((None, None, IN))
    ours.set_weights(weights + [np.zeros(U, "float32")] * (len(ours.weights) - len(weights)))
    np.testing.assert_allclose(ours(x), reference(x), atol=1e-6)


# --- the hand-written training gradient ----------------------------------------------




@pytest.mark.parametrize("case", ["peephole", "cifg", "cifg_peepholes", "gru", "layernorm_lstm"])
@pytest.mark.parametrize("variant", ["plain", "masked_backwards_initial_state"])
def test_training_gradient_matches_finite_differences_of_numpy_reference(
    case, variant, rng, monkeypatch, gradients
):
    """The training gradient (training=True: TensorFlow's hand-written BPTT,
    autodiff of the loop elsewhere) against float64 central differences of
    the NumPy forward reference, for the inputs, every weight and the initial
    states, with sequence and final-state losses."""
    bptt_calls = []
    if BACKEND == "tensorflow":
        from keras_seq.layers.recurrent import bptt_tensorflow

        real = bptt_tensorflow.run_bptt_recurrence
        monkeypatch.setattr(
            bptt_tensorflow, "run_bptt_recurrence",
            lambda *a, **k: bptt_calls.append(1) or real(*a, **k),
        )
    # Keras' JAX ops compute float64 in float32 (its type promotion caps at 32
    # bits, x64 mode or not): there the layer runs in float32, to float32's
    # tolerances.
    if BACKEND == "jax":
        dtype, loss_tolerance, atol = "float32", {"atol": 1e-5}, 2e-5
    else:
        dtype, loss_tolerance, atol = "float64", {"rtol": 1e-10}, 1e-6
    cls, extra, step, n_states = CASES[case]
    masked = variant != "plain"
    layer = cls(U, **extra, return_sequences=True, return_state=True, go_backwards=masked,
                dtype=dtype)
    layer.build((None, None, IN))
    weights = [rng.normal(0.0, 0.5, w.shape) for w in layer.get_weights()]
    layer.set_weights(weights)
    x = rng.normal(size=(B, T, IN))
    states = [rng.normal(size=(B, U)) if masked else np.zeros((B, U)) for _ in range(n_states)]
    mask = _ragged_mask([5, 3, 0]) if masked else None
    probes = [rng.normal(size=(B, T, U))] + [rng.normal(size=(B, U)) for _ in range(n_states)]

    def numpy_loss():
        sequence, final = _np_run(step, weights, x, states, mask, masked)
        return np.sum(sequence * probes[0]) + sum(np.sum(s * p) for s, p in zip(final, probes[1:]))

    expected = finite_difference_grads(numpy_loss, [x, *weights, *states])

    def loss(x, *initial):
        outputs = layer(x, mask=mask, initial_state=list(initial) or None, training=True)
        return sum(ops.sum(o * ops.convert_to_tensor(p)) for o, p in zip(outputs, probes))

    inputs = [x, *states] if masked else [x]
    value, grads = gradients(loss, inputs, layer.trainable_weights)
    # In the order of `expected`: x, the weights, then the initial states.
    got = [grads[0], *grads[len(inputs) :], *grads[1 : len(inputs)]]
    if BACKEND == "tensorflow":
        assert bptt_calls, "training=True did not take the hand-written gradient"
    np.testing.assert_allclose(float(value), numpy_loss(), **loss_tolerance)
    for g, e in zip(got, expected[: len(got)]):
        np.testing.assert_allclose(g, e, atol=atol)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("zero_output_for_mask", [False, True])
@pytest.mark.parametrize("case", ["peephole", "cifg_peepholes", "gru", "layernorm_lstm"])
def test_training_gradient_with_recurrent_dropout_equals_autodiff(
    case, zero_output_for_mask, rng, monkeypatch, gradients
):
    """With recurrent dropout (one mask per call, from the seed) and padding,
    the hand-written gradient equals TensorFlow's autodiff of the cell's step
    in the loop, for every weight, the inputs and the initial states."""
    from keras_seq.layers.recurrent import backend, bptt_tensorflow

    calls = []
    real = bptt_tensorflow.run_bptt_recurrence
    monkeypatch.setattr(bptt_tensorflow, "run_bptt_recurrence",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    cls, extra, _, n_states = CASES[case]
    x = _inputs(rng)
    states = [rng.normal(size=(B, U)).astype("float32") for _ in range(n_states)]
    mask = _ragged_mask([5, 2, 4])
    probes = [rng.normal(size=(B, T, U)).astype("float32")] + [
        rng.normal(size=(B, U)).astype("float32") for _ in range(n_states)]

    def grads(hand_written):
        monkeypatch.setattr(backend, "MANUAL_GRADIENT_LOOP", hand_written)
        layer = cls(U, **extra, recurrent_dropout=0.4, seed=3, return_sequences=True,
                    return_state=True, zero_output_for_mask=zero_output_for_mask)
        layer.build((None, None, IN))
        layer.set_weights([np.random.default_rng(1).normal(0.0, 0.5, w.shape)
                           for w in layer.get_weights()])

        def loss(x, *initial):
            outputs = layer(x, mask=mask, initial_state=list(initial), training=True)
            return sum(ops.sum(o * ops.convert_to_tensor(p)) for o, p in zip(outputs, probes))

        grads = gradients(loss, [x, *states], layer.trainable_weights)[1]
        assert len(grads) == 1 + n_states + len(layer.trainable_weights)
        return grads

    got = grads(True)
    assert calls, "the hand-written gradient did not run"
    expected = grads(False)
    assert len(calls) == 1
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=2e-5)


@pytest.mark.parametrize("policy, rtol", [("mixed_float16", 3e-2), ("mixed_bfloat16", 1e-1)])
@pytest.mark.parametrize("case", ["peephole", "cifg_peepholes", "gru"])
def test_mixed_precision_training_gradients_close_to_float32(policy, rtol, case, rng, gradients):
    reference, weights, _, _ = _make(case, rng, return_sequences=True)
    x = _inputs(rng)
    mask = _ragged_mask([5, 3, 2])
    probe = rng.normal(size=(B, T, U)).astype("float32")
    expected = _grads(gradients, reference, x, mask, probe, training=True)
    keras.mixed_precision.set_global_policy(policy)
    layer = _make(case, rng, return_sequences=True)[0]
    layer.set_weights(weights)
    got = _grads(gradients, layer, x, mask, probe, training=True)
    for g, e in zip(got, expected):
        g = np.asarray(g, "float32")
        assert np.all(np.isfinite(g))
        scale = np.max(np.abs(e))
        np.testing.assert_allclose(g / scale, np.asarray(e) / scale, atol=rtol)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("dtype, atol", [("float32", 1e-6), ("float16", 1e-3), ("float64", 1e-15)])
def test_fast_activations_of_the_training_loops_match_numpy(dtype, atol):
    import tensorflow as tf

    from keras_seq.layers.recurrent.manual_gradient import fast_sigmoid, fast_tanh

    x = np.concatenate([np.linspace(-30.0, 30.0, 20001), [0.0, 1e-8, -1e-8, 7.9, -7.9]])
    got_tanh = np.asarray(fast_tanh(tf.constant(x, dtype)), "float64")
    got_sigmoid = np.asarray(fast_sigmoid(tf.constant(x, dtype)), "float64")
    x_rounded = x.astype(dtype).astype("float64")  # the input as the dtype holds it
    np.testing.assert_allclose(got_tanh, np.tanh(x_rounded), atol=atol, rtol=0)
    np.testing.assert_allclose(got_sigmoid, 1.0 / (1.0 + np.exp(-x_rounded)), atol=atol, rtol=0)
    assert np.all(np.abs(got_tanh) <= 1.0) and np.all((got_sigmoid >= 0) & (got_sigmoid <= 1))


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("steps", [1, 3, 4, 5, 8])
def test_jit_autodiff_gradients_for_lengths_around_the_loop_unrolling(steps, rng, gradients):
    """The TensorArray loop runs several steps per iteration plus a remainder
    loop; any length, including fewer steps than one iteration holds, must
    differentiate under XLA like eagerly."""
    layer, _, _, _ = _make("gru_reset_before", rng, return_sequences=True)  # autodiff path
    x = _inputs(rng, steps=steps)
    probe = rng.normal(size=(B, steps, U)).astype("float32")
    expected = _grads(gradients, layer, x, None, probe, training=True)
    got = _xla_grads(layer, x, None, probe, training=True)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-5)


# --- the step's matmul form --------------------------------------------------------


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("form", ["fused", "plain"])
@pytest.mark.parametrize("case", ["peephole", "cifg_peepholes", "gru"])
def test_both_step_matmul_forms_match_numpy_reference(case, form, rng, monkeypatch):
    """Whichever form a machine is set to (KERAS_SEQ_STEP_MATMUL), both are right."""
    import tensorflow as tf

    from keras_seq.layers.recurrent import backend_tensorflow

    monkeypatch.setattr(backend_tensorflow, "STEP_MATMUL", form)
    layer, weights, step, n_states = _make(case, rng, return_sequences=True)
    x = _inputs(rng, steps=11)  # one block of eight steps and three single steps
    infer = tf.function(lambda x: layer(x, training=False))
    expected, _ = _np_run(step, [w.astype("float64") for w in weights], x.astype("float64"),
                          [np.zeros((B, U))] * n_states)
    np.testing.assert_allclose(infer(x), expected, atol=1e-5)
    loop_ops = _op_types(infer.get_concrete_function(x), loops_only=True)
    assert "MatMul" in loop_ops
    assert ("BiasAdd" in loop_ops) == (form == "fused")


@pytest.mark.tensorflow_only
def test_step_matmul_form_comes_from_the_environment_else_auto():
    from keras_seq.layers.recurrent.backend_tensorflow import step_matmul_setting

    assert step_matmul_setting({}) == "auto"
    assert step_matmul_setting({"KERAS_SEQ_STEP_MATMUL": "plain"}) == "plain"
    assert step_matmul_setting({"KERAS_SEQ_STEP_MATMUL": " Fused"}) == "fused"
    with pytest.raises(ValueError, match="KERAS_SEQ_STEP_MATMUL.*'fast'"):
        step_matmul_setting({"KERAS_SEQ_STEP_MATMUL": "fast"})


@pytest.mark.tensorflow_only
def test_auto_step_matmul_takes_the_form_that_timing_both_finds_faster(monkeypatch):
    """``auto`` (the default) times both forms once per process and keeps
    the one whose worse ratio to the faster form, at batch 1 and 64, is smaller."""
    from keras_seq.layers.recurrent import backend_tensorflow

    time_both = backend_tensorflow._time_step_matmul_forms

    def timed(times):
        monkeypatch.setattr(backend_tensorflow, "_time_step_matmul_forms", lambda: times)
        backend_tensorflow.calibrated_step_matmul.cache_clear()
        return backend_tensorflow.calibrated_step_matmul()

    monkeypatch.setattr(backend_tensorflow, "STEP_MATMUL", "auto")
    try:
        assert timed({"plain": {1: 2.0, 64: 13.0}, "fused": {1: 5.0, 64: 16.0}}) == "plain"
        assert timed({"plain": {1: 7.0, 64: 50.0}, "fused": {1: 2.5, 64: 52.0}}) == "fused"
        assert backend_tensorflow.step_matmul_form() == "fused"
    finally:
        backend_tensorflow.calibrated_step_matmul.cache_clear()
    times = time_both(batches=(1,), steps=3, repeats=1)
    assert set(times) == {"plain", "fused"} and all(t[1] > 0 for t in times.values())


@pytest.mark.tensorflow_only
def test_auto_timing_in_a_first_trace_leaves_that_function_traced_once(monkeypatch, rng):
    """``auto`` times both forms while the first layer step is traced; the
    function being traced (a user's, or Keras' train function) is traced
    once, as with a fixed form (twice when the timing made a variable: a
    tiny date run's training took 19.7 CPU-s instead of 15.2)."""
    import tensorflow as tf

    from keras_seq.layers.recurrent import backend_tensorflow

    monkeypatch.setattr(backend_tensorflow, "STEP_MATMUL", "auto")
    backend_tensorflow.calibrated_step_matmul.cache_clear()
    try:
        layer = layers.GRU(U, return_sequences=True)
        x = _inputs(rng)
        layer(x)  # built outside the function, as fit builds a model first
        backend_tensorflow.calibrated_step_matmul.cache_clear()
        infer = tf.function(lambda x: layer(x, training=False))
        infer(x)
        assert backend_tensorflow.calibrated_step_matmul.cache_info().misses == 1
        assert infer.experimental_get_tracing_count() == 1
    finally:
        backend_tensorflow.calibrated_step_matmul.cache_clear()


@pytest.mark.tensorflow_only
def test_equal_cells_share_the_compiled_training_loops(rng, gradients):
    """Two layers of one configuration (the directions of a Bidirectional,
    a new model) trace the hand-written loops once; another width traces anew."""
    from keras_seq.layers.recurrent import bptt_tensorflow

    x = _inputs(rng)

    def train(layer):
        gradients(lambda x: ops.sum(layer(x, training=True)), [x], layer.trainable_weights)

    train(layers.GRU(U, return_sequences=True))
    traces = bptt_tensorflow._forward_loop.experimental_get_tracing_count()
    train(layers.GRU(U, return_sequences=True))
    assert bptt_tensorflow._forward_loop.experimental_get_tracing_count() == traces
    train(layers.GRU(U + 1, return_sequences=True))
    assert bptt_tensorflow._forward_loop.experimental_get_tracing_count() == traces + 1
