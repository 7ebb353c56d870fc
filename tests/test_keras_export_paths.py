"""Keras' own export paths work for every public layer and model builder.

A user deploys with ``model.export(path, format="litert" | "onnx" |
"tf_saved_model")`` or ``tf.lite.TFLiteConverter.from_keras_model`` and no
knowledge of this package: each path must succeed with a dynamic batch and a
dynamic length, TFLite must use builtin ops only (in every subgraph, loop
bodies included), and every artifact must compute what the Keras model
computes, at two batch sizes and two lengths, with padding. (Keras' `litert`
export converts the SavedModel its `tf_saved_model` export writes, so each
SavedModel is checked through its TFLite file, and a recurrent and a
Transformer builder's are also loaded and served; TensorFlow's `from_keras_model`
converter runs for the recurrent layers, whose loops it converts its own way.)
"""

from __future__ import annotations

import functools
import warnings

import keras
import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from keras_seq import layers, models
from keras_seq.export import tflite_op_names

pytestmark = pytest.mark.slow

V = 11  # token ids; 0 is padding
SHAPES = [(2, 7), (3, 19)]  # (batch, length): the second length runs loop blocks + remainder


def _tokens(name="tokens"):
    return keras.Input((None,), dtype="int32", name=name)


def _embedded(tokens, width=8):
    return keras.layers.Embedding(V, width, mask_zero=True)(tokens)


# --- one small functional model per public layer ------------------------------------


def _peephole_lstm():
    tokens = _tokens()
    h = layers.PeepholeLSTM(6, return_sequences=True)(_embedded(tokens))
    return keras.Model(tokens, layers.PeepholeLSTM(5, go_backwards=True)(h))


def _coupled_gate_lstm():
    tokens = _tokens()
    h = layers.CoupledGateLSTM(6, use_peepholes=True, return_sequences=True)(_embedded(tokens))
    out, h_state, c_state = layers.CoupledGateLSTM(5, return_state=True)(h)
    return keras.Model(tokens, [out, c_state])


def _gru():
    tokens = _tokens()
    h = layers.GRU(6, return_sequences=True)(_embedded(tokens))
    h = keras.layers.Bidirectional(layers.GRU(4, reset_after=False, return_sequences=True))(h)
    return keras.Model(tokens, h)


def _bahdanau_attention():
    tokens, queries = _tokens(), _tokens("queries")
    context = layers.BahdanauAttention(6, normalize=True)(
        _embedded(queries), _embedded(tokens, 5)
    )
    return keras.Model([tokens, queries], context)


def _multi_head_attention():
    tokens = _tokens()
    x = _embedded(tokens)
    return keras.Model(tokens, layers.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True))


def _positional_and_feed_forward():
    tokens = _tokens()
    x = layers.SinusoidalPositionalEncoding()(_embedded(tokens))
    return keras.Model(tokens, layers.PositionwiseFeedForward(16)(x))


def _transformer_blocks():
    tokens, targets = _tokens(), _tokens("targets")
    encoded = layers.TransformerEncoder(16, 2)(_embedded(tokens))
    decoded = layers.TransformerDecoder(16, 2)(_embedded(targets), encoded)
    decoded = layers.TransformerDecoder(16, 2, normalize_first=True)(decoded)  # decoder-only
    return keras.Model([tokens, targets], decoded)


def _toolbox():
    tokens = _tokens()
    x = layers.Folding()(layers.Highway()(_embedded(tokens)))
    x = layers.DynamicKMaxPooling(3, 1, 2)(x)  # a dynamic length: max(3, ceil(T / 2))
    # 5 > the steps a padded row keeps: zeros after them
    return keras.Model(tokens, [x, layers.KMaxPooling(5)(x)])


def _ntm():
    tokens = _tokens()
    ntm = layers.NTM(6, memory_size=8, memory_width=4, num_read_heads=2, shift_range=2,
                     output_size=5, go_backwards=True, return_sequences=True)
    return keras.Model(tokens, ntm(_embedded(tokens)))


# --- every model builder ------------------------------------------------------------


def _rnn_seq2seq(cell, attention="bahdanau"):
    return models.rnn_seq2seq(V, V, units=6, embedding_dim=4, cell=cell, attention=attention)


FACTORIES = {
    "PeepholeLSTM": _peephole_lstm,
    "CoupledGateLSTM": _coupled_gate_lstm,
    "GRU": _gru,
    "BahdanauAttention": _bahdanau_attention,
    "MultiHeadAttention": _multi_head_attention,
    "SinusoidalPositionalEncoding+PositionwiseFeedForward": _positional_and_feed_forward,
    "TransformerEncoder+TransformerDecoder": _transformer_blocks,
    "Highway+Folding+DynamicKMaxPooling+KMaxPooling": _toolbox,
    "NTM": _ntm,
    "rnn_seq2seq-gru": functools.partial(_rnn_seq2seq, "gru"),
    "rnn_seq2seq-coupled-no-attention": functools.partial(_rnn_seq2seq, "coupled", None),
    "transformer_seq2seq": lambda: models.transformer_seq2seq(
        V, V, num_layers=1, model_dim=8, num_heads=2, intermediate_dim=16
    ),
    "sequence_classifier-rnn": lambda: models.sequence_classifier(V, 3, units=5, cell="peephole"),
    "sequence_classifier-transformer": lambda: models.sequence_classifier(
        V, 3, kind="transformer", units=8, num_heads=2, intermediate_dim=16
    ),
    "language_model-rnn": lambda: models.language_model(V, kind="rnn", units=6, cell="lstm"),
    # One layer: the Elman RNN's convertible loop, at a fraction of a classifier's cost.
    "language_model-rnn-simple": lambda: models.language_model(
        V, kind="rnn", num_layers=1, units=6, cell="simple"
    ),
    "dcnn_classifier": lambda: models.dcnn_classifier(
        V, 3, embedding_dim=8, filters=(2, 3), kernel_sizes=(3, 2), k_top=3
    ),
    "language_model-transformer": lambda: models.language_model(
        V, units=8, num_heads=2, intermediate_dim=16
    ),
}


@functools.cache
def _model(name):
    keras.utils.set_random_seed(7)
    model = FACTORIES[name]()
    # Random weights everywhere, so that peepholes, biases and gates all matter.
    rng = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(rng.normal(0.0, 0.4, weight.shape).astype(weight.dtype))
    return model


def _feeds(model, batch, length, seed):
    """Token inputs keyed by the model's input names, with right padding."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i, tensor in enumerate(model.inputs):
        ids = rng.integers(1, V, size=(batch, length + i)).astype("int32")  # lengths differ
        ids[0, -3:] = 0  # a padded row
        feeds[tensor.name] = ids
    return feeds


def _keras_outputs(model, feeds):
    inputs = tf.nest.pack_sequence_as(model.input, [feeds[t.name] for t in model.inputs])
    outputs = model(inputs, training=False)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [np.asarray(o) for o in outputs]


def _run_tflite(flatbuffer, feeds):
    """Runs the serving signature; its input names are the Keras input names."""
    runner = Interpreter(model_content=flatbuffer).get_signature_runner("serving_default")
    outputs = runner(**feeds)
    return [outputs[k] for k in sorted(outputs)]


def _assert_outputs_close(got, expected, atol):
    assert len(got) == len(expected)
    # Output order of a converter need not be Keras'; match outputs by shape,
    # then by closeness (no two outputs of these models share a shape and values).
    remaining = list(got)
    for e in expected:
        candidates = [g for g in remaining if np.shape(g) == e.shape]
        assert candidates, f"no output of shape {e.shape} among {[np.shape(g) for g in got]}"
        best = min(candidates, key=lambda g: np.max(np.abs(g - e)))
        np.testing.assert_allclose(best, e, atol=atol, rtol=0)
        remaining.remove(best)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Lazily exports each model once per path."""
    cache = {}

    def get(name, path_kind):
        if (name, path_kind) not in cache:
            model = _model(name)
            folder = tmp_path_factory.mktemp(name.replace("+", "_"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if path_kind == "litert":
                    model.export(str(folder / "m.tflite"), format="litert", verbose=False)
                    cache[name, path_kind] = (folder / "m.tflite").read_bytes()
                elif path_kind == "from_keras_model":
                    converter = tf.lite.TFLiteConverter.from_keras_model(model)
                    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
                    cache[name, path_kind] = converter.convert()
                elif path_kind == "onnx":
                    # Keras' ONNX exporter refuses a model never called.
                    _keras_outputs(model, _feeds(model, *SHAPES[0], 0))
                    model.export(str(folder / "m.onnx"), format="onnx", verbose=False)
                    cache[name, path_kind] = ort.InferenceSession(str(folder / "m.onnx"))
                else:
                    model.export(str(folder / "sm"), format="tf_saved_model", verbose=False)
                    cache[name, path_kind] = tf.saved_model.load(str(folder / "sm"))
        return cache[name, path_kind]

    return get


# TensorFlow's converter path for each recurrent layer (whose loops it
# converts from a concrete function, not from a SavedModel); the rest
# through Keras' exporter (`litert`) alone.
_RECURRENT = ("PeepholeLSTM", "CoupledGateLSTM", "GRU", "NTM")
_PATHS = [(name, "litert") for name in FACTORIES] + [
    (name, "from_keras_model") for name in _RECURRENT]
# Keras' `litert` export writes the same SavedModel (one ExportArchive
# endpoint) and converts it, so every SavedModel is checked through its
# TFLite file; a recurrent and a Transformer builder's are also loaded and
# served here.
_SAVED_MODELS = ["rnn_seq2seq-gru", "transformer_seq2seq"]


@pytest.mark.parametrize("name, path_kind", _PATHS)
def test_tflite_through_keras_paths_is_builtin_only_and_matches_keras(name, path_kind, artifacts):
    flatbuffer = artifacts(name, path_kind)
    ops = tflite_op_names(flatbuffer)  # every subgraph, custom ops as CUSTOM:<name>
    assert not [op for op in ops if op.startswith("CUSTOM")], sorted(ops)
    model = _model(name)
    for seed, (batch, length) in enumerate(SHAPES):
        feeds = _feeds(model, batch, length, seed)
        _assert_outputs_close(
            _run_tflite(flatbuffer, feeds), _keras_outputs(model, feeds), atol=1e-5
        )


@pytest.mark.parametrize("name", list(FACTORIES))
def test_onnx_through_model_export_matches_keras(name, artifacts):
    session = artifacts(name, "onnx")
    model = _model(name)
    names = [i.name for i in session.get_inputs()]
    for seed, (batch, length) in enumerate(SHAPES):
        feeds = _feeds(model, batch, length, seed)
        arrays = [feeds[t.name] for t in model.inputs]
        got = session.run(None, dict(zip(names, arrays)))
        _assert_outputs_close(got, _keras_outputs(model, feeds), atol=1e-5)


@pytest.mark.parametrize("name", _SAVED_MODELS)
def test_saved_model_through_model_export_matches_keras(name, artifacts):
    serve = artifacts(name, "tf_saved_model").serve
    model = _model(name)
    for seed, (batch, length) in enumerate(SHAPES):
        feeds = _feeds(model, batch, length, seed)
        arrays = [tf.constant(feeds[t.name]) for t in model.inputs]
        got = serve(tf.nest.pack_sequence_as(model.input, arrays))
        got = [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
        _assert_outputs_close(got, _keras_outputs(model, feeds), atol=1e-6)
