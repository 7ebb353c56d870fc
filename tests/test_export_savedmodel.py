"""SavedModel export: strings in, strings out, served by plain TensorFlow.

The stand-in for TF Serving is a fresh Python process that imports TensorFlow
(and tensorflow-text only for the WordPiece model) but cannot import keras_seq.
"""

import importlib.util
import json
import os
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, models, text
from keras_seq._unused_imports import python_command
from keras_seq.export import export_run, export_saved_model, saved_model_op_names

pytestmark = pytest.mark.slow

SOURCE_LENGTH, TARGET_LENGTH = 12, 10
CORPUS = ["21 Nov 2026", "2026-11-21", "Saturday, 3rd of May 1999", "1999-05-03", "xyz"]
# Mixed lengths: empty, short, one longer than SOURCE_LENGTH (truncated), an
# unknown character (é) and invalid UTF-8.
INPUTS = ["", "21 Nov", "Saturday, 3rd of May 1999", "3 mai 1999 é", b"12\xff34"]

# Runs in a fresh interpreter: keras_seq is made unimportable, so the
# SavedModels must carry everything they need.
_SERVE_SCRIPT = r"""
import json, sys
sys.modules["keras_seq"] = None  # any `import keras_seq` now raises ImportError
import tensorflow as tf

def serve(path, inputs):
    signature = tf.saved_model.load(path).signatures["serving_default"]
    out = signature(inputs=tf.constant(inputs))
    return {
        "inputs": {k: [repr(v.dtype), v.shape.as_list()] for k, v in
                   signature.structured_input_signature[1].items()},
        "outputs": [s.decode("utf-8") for s in out["outputs"].numpy()],
        "output_ids": out["output_ids"].numpy().tolist(),
    }

with open(sys.argv[1], "rb") as f:
    request = json.load(f)
inputs = [bytes.fromhex(s) for s in request["inputs_hex"]]
result = {"char": serve(request["char"], inputs)}
result["tensorflow_text_loaded_for_char"] = "tensorflow_text" in sys.modules
import tensorflow_text  # noqa: F401  (registers the WordPiece ops)
result["wordpiece"] = serve(request["wordpiece"], inputs)
result["keras_seq_modules"] = sorted(
    m for m, v in sys.modules.items() if v is not None and m.split(".")[0] == "keras_seq"
)
print("RESULT " + json.dumps(result))
"""


def _as_bytes(s):
    return s if isinstance(s, bytes) else s.encode("utf-8")


def _randomize(model, seed):
    """Larger random weights than the initialisers, so untrained outputs vary."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(scale=0.5, size=w.shape).astype(w.dtype) for w in
                       model.get_weights()])


def _reference_greedy(model, source_ids, max_length):
    """Greedy decoding by re-running the teacher-forced model on the prefix.

    Independent of `keras_seq.decoding`: no step functions, no caches.
    """
    batch = source_ids.shape[0]
    ids = np.zeros((batch, max_length), np.int32)
    finished = np.zeros(batch, bool)
    for t in range(max_length):
        decoder_inputs = np.concatenate(
            [np.full((batch, 1), text.START_ID, np.int32), ids[:, :t]], axis=1
        )
        logits = model({"encoder_inputs": source_ids, "decoder_inputs": decoder_inputs})
        tokens = np.argmax(np.asarray(logits)[:, t], axis=-1)
        ids[:, t] = np.where(finished, text.PAD_ID, tokens)
        finished |= ids[:, t] == text.END_ID
    return ids


def _reference_detokenize(tokenizer, ids):
    """Python transcription of the detokenizing rules of keras_seq.text."""
    vocabulary = tokenizer.vocabulary
    strings = []
    for row in ids:
        pieces = []
        for i in row:
            if i == text.END_ID:
                break
            if i in (text.PAD_ID, text.START_ID):
                continue
            token = "\ufffd" if i == text.UNK_ID else vocabulary[i]
            pieces.append(token[2:] if token.startswith("##") and len(token) > 2 else token)
        strings.append("".join(pieces))
    return strings


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("savedmodel")
    char_tokenizer = text.CharTokenizer.from_corpus(CORPUS)
    v = char_tokenizer.vocabulary_size
    rnn = models.rnn_seq2seq(v, v, units=8, embedding_dim=6)
    _randomize(rnn, 1)
    word_tokenizer = text.WordPieceTokenizer.from_corpus(CORPUS, vocab_size=60)
    w = word_tokenizer.vocabulary_size
    # Pre-norm: with its initial weights its outputs already vary by input.
    transformer = models.transformer_seq2seq(
        w, w, num_layers=1, model_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0,
        normalize_first=True,
    )
    char_path = export_saved_model(
        rnn, char_tokenizer, char_tokenizer, root / "char" / "1", SOURCE_LENGTH, TARGET_LENGTH
    )
    wordpiece_path = export_saved_model(
        transformer,
        word_tokenizer,
        word_tokenizer,
        root / "wordpiece" / "1",
        SOURCE_LENGTH,
        TARGET_LENGTH,
        beam_width=3,
        length_penalty=0.6,
    )
    request = root / "request.json"
    request.write_text(
        json.dumps(
            {
                "char": char_path,
                "wordpiece": wordpiece_path,
                "inputs_hex": [_as_bytes(s).hex() for s in INPUTS],
            }
        )
    )
    script = root / "serve.py"
    script.write_text(_SERVE_SCRIPT)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [*python_command(path=str(script)), str(request)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [s for s in done.stdout.splitlines() if s.startswith("RESULT ")][-1]
    served = json.loads(line[len("RESULT ") :])
    return {
        "served": served,
        "paths": {"char": char_path, "wordpiece": wordpiece_path},
        "rnn": (rnn, char_tokenizer),
        "transformer": (transformer, word_tokenizer),
    }


def test_fresh_process_serves_without_keras_seq(exported):
    served = exported["served"]
    assert served["keras_seq_modules"] == []
    # The character model is core TensorFlow only.
    assert served["tensorflow_text_loaded_for_char"] is False
    assert served["char"]["inputs"] == {"inputs": ["tf.string", [None]]}


def test_op_lists_name_what_a_server_needs(exported):
    from tensorflow.python.framework import op_def_registry

    char_ops = saved_model_op_names(exported["paths"]["char"])
    wordpiece_ops = saved_model_op_names(exported["paths"]["wordpiece"])
    # Every op of the GRU + character model is a core op with a regular
    # kernel: no XLA-compiled op (TF Serving disables XLA on CPU by default).
    assert {"UnicodeDecode", "LowerBound", "ReduceJoin", "While"} <= char_ops
    assert not [op for op in char_ops if op.startswith("Xla")]
    # The WordPiece ops come from tensorflow-text (registered in this process
    # because keras_seq.text imported it).
    text_ops = {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"}
    assert text_ops <= wordpiece_ops
    # The Transformer's cached beam search writes its key/value caches with core ops too.
    assert not [op for op in wordpiece_ops if op.startswith("Xla")]
    assert all(op_def_registry.get(op) is not None for op in char_ops | wordpiece_ops)


def test_greedy_savedmodel_equals_teacher_forced_reference_decoding(exported):
    model, tokenizer = exported["rnn"]
    served = exported["served"]["char"]
    source_ids = tokenizer.encode(INPUTS, SOURCE_LENGTH).numpy()
    expected_ids = _reference_greedy(model, source_ids, TARGET_LENGTH)
    np.testing.assert_array_equal(served["output_ids"], expected_ids)
    assert served["outputs"] == _reference_detokenize(tokenizer, expected_ids)
    # The outputs are not trivially constant: the test can tell rows apart.
    assert len(set(served["outputs"])) > 1


def test_greedy_savedmodel_equals_in_process_decoding(exported):
    model, tokenizer = exported["rnn"]
    ids = decoding.greedy_decode(model, tokenizer.encode(INPUTS, SOURCE_LENGTH), TARGET_LENGTH)
    expected = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    assert exported["served"]["char"]["outputs"] == expected


def test_wordpiece_beam_savedmodel_equals_in_process_beam_search(exported):
    model, tokenizer = exported["transformer"]
    served = exported["served"]["wordpiece"]
    ids, _ = decoding.beam_search(
        model, tokenizer.encode(INPUTS, SOURCE_LENGTH), TARGET_LENGTH, 3, 0.6
    )
    np.testing.assert_array_equal(served["output_ids"], ids.numpy())
    assert served["outputs"] == _reference_detokenize(tokenizer, ids.numpy())
    assert len(set(served["outputs"])) > 1


def test_the_translator_traces_its_serving_function_once(exported, tmp_path):
    """Saving traced the module's method again after its signature's
    concrete function was taken (two traces of the whole decoder)."""
    from keras_seq.export.saved_model import _Translator

    model, tokenizer = exported["rnn"]
    translator = _Translator(model, tokenizer, tokenizer, SOURCE_LENGTH, TARGET_LENGTH,
                             beam_width=1, length_penalty=0.0)
    path = translator.write(translator.translate, tmp_path / "1")
    assert translator.translate.experimental_get_tracing_count() == 1
    # What it writes serves as the fixture's export, served in a fresh process.
    assert _serve_directly(path, INPUTS)[1] == exported["served"]["char"]["outputs"]


def test_export_saved_model_rejects_bad_arguments(exported):
    model, tokenizer = exported["rnn"]
    with pytest.raises(ValueError, match="export_saved_model: invalid value for argument `target_length`: expected a positive"):
        export_saved_model(model, tokenizer, tokenizer, "unused", 8, 0)
    with pytest.raises(TypeError, match="export_saved_model: invalid type for argument `source_tokenizer`"):
        export_saved_model(model, "vocab.txt", tokenizer, "unused", 8, 8)
    small = text.CharTokenizer.from_corpus(["ab"])
    with pytest.raises(ValueError, match="predicts only 7"):
        export_saved_model(
            models.rnn_seq2seq(7, 7, units=4, embedding_dim=2), tokenizer, tokenizer, "x", 8, 8
        )
    classifier = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="expected a translation model"):
        export_saved_model(classifier, small, small, "unused", 8, 8)


# ---------------------------------------------------------------- export_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, exported):
    """A folder laid out as `keras-seq train` writes it."""
    model, tokenizer = exported["rnn"]
    path = tmp_path_factory.mktemp("run")
    # As after training: model.keras also holds the optimizer's state.
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    model.save(path / "model.keras")
    tokenizer.save(path)
    config = {"source_length": SOURCE_LENGTH, "target_length": TARGET_LENGTH}
    (path / "metrics.json").write_text(json.dumps({"config": config}))
    return path


@pytest.fixture(scope="module")
def run_exports(run_dir, tmp_path_factory):
    directory = tmp_path_factory.mktemp("exported")
    written = export_run(run_dir, directory, formats=("savedmodel", "tflite", "onnx"))
    return directory, written


def test_export_run_writes_every_format_and_they_agree(run_exports, exported):
    import onnxruntime

    from keras_seq.export import run_tflite, tflite_greedy_decode, tflite_op_names

    model, tokenizer = exported["rnn"]
    directory, written = run_exports
    assert written["savedmodel"] == os.path.join(directory, "translator", "1")
    assert os.path.isfile(os.path.join(written["savedmodel"], "saved_model.pb"))

    source_ids = tokenizer.encode(INPUTS, SOURCE_LENGTH).numpy()
    expected_ids = _reference_greedy(model, source_ids, TARGET_LENGTH)
    loaded = tf.saved_model.load(written["savedmodel"])
    # The model's variables are saved, the optimizer's (2 more copies with Adam) are not.
    saved = sum(v.shape.num_elements() for v in loaded.model_variables)
    assert saved == sum(int(np.prod(v.shape)) for v in model.variables)
    assert saved < 1.01 * model.count_params()
    served = loaded.signatures["serving_default"]
    out = served(inputs=tf.constant([_as_bytes(s) for s in INPUTS]))
    np.testing.assert_array_equal(out["output_ids"], expected_ids)

    flatbuffers = {}
    for key in ("tflite", "tflite_encoder", "tflite_decoder_step"):
        with open(written[key], "rb") as f:
            flatbuffers[key] = f.read()
        assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffers[key]))
    got = tflite_greedy_decode(
        flatbuffers["tflite_encoder"], flatbuffers["tflite_decoder_step"], source_ids,
        TARGET_LENGTH,
    )
    np.testing.assert_array_equal(got, expected_ids)
    # The device side finds the vocabulary and lengths next to the flatbuffers.
    folder = os.path.dirname(written["tflite"])
    assert text.load_tokenizer(folder).vocabulary == tokenizer.vocabulary
    with open(os.path.join(folder, "export.json")) as f:
        assert json.load(f)["target_length"] == TARGET_LENGTH

    decoder_inputs = np.concatenate(
        [np.full((len(INPUTS), 1), text.START_ID, np.int32), expected_ids[:, :-1]], axis=1
    )
    logits = np.asarray(
        model({"encoder_inputs": source_ids, "decoder_inputs": decoder_inputs})
    )
    (tflite_logits,) = run_tflite(flatbuffers["tflite"], source_ids, decoder_inputs)
    np.testing.assert_allclose(tflite_logits, logits, atol=1e-5)
    session = onnxruntime.InferenceSession(written["onnx"])
    (onnx_logits,) = session.run(
        None, {"encoder_inputs": source_ids, "decoder_inputs": decoder_inputs}
    )
    np.testing.assert_allclose(onnx_logits, logits, atol=1e-4)
    # The ONNX encoder and decoder step, fed Keras' greedy tokens.
    encoder = onnxruntime.InferenceSession(written["onnx_encoder"])
    step = onnxruntime.InferenceSession(written["onnx_decoder_step"])
    outputs = encoder.run(None, {"encoder_inputs": source_ids})
    num_state = len(step.get_outputs()) - 1
    constants, state = outputs[: len(outputs) - num_state], outputs[len(outputs) - num_state :]
    names = [i.name for i in step.get_inputs()]
    for t in range(3):
        feeds = [decoder_inputs[:, t], np.array(t, np.int32), *constants, *state]
        step_logits, *state = step.run(None, dict(zip(names, feeds)))
        np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-4)

    # This run records no held-out examples: artifacts, but no reference outputs.
    with open(written["manifest"]) as f:
        manifest = json.load(f)
    assert manifest["reference"] is None and "reference" not in written
    assert [(a["artifact"], a["format"]) for a in manifest["artifacts"]] == [
        ("translator/1", "savedmodel"), ("tflite", "tflite"), ("onnx", "onnx")
    ]


def test_export_run_rejects_unknown_format_and_non_run_folder(run_dir, tmp_path):
    with pytest.raises(ValueError, match=r"export_run: invalid value for argument `formats`: .*received 'coreml'"):
        export_run(run_dir, tmp_path, formats=("coreml",))
    with pytest.raises(FileNotFoundError, match="export_run: .*metrics.json does not exist"):
        export_run(tmp_path, tmp_path / "out")
    with pytest.raises(ValueError, match=r"export_run: invalid value for argument `quantize`: expected one of "
                       r"'dynamic', 'float16', 'int8', 'int16x8', received 'int4'"):
        export_run(run_dir, tmp_path, quantize=("int4",))
    with pytest.raises(ValueError, match="export_run: invalid value for argument `examples`: expected a positive"):
        export_run(run_dir, tmp_path, examples=0)


def _load_script(name):
    path = os.path.join(os.path.dirname(__file__), os.pardir, "serving", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_serving_folder_check_scripts_run_on_export_run_output(run_exports, exported, capsys):
    model, tokenizer = exported["rnn"]
    _, written = run_exports
    request = os.path.join(os.path.dirname(__file__), os.pardir, "serving", "request.json")
    with open(request) as f:
        instances = json.load(f)["instances"]
    assert _load_script("check_savedmodel.py").main([written["savedmodel"], "--request", request]) == 0
    response = json.loads(capsys.readouterr().out.splitlines()[-1])
    ids = decoding.greedy_decode(model, tokenizer.encode(instances, SOURCE_LENGTH), TARGET_LENGTH)
    assert [p["outputs"] for p in response["predictions"]] == _reference_detokenize(
        tokenizer, ids.numpy()
    )
    folder = os.path.dirname(written["tflite"])
    assert _load_script("check_tflite.py").main([folder, "--text", "21 Nov 2026"]) == 0
    assert "seq2seq.tflite agrees with the step-by-step decoding: True" in capsys.readouterr().out


# ---------------------------------------------------------------- TF Serving client


def _serve_directly(path, inputs):
    signature = tf.saved_model.load(path).signatures["serving_default"]
    outputs = signature(inputs=tf.constant([_as_bytes(s) for s in inputs]))["outputs"]
    return signature, [s.decode("utf-8") for s in outputs.numpy()]


def test_client_grpc_request_is_answered_by_the_serving_signature(exported):
    client = _load_script("client.py")
    signature, expected = _serve_directly(exported["paths"]["char"], INPUTS)
    request = client.predict_request(INPUTS)
    assert request.model_spec.name == "translator"
    assert request.model_spec.signature_name == "serving_default"
    inputs = tf.make_ndarray(request.inputs["inputs"])
    assert inputs.shape == (len(INPUTS),)
    outputs = signature(inputs=tf.constant(inputs))
    assert [s.decode("utf-8") for s in outputs["outputs"].numpy()] == expected
    # The REST body in the row format; invalid UTF-8 goes base64-encoded.
    body = json.loads(client.rest_body(INPUTS))
    assert body["signature_name"] == "serving_default"
    assert body["instances"][:4] == INPUTS[:4]
    assert body["instances"][4] == {"b64": "MTL/MzQ="}


def test_client_round_trips_through_stand_in_rest_and_grpc_servers(exported):
    """Servers that answer like TF Serving, with the SavedModel's signature."""
    import base64
    import threading
    from concurrent import futures
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    client = _load_script("client.py")
    signature, expected = _serve_directly(exported["paths"]["char"], INPUTS)

    class Predict(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            assert request.model_spec.name == "translator"
            outputs = signature(inputs=tf.constant(tf.make_ndarray(request.inputs["inputs"])))
            response = predict_pb2.PredictResponse()
            for name in request.output_filter or outputs:
                response.outputs[name].CopyFrom(tf.make_tensor_proto(outputs[name].numpy()))
            return response

    class Rest(BaseHTTPRequestHandler):
        def do_POST(self):
            assert self.path == "/v1/models/translator:predict"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            inputs = [base64.b64decode(i["b64"]) if isinstance(i, dict) else i.encode()
                      for i in body["instances"]]
            outputs = signature(inputs=tf.constant(inputs))
            rows = [{"outputs": s.decode("utf-8"), "output_ids": ids.tolist()}
                    for s, ids in zip(outputs["outputs"].numpy(), outputs["output_ids"].numpy())]
            answer = json.dumps({"predictions": rows}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Predict(), grpc_server)
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    rest_server = ThreadingHTTPServer(("127.0.0.1", 0), Rest)
    threading.Thread(target=rest_server.serve_forever, daemon=True).start()
    try:
        assert client.predict_grpc(INPUTS, f"127.0.0.1:{grpc_port}") == expected
        url = f"http://127.0.0.1:{rest_server.server_address[1]}"
        assert client.predict_rest(INPUTS, url) == expected
    finally:
        grpc_server.stop(None)
        rest_server.shutdown()


@pytest.mark.parametrize("inputs", [[["a", "b"]], [["a"], ["b"]], "a"])
def test_serving_signature_refuses_anything_but_a_rank_1_batch(exported, inputs):
    served = tf.saved_model.load(exported["paths"]["char"]).signatures["serving_default"]
    assert served(inputs=tf.constant(["a", "b"]))["outputs"].shape == (2,)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"inputs_must_be_a_rank_1_batch(.|\n)*expected shape \[\?\]"):
        served(inputs=tf.constant(inputs))
