"""ELMo's biLM and contextual embedder (`keras_seq.models.elmo`), and examples/elmo.py.

References here are independent of the builders: row reversal in NumPy, the
backward direction through a fresh ``go_backwards=True`` layer, the softmax
and cross-entropy in NumPy.
"""

import importlib.util
import os
import sys

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq.layers.recurrent.coupled_gate_lstm import CoupledGateLSTM
from keras_seq.layers.scalar_mix import ScalarMix
from keras_seq.models.elmo import bidirectional_language_model, contextual_embedder

V, UNITS = 13, 6


def _bilm(num_layers=2, embedding_dim=None, cell="coupled", dropout=0.0, seed=0):
    keras.utils.set_random_seed(seed)
    return bidirectional_language_model(V, num_layers=num_layers, units=UNITS, cell=cell,
                                        embedding_dim=embedding_dim, dropout=dropout)


def _np(x):
    return ops.convert_to_numpy(x)


def _logits(model, ids):
    out = model(np.asarray(ids, "int32"))
    return _np(out["forward"]), _np(out["backward"])


def _reverse_real_tokens(x, lengths):
    """Each row's first ``lengths[b]`` steps reversed; the rest left in place."""
    x = np.array(x, copy=True)
    for b, n in enumerate(lengths):
        x[b, :n] = x[b, :n][::-1]
    return x


def _internal(bilm, ids, layer_name):
    """The output of the biLM's layer ``layer_name`` inside the biLM, via a sub-model."""
    sub = keras.Model(bilm.input, bilm.get_layer(layer_name).output)
    return _np(sub(np.asarray(ids, "int32")))


def _tokens(rng, shape):
    return rng.integers(1, V, size=shape).astype("int32")


# ---------------------------------------------------------------------------
# Directionality and padding


@pytest.mark.parametrize("cell", ["coupled"])
def test_forward_logits_never_depend_on_later_tokens(cell, rng):
    bilm = _bilm(cell=cell)
    ids = _tokens(rng, (3, 7))
    forward, _ = _logits(bilm, ids)
    for t in range(6):
        changed = ids.copy()
        changed[:, t + 1:] = 1 + changed[:, t + 1:] % (V - 1)  # other non-padding ids
        changed_forward, _ = _logits(bilm, changed)
        np.testing.assert_array_equal(changed_forward[:, : t + 1], forward[:, : t + 1])
        assert not np.allclose(changed_forward[:, t + 1:], forward[:, t + 1:])


@pytest.mark.parametrize("cell", ["coupled"])
def test_backward_logits_never_depend_on_earlier_tokens(cell, rng):
    bilm = _bilm(cell=cell)
    ids = _tokens(rng, (3, 7))
    ids[1, 5:] = 0  # a padded row too
    _, backward = _logits(bilm, ids)
    for t in range(1, 5):
        changed = ids.copy()
        changed[:, :t] = 1 + changed[:, :t] % (V - 1)
        _, changed_backward = _logits(bilm, changed)
        np.testing.assert_array_equal(changed_backward[:, t:5], backward[:, t:5])
        assert not np.allclose(changed_backward[:, :t], backward[:, :t])


def test_padding_never_leaks_into_real_positions(rng):
    bilm = _bilm()
    row = _tokens(rng, (1, 4))
    forward, backward = _logits(bilm, row)  # no padding at all
    for padding in (1, 3, 6):
        padded = np.concatenate([row, np.zeros((1, padding), "int32")], axis=1)
        # A batch with a longer row and a shorter one beside the padded row.
        batch = np.zeros((3, 4 + padding), "int32")
        batch[0] = padded
        batch[1] = _tokens(rng, (4 + padding,))
        batch[2, :2] = _tokens(rng, (2,))
        padded_forward, padded_backward = _logits(bilm, batch)
        np.testing.assert_allclose(padded_forward[0, :4], forward[0], atol=1e-6)
        np.testing.assert_allclose(padded_backward[0, :4], backward[0], atol=1e-6)


def test_backward_direction_equals_a_go_backwards_layer_reversed_back(rng):
    # Reference: the same weights in fresh layers, the first with go_backwards=True
    # (it returns its outputs in reading order, last token first), the softmax in NumPy.
    bilm = _bilm()
    ids = _tokens(rng, (1, 6))
    embedding = bilm.get_layer("token_embedding").get_weights()[0]
    first = CoupledGateLSTM(UNITS, return_sequences=True, go_backwards=True)
    second = CoupledGateLSTM(UNITS, return_sequences=True)
    x = embedding[ids]  # (1, T, units)
    first.build(x.shape)
    second.build((1, 6, UNITS))
    first.set_weights(bilm.get_layer("backward_0").get_weights())
    second.set_weights(bilm.get_layer("backward_1").get_weights())
    h = _np(second(first(x)))[:, ::-1]  # back to the original positions
    kernel, bias = bilm.get_layer("softmax").get_weights()
    _, backward = _logits(bilm, ids)
    np.testing.assert_allclose(backward, h @ kernel + bias, atol=1e-5)


def test_forward_direction_equals_the_layers_applied_in_order(rng):
    bilm = _bilm(embedding_dim=4)
    ids = _tokens(rng, (2, 5))
    e = bilm.get_layer("token_embedding").get_weights()[0][ids]
    w_p, b_p = bilm.get_layer("token_projection").get_weights()
    h = e @ w_p + b_p
    for j in range(2):
        h = bilm.get_layer(f"forward_{j}")(h)
    kernel, bias = bilm.get_layer("softmax").get_weights()
    forward, _ = _logits(bilm, ids)
    np.testing.assert_allclose(forward, _np(h) @ kernel + bias, atol=1e-5)


# ---------------------------------------------------------------------------
# The shared softmax and the layers


def test_one_softmax_dense_serves_both_directions(rng):
    bilm = _bilm()
    dense = [layer for layer in bilm.layers if isinstance(layer, keras.layers.Dense)]
    assert [layer.name for layer in dense] == ["softmax"]
    # Embedding, 2 layers x 2 directions x (kernel, recurrent kernel, bias), softmax kernel, bias.
    assert len(bilm.trainable_weights) == 1 + 12 + 2
    ids = _tokens(rng, (2, 5))
    ids[1, 3:] = 0
    lengths = [5, 3]
    kernel, bias = bilm.get_layer("softmax").get_weights()
    forward, backward = _logits(bilm, ids)
    h_forward = _internal(bilm, ids, "forward_1")
    h_backward = _reverse_real_tokens(_internal(bilm, ids, "backward_1"), lengths)
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(forward[b, :n], h_forward[b, :n] @ kernel + bias, atol=1e-5)
        np.testing.assert_allclose(backward[b, :n], h_backward[b, :n] @ kernel + bias, atol=1e-5)


def test_layers_have_stable_names():
    bilm = _bilm(num_layers=3, embedding_dim=4)
    names = {layer.name for layer in bilm.layers}
    expected = {"token_embedding", "token_projection", "softmax",
                *(f"{d}_{i}" for d in ("forward", "backward") for i in range(3))}
    assert expected <= names
    assert "token_projection" not in {layer.name for layer in _bilm().layers}
    assert isinstance(bilm.get_layer("forward_2"), CoupledGateLSTM)
    assert [t.name for t in bilm.inputs] == ["token_ids"]


# ---------------------------------------------------------------------------
# The contextual embedder


@pytest.mark.parametrize("num_layers, embedding_dim", [(1, None), (2, None), (3, 4)])
def test_embedder_output_is_layers_by_time_by_twice_units(num_layers, embedding_dim, rng):
    embedder = contextual_embedder(_bilm(num_layers=num_layers, embedding_dim=embedding_dim))
    r = embedder(_tokens(rng, (2, 7)))
    assert tuple(r.shape) == (2, num_layers + 1, 7, 2 * UNITS)
    assert embedder.count_params() == _bilm(num_layers, embedding_dim).count_params() - (
        UNITS * V + V)  # every weight but the softmax's, none new


@pytest.mark.parametrize("embedding_dim", [None, 4])
def test_embedder_layer_0_is_the_token_representation_twice(embedding_dim, rng):
    bilm = _bilm(embedding_dim=embedding_dim)
    ids = _tokens(rng, (2, 5))
    x = bilm.get_layer("token_embedding").get_weights()[0][ids]
    if embedding_dim is not None:
        w_p, b_p = bilm.get_layer("token_projection").get_weights()
        x = x @ w_p + b_p
    r = _np(contextual_embedder(bilm)(ids))
    np.testing.assert_allclose(r[:, 0], np.concatenate([x, x], axis=-1), atol=1e-6)


def test_embedder_layers_are_the_bilm_internal_outputs_at_original_positions(rng):
    bilm = _bilm(num_layers=2, embedding_dim=5)
    ids = _tokens(rng, (3, 6))
    ids[0, 4:] = 0
    ids[2, 1:] = 0
    lengths = [4, 6, 1]
    r = _np(contextual_embedder(bilm)(ids))
    for j in range(2):
        h_forward = _internal(bilm, ids, f"forward_{j}")
        h_backward = _reverse_real_tokens(_internal(bilm, ids, f"backward_{j}"), lengths)
        for b, n in enumerate(lengths):
            np.testing.assert_allclose(r[b, j + 1, :n, :UNITS], h_forward[b, :n], atol=1e-6)
            np.testing.assert_allclose(r[b, j + 1, :n, UNITS:], h_backward[b, :n], atol=1e-6)


def test_embedder_layers_feed_scalar_mix(rng):
    r = contextual_embedder(_bilm())(_tokens(rng, (2, 5)))
    mixed = _np(ScalarMix()([r[:, j] for j in range(3)]))
    np.testing.assert_allclose(mixed, _np(ops.mean(r, axis=1)), atol=1e-6)  # w = 0, γ = 1


# ---------------------------------------------------------------------------
# Saving, training, dropout


def test_keras_file_reloads_in_safe_mode_with_the_same_outputs(tmp_path, rng):
    bilm = _bilm(embedding_dim=4)
    ids = _tokens(rng, (2, 6))
    ids[1, 4:] = 0
    path = str(tmp_path / "bilm.keras")
    bilm.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    for got, want in zip(_logits(loaded, ids), _logits(bilm, ids)):
        np.testing.assert_allclose(got, want, atol=1e-6)
    embedder = contextual_embedder(bilm)
    np.testing.assert_allclose(_np(contextual_embedder(loaded)(ids)), _np(embedder(ids)),
                               atol=1e-6)
    embedder.save(str(tmp_path / "embedder.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "embedder.keras"), safe_mode=True)
    np.testing.assert_allclose(_np(reloaded(ids)), _np(embedder(ids)), atol=1e-6)


def _masked_cross_entropy(logits, targets):
    """Mean −log softmax(logits)[target] over the targets that are not 0 (NumPy)."""
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    real = targets != 0
    return float(-(picked * real).sum() / real.sum())


def _shifted_targets(ids):
    forward = np.zeros_like(ids)
    forward[:, :-1] = ids[:, 1:]  # token t + 1 (0 past the end: ignored)
    backward = np.zeros_like(ids)
    backward[:, 1:] = ids[:, :-1]  # token t − 1 (0 at t = 0: ignored)
    return {"forward": forward, "backward": backward}


def test_training_a_few_steps_lowers_both_losses(rng):
    bilm = _bilm(dropout=0.1)
    words = ("the cat sat on the mat . the dog sat on the log . a cat saw a dog .").split()
    vocabulary = {w: i + 1 for i, w in enumerate(sorted(set(words)))}
    stream = np.array([vocabulary[w] for w in words * 4], "int32")
    starts = rng.integers(0, len(stream) - 8, size=32)
    ids = np.stack([stream[s:s + 8] for s in starts])
    ids[::3, 6:] = 0  # padded rows
    targets = _shifted_targets(ids)

    def losses():
        forward, backward = _logits(bilm, ids)
        return (_masked_cross_entropy(forward, targets["forward"]),
                _masked_cross_entropy(backward, targets["backward"]))

    before = losses()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    bilm.compile(keras.optimizers.Adam(3e-2), {"forward": loss, "backward": loss})
    bilm.fit(ids, targets, batch_size=16, epochs=16, verbose=0)
    after = losses()
    assert after[0] < 0.85 * before[0] and after[1] < 0.85 * before[1], (before, after)


def test_dropout_is_inactive_at_inference(rng):
    bilm = _bilm(dropout=0.5)
    ids = _tokens(rng, (2, 5))
    np.testing.assert_array_equal(_logits(bilm, ids)[1], _logits(bilm, ids)[1])
    train = _np(bilm(ids, training=True)["forward"])
    assert not np.allclose(train, _logits(bilm, ids)[0])


# ---------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize("argument, value, error", [
    ("vocabulary_size", 0, ValueError),
    ("vocabulary_size", "10", TypeError),
    ("num_layers", 0, ValueError),
    ("num_layers", True, TypeError),
    ("units", -1, ValueError),
    ("units", 2.5, ValueError),
    ("embedding_dim", 0, ValueError),
    ("embedding_dim", "8", TypeError),
    ("dropout", 1.0, ValueError),
    ("dropout", None, TypeError),
    ("cell", "transformer", ValueError),
])
def test_bad_arguments_name_the_function_and_the_argument(argument, value, error):
    arguments = dict(vocabulary_size=10, num_layers=1, units=4)
    arguments[argument] = value
    with pytest.raises(error, match=rf"bidirectional_language_model.*`{argument}`"):
        bidirectional_language_model(**arguments)


def test_embedder_refuses_what_is_not_a_bilm():
    with pytest.raises(TypeError, match=r"contextual_embedder.*`bilm`"):
        contextual_embedder("bilm.keras")
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"contextual_embedder.*`bilm`"):
        contextual_embedder(other)


# ---------------------------------------------------------------------------
# examples/elmo.py


@pytest.fixture(scope="module")
def example():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("elmo_example",
                                                  os.path.join(root, "examples", "elmo.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


_DETERMINERS = {"the", "a", "an", "my", "your", "his", "her", "our", "their", "this", "that"}


def test_the_example_labels_each_ambiguous_word_by_its_use(example):
    # Independent rule: a noun use has a determiner right before it, or a
    # determiner then one adjective (a word that never follows a pronoun).
    examples = example.labelled_examples(300, np.random.default_rng(0))
    labels = []
    for words, position, label in examples:
        assert words[position] in example.AMBIGUOUS
        before = words[max(0, position - 2):position]
        noun = before[-1] in _DETERMINERS or (len(before) == 2 and before[0] in _DETERMINERS)
        assert label == int(not noun), (words, position, label)
        labels.append(label)
    assert 0.35 < np.mean(labels) < 0.65  # both senses, roughly balanced
    assert {w[p] for w, p, _ in examples} == set(example.AMBIGUOUS)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_the_example_runs_and_returns_its_numbers(example, capsys):
    result = example.main(["--epochs", "1", "--units", "8", "--unlabelled", "64",
                           "--labelled", "40", "--held-out", "20", "--classifier-epochs", "1"])
    for key in ("similarity_same_sense", "similarity_different_sense"):
        assert -1.0 <= result[key] <= 1.0
    for key in ("accuracy_elmo", "accuracy_token_embedding"):
        assert 0.0 <= result[key] <= 1.0
    assert result["forward_loss"] > 0 and result["backward_loss"] > 0
    assert "accuracy" in capsys.readouterr().out
