"""Native ONNX recurrent nodes (`convert_to_onnx(native_recurrent=True)`).

Two references: onnxruntime's own ``LSTM``, ``GRU`` and ``RNN`` kernels, fed
the layers' weights (``get_weights()``) through the mapping the contract
documents, in ONNX models written here by hand; and Keras, against each
exported file (masks with holes and empty rows, ``go_backwards``,
``Bidirectional``, initial and final states, stacked layers, streaming
chunks).
"""

import warnings

import keras
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from keras_seq import layers
from keras_seq.export import convert_to_onnx, initial_streaming_states, streaming_model

pytestmark = pytest.mark.slow

NATIVE = {"LSTM", "GRU", "RNN"}
# (name, constructor, ONNX op): every layer class the converter writes as a node.
LAYERS = [
    ("PeepholeLSTM", lambda u, **k: layers.PeepholeLSTM(u, **k), "LSTM"),
    ("CoupledGateLSTM", lambda u, **k: layers.CoupledGateLSTM(u, **k), "LSTM"),
    ("CoupledGateLSTM+peepholes",
     lambda u, **k: layers.CoupledGateLSTM(u, use_peepholes=True, **k), "LSTM"),
    ("GRU", lambda u, **k: layers.GRU(u, **k), "GRU"),
    ("GRU reset_after=False", lambda u, **k: layers.GRU(u, reset_after=False, **k), "GRU"),
    ("keras LSTM", lambda u, **k: keras.layers.LSTM(u, **k), "LSTM"),
    ("keras GRU", lambda u, **k: keras.layers.GRU(u, **k), "GRU"),
    ("keras SimpleRNN", lambda u, **k: keras.layers.SimpleRNN(u, **k), "RNN"),
    ("ConvertibleLSTM", lambda u, **k: layers.ConvertibleLSTM(u, **k), "LSTM"),
    ("ConvertibleSimpleRNN", lambda u, **k: layers.ConvertibleSimpleRNN(u, **k), "RNN"),
]
LAYER_IDS = [name for name, _, _ in LAYERS]


def _randomize(model_or_layer, rng, scale=0.5):
    model_or_layer.set_weights(
        [rng.normal(scale=scale, size=w.shape).astype("float32")
         for w in model_or_layer.get_weights()]
    )


def _sequences(rng, batch=4, length=7, features=3):
    """Inputs whose zero steps a ``Masking`` layer masks: a hole, right padding, an empty row."""
    x = rng.normal(size=(batch, length, features)).astype("float32")
    x[0, 2] = 0.0  # a hole
    x[1, 4:] = 0.0  # right padding
    x[2] = 0.0  # no valid step
    return x


def _convert(model, path, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert_to_onnx(model, path, **kwargs)
    return onnx.load(path), [str(w.message) for w in caught if w.category is UserWarning]


def _run(path, feeds):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


def _ops(model_proto):
    return [node.op_type for node in model_proto.graph.node]


def _natives(model_proto):
    return [node for node in model_proto.graph.node if node.op_type in NATIVE]


def _attributes(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _assert_outputs_equal(got, expected, atol=1e-5):
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), atol=atol)


# ---------------------------------------------------------------------------
# Reference: onnxruntime's own kernels, given each layer's weights


def _onnx_weights(name, weights, units):
    """The contract's mapping of a layer's ``get_weights()`` to ONNX's inputs, for one direction.

    Returns ``(op, attributes, W, R, B, P or None)``. ONNX's gate orders: LSTM
    i, o, f, c; GRU z, r, h; ``B`` is [Wb, Rb]; ``P`` is [p_i, p_o, p_f].
    """

    def rows(matrix, blocks):  # Keras (rows, gates*u) column blocks -> ONNX (gates*u, rows)
        return np.concatenate([b.T for b in blocks(np.split(matrix, matrix.shape[1] // units, 1))])

    if name.startswith("CoupledGateLSTM"):
        # f = σ(a): input_forget=1 computes i = σ(slot i) and f = 1 − i, so
        # slot i holds −a. The forget slot stays zero here: onnxruntime must
        # not read it.
        kernel, recurrent, bias, *peepholes = weights

        def blocks(b):
            f, c, o = b
            return [-f, o, np.zeros_like(f), c]

        w, r = rows(kernel, blocks), rows(recurrent, blocks)
        b_f, b_c, b_o = np.split(bias, 3)
        b = np.concatenate([-b_f, b_o, np.zeros(units), b_c, np.zeros(4 * units)])
        p = None
        if peepholes:
            p_f, p_o = peepholes
            p = np.concatenate([-p_f, p_o, np.zeros(units)])
        return "LSTM", {"input_forget": 1}, w, r, b, p
    if "LSTM" in name:
        kernel, recurrent, bias, *peepholes = weights

        def blocks(b):
            i, f, c, o = b
            return [i, o, f, c]

        b_i, b_f, b_c, b_o = np.split(bias, 4)
        b = np.concatenate([b_i, b_o, b_f, b_c, np.zeros(4 * units)])
        p = None
        if peepholes:
            p_i, p_f, p_o = peepholes
            p = np.concatenate([p_i, p_o, p_f])
        return "LSTM", {}, rows(kernel, blocks), rows(recurrent, blocks), b, p
    if "GRU" in name:
        kernel, recurrent, bias = weights
        reset_after = bias.ndim == 2
        b = bias.reshape(-1) if reset_after else np.concatenate([bias, np.zeros(3 * units)])
        return ("GRU", {"linear_before_reset": int(reset_after)}, kernel.T, recurrent.T, b, None)
    kernel, recurrent, bias = weights
    return "RNN", {}, kernel.T, recurrent.T, np.concatenate([bias, np.zeros(units)]), None


def _single_node_model(op, attributes, w, r, b, p, units, features):
    """An ONNX model of one node: inputs X, initial_h[, initial_c]; outputs Y, Y_h[, Y_c]."""
    lstm = op == "LSTM"
    initializers = [numpy_helper.from_array(np.asarray(v, np.float32)[None], name)
                    for name, v in (("W", w), ("R", r), ("B", b), ("P", p)) if v is not None]
    inputs = ["X", "W", "R", "B", "", "initial_h"] + (["initial_c"] if lstm else [])
    if p is not None:
        inputs.append("P")
    outputs = ["Y", "Y_h"] + (["Y_c"] if lstm else [])
    node = helper.make_node(op, inputs, outputs, hidden_size=units, **attributes)
    graph = helper.make_graph(
        [node], "reference",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, features]),
         helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, [1, None, units]),
         *([helper.make_tensor_value_info("initial_c", TensorProto.FLOAT, [1, None, units])]
           if lstm else [])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * (4 if o == "Y" else 3))
         for o in outputs],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("name,make,op", LAYERS, ids=LAYER_IDS)
def test_layer_equals_onnxruntime_kernel_given_its_weights(name, make, op, tmp_path, rng):
    units, features = 5, 3
    layer = make(units, return_sequences=True, return_state=True)
    x = rng.normal(size=(3, 6, features)).astype("float32")
    states = [rng.normal(size=(3, units)).astype("float32") for _ in range(2 if op == "LSTM" else 1)]
    layer(x, initial_state=states)  # builds
    _randomize(layer, rng)
    expected = layer(x, initial_state=states)

    reference_op, attributes, w, r, b, p = _onnx_weights(name, layer.get_weights(), units)
    assert reference_op == op
    path = tmp_path / "reference.onnx"
    onnx.save(_single_node_model(op, attributes, w, r, b, p, units, features), path)
    y, *finals = _run(path, [np.transpose(x, (1, 0, 2)), *(s[None] for s in states)])
    np.testing.assert_allclose(np.transpose(y[:, 0], (1, 0, 2)), expected[0], atol=1e-5)
    for final, state in zip(finals, expected[1:]):
        np.testing.assert_allclose(final[0], state, atol=1e-5)


def test_onnxruntime_ignores_the_forget_slot_when_input_forget_is_set(tmp_path, rng):
    """The fact the CIFG mapping rests on: with ``input_forget=1`` the forget
    gate's weights change nothing (f = 1 − i), and without it they count."""
    units, features = 4, 3
    w, r = rng.normal(size=(2, 4 * units, features)), rng.normal(size=(2, 4 * units, units))
    b = rng.normal(size=(2, 8 * units))
    x = rng.normal(size=(5, 2, features)).astype("float32")
    h0 = np.zeros((1, 2, units), np.float32)
    outputs = {}
    for coupled in (0, 1):
        for variant in (0, 1):
            forget = slice(2 * units, 3 * units)
            w_v, r_v, b_v = w[0].copy(), r[0].copy(), b[0].copy()
            if variant:
                w_v[forget], r_v[forget] = w[1][forget], r[1][forget]
                b_v[forget] = b[1][forget]
            path = tmp_path / f"m{coupled}{variant}.onnx"
            onnx.save(_single_node_model("LSTM", {"input_forget": coupled}, w_v, r_v, b_v, None,
                                         units, features), path)
            outputs[coupled, variant] = _run(path, [x, h0, h0])[0]
    np.testing.assert_array_equal(outputs[1, 0], outputs[1, 1])
    assert np.abs(outputs[0, 0] - outputs[0, 1]).max() > 1e-2


# ---------------------------------------------------------------------------
# Exported files against Keras


@pytest.mark.parametrize("name,make,op", LAYERS, ids=LAYER_IDS)
def test_each_layer_exports_as_one_node_per_call_with_keras_outputs(name, make, op, tmp_path,
                                                                   rng):
    """A masked ``go_backwards`` call (holes, right padding, an empty row) and
    an unmasked one with its states: two nodes, no ``Loop``, Keras' outputs."""
    x_in = keras.Input((None, 3), name="x")
    masked = keras.layers.Masking()(x_in)
    backwards = make(4, return_sequences=True, go_backwards=True, return_state=True)(masked)
    forwards = make(4, return_state=True)(x_in)
    model = keras.Model(x_in, [*backwards, *forwards])
    _randomize(model, rng)
    proto, _ = _convert(model, tmp_path / "m.onnx")
    assert "Loop" not in _ops(proto)
    nodes = _natives(proto)
    assert [n.op_type for n in nodes] == [op, op]
    # sequence_lens only in forward nodes: onnxruntime's CUDA provider reverses
    # the whole padded sequence for direction="reverse".
    for node in nodes:
        if len(node.input) > 4 and node.input[4]:
            assert _attributes(node)["direction"] == b"forward"
    if op == "GRU":  # written even at 0: the CUDA provider reads only a 0 that is written
        assert all("linear_before_reset" in _attributes(n) for n in nodes)
    x = _sequences(rng)
    for batch in (4, 1):
        _assert_outputs_equal(_run(tmp_path / "m.onnx", [x[:batch]]), model(x[:batch]))


@pytest.mark.parametrize(
    "make,op", [(layers.PeepholeLSTM, "LSTM"), (layers.GRU, "GRU"),
                (keras.layers.SimpleRNN, "RNN")],
    ids=["PeepholeLSTM", "GRU", "SimpleRNN"],
)
def test_bidirectional_is_one_node_and_matches_keras(make, op, tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    masked = keras.layers.Masking()(x_in)
    both = keras.layers.Bidirectional(make(4, return_sequences=True, return_state=True))(masked)
    summed = keras.layers.Bidirectional(make(3), merge_mode="sum")(x_in)
    model = keras.Model(x_in, [*both, summed])
    _randomize(model, rng)
    proto, _ = _convert(model, tmp_path / "m.onnx")
    assert "Loop" not in _ops(proto)
    directions = [_attributes(n)["direction"] for n in _natives(proto)]
    if op == "RNN":
        # With sequence_lens, the CUDA provider's RNN runs the reverse half
        # from the padded end: two forward nodes instead.
        assert sorted(directions) == [b"bidirectional", b"forward", b"forward"]
    else:
        assert directions == [b"bidirectional", b"bidirectional"]
    x = _sequences(rng)
    _assert_outputs_equal(_run(tmp_path / "m.onnx", [x]), model(x))


def test_stacked_layers_with_initial_states_from_inputs_match_keras(tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    h0, c0 = keras.Input((5,), name="h0"), keras.Input((5,), name="c0")
    h = keras.layers.Masking()(x_in)
    h, *states = layers.PeepholeLSTM(5, return_sequences=True, return_state=True)(
        h, initial_state=[h0, c0])
    h = layers.GRU(4, return_sequences=True, go_backwards=True)(h)
    h = layers.CoupledGateLSTM(3)(h)
    model = keras.Model([x_in, h0, c0], [h, *states])
    _randomize(model, rng)
    proto, _ = _convert(model, tmp_path / "m.onnx")
    assert [n.op_type for n in _natives(proto)] == ["LSTM", "GRU", "LSTM"]
    assert "Loop" not in _ops(proto)
    lstm = _natives(proto)[0]
    assert lstm.input[5] and lstm.input[6] and lstm.input[7]  # initial_h, initial_c, P
    feeds = [_sequences(rng), *(rng.normal(size=(4, 5)).astype("float32") for _ in range(2))]
    _assert_outputs_equal(_run(tmp_path / "m.onnx", feeds), model(feeds))


def test_streaming_model_runs_chunk_by_chunk_with_the_nodes_states(tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    h = layers.GRU(6, return_sequences=True, name="gru")(x_in)
    h = layers.CoupledGateLSTM(5, return_sequences=True, name="cifg")(h)
    h = keras.layers.SimpleRNN(4, name="elman")(h)
    model = keras.Model(x_in, keras.layers.Dense(2)(h))
    _randomize(model, rng)
    stream = streaming_model(model)
    proto, _ = _convert(stream, tmp_path / "stream.onnx")
    assert [n.op_type for n in _natives(proto)] == ["GRU", "LSTM", "RNN"]
    graph_inputs = [i.name for i in proto.graph.input]
    assert graph_inputs == ["x", "gru_state_0", "cifg_state_0", "cifg_state_1", "elman_state_0"]
    x = rng.normal(size=(2, 9, 3)).astype("float32")
    states = initial_streaming_states(stream, 2)
    for start, stop in [(0, 1), (1, 5), (5, 9)]:
        y, *states = _run(tmp_path / "stream.onnx", [x[:, start:stop], *states])
        np.testing.assert_allclose(y, np.asarray(model(x[:, :stop])), atol=1e-5)


def test_native_recurrent_false_writes_the_loop_with_the_same_outputs(tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    model = keras.Model(x_in, layers.GRU(4, return_sequences=True)(keras.layers.Masking()(x_in)))
    _randomize(model, rng)
    proto, _ = _convert(model, tmp_path / "loop.onnx", native_recurrent=False)
    assert "Loop" in _ops(proto) and not _natives(proto)
    x = _sequences(rng)
    _assert_outputs_equal(_run(tmp_path / "loop.onnx", [x]), model(x))


def test_layers_the_operators_cannot_express_keep_their_loop(tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    zoned = layers.PeepholeLSTM(4, zoneout=0.2, return_sequences=True, name="zoned")(x_in)
    relu = keras.layers.SimpleRNN(4, activation="relu", return_sequences=True, name="relu")(x_in)
    model = keras.Model(x_in, [zoned, relu])
    _randomize(model, rng, scale=0.3)
    proto, messages = _convert(model, tmp_path / "m.onnx")
    assert "Loop" in _ops(proto) and not _natives(proto)
    assert any("PeepholeLSTM 'zoned' keeps its Loop" in m and "zoneout" in m for m in messages)
    assert any("SimpleRNN 'relu' keeps its Loop" in m and "activation='tanh'" in m
               for m in messages)
    x = _sequences(rng)
    _assert_outputs_equal(_run(tmp_path / "m.onnx", [x]), model(x))


def test_peephole_nodes_are_named_in_a_warning_and_portable_keeps_their_loop(tmp_path, rng):
    x_in = keras.Input((None, 3), name="x")
    h = layers.PeepholeLSTM(4, return_sequences=True, name="peep")(x_in)
    h = layers.CoupledGateLSTM(4, name="cifg")(h)
    model = keras.Model(x_in, h)
    _randomize(model, rng)
    proto, messages = _convert(model, tmp_path / "default.onnx")
    assert [len(n.input) for n in _natives(proto)] == [8, 4]  # P on the peephole node only
    (message,) = [m for m in messages if "OpenVINO" in m]
    assert "PeepholeLSTM 'peep'" in message and "cifg" not in message
    assert "native_recurrent='portable'" in message

    proto, messages = _convert(model, tmp_path / "portable.onnx", native_recurrent="portable")
    assert "Loop" in _ops(proto)
    assert [(n.op_type, len(n.input)) for n in _natives(proto)] == [("LSTM", 4)]
    assert any("PeepholeLSTM 'peep' keeps its Loop" in m for m in messages)
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    for path in ("default.onnx", "portable.onnx"):
        _assert_outputs_equal(_run(tmp_path / path, [x]), model(x))


def _without(proto, node, attribute=None, input_index=None):
    """A copy of ``proto`` whose ``node`` lost an attribute or an input."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    (target,) = [n for n in copy.graph.node if n.name == node.name]
    if attribute is not None:
        kept = [a for a in target.attribute if a.name != attribute]
        del target.attribute[:]
        target.attribute.extend(kept)
    if input_index is not None:
        del target.input[input_index]
    return copy


def test_the_files_compute_what_runtimes_that_ignore_input_forget_compute(tmp_path, rng):
    """TensorRT refuses ``input_forget`` and OpenVINO ignores it: a CIFG node
    read without it (forget gate from its own slot) gives the same numbers,
    with and without peepholes. A node read without ``P`` (OpenVINO drops it)
    does not: hence the warning."""
    x_in = keras.Input((None, 3), name="x")
    plain = layers.CoupledGateLSTM(4, return_sequences=True)(x_in)
    peep = layers.CoupledGateLSTM(4, use_peepholes=True, return_sequences=True)(x_in)
    model = keras.Model(x_in, [plain, peep])
    _randomize(model, rng)
    proto, _ = _convert(model, tmp_path / "m.onnx")
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    expected = _run(tmp_path / "m.onnx", [x])
    ignored = proto
    for node in _natives(proto):
        assert _attributes(node)["input_forget"] == 1
        ignored = _without(ignored, node, attribute="input_forget")
    onnx.save(ignored, tmp_path / "ignored.onnx")
    _assert_outputs_equal(_run(tmp_path / "ignored.onnx", [x]), expected, atol=1e-6)

    peephole_node = [n for n in _natives(proto) if len(n.input) == 8][0]
    onnx.save(_without(proto, peephole_node, input_index=7), tmp_path / "dropped.onnx")
    assert np.abs(_run(tmp_path / "dropped.onnx", [x])[1] - expected[1]).max() > 1e-3


@pytest.mark.parametrize("value,error", [("yes", ValueError), (1, TypeError), (None, TypeError)])
def test_convert_to_onnx_rejects_a_bad_native_recurrent(value, error, tmp_path):
    x_in = keras.Input((None, 3))
    model = keras.Model(x_in, layers.GRU(2)(x_in))
    with pytest.raises(error, match="convert_to_onnx: invalid .*`native_recurrent`: expected "
                                    "True, False or 'portable'"):
        convert_to_onnx(model, tmp_path / "x.onnx", native_recurrent=value)
    assert not (tmp_path / "x.onnx").exists()


def test_a_conversion_changes_nothing_that_another_thread_computes(tmp_path, rng):
    """While `convert_to_onnx` traces a model holding Keras' own LSTM (which
    gets a per-layer hook for the conversion) and this package's layers,
    another thread calls another Keras LSTM model and the converted model
    itself, eagerly: both compute Keras' numbers throughout."""
    import threading

    inputs = keras.Input((None, 3))
    h = keras.layers.LSTM(4, return_sequences=True)(inputs)
    h = keras.layers.Bidirectional(layers.GRU(3, return_sequences=True))(h)
    converted = keras.Model(inputs, layers.PeepholeLSTM(2)(h))
    other = keras.Sequential([keras.Input((None, 3)), keras.layers.LSTM(5)])
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    expected = [np.asarray(converted(x)), np.asarray(other(x))]
    stop, errors, differences = threading.Event(), [], []

    def call_them():
        while not stop.is_set():
            try:
                for model, want in zip((converted, other), expected):
                    differences.append(float(np.max(np.abs(np.asarray(model(x)) - want))))
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)
                return

    thread = threading.Thread(target=call_them)
    thread.start()
    try:
        model_proto, _ = _convert(converted, tmp_path / "m.onnx")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert differences and max(differences) == 0.0
    ops = [node.op_type for node in model_proto.graph.node if node.op_type in NATIVE]
    assert ops == ["LSTM", "GRU", "LSTM"]  # the Bidirectional GRU as one node
    assert "inner_loop" not in vars(converted.layers[1])  # Keras' LSTM's hook is gone
