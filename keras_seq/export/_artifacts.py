"""What every exporter of a run writes besides its models: host folders, manifest entries, JSON.

A host-side folder (TFLite, ONNX) holds, beside its model files, the
tokenizer files and ``export.json`` (the lengths, the special ids and what
else the host needs to tokenize and run its loop): `host_folder`. Each
artifact is one entry of ``manifest.json``, which ``keras-seq verify``
reads (`artifact_entry`).
"""

from __future__ import annotations

import json
import os

__all__ = ["HOST_FILE", "REFERENCE_FILE", "artifact_entry", "host_folder", "write_json"]

HOST_FILE = "export.json"
"""A host-side folder's settings for the host's tokenizer and loop."""
REFERENCE_FILE = "reference.npz"
"""Keras' outputs on held-out examples, which ``keras-seq verify`` compares with."""


def host_folder(directory, name, tokenizer, host_config) -> str:
    """A folder for a host-side artifact, with what the host needs to tokenize:
    the tokenizer files and ``export.json`` (``host_config``)."""
    folder = os.path.join(directory, name)
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(folder)
    write_json(os.path.join(folder, HOST_FILE), host_config)
    return folder


def artifact_entry(directory, path, format, quantize, **more) -> dict:
    """The manifest entry of the artifact at ``path`` (relative to ``directory``)."""
    return {
        "artifact": os.path.relpath(path, directory).replace(os.sep, "/"),
        "format": format,
        "quantize": quantize,
        **more,
    }


def write_json(path, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")
