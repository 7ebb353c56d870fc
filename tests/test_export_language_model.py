"""``keras-seq export`` of a language-model run: ``lm_step.tflite`` and its greedy parity.

References: the full Keras model run on each prefix (the step's logits), and
Keras' own greedy generation (`training.generate_text` at temperature 0,
what ``keras-seq generate --temperature 0`` prints) for the text the
exported step generates in LiteRT.
"""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import training
from keras_seq.cli import main
from keras_seq.export import convert_language_model_step_to_tflite, tflite_op_names, verify
from keras_seq.recipes import read_run

_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 20
_TINY = ["--task", "lm", "--units", "16", "--layers", "2", "--context", "16",
         "--batch-size", "4", "--steps-per-epoch", "3", "--epochs", "1",
         "--validation-size", "4", "--verbose", "0"]


# Every kind of language model; the first three are checked in depth below.
KINDS = ("rnn", "transformer", "xlstm", "mingru", "minlstm", "rglru")
_PROGRESS = re.compile(r"export: \S.* (\.\.\.|in [\d.]+ s)")


@pytest.fixture(scope="module")
def lm_exports(tmp_path_factory):
    """kind -> (run folder, export folder) of a tiny run of each kind; the
    exports run as a user runs them, in a process of their own (one for all
    kinds), whose stderr lines are kept per kind (``stderr``), and which
    says which packages of `UNUSED_AT_IMPORT` it loaded (``loaded``)."""
    root = tmp_path_factory.mktemp("lm_export")
    text_file = root / "text.txt"
    text_file.write_text(_TEXT, encoding="utf-8")
    exports, commands = {}, []
    for kind in KINDS:
        argv = ["train", *_TINY, "--model", kind, "--data", str(text_file), "--out", str(root),
                "--name", kind]
        assert main(argv) == 0
        quantize = ["--quantize", "dynamic"] if kind == "rnn" else []
        commands.append((kind, ["export", str(root / kind), str(root / f"out_{kind}"),
                                *quantize]))
        exports[kind] = (root / kind, root / f"out_{kind}")
    script = (
        "import json, sys\n"
        "from keras_seq_command import main  # the console script's entry point\n"
        f"for kind, argv in json.loads({json.dumps(json.dumps(commands))}):\n"
        "    print('== ' + kind, file=sys.stderr, flush=True)\n"
        "    assert main(argv) == 0, kind\n"
        "from keras_seq._unused_imports import UNUSED_AT_IMPORT\n"
        "print('LOADED', json.dumps(sorted(set(UNUSED_AT_IMPORT) & set(sys.modules))))\n"
        "import matplotlib.pyplot, sklearn  # afterwards, as usual\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # a user's
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    stderr, kind = {}, None
    for line in done.stderr.splitlines():
        if line.startswith("== "):
            kind = line[3:]
            stderr[kind] = []
        elif kind is not None:
            stderr[kind].append(line)
    (loaded,) = [json.loads(line[len("LOADED "):]) for line in done.stdout.splitlines()
                 if line.startswith("LOADED ")]
    return text_file, exports, stderr, loaded


@pytest.mark.parametrize("kind", KINDS)
def test_an_export_prints_its_progress_and_nothing_of_the_converters(lm_exports, kind):
    """No converter's log line (156 of tf2onnx's "missing output shape" for a
    minGRU before): stderr holds the progress lines alone."""
    _, _, stderr, _ = lm_exports
    lines = stderr[kind]
    assert any(line.startswith("export: lm_step.tflite") for line in lines), lines
    assert [line for line in lines if not _PROGRESS.fullmatch(line)] == [], lines


def test_the_commands_process_loads_none_of_the_packages_keras_imports_for_nothing(
        lm_exports):
    """Importing TensorFlow imports Keras, which would import scikit-learn,
    matplotlib, JAX and IPython (all installed here) for features no command
    uses: the exports' process loaded none of them, and imported two of them
    after its commands as any process does."""
    *_, loaded = lm_exports
    assert loaded == []


def test_an_lm_run_records_its_held_out_text(lm_exports):
    _, exports, *_ = lm_exports
    run_dir, _ = exports["rnn"]
    assert (run_dir / "test.txt").read_text(encoding="utf-8") == _TEXT[int(len(_TEXT) * 0.9):]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rnn", "transformer", "xlstm"])
def test_the_exported_step_generates_keras_greedy_text_exactly_in_litert(lm_exports, kind):
    _, exports, *_ = lm_exports
    run_dir, out = exports[kind]
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".tflite", ".onnx")) == {
        "rnn": ["lm_step.tflite", "lm_step_dynamic.tflite", "lm_stream.onnx"],
        "transformer": ["lm_step.tflite"], "xlstm": ["lm_step.tflite", "lm_stream.onnx"],
    }[kind]
    reference = np.load(out / "reference.npz")
    held_out = (run_dir / "test.txt").read_text(encoding="utf-8")
    prompts = [str(p) for p in reference["prompts"]]
    assert len(prompts) == 20 and all(p in held_out for p in prompts)
    assert reference["keras_ids"].shape == (20, 200)
    # Keras' reference is what `keras-seq generate --temperature 0` gives.
    expected = training.generate_text(run_dir, prompts[3], length=200, temperature=0.0)
    assert str(reference["keras_text"][3]) == expected

    result = verify(out)
    assert result["passed"], result["failures"]
    rows = {row["artifact"]: row for row in result["artifacts"]}
    float_row = rows["lm_step.tflite"]
    assert float_row["string_match"] == 1.0 and float_row["token_agreement"] == 1.0
    assert float_row["max_abs_logit_error"] < 1e-4
    assert float_row["ms_per_token"] > 0 and float_row["keras_ms_per_token"] > 0
    assert not [op for op in float_row["ops"] if op.startswith("CUSTOM")]
    if kind == "rnn":
        assert rows["lm_step_dynamic.tflite"]["token_agreement"] >= 0.995
    if kind != "transformer":
        # The streaming ONNX, fed one token per call, continues every prompt as Keras.
        stream_row = rows["lm_stream.onnx"]
        assert stream_row["provider"] == "CPUExecutionProvider"
        assert stream_row["string_match"] == 1.0 and stream_row["token_agreement"] == 1.0
        assert stream_row["max_abs_logit_error"] < 1e-4
        # Native LSTM/GRU nodes for the rnn; the residual blocks: a one-token
        # step beside a Loop for longer chunks.
        native = bool({"LSTM", "GRU"} & set(stream_row["ops"]))
        assert native == (kind == "rnn")
        assert ("Loop" in stream_row["ops"]) == ("If" in stream_row["ops"]) == (kind == "xlstm")
    else:
        assert "lm_stream.onnx" not in rows


@pytest.mark.slow
def test_the_verify_command_imports_neither_keras_nor_tensorflow_on_any_backend(lm_exports):
    """The console script's ``verify`` on a LiteRT and ONNX export, under
    KERAS_BACKEND=jax: its table, exit 0, and no Keras or TensorFlow in the
    command's process (its child loads what each artifact needs)."""
    _, exports, *_ = lm_exports
    _, out = exports["rnn"]
    script = (
        "import sys\n"
        "from keras_seq_command import main  # the console script's entry point\n"
        f"status = main(['verify', {str(out)!r}])\n"
        "print('IMPORTED', sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch')\n"
        "                         if m in sys.modules))\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, KERAS_BACKEND="jax"), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "IMPORTED []" in done.stdout
    table = done.stdout.splitlines()
    assert table[0].split()[0] == "artifact"
    assert sorted(line.split()[0] for line in table[1:4]) == [
        "lm_step.tflite", "lm_step_dynamic.tflite", "lm_stream.onnx"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rnn", "transformer", "xlstm"])
def test_the_steps_logits_are_the_full_models_at_the_end_of_each_prefix(lm_exports, kind):
    from ai_edge_litert.interpreter import Interpreter

    _, exports, *_ = lm_exports
    run_dir, out = exports[kind]
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    runner = Interpreter(model_path=str(out / "lm_step.tflite")).get_signature_runner()
    config = json.loads((out / "export.json").read_text())
    signature = Interpreter(model_path=str(out / "lm_step.tflite")).get_signature_list()
    assert sorted(signature["serving_default"]["inputs"]) == sorted(config["inputs"])
    assert config["inputs"][:2] == (["token", "t"] if kind == "transformer" else
                                    ["token", "state_0"])
    ids = np.random.default_rng(0).integers(4, model.outputs[0].shape[-1], (2, 12)).astype("int32")
    states = [np.zeros([2, *shape[1:]], "float32") for shape in config["state_shapes"]]
    full = np.asarray(model(ids))
    for t in range(ids.shape[1]):
        inputs = {"token": ids[:, t], **dict(zip(config["inputs"][-len(states):], states))}
        if kind == "transformer":
            inputs["t"] = np.int32(t)
        outputs = runner(**inputs)
        states = [outputs[f"output_{i + 1}"] for i in range(len(states))]
        np.testing.assert_allclose(outputs["output_0"], full[:, t], atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rnn", "xlstm"])
def test_the_stream_fed_in_chunks_gives_the_full_models_logits(lm_exports, kind):
    import onnx
    import onnxruntime

    _, exports, *_ = lm_exports
    run_dir, out = exports[kind]
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    session = onnxruntime.InferenceSession(str(out / "lm_stream.onnx"),
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names[0] == "token_ids"
    assert {n.rsplit("_state_", 1)[0] for n in names[1:]} == {"recurrent_0", "recurrent_1"}
    ids = np.random.default_rng(0).integers(4, model.outputs[0].shape[-1], (2, 12)).astype("int32")
    if kind == "rnn":
        ids[1, 9:] = 0  # padding at the end of the second row
    full = np.asarray(model(ids))
    states = [np.zeros((2, i.shape[-1]), "float32") for i in session.get_inputs()[1:]]
    # Chunks of 5, 1 (the one-token branch for the blocks) and 6 tokens.
    for start, stop in [(0, 5), (5, 6), (6, 12)]:
        logits, *states = session.run(None, dict(zip(names, [ids[:, start:stop], *states])))
        valid = ids[:, start:stop] != 0
        np.testing.assert_allclose(logits[valid], full[:, start:stop][valid], atol=1e-4)
    if kind == "xlstm":
        # A one-token call runs the step's ops alone: no Loop in that branch.
        (branch,) = [n for n in onnx.load(out / "lm_stream.onnx").graph.node if n.op_type == "If"]
        one = {a.name: a.g for a in branch.attribute}["then_branch"]
        assert "Loop" not in {n.op_type for n in one.node} and len(one.node) > 50


@pytest.mark.slow
def test_a_transformer_run_has_no_streaming_onnx(lm_exports, capsys, tmp_path):
    _, exports, *_ = lm_exports
    run_dir, _ = exports["transformer"]
    capsys.readouterr()
    assert main(["export", str(run_dir), str(tmp_path / "t"), "--formats", "onnx"]) == 1
    assert "a Transformer language model has no streaming form" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_verify_fails_a_step_that_generates_other_text(lm_exports, tmp_path):
    import shutil

    _, exports, *_ = lm_exports
    _, out = exports["transformer"]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    reference = dict(np.load(copy / "reference.npz"))
    keras_ids = reference["keras_ids"].copy()
    keras_ids[2, 7] = 4 if keras_ids[2, 7] != 4 else 5  # Keras "said" something else
    reference["keras_ids"] = keras_ids
    np.savez(copy / "reference.npz", **reference)
    result = verify(copy)
    assert not result["passed"]
    assert result["artifacts"][0]["string_match"] == pytest.approx(19 / 20)
    assert any("lm_step.tflite: decodes 95.00% of 20 examples" in f for f in result["failures"])


@pytest.mark.slow
def test_lm_export_refuses_other_formats_a_beam_and_a_used_folder(lm_exports, capsys, tmp_path):
    _, exports, *_ = lm_exports
    run_dir, out = exports["rnn"]
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["export", str(run_dir), str(out)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(["export", str(run_dir), str(tmp_path / "a"), "--formats", "savedmodel"]) == 1
    assert "exports 'tflite' (lm_step.tflite) and, for a recurrent model, 'onnx'" in (
        capsys.readouterr().err)
    assert main(["export", str(run_dir), str(tmp_path / "b"), "--beam", "3"]) == 1
    assert "keras-seq export: --beam is for translation runs" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    replaced = tmp_path / "replaced"
    replaced.mkdir()
    (replaced / "old.txt").write_text("an earlier export")
    assert main(["export", str(run_dir), str(replaced), "--overwrite"]) == 0
    assert sorted(p.name for p in replaced.iterdir()) == [
        "export.json", "lm_step.tflite", "lm_stream.onnx", "manifest.json", "reference.npz",
        "tokenizer.json", "vocab.txt",
    ]


@pytest.mark.slow
def test_a_run_without_test_txt_takes_its_prompts_from_the_data_file(lm_exports, tmp_path):
    import shutil

    text_file, exports, *_ = lm_exports
    run_dir, _ = exports["rnn"]
    old = tmp_path / "old_run"
    shutil.copytree(run_dir, old)
    (old / "test.txt").unlink()
    folder = read_run(old, "test", task="lm")
    assert folder.held_out_text() == _TEXT[int(len(_TEXT) * 0.9):]
    metrics = json.loads((old / "metrics.json").read_text())
    metrics["data"] = str(text_file) + ".gone"
    (old / "metrics.json").write_text(json.dumps(metrics))
    assert read_run(old, "test", task="lm").held_out_text() is None


def test_the_step_converter_refuses_a_model_that_is_not_a_language_model():
    x = keras.Input((None,), dtype="int32")
    model = keras.Model(x, keras.layers.Dense(3)(keras.layers.Embedding(5, 4)(x)))
    with pytest.raises(ValueError, match="language_model"):
        convert_language_model_step_to_tflite(model, context=8)
    assert "FULLY_CONNECTED" in tflite_op_names(
        convert_language_model_step_to_tflite(
            keras_seq.models.language_model(9, kind="rnn", num_layers=1, units=4), context=8
        )
    )
