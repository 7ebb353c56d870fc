"""The `keras-seq` command line: `train`, `tune`, `translate`, `generate`, `export`, `verify`.

Each command parses its arguments, calls a library function and prints:

- ``keras-seq train`` runs `keras_seq.training.train` (with no arguments: the
  default model, a bidirectional GRU encoder and a GRU decoder with Bahdanau
  attention, on the embedded date-normalisation task; ``--task lm``: a
  character language model) and writes ``runs/<name>/`` (see
  `keras_seq.training`);
- ``keras-seq tune --trials N`` runs `keras_seq.tuning.search`, prints
  KerasTuner's results table and writes the best model as a run folder;
- ``keras-seq translate RUN_DIR "text" ...`` prints one output per input
  (`keras_seq.training.translate_texts`);
- ``keras-seq generate RUN_DIR --prompt TEXT`` prints the prompt and a
  sampled continuation (`keras_seq.training.generate_text`);
- ``keras-seq export RUN_DIR OUT`` writes the deployment artifacts
  (`keras_seq.export.export_run`) and ``keras-seq verify OUT`` checks them
  against Keras without keras-seq (`keras_seq.export.verify`).

Every command needs Keras on TensorFlow; on another backend the command stops
with a one-line message before running it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Sequence

from keras_seq import run_config
from keras_seq._backend import require_tensorflow


def _family_default(training, key: str, lm: bool = True) -> str:
    """The default of a per-family option: "2 (gru, simple), 4 (LSTM cells and transformer);
    --task lm: 5 (transformer), 6 (rnn)"."""

    def listed(families):
        if len(families) == 1:
            return str(next(iter(families)))
        return ", ".join(f"{value} ({' and '.join(names)})" for value, names in families.items())

    families = {}  # default -> the model families that have it
    for family, model, cell in (
        ("gru, simple", "rnn", "gru"), ("LSTM cells", "rnn", "lstm"),
        ("transformer", "transformer", None),
    ):
        families.setdefault(training.default_for(key, model, cell), []).append(family)
    lm_families = {}
    for model in ("transformer", "rnn"):
        lm_families.setdefault(training.default_for(key, model, task="lm"), []).append(model)
    return listed(families) + (f"; --task lm: {listed(lm_families)}" if lm else "")


def _lm_default(training, key: str) -> str:
    values = {model: training.default_for(key, model, task="lm") for model in ("transformer", "rnn")}
    if len(set(values.values())) == 1:
        return str(values["transformer"])
    return ", ".join(f"{v} ({m})" for m, v in values.items())


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and each command's own (for its usage line)."""
    training = run_config  # the choices and defaults, without Keras
    config = training.TrainingConfig()
    parser = argparse.ArgumentParser(
        prog="keras-seq",
        description="Train and use keras-seq sequence-to-sequence and language models.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train",
        help="train a model (default: the date task) and write runs/<name>/",
        description="Train a seq2seq model (or, with --task lm, a character language model) "
        "and write model.keras, vocab.txt, TensorBoard logs, history.csv, metrics.json and "
        "(seq2seq models with attention) attention.png to OUT/NAME.",
    )
    train.add_argument(
        "--task",
        choices=training.TASKS,
        help="dates: the embedded date task; translate: a parallel corpus (--data FILE.tsv); "
        "lm: a character language model of --data FILE.txt, by default tiny Shakespeare "
        "(default: dates, or translate when --data is given)",
    )
    train.add_argument(
        "--model", choices=training.MODELS,
        help="default: rnn; transformer with --task lm",
    )
    train.add_argument(
        "--cell",
        choices=training.CELLS,
        help="recurrent cell of --model rnn (default: gru; lstm with --task lm)",
    )
    train.add_argument(
        "--attention",
        choices=training.ATTENTIONS,
        help=f"attention of --model rnn translation models (default: {config.attention})",
    )
    train.add_argument(
        "--data", metavar="FILE",
        help="--task translate: a parallel corpus source<TAB>target (FILE.tsv); --task lm: a "
        "UTF-8 text (FILE.txt; default: tiny Shakespeare, downloaded once)",
    )
    train.add_argument(
        "--epochs", type=int, help=f"default: {_family_default(training, 'epochs')}"
    )
    train.add_argument(
        "--batch-size", type=int, help=f"default: {_family_default(training, 'batch_size')}"
    )
    train.add_argument(
        "--context", type=int, metavar="N",
        help=f"--task lm: characters per training window (default: {_lm_default(training, 'context')})",
    )
    train.add_argument(
        "--steps-per-epoch", type=int, metavar="N",
        help="--task lm: batches per epoch, each followed by a validation and a backup "
        f"(default: {_lm_default(training, 'steps_per_epoch')})",
    )
    train.add_argument(
        "--out", default=config.out, help="parent folder of the run (default: %(default)s)"
    )
    train.add_argument(
        "--name",
        help="run name (default: rnn-<cell>-<time>, transformer-<layers>x<units>-<time>; "
        "with --task lm, the same prefixed lm-)",
    )
    train.add_argument("--seed", type=int, default=config.seed, help="default: %(default)s")
    # Advanced knobs, mostly for quick experiments and tests.
    hidden = argparse.SUPPRESS
    train.add_argument("--train-size", type=int, default=config.train_size, help=hidden)
    train.add_argument("--validation-size", type=int, help=hidden)
    train.add_argument("--test-size", type=int, default=config.test_size, help=hidden)
    train.add_argument(
        "--units", type=int,
        help="width: recurrent units or Transformer model_dim; default: "
        f"{_family_default(training, 'units')}",
    )
    train.add_argument(
        "--layers", type=int,
        help="Transformer blocks (per side), or recurrent layers of --task lm; default: "
        f"{_family_default(training, 'layers')}",
    )
    train.add_argument("--learning-rate", type=float, help=hidden)
    train.add_argument(
        "--max-source-length", type=int, default=config.max_source_length, help=hidden
    )
    train.add_argument(
        "--max-target-length", type=int, default=config.max_target_length, help=hidden
    )
    train.add_argument(
        "--distribute",
        choices=training.DISTRIBUTIONS,
        default=config.distribute,
        help="tf.distribute strategy: 'auto' picks multi_worker when TF_CONFIG describes a "
        "cluster, mirrored with several local GPUs, else none; 'mirrored' uses every local GPU "
        "(or CPU device); 'multi_worker' one process per worker, the cluster given by "
        "TF_CONFIG (default: %(default)s)",
    )
    train.add_argument(
        "--precision",
        choices=training.PRECISIONS,
        default=config.precision,
        help="Keras dtype policy of the run; logits and loss stay float32 (default: %(default)s)",
    )
    train.add_argument(
        "--backup-every-steps",
        type=int,
        metavar="N",
        help="also back up the training state every N steps (default: at the end of each epoch)",
    )
    train.add_argument(
        "--fresh",
        action="store_true",
        help="delete the run's backup and start over (also over a finished run); without it "
        "a run started again with the same command resumes from its backup",
    )
    train.add_argument("--verbose", type=int, default=config.verbose, help=hidden)

    _add_tune_parser(commands, training, config)

    translate = commands.add_parser(
        "translate",
        help="print a trained model's outputs for the given texts",
        description="Decode each TEXT with the model in RUN_DIR and print one output per line.",
    )
    translate.add_argument("run_dir", metavar="RUN_DIR")
    translate.add_argument("texts", metavar="TEXT", nargs="+")
    translate.add_argument("--beam", type=int, default=0, help="beam width; 0: greedy (default: %(default)s)")
    translate.add_argument(
        "--length-penalty", type=float, metavar="ALPHA",
        help="GNMT length penalty α of the beam search; needs --beam (default: 0)",
    )

    generate = commands.add_parser(
        "generate",
        help="sample text from a trained language model (train --task lm)",
        description="Print TEXT followed by N characters sampled from the language model in "
        "RUN_DIR (one in-graph loop, cached for the Transformer).",
    )
    generate.add_argument("run_dir", metavar="RUN_DIR")
    generate.add_argument("--prompt", metavar="TEXT", required=True,
                          help="the text to continue (characters of the run's vocabulary)")
    generate.add_argument("--length", type=int, default=500, metavar="N",
                          help="characters to sample (default: %(default)s)")
    generate.add_argument("--temperature", type=float, default=1.0, metavar="T",
                          help="sample from softmax(logits / T); 0 is greedy, the most "
                          "probable character each time (default: %(default)s)")
    generate.add_argument("--seed", type=int,
                          help="the same seed gives the same text (default: a fresh sample)")

    export = commands.add_parser(
        "export",
        help="export a trained run for TF Serving (SavedModel), TFLite and ONNX",
        description="Write OUT/translator/1 (strings in, strings out), OUT/tflite/, "
        "OUT/onnx/ and quantized TFLite folders for the model in RUN_DIR, with Keras' "
        "outputs on held-out examples (OUT/reference.npz) for `keras-seq verify`; see "
        "export/README.md.",
    )
    export.add_argument("run_dir", metavar="RUN_DIR")
    export.add_argument("out", metavar="OUT")
    export.add_argument(
        "--formats",
        nargs="+",
        choices=("savedmodel", "tflite", "onnx"),
        default=["savedmodel", "tflite", "onnx"],
        help="default: %(default)s",
    )
    export.add_argument(
        "--quantize",
        nargs="+",
        choices=("dynamic", "float16"),
        default=[],
        help="also write quantized TFLite encoder and decoder step: OUT/tflite_dynamic/ "
        "(int8 weights), OUT/tflite_float16/ (default: none)",
    )
    export.add_argument("--beam", type=int, default=1, help="beam width of the SavedModel (default: %(default)s)")
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUT whole; the new export is written beside it and swapped "
        "in only when complete (without it, an OUT that exists and is not empty is refused)",
    )
    export.add_argument(
        "--examples",
        type=int,
        default=200,
        help="held-out examples (of the run's test split) in the reference outputs "
        "(default: %(default)s)",
    )

    verify = commands.add_parser(
        "verify",
        help="check every artifact of an export against Keras, without keras-seq",
        description="Run each artifact in OUT (written by `keras-seq export`) in a fresh "
        "process that cannot import keras_seq, and compare its outputs on the held-out "
        "examples with Keras'. Exits 1 if a float artifact decodes any example differently "
        "from Keras or a quantized one agrees on fewer than 99.5%.",
    )
    verify.add_argument("out", metavar="OUT")
    verify.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    return parser, commands.choices


def _add_tune_parser(commands, training, config) -> None:
    tune = commands.add_parser(
        "tune",
        help="search cell types and sizes with KerasTuner; save the best model as a run",
        description="Search keras_seq.tuning.Seq2SeqHyperModel (cell, units, embedding width, "
        "attention, dropout, learning rate) with KerasTuner on the data of `keras-seq train`, "
        "print the results table and write the best model to OUT/NAME as a run folder that "
        "`translate`, `export` and `verify` accept.",
    )
    tune.add_argument("--trials", type=int, default=10, help="most trials (models) to train "
                      "(default: %(default)s)")
    tune.add_argument("--tuner", choices=training.TUNERS, default="random",
                      help="KerasTuner's RandomSearch, Hyperband (max_epochs=--epochs) or "
                      "BayesianOptimization (default: %(default)s)")
    tune.add_argument(
        "--data", metavar="FILE.tsv", help="parallel corpus source<TAB>target (default: dates)"
    )
    # The search resolves the sizes of TrainingConfig's default cell (GRU).
    tune.add_argument("--epochs", type=int,
                      help=f"epochs per trial (default: {training.default_for('epochs')})")
    tune.add_argument(
        "--batch-size", type=int, help=f"default: {training.default_for('batch_size')}"
    )
    tune.add_argument("--cells", nargs="+", choices=training.CELLS,
                      help="cell types to search (default: all)")
    tune.add_argument("--units", nargs="+", type=int, metavar="N",
                      help="recurrent widths to search (default: "
                      f"{' '.join(map(str, training.SEARCH_UNITS))})")
    tune.add_argument("--embedding-dims", nargs="+", type=int, metavar="N",
                      help="embedding widths to search (default: "
                      f"{' '.join(map(str, training.SEARCH_EMBEDDING_DIMS))})")
    tune.add_argument("--attention", nargs="+", choices=training.ATTENTIONS,
                      help="attention choices to search (default: both)")
    tune.add_argument(
        "--out", default=config.out, help="parent folder of the run (default: %(default)s)"
    )
    tune.add_argument("--name", help="run name (default: tune-<tuner>-<time>)")
    tune.add_argument("--seed", type=int, default=config.seed, help="default: %(default)s")
    tune.add_argument(
        "--distribute",
        choices=tuple(d for d in training.DISTRIBUTIONS if d != "multi_worker"),
        default=config.distribute,
        help="'auto' as for train; 'mirrored': every trial trains under MirroredStrategy. "
        "There is no multi_worker: KerasTuner does not support it (keras-tuner#910), and "
        "'auto' stops on a TF_CONFIG cluster (default: %(default)s)",
    )
    hidden = argparse.SUPPRESS
    tune.add_argument("--train-size", type=int, default=config.train_size, help=hidden)
    tune.add_argument("--validation-size", type=int, default=config.validation_size, help=hidden)
    tune.add_argument("--test-size", type=int, default=config.test_size, help=hidden)
    tune.add_argument(
        "--max-source-length", type=int, default=config.max_source_length, help=hidden
    )
    tune.add_argument(
        "--max-target-length", type=int, default=config.max_target_length, help=hidden
    )
    tune.add_argument("--verbose", type=int, default=config.verbose, help=hidden)


class _UsageError(ValueError):
    """An argument error found after parsing: exit 2 with the command's usage."""


def _positive(args, *names) -> None:
    for name in names:
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        if any(v is not None and v <= 0 for v in values):
            raise _UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")


def _config_options(args, *search) -> dict:
    """`TrainingConfig` fields from the parsed arguments (options left unset are
    left out, so the config's own defaults apply)."""
    return {
        k: v for k, v in vars(args).items()
        if k not in ("command", *search) and not (k == "attention" and v is None)
    }


def _check_train(args) -> None:
    from keras_seq.run_config import TrainingConfig

    _positive(
        args, "epochs", "batch_size", "units", "layers", "train_size", "validation_size",
        "test_size", "learning_rate", "backup_every_steps", "context", "steps_per_epoch",
    )
    try:
        config = TrainingConfig(**_config_options(args)).resolved()
    except (ValueError, TypeError) as error:
        raise _UsageError(str(error)) from None
    if config.model == "transformer" or config.task == "lm":
        if args.cell is not None and config.model == "transformer":
            raise _UsageError(
                "--cell chooses the recurrent cell of --model rnn; a transformer has none "
                "(leave --cell out, or add --model rnn)"
            )
        if args.attention is not None:
            what = "language models" if config.task == "lm" else "--model transformer"
            raise _UsageError(
                f"--attention chooses the attention of --model rnn translation models; "
                f"{what} have their own (leave --attention out)"
            )


def _check_tune(args) -> None:
    from keras_seq.run_config import TrainingConfig

    _positive(args, "trials", "epochs", "batch_size", "train_size", "validation_size",
              "test_size", "units", "embedding_dims")
    try:
        TrainingConfig(**_config_options(args, *_SEARCH_OPTIONS)).resolved()
    except (ValueError, TypeError) as error:
        raise _UsageError(str(error)) from None


def _check_translate(args) -> None:
    if args.beam < 0:
        raise _UsageError(f"--beam must be >= 0, got {args.beam}")
    if args.length_penalty is not None:
        if args.length_penalty < 0:
            raise _UsageError(f"--length-penalty must be >= 0, got {args.length_penalty}")
        if args.beam == 0:
            raise _UsageError(
                "--length-penalty applies to beam search only; add --beam N (N >= 1)"
            )


def _check_generate(args) -> None:
    _positive(args, "length")
    if args.temperature < 0:
        raise _UsageError(f"--temperature must be >= 0, got {args.temperature}")


def _check_export(args) -> None:
    _positive(args, "beam", "examples")


_SEARCH_OPTIONS = ("trials", "tuner", "cells", "units", "embedding_dims", "attention")


def _tune(args) -> int:
    from keras_seq import training, tuning

    search = {k: getattr(args, k) for k in _SEARCH_OPTIONS}
    result = tuning.search(
        training.TrainingConfig(**_config_options(args, *_SEARCH_OPTIONS)), **search
    )
    result.tuner.results_summary()
    metrics = result.metrics
    print(
        f"\nBest hyperparameters: {result.best_hyperparameters}\n"
        f"Held-out exact match of the best model: {metrics['test_exact_match']:.4%} "
        f"({metrics['test_correct']}/{metrics['test_examples']}), "
        f"total {metrics['seconds']['total']:.0f} s. Run written to {result.run_dir}"
    )
    return 0


def _train(args) -> int:
    from keras_seq import training

    result = training.train(training.TrainingConfig(**_config_options(args)))
    metrics = result.metrics
    if metrics.get("task") == "lm":
        print(
            f"Held-out loss: {metrics['val_loss']:.4f} nats/character (perplexity "
            f"{metrics['val_perplexity']:.3f}) over {metrics['val_characters']} characters, "
            f"total {metrics['seconds']['total']:.0f} s. Run written to {result.run_dir}"
        )
        return 0
    print(
        f"Held-out exact match: {metrics['test_exact_match']:.4%} "
        f"({metrics['test_correct']}/{metrics['test_examples']}), "
        f"total {metrics['seconds']['total']:.0f} s. Run written to {result.run_dir}"
    )
    return 0


def _translate(args) -> int:
    from keras_seq import training

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", training.InputWarning)
        outputs = training.translate_texts(
            args.run_dir, args.texts, beam_width=args.beam,
            length_penalty=args.length_penalty or 0.0,
        )
    for warning in caught:
        if issubclass(warning.category, training.InputWarning):
            print(f"keras-seq translate: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    for output in outputs:
        print(output)
    return 0


def _generate(args) -> int:
    from keras_seq import training

    text = training.generate_text(
        args.run_dir, args.prompt, length=args.length, temperature=args.temperature,
        seed=args.seed,
    )
    print(args.prompt + text)
    return 0


def _export(args) -> int:
    from keras_seq.export import export_run

    written = export_run(
        args.run_dir, args.out, formats=tuple(args.formats), beam_width=args.beam,
        quantize=tuple(args.quantize), examples=args.examples, overwrite=args.overwrite,
    )
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


def _verify(args) -> int:
    from keras_seq.export import verification_table, verify

    result = verify(args.out, json_path=args.json)
    print(verification_table(result))
    for failure in result["failures"]:
        print(f"FAIL {failure}", file=sys.stderr)
    return 0 if result["passed"] else 1


# command -> (argument check without TensorFlow, the command)
_COMMANDS = {
    "train": (_check_train, _train),
    "tune": (_check_tune, _tune),
    "translate": (_check_translate, _translate),
    "generate": (_check_generate, _generate),
    "export": (_check_export, _export),
    "verify": (None, _verify),
}


# TensorFlow's C++ start-up notes: absl-format INFO/WARNING lines
# ("I0000 00:00:1795580816.342428  18897 cudart_stub.cc:31] ..."), absl's
# banner before them, the second line of cpu_feature_guard's note, and the
# CUDA probe's error on a machine without a GPU. Some are written before
# TF_CPP_MIN_LOG_LEVEL is read, the last whatever it says.
_TENSORFLOW_NOTE = re.compile(
    r"^([IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\] |E\d{4} [\d:.]+\s+\d+ cuda\w*\.cc:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: )"
)


def _import_keras_quietly() -> None:
    """Imports Keras (and so its backend, TensorFlow) with the backend's C++
    start-up notes dropped from stderr; anything else it writes there is kept."""
    if "keras" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import keras

            if keras.backend.backend() == "tensorflow":
                import tensorflow as tf

                tf.config.list_logical_devices()  # the CUDA probe
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _TENSORFLOW_NOTE.match(line):
                    sys.stderr.write(line)


def _quiet_tensorflow() -> None:
    """TensorFlow's Python and absl loggers to errors only: their start-up and
    conversion notes are not the command's output. (Its C++ log level is set
    by TF_CPP_MIN_LOG_LEVEL in `main`, before TensorFlow is imported.)"""
    import logging

    _import_keras_quietly()

    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:  # absl comes with TensorFlow
        pass


def _failure_message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    return str(error).strip().replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``keras-seq`` command.

    Exit status: 0 on success; 1 when the command could not do its work (a
    missing or invalid file, an existing export without ``--overwrite``, a
    failed verification), with one line ``keras-seq <command>: <reason>`` on
    stderr; 2 for an error in the arguments, found before anything is loaded,
    with the command's usage.
    """
    # Set before TensorFlow is imported, which happens only once a command
    # runs (the package defers Keras in this process, see keras_seq/__init__).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    parser, subparsers = _parser()
    args = parser.parse_args(argv)
    check, run = _COMMANDS[args.command]
    try:
        if check is not None:
            check(args)
    except _UsageError as error:
        subparsers[args.command].error(str(error))
    _quiet_tensorflow()
    try:
        require_tensorflow(f"keras-seq {args.command}", "run it with KERAS_BACKEND=tensorflow")
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    try:
        return run(args)
    except (ValueError, TypeError, OSError, RuntimeError, ImportError) as error:
        print(f"keras-seq {args.command}: {_failure_message(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
