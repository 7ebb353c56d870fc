"""A user's cell object inside the layers that used to take a cell's name:
`RecurrentDecoder` (a translator) and `RecurrentBlock` (a block language model).

The user's cell is Keras' GRU (``reset_after=True``) written again as a
`keras_seq.layers.RecurrentCell` in `keras.ops`: with the weights of the
same layer built on the registered ``"gru"`` (Keras' own GRU cell) it must
give that layer's outputs. The models built on it train, generate (checked
against a loop of whole forward passes, which never use the cached step),
stream, save and export from Python.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq.export import (
    convert_decoder_steps_to_tflite,
    convert_language_model_step_to_tflite,
    initial_streaming_states,
    run_tflite,
    streaming_model,
    tflite_greedy_decode,
)
from keras_seq.layers import (
    GRU,
    RNN,
    AttentionWrapper,
    BahdanauAttention,
    Bidirectional,
    RecurrentBlock,
    RecurrentCell,
    RecurrentDecoder,
)
from keras_seq.tasks import CausalLM, Seq2SeqLM

UNITS, VOCABULARY = 8, 12


@keras.saving.register_keras_serializable(package="keras_seq_tests")
class UserGRUCell(RecurrentCell):
    """z, r, h~ as Keras' GRU with reset_after: h' = z h + (1 - z) h~."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        u = self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], 3 * u), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(u, 3 * u), name="recurrent_kernel",
                                                initializer="orthogonal")
        self.bias = self.add_weight(shape=(2, 3 * u), name="bias", initializer="zeros")

    def step(self, inputs, states, training=False):
        h = states[0]
        x = ops.matmul(inputs, self.kernel) + self.bias[0]
        r_h = ops.matmul(h, self.recurrent_kernel) + self.bias[1]
        x_z, x_r, x_h = ops.split(x, 3, axis=-1)
        h_z, h_r, h_h = ops.split(r_h, 3, axis=-1)
        z = ops.sigmoid(x_z + h_z)
        r = ops.sigmoid(x_r + h_r)
        candidate = ops.tanh(x_h + r * h_h)
        h = z * h + (1.0 - z) * candidate
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _copy(source, target):
    target.set_weights(source.get_weights())


def test_a_decoder_with_the_users_cell_is_the_decoder_with_kerass_cell():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(2, 5, 6)).astype("float32")
    memory = rng.normal(size=(2, 7, 10)).astype("float32")
    s0 = rng.normal(size=(2, UNITS)).astype("float32")
    keras_decoder = RecurrentDecoder(UNITS, cell="gru", attention="bahdanau")
    user_decoder = RecurrentDecoder(UNITS, cell=UserGRUCell(UNITS), attention="bahdanau")
    expected = np.asarray(keras_decoder(y, memory, initial_state=[s0]))
    user_decoder(y, memory, initial_state=[s0])
    assert len(user_decoder.get_weights()) == len(keras_decoder.get_weights())
    _copy(keras_decoder, user_decoder)
    np.testing.assert_allclose(np.asarray(user_decoder(y, memory, initial_state=[s0])),
                               expected, atol=1e-5)


def test_a_block_with_the_users_cell_is_the_block_with_kerass_cell():
    x = np.random.default_rng(1).normal(size=(2, 6, UNITS)).astype("float32")
    keras_block = RNN(RecurrentBlock(UNITS, cell="gru"), return_sequences=True)
    user_block = RNN(RecurrentBlock(UNITS, cell=UserGRUCell(UNITS)), return_sequences=True)
    expected = np.asarray(keras_block(x))
    user_block(x)
    _copy(keras_block, user_block)
    np.testing.assert_allclose(np.asarray(user_block(x)), expected, atol=1e-5)


def test_a_language_model_without_an_output_layer_needs_a_token_embedding():
    with pytest.raises(ValueError, match="CausalLM: `output_layer` is needed"):
        CausalLM(keras.layers.Embedding(VOCABULARY, UNITS),
                 [RNN(RecurrentBlock(UNITS, cell=UserGRUCell(UNITS)), return_sequences=True)])


def test_a_layer_refuses_a_cell_it_cannot_hold():
    with pytest.raises(TypeError, match="RecurrentBlock.*`cell`"):
        RecurrentBlock(UNITS, cell=keras.layers.Dense(UNITS))
    with pytest.raises(ValueError, match="RecurrentBlock.*`cell`.*8 units"):
        RecurrentBlock(UNITS, cell=UserGRUCell(UNITS + 1))
    # A step loop draws no masks inside it: a cell's own dropout is refused.
    with pytest.raises(TypeError, match="RecurrentDecoder.*`cell`.*a recurrent cell"):
        RecurrentDecoder(UNITS, cell=keras.layers.Dense(UNITS))
    with pytest.raises(ValueError, match="RecurrentDecoder.*`cell`.*a cell without dropout.*"
                                         "zoneout=.*GRUCell with dropout=0.1"):
        RecurrentDecoder(UNITS, cell=keras.layers.GRUCell(UNITS, dropout=0.1))
    with pytest.raises(ValueError, match="AttentionWrapper.*`cell`.*a cell without "
                                         "recurrent_dropout.*LSTMCell with recurrent_dropout=0.2"):
        AttentionWrapper(keras.layers.LSTMCell(UNITS, recurrent_dropout=0.2),
                         BahdanauAttention(UNITS))


def _greedy_by_forward_passes(forward, prompt, steps):
    """Greedy continuation by whole forward passes over the growing sequence."""
    ids = np.array(prompt, "int32")
    for _ in range(steps):
        logits = np.array(forward(ids))[:, -1]
        logits[:, :4] = -np.inf  # the reserved ids are never generated
        ids = np.concatenate([ids, logits.argmax(-1)[:, None].astype("int32")], axis=1)
    return ids


@pytest.fixture(scope="module")
def block_language_model():
    """A block language model whose blocks hold the user's cell, trained briefly."""
    keras.utils.set_random_seed(0)
    embedding = keras.layers.Embedding(VOCABULARY, UNITS, name="embedding")
    blocks = [RNN(RecurrentBlock(UNITS, cell=UserGRUCell(UNITS), intermediate_dim=16),
                  return_sequences=True, name=f"recurrent_{i}") for i in range(2)]
    model = CausalLM(embedding, blocks, final_norm=keras.layers.RMSNormalization(),
                     output_layer=keras.layers.Dense(VOCABULARY, dtype="float32"),
                     name="user_block_lm")
    text = np.tile(np.arange(4, VOCABULARY, dtype="int32"), 20)
    windows = np.stack([text[i : i + 17] for i in range(0, len(text) - 17, 3)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(windows[:, :-1], windows[:, 1:], epochs=20, batch_size=16, verbose=0)
    return model, history.history["loss"]


def test_the_block_language_model_trains_and_generates(block_language_model):
    model, losses = block_language_model
    # The cycle 4, 5, ..., 11 is learned: the loss falls below a fifth of log(V).
    assert losses[-1] < 0.2 * np.log(VOCABULARY) < losses[0], losses
    from keras_seq import decoding

    prompt = [[4, 5, 6], [9, 10, 11]]
    expected = _greedy_by_forward_passes(lambda ids: model(ids), prompt, 10)
    generated = decoding.sample(model, np.array(prompt, "int32"), 10, temperature=0.0)
    np.testing.assert_array_equal(np.asarray(generated), expected[:, 3:])


def test_the_block_language_model_streams_saves_and_exports(block_language_model, tmp_path):
    model, _ = block_language_model
    ids = np.array([[4, 5, 6, 7, 8, 9, 10]], "int32")
    full = np.asarray(model(ids))
    # Streaming: chunks of 3, 1 and 3 tokens with the states carried.
    streaming = streaming_model(model)
    states = initial_streaming_states(streaming, 1)
    chunks = []
    for chunk in (ids[:, :3], ids[:, 3:4], ids[:, 4:]):
        logits, *states = streaming([chunk, *states])
        chunks.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(chunks, axis=1), full, atol=1e-5)
    # The .keras file.
    path = str(tmp_path / "lm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.blocks[0].cell.recurrence.cell, UserGRUCell)
    np.testing.assert_allclose(np.asarray(loaded(ids)), full, atol=1e-6)
    # The device's generation step, fed the tokens one by one.
    step = convert_language_model_step_to_tflite(model, context=16)
    state = None
    for t in range(ids.shape[1]):
        if state is None:
            from keras_seq.export import tflite_op_names

            assert not any(op.startswith(("CUSTOM", "FlexOp")) for op in tflite_op_names(step))
            sizes = [(1, UNITS * 3), (1, UNITS)] * 2  # conv window, cell state per block
            state = [np.zeros(s, "float32") for s in sizes]
        logits, *state = run_tflite(step, ids[:, t], *state)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-4)


@pytest.fixture(scope="module")
def translator():
    """A translator whose decoder holds the user's cell (this package's GRU encoder, which TFLite converts),
    and the same model on Keras' own GRU cell with the same weights."""

    def build(cell):
        keras.utils.set_random_seed(2)
        source = keras.Input((None,), dtype="int32", name="source_ids")
        x = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
        h, forward, backward = Bidirectional(
            GRU(UNITS, return_sequences=True, return_state=True))(x)
        s0 = keras.layers.Dense(UNITS, activation="tanh")(
            keras.layers.Concatenate()([forward, backward]))
        encoder = keras.Model(source, [h, s0], name="encoder")
        decoder = RecurrentDecoder(UNITS, cell=cell, attention="luong", name="decoder")
        return Seq2SeqLM(encoder, keras.layers.Embedding(VOCABULARY, 6, mask_zero=True),
                         decoder, output_layer=keras.layers.Dense(VOCABULARY, dtype="float32"))

    user, reference = build(UserGRUCell(UNITS)), build("gru")
    user.compile(optimizer=keras.optimizers.Adam(1e-2),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  ignore_class=0))
    rng = np.random.default_rng(3)
    source = rng.integers(4, VOCABULARY, size=(64, 5)).astype("int32")
    target = np.concatenate([np.full((64, 1), 2, "int32"), source[:, ::-1],
                             np.full((64, 1), 3, "int32")], axis=1)  # reversed, START/END
    user.fit({"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:],
             epochs=2, batch_size=16, verbose=0)
    _copy(user, reference)
    return user, reference, source[:4]


def test_the_translator_with_the_users_cell_decodes_as_kerass(translator):
    from keras_seq import decoding

    user, reference, source = translator
    ids = np.asarray(decoding.greedy_decode(user, source, 7))
    np.testing.assert_array_equal(ids, np.asarray(decoding.greedy_decode(reference, source, 7)))

    # Against whole forward passes over the growing target.
    def forward(prefix):
        return user({"encoder_inputs": source, "decoder_inputs": prefix})

    expected = _greedy_by_forward_passes(forward, np.full((4, 1), 2), 7)[:, 1:]
    ended = np.cumsum(expected == 3, axis=1) - (expected == 3) > 0  # after [END]: padding
    np.testing.assert_array_equal(ids[~ended], expected[~ended])


def test_the_translator_with_the_users_cell_exports(translator):
    from keras_seq import decoding

    user, _, source = translator
    encoder, step = convert_decoder_steps_to_tflite(user, target_length=7)
    ids = np.asarray(decoding.greedy_decode(user, source, 7))
    np.testing.assert_array_equal(tflite_greedy_decode(encoder, step, source, 7), ids)
