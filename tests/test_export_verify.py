"""`keras-seq export` of a trained date model: quantized TFLite, reference outputs, `verify`.

One small GRU date model is trained through `keras-seq train` and exported
once (every format, both quantizations); the tests share it.
"""

import json
import os
import shutil

import numpy as np
import pytest

from keras_seq import data, decoding, text
from keras_seq.cli import main
from keras_seq.export import tflite_greedy_decode, verify

pytestmark = pytest.mark.slow

TEST_SIZE = 200
# Trained to about 100% on the held-out dates: confident enough that int8
# weights flip at most an occasional near-tie of the argmax. (With length
# buckets, 3 epochs gave 89%, 4 give 100%.)
_TRAIN = ["--train-size", "6000", "--validation-size", "32", "--test-size", str(TEST_SIZE),
          "--units", "32", "--batch-size", "32", "--epochs", "4", "--learning-rate", "1e-2",
          "--verbose", "0"]
ROW_KEYS = {"artifact", "format", "provider", "quantize", "size_bytes", "ops",
            "max_abs_logit_error", "string_match", "exact_match", "latency_ms_batch1"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    assert main(["train", "--out", str(runs), "--name", "dates", *_TRAIN]) == 0
    out = tmp_path_factory.mktemp("exported")
    assert main(["export", str(runs / "dates"), str(out), "--quantize", "dynamic", "float16",
                 "--examples", str(TEST_SIZE)]) == 0
    return runs / "dates", out


@pytest.fixture(scope="module")
def keras_run(exported):
    import keras

    run_dir, _ = exported
    config = json.loads((run_dir / "metrics.json").read_text())["config"]
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    tokenizer = text.load_tokenizer(run_dir)
    test = data.date_task(0, 0, TEST_SIZE, seed=config["seed"])["test"]
    source_ids = tokenizer.encode([s for s, _ in test], config["source_length"]).numpy()
    keras_ids = decoding.greedy_decode(model, source_ids, config["target_length"]).numpy()
    return model, tokenizer, config, test, source_ids, keras_ids


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _weight_bytes(flatbuffer):
    """Bytes of the constant buffers (weights) of a .tflite, without the graph."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAsModel(flatbuffer, 0)
    return sum(m.Buffers(i).DataLength() for i in range(m.BuffersLength()))


def test_reference_holds_keras_outputs_on_the_runs_test_split(exported, keras_run):
    run_dir, out = exported
    model, tokenizer, config, test, source_ids, keras_ids = keras_run
    reference = np.load(out / "reference.npz")
    assert list(reference["sources"]) == [s for s, _ in test]
    assert list(reference["targets"]) == [t for _, t in test]
    np.testing.assert_array_equal(reference["source_ids"], source_ids)
    np.testing.assert_array_equal(reference["keras_ids"], keras_ids)
    outputs = [s.decode() for s in tokenizer.detokenize(keras_ids).numpy()]
    assert list(reference["keras_outputs"]) == outputs
    # The regenerated split is the one `train` evaluated on.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    exact = np.mean([o == t for o, (_, t) in zip(outputs, test)])
    assert exact == metrics["test_exact_match"] >= 0.95
    # Logits of the teacher-forced model along Keras' own greedy tokens.
    decoder_inputs = np.concatenate(
        [np.full((TEST_SIZE, 1), text.START_ID, np.int32), keras_ids[:, :-1]], axis=1
    )
    logits = np.asarray(model({"encoder_inputs": source_ids, "decoder_inputs": decoder_inputs}))
    rows, steps = reference["logit_rows"], reference["logit_steps"]
    np.testing.assert_allclose(reference["keras_logits"], logits[rows, steps], atol=1e-5)
    # Every step up to and including [END] is there.
    lengths = np.argmax(keras_ids == text.END_ID, axis=1) + 1
    assert len(rows) == lengths.sum()


@pytest.mark.parametrize("mode", ["dynamic", "float16"])
def test_quantized_tflite_decodes_like_keras_and_is_smaller(exported, keras_run, mode):
    from keras_seq.export import tflite_op_names

    _, out = exported
    _, tokenizer, config, _, source_ids, keras_ids = keras_run
    quantized = {n: _read(out / f"tflite_{mode}" / f"{n}.tflite") for n in ("encoder", "decoder_step")}
    floats = {n: _read(out / "tflite" / f"{n}.tflite") for n in ("encoder", "decoder_step")}
    for flatbuffer in quantized.values():
        assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    ids = tflite_greedy_decode(
        quantized["encoder"], quantized["decoder_step"], source_ids, config["target_length"]
    )
    got = tokenizer.detokenize(ids).numpy()
    expected = tokenizer.detokenize(keras_ids).numpy()
    assert np.mean(got == expected) >= 0.995
    # int8 weights: about a quarter of float32; float16 half (biases and
    # small tensors stay float32).
    shrink = {"dynamic": 2.5, "float16": 1.5}[mode]
    for name in quantized:
        assert _weight_bytes(quantized[name]) < _weight_bytes(floats[name]) / shrink
        assert len(quantized[name]) < len(floats[name])


def test_verify_passes_and_writes_the_json_layout(exported, tmp_path, capsys):
    _, out = exported
    capsys.readouterr()
    assert main(["verify", str(out), "--json", str(tmp_path / "verify.json")]) == 0
    table = capsys.readouterr().out
    rows = json.loads((tmp_path / "verify.json").read_text())
    assert list(rows) == ["artifacts"]
    by_name = {row["artifact"]: row for row in rows["artifacts"]}
    assert set(by_name) == {"translator/1", "tflite", "tflite_dynamic", "tflite_float16", "onnx"}
    for name, row in by_name.items():
        assert set(row) == ROW_KEYS
        assert name in table
        assert row["size_bytes"] > 0 and row["latency_ms_batch1"] > 0
        assert row["exact_match"] >= 0.95
        if row["quantize"] is None:
            assert row["string_match"] == 1.0
        else:
            assert row["string_match"] >= 0.995
    assert by_name["translator/1"]["format"] == "savedmodel"
    assert by_name["translator/1"]["max_abs_logit_error"] is None
    assert by_name["tflite"]["max_abs_logit_error"] < 1e-4
    assert by_name["onnx"]["max_abs_logit_error"] < 1e-4
    assert 1e-4 < by_name["tflite_dynamic"]["max_abs_logit_error"] < 1.0
    assert by_name["tflite_float16"]["quantize"] == "float16"
    for name in ("tflite", "tflite_dynamic", "tflite_float16"):
        ops = by_name[name]["ops"]
        assert "WHILE" in ops and not [op for op in ops if op.startswith("CUSTOM")]
    assert "DEQUANTIZE" in by_name["tflite_float16"]["ops"]
    # The encoder's bidirectional GRU is one native node; the forward pass's
    # attentive decoder keeps its Loop. One row per local provider: here, the CPU.
    assert "GRU" in by_name["onnx"]["ops"]
    assert [row["provider"] for row in rows["artifacts"] if row["format"] == "onnx"] == [
        "CPUExecutionProvider"]
    assert "onnx [CPU]" in table
    assert all(row["provider"] is None for row in rows["artifacts"] if row["format"] != "onnx")
    # The sizes are the files a device ships: encoder and decoder step.
    float_size = sum(os.path.getsize(out / "tflite" / f"{n}.tflite")
                     for n in ("encoder", "decoder_step"))
    assert by_name["tflite"]["size_bytes"] == float_size


def _copy_with_only(out, destination, artifact):
    """A copy of the export with one artifact in its manifest."""
    shutil.copytree(out, destination)
    manifest = json.loads((destination / "manifest.json").read_text())
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["artifact"] == artifact]
    (destination / "manifest.json").write_text(json.dumps(manifest))
    return destination


def _scale_largest_weight(path, factor):
    """Rewrites the largest float32 constant of a .tflite, scaled."""
    from ai_edge_litert import schema_py_generated as schema

    flatbuffer = bytearray(_read(path))
    m = schema.Model.GetRootAsModel(flatbuffer, 0)
    buffer = max((m.Buffers(i) for i in range(m.BuffersLength())), key=lambda b: b.DataLength())
    data = buffer.DataAsNumpy()  # a view into `flatbuffer`
    weights = data[: data.size // 4 * 4].view(np.float32)
    weights *= factor
    with open(path, "wb") as f:
        f.write(flatbuffer)


def test_verify_fails_on_a_corrupted_decoder_step(exported, tmp_path, capsys):
    _, out = exported
    copy = _copy_with_only(out, tmp_path / "corrupted", "tflite")
    _scale_largest_weight(copy / "tflite" / "decoder_step.tflite", -1.0)
    result = verify(copy)
    assert not result["passed"]
    (row,) = result["artifacts"]
    assert row["string_match"] < 1.0 and row["max_abs_logit_error"] > 1e-2
    assert any("tflite: decodes" in failure for failure in result["failures"])
    capsys.readouterr()
    assert main(["verify", str(copy)]) == 1
    assert "FAIL tflite: decodes" in capsys.readouterr().err


def test_verify_fails_on_an_artifact_that_cannot_run(exported, tmp_path):
    _, out = exported
    copy = _copy_with_only(out, tmp_path / "swapped", "onnx")
    # The decoder step in place of the encoder: other inputs, the runtime refuses.
    shutil.copy(out / "onnx" / "decoder_step.onnx", copy / "onnx" / "encoder.onnx")
    result = verify(copy)
    assert not result["passed"]
    assert [row["string_match"] for row in result["artifacts"]] == [None]
    assert any(failure.startswith("onnx on CPUExecutionProvider: ")
               for failure in result["failures"])


def test_verify_refuses_a_folder_that_is_not_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="verify: .*manifest.json does not exist"):
        verify(tmp_path)


def test_no_module_beside_the_worker_shadows_an_installed_package():
    # The worker runs by path, so its folder (keras_seq/export) comes first on
    # its sys.path: a module there named like a package (onnx.py, tflite.py)
    # would be imported instead of the package.
    import importlib.util

    import keras_seq.export

    folder = os.path.dirname(keras_seq.export.__file__)
    names = [f[: -len(".py")] for f in os.listdir(folder) if f.endswith(".py")]
    assert "_verify_worker" in names
    shadowing = [n for n in names if n != "__init__" and importlib.util.find_spec(n) is not None]
    assert shadowing == []
