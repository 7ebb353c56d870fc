"""The `keras-seq` command line: `train`, `tune`, `translate`, `classify`, `generate`,
`export`, `verify`.

Each command parses its arguments, calls a library function and prints:

- ``keras-seq train`` runs `keras_seq.training.train` (with no arguments: the
  default model, a bidirectional GRU encoder and a GRU decoder with Bahdanau
  attention, on the embedded date-normalisation task; ``--task lm``: a
  character language model; ``--task classify``: a text classifier, from
  scratch or fine-tuned from a language model) and writes ``runs/<name>/``
  (see `keras_seq.training`);
- ``keras-seq tune --trials N`` runs `keras_seq.tuning.search`, prints
  KerasTuner's results table and writes the best model as a run folder;
- ``keras-seq translate RUN_DIR "text" ...`` prints one output per input
  (`keras_seq.training.translate_texts`);
- ``keras-seq classify RUN_DIR "text" ...`` prints each text's label and its
  probability (`keras_seq.training.classify_texts`);
- ``keras-seq generate RUN_DIR --prompt TEXT`` prints the prompt and a
  sampled continuation (`keras_seq.training.generate_text`);
- ``keras-seq export RUN_DIR OUT`` writes the deployment artifacts
  (`keras_seq.export.export_run`) and ``keras-seq verify OUT`` checks them
  against Keras without keras-seq (`keras_seq.export.verify`).

Every command but ``verify`` needs Keras on TensorFlow; on another backend the
command stops with a one-line message before running it. ``verify`` imports
neither Keras nor TensorFlow (its child process loads what each artifact
needs), on any backend.

**Failures.** An error the library raises on purpose (a bad option, a missing
or invalid file, a run of the wrong kind: an instance of
`keras_seq._validation.Explained`, or an ``OSError`` naming its file) is one
line on stderr, ``keras-seq <command>: <reason>``, in the command's words
(`keras_seq.cli.words`); anything else keeps Python's traceback. With
``--debug`` (or ``KERAS_SEQ_DEBUG=1``) every failure shows its traceback.

Modules: `parser` (the options, and the table of their flags), `words` (the
library's messages in those flags), `commands` (each command's check and
run), `quiet` (Keras imported without TensorFlow's start-up notes); `main` is
here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from keras_seq._backend import require_tensorflow
from keras_seq._validation import Explained
from keras_seq.cli.commands import COMMANDS, WITHOUT_KERAS, UsageError
from keras_seq.cli.parser import build_parser
from keras_seq.cli.quiet import import_keras_quietly
from keras_seq.cli.words import CommandWords

__all__ = ["main"]

DEBUG_VARIABLE = "KERAS_SEQ_DEBUG"


def _quiet_tensorflow() -> None:
    """TensorFlow's Python and absl loggers to errors only: their start-up and
    conversion notes are not the command's output. (Its C++ log level is set
    by TF_CPP_MIN_LOG_LEVEL in `main`, before TensorFlow is imported.)"""
    import logging

    import_keras_quietly()

    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:  # absl comes with TensorFlow
        pass


def on_purpose(error: BaseException) -> bool:
    """Whether ``error`` is one line, not a failure to show with its traceback:
    an error the library raised on purpose, or the system's (a missing file, a
    full disk, a permission: `OSError`), which no traceback explains."""
    return isinstance(error, (Explained, OSError))


def reason(error, words: CommandWords) -> str:
    """What went wrong, in the command's words, on one line."""
    if isinstance(error, Explained):
        text = error.render(words)
    elif isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.strerror}: {error.filename}"
    else:
        text = str(error)
    return " ".join(text.split())


def failure_line(command: str, error: BaseException, words: CommandWords) -> str:
    """``keras-seq <command>: <reason>``."""
    return f"keras-seq {command}: {reason(error, words)}"


def main(argv: Sequence[str] | None = None,
         finish_import: Callable[[], None] | None = None) -> int:
    """Entry point of the ``keras-seq`` command.

    Exit status: 0 on success; 1 when the command could not do its work (a
    missing or invalid file, an existing export without ``--overwrite``, a
    failed verification), with one line ``keras-seq <command>: <reason>`` on
    stderr; 2 for an error in the arguments, found before anything is loaded,
    with the command's usage.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
        finish_import: what completes the import of ``keras_seq`` once the
            arguments are checked, when the console script deferred it
            (`keras_seq_command`); None: the package is imported already.
    """
    # Set before TensorFlow is imported, which happens only once a command
    # runs (the console script defers the package's import, see
    # keras_seq_command). 3 drops TensorFlow's C++ ERROR lines too: those it
    # writes without failing depend on the machine (oneDNN's note that a CPU
    # without AVX-512 runs int64 ops through Eigen, written once tf.data
    # tokenizes); a real failure reaches the user as an exception.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    parser, subparsers = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        if hasattr(args, "texts") and not any(
            e.startswith("-") and e != "-" for e in extras
        ):
            # argparse gives TEXT... nothing when an option precedes them
            # (`translate RUN_DIR --beam 4 TEXT...`) and leaves them over.
            args.texts += extras
        else:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
    debug = getattr(args, "debug", False) or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    words = CommandWords(args.command, {name: p.flags for name, p in subparsers.items()})
    check, run = COMMANDS[args.command]
    try:
        if check is not None:
            check(args)
    except UsageError as error:
        subparsers[args.command].error(error.say(words))
    except Exception as error:  # a missing file or run folder, found before Keras
        if debug or not on_purpose(error):
            raise
        print(failure_line(args.command, error, words), file=sys.stderr)
        return 1
    if args.command not in WITHOUT_KERAS:
        _quiet_tensorflow()
        if finish_import is not None:
            finish_import()
        try:
            require_tensorflow(f"keras-seq {args.command}",
                               "run it with KERAS_BACKEND=tensorflow")
        except RuntimeError as error:
            print(error, file=sys.stderr)
            return 1
    try:
        return run(args)
    except UsageError as error:  # found once Keras is loaded (a user's --cell)
        subparsers[args.command].error(error.say(words))
    except Exception as error:
        if debug or not on_purpose(error):
            raise
        print(failure_line(args.command, error, words), file=sys.stderr)
        return 1
