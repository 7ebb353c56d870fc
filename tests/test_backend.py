"""The TensorFlow-only parts refuse another Keras backend with one clear message."""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

from keras_seq._backend import EXPORT_THERE, require_tensorflow


def _run(backend, *args):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_require_tensorflow_names_the_function_the_backend_and_the_way_there(monkeypatch):
    require_tensorflow("keras_seq.export.convert_to_tflite", EXPORT_THERE)  # TensorFlow: passes
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(RuntimeError) as error:
        require_tensorflow("keras_seq.export.convert_to_tflite", EXPORT_THERE)
    assert str(error.value) == (
        "keras_seq.export.convert_to_tflite needs the TensorFlow backend "
        "(KERAS_BACKEND=tensorflow); Keras is running on 'jax'. To use it, save the model "
        "as .keras, load it under TensorFlow and export there."
    )


def test_on_jax_the_package_imports_and_tensorflow_only_functions_refuse():
    script = textwrap.dedent(
        """
        import keras
        import keras_seq
        from keras_seq import decoding, distribute, export, models, training, tuning

        model = models.transformer_seq2seq(
            20, 15, num_layers=1, model_dim=8, num_heads=2, intermediate_dim=16
        )
        calls = {
            "export.convert_to_tflite": lambda: export.convert_to_tflite(model),
            "export.export_saved_model": lambda: export.export_saved_model(model, None, None, "out", 8, 8),
            "decoding.greedy_decode": lambda: decoding.greedy_decode(model, [[3, 4]], 5),
            "training.train": lambda: training.train(),
            "distribute.make_strategy": lambda: distribute.make_strategy(),
            "tuning.search": lambda: tuning.search(),
        }
        for name, call in calls.items():
            try:
                call()
            except RuntimeError as error:
                print(name, "|", error)
            else:
                print(name, "| no error")
        """
    )
    result = _run("jax", "-c", script)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" | ") for line in result.stdout.splitlines() if " | " in line)
    assert len(lines) == 6, result.stdout
    for name, message in lines.items():
        assert message.startswith(
            f"keras_seq.{name} needs the TensorFlow backend (KERAS_BACKEND=tensorflow); "
            "Keras is running on 'jax'. To use it, "
        ), message
    assert lines["export.convert_to_tflite"].endswith(
        "save the model as .keras, load it under TensorFlow and export there."
    )


@pytest.mark.parametrize("backend, entry", [("torch", "keras_seq.cli"),
                                            ("jax", "keras_seq_command")])
def test_command_line_on_another_backend_stops_with_one_line_and_no_traceback(backend, entry):
    """Both entries (the console script's module also leaves out packages
    while Keras imports, JAX among them on TensorFlow only)."""
    result = _run(backend, "-m", entry, "train", "--epochs", "1")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-seq train needs the TensorFlow backend (KERAS_BACKEND=tensorflow); Keras is running "
        f"on {backend!r}. To use it, run it with KERAS_BACKEND=tensorflow."
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_layers_and_builders_import_no_tensorflow_on_other_backends(backend):
    """On JAX and PyTorch, importing the package, its layers and builders (and
    running recurrent layers) leaves TensorFlow unimported: it is slow to
    import and logs its own start-up lines. (Keras' own `Bidirectional` does
    import it, to serialize its layer.)"""
    script = textwrap.dedent(
        """
        import sys
        import keras_seq
        from keras_seq import layers, models

        models.language_model(9, kind="rnn", num_layers=1, units=4, cell="peephole")
        layers.LayerNormLSTM(3)(keras_seq.layers.RNN(layers.GRUCell(2),
                                return_sequences=True)(__import__("numpy").ones((1, 2, 3))))
        print("TENSORFLOW", "tensorflow" in sys.modules)
        """
    )
    result = _run(backend, "-c", script)
    assert "TENSORFLOW False" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]


def test_on_a_backend_without_the_loop_the_layers_import_and_a_recurrent_layer_refuses():
    """Keras' numpy backend runs no recurrent loop of this package: importing
    `keras_seq.layers` still works and so do the other layers, and making a
    recurrent layer is one line naming it and the backend."""
    script = textwrap.dedent(
        """
        import numpy as np
        from keras_seq import layers

        context = layers.BahdanauAttention(4)(np.ones((2, 3), "float32"),
                                             np.ones((2, 5, 3), "float32"))
        print("ATTENTION", tuple(context.shape))
        for make in (lambda: layers.GRU(3), lambda: layers.RNN(layers.MinGRUCell(3))):
            try:
                make()
            except RuntimeError as error:
                print("REFUSED |", error)
        """
    )
    result = _run("numpy", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "ATTENTION (2, 3)" in result.stdout
    refused = [line for line in result.stdout.splitlines() if line.startswith("REFUSED")]
    assert refused == [
        "REFUSED | GRU: the recurrent layers run on the TensorFlow, JAX and PyTorch backends; "
        "Keras runs on 'numpy'. Set KERAS_BACKEND to one of them.",
        "REFUSED | RNN: the recurrent layers run on the TensorFlow, JAX and PyTorch backends; "
        "Keras runs on 'numpy'. Set KERAS_BACKEND to one of them.",
    ]
