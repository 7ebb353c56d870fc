"""Run by `test_optimizer_across_backends.py` under TensorFlow: loads
``DIR/model.keras`` (trained and saved compiled on another backend) with its
optimizer, takes one more training step on ``DIR/batch.npz``, and prints one
JSON line: the optimizer's class and step count, whether PyTorch was
imported, and the weights and Adam moments before and after the step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keras
import numpy as np

import keras_seq  # noqa: F401  (what a user imports before loading)


def main(directory: str) -> None:
    assert keras.backend.backend() == "tensorflow"
    model = keras.saving.load_model(Path(directory) / "model.keras", safe_mode=True)
    optimizer = model.optimizer
    state = {v.path: np.asarray(v).tolist() for v in optimizer.variables}
    before = [w.tolist() for w in model.get_weights()]
    with np.load(Path(directory) / "batch.npz") as batch:
        model.train_on_batch(batch["x"], batch["y"])
    print(json.dumps({
        "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
        "iterations": int(optimizer.iterations),
        "torch_imported": "torch" in sys.modules,
        "state": state,
        "before": before,
        "after": [w.tolist() for w in model.get_weights()],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
