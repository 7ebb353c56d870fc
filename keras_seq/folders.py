"""The files and folders the commands name, checked without Keras.

A run folder (its ``metrics.json``), a data file, an export folder (its
``manifest.json``) and the folder an export is written to: the command line
checks each before it loads TensorFlow, and the library functions that read
or write them check them with the same functions and messages.
"""

from __future__ import annotations

import os

from keras_seq._validation import Arg, Call, ExistingFileError, MissingFileError

__all__ = ["MANIFEST_FILE", "check_export_destination", "data_file", "export_manifest_path",
           "run_metrics_path"]

MANIFEST_FILE = "manifest.json"
"""The file of an export folder that lists its artifacts, read by ``keras-seq verify``."""


def run_metrics_path(run_dir, where: str) -> str:
    """The ``metrics.json`` of the run folder ``run_dir``, which makes it one.

    Needs no Keras: the command line checks a run folder before it loads
    anything (`keras_seq.run_folder.read_run` reads it).

    Raises:
        FileNotFoundError: naming ``where`` and the folder, when there is none.
    """
    run_dir = os.fspath(run_dir)
    metrics_path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(metrics_path):
        raise MissingFileError(
            where, f"{run_dir} is not a run folder: {metrics_path} does not exist (a run "
            "folder is written by ", Call("train"), ")."
        )
    return metrics_path


def data_file(expected: str, path, argument: str = "data") -> str:
    """``path``, a data file given as ``argument``, if it is a file; ``expected``
    says what it holds (``"label<TAB>text file."``, a recipe's ``data``).

    Needs no Keras: the command line checks the files before it loads anything.

    Raises:
        FileNotFoundError: naming the file and what ``argument`` takes.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(
            "train", f"the data file {path} does not exist"
            + (" (it is a folder)" if os.path.isdir(path) else "") + "; ",
            Arg(argument), f" takes a {expected}"
        )
    return path


def export_manifest_path(out_dir, where: str) -> str:
    """The ``manifest.json`` of the export folder ``out_dir``, which makes it one.

    Raises:
        FileNotFoundError: naming ``where`` and the file, when there is none.
    """
    manifest_path = os.path.join(os.fspath(out_dir), MANIFEST_FILE)
    if not os.path.isfile(manifest_path):
        raise MissingFileError(
            where, f"{manifest_path} does not exist; ", Arg("out_dir"), " must be a folder "
            "written by ", Call("export_run"), "."
        )
    return manifest_path


def check_export_destination(out, overwrite: bool, where: str) -> None:
    """``out`` can receive an export: a new or empty folder, or any folder with ``overwrite``.

    Raises:
        FileExistsError: ``out`` is a file, or a non-empty folder and
            ``overwrite`` is False.
    """
    out = os.fspath(out)
    if os.path.isfile(out) or (os.path.exists(out) and not os.path.isdir(out)):
        raise ExistingFileError(
            where, f"{out} is a file; the export needs a folder (a new one, or an export to "
            "replace with ", Arg("overwrite", True), ")."
        )
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise ExistingFileError(
            where, f"{out} is not empty; choose a new folder, or pass ", Arg("overwrite", True),
            " to replace it whole."
        )
