"""The checks behind `test_layers_every_backend.py` and
`test_builders_every_backend.py`: every public layer and builder trains,
predicts, saves and reloads on the current Keras backend, and a model saved
on JAX or PyTorch loads under TensorFlow with the same outputs ("one model,
any backend"). Two test files share the cases so that the two pytest
processes share the work.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np

from keras_seq._unused_imports import python_command

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import backend_cases  # noqa: E402

CASES = backend_cases.cases()
BACKEND = keras.backend.backend()
BUILDERS = sorted(name for name in CASES if name[0].islower() or name.startswith("Recurrent"))
LAYERS = sorted(name for name in CASES if name not in BUILDERS)


def _as_list(outputs):
    return [np.asarray(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]


def _predict(model, inputs):
    return _as_list(model.predict(inputs, batch_size=backend_cases.B, verbose=0))


def _target_like(outputs):
    rng = np.random.default_rng(7)
    targets = [rng.normal(size=o.shape).astype("float32") for o in outputs]
    return targets if len(targets) > 1 else targets[0]


@functools.cache
def _saved_dir() -> Path:
    """The saved cases' folder, shared by the test files of this process and
    deleted when it ends."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"keras_seq_{BACKEND}_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder)


@functools.cache
def trained(name: str):
    """Trains case ``name`` for two epochs on this backend and saves it:
    ``(model, inputs, outputs, path)``; the weights and outputs go next to
    the ``.keras`` file as ``.npz`` for the TensorFlow subprocess."""
    keras.utils.set_random_seed(0)
    build, inputs = CASES[name]
    model = build()
    outputs = _predict(model, inputs)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(inputs, _target_like(outputs), epochs=2, batch_size=backend_cases.B,
                        verbose=0)
    assert np.all(np.isfinite(history.history["loss"])), name
    changed = [not np.array_equal(a, b) for a, b in zip(before, model.get_weights())]
    assert any(changed), f"{name}: fit changed no weight"
    outputs = _predict(model, inputs)
    path = _saved_dir() / f"{name}.keras"
    model.save(path)
    np.savez(path.with_suffix(".outputs.npz"), *outputs)
    np.savez(path.with_suffix(".weights.npz"), *model.get_weights())
    return model, inputs, outputs, path


def check_trains_predicts_and_reloads(name):
    model, inputs, outputs, path = trained(name)
    for o in outputs:
        assert np.all(np.isfinite(o)), name
    reloaded = keras.saving.load_model(path, safe_mode=True)
    again = _predict(reloaded, inputs)
    for a, b in zip(outputs, again):
        np.testing.assert_allclose(b, a, atol=1e-6, rtol=0)


def check_loads_under_tensorflow(names):
    """One TensorFlow subprocess loads every ``.keras`` saved here (and builds
    every case anew with the saved weights) and predicts the same inputs; a
    few of the loaded models are exported to builtin-only TFLite there and
    run in LiteRT."""
    names = sorted(names)
    for name in names:
        trained(name)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [*python_command(path=str(HERE / "load_under_tensorflow.py")), str(_saved_dir()), *names],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(errors) == names
    exported = [name for name in names if "tflite" in errors[name]]
    assert exported, "no case was exported to TFLite under TensorFlow"
    bad = {name: e for name, e in errors.items() if max(e.values()) > 1e-5}
    assert not bad, bad
