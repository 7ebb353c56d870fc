"""Run by `test_every_backend.py` under TensorFlow: for each case name, loads
``DIR/<name>.keras`` (saved on another backend) with ``safe_mode=True``, and
builds the case anew with the saved weights; prints, as one JSON line, the
largest absolute difference of each from the outputs recorded on the other
backend. The cases in `EXPORTED` are also converted to a builtin-only
``.tflite`` there (`keras_seq.export.convert_to_tflite`) and run in LiteRT."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import backend_cases  # noqa: E402

import keras_seq  # noqa: E402,F401  (registers the classes for loading)

# Exported after loading: one of each recurrent loop kind and a builder.
EXPORTED = ("PeepholeLSTM", "GRU_reset_before", "NTM", "rnn_seq2seq_gru_bahdanau")


def _tflite_error(model, inputs, expected):
    from keras_seq.export import convert_to_tflite, run_tflite

    flat = [inputs[k] for k in ("encoder_inputs", "decoder_inputs")] if isinstance(
        inputs, dict) else (inputs if isinstance(inputs, list) else [inputs])
    outputs = run_tflite(convert_to_tflite(model), *flat)
    return max(float(np.max(np.abs(np.asarray(o) - e))) for o, e in zip(outputs, expected))


def _max_error(model, inputs, expected):
    outputs = model(inputs, training=False)  # eager: no predict function to trace per model
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return max(float(np.max(np.abs(np.asarray(o) - e))) for o, e in zip(outputs, expected))


def main(directory: str, names: list[str]) -> None:
    assert keras.backend.backend() == "tensorflow"
    cases = backend_cases.cases()
    errors = {}
    for name in names:
        path = Path(directory) / f"{name}.keras"
        build, inputs = cases[name]
        with np.load(path.with_suffix(".outputs.npz")) as f:
            expected = [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
        with np.load(path.with_suffix(".weights.npz")) as f:
            weights = [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
        loaded = keras.saving.load_model(path, safe_mode=True)
        rebuilt = build()
        rebuilt.set_weights(weights)
        errors[name] = {
            "loaded": _max_error(loaded, inputs, expected),
            "same_weights": _max_error(rebuilt, inputs, expected),
        }
        if name in EXPORTED:
            errors[name]["tflite"] = _tflite_error(loaded, inputs, expected)
    print(json.dumps(errors))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
