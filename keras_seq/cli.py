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
import sys
from collections.abc import Sequence

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


def _parser() -> argparse.ArgumentParser:
    # Imported here, after `main` has set the environment: it loads Keras.
    from keras_seq import training

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
        default=config.attention,
        help="attention of --model rnn (default: %(default)s)",
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
    train.add_argument("--name", help="run name (default: <model>-<cell>-<time>)")
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
        "--length-penalty", type=float, default=0.0, help="GNMT length penalty α for --beam (default: %(default)s)"
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
    return parser


def _add_tune_parser(commands, training, config) -> None:
    import inspect

    from keras_seq import tuning

    space = inspect.signature(tuning.Seq2SeqHyperModel).parameters

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
    tune.add_argument("--tuner", choices=tuning.TUNERS, default="random",
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
                      f"{' '.join(map(str, space['units'].default))})")
    tune.add_argument("--embedding-dims", nargs="+", type=int, metavar="N",
                      help="embedding widths to search (default: "
                      f"{' '.join(map(str, space['embedding_dims'].default))})")
    tune.add_argument("--attention", nargs="+", choices=training.ATTENTIONS,
                      help="attention choices to search (default: both)")
    tune.add_argument(
        "--out", default=config.out, help="parent folder of the run (default: %(default)s)"
    )
    tune.add_argument("--name", help="run name (default: tune-<tuner>-<time>)")
    tune.add_argument("--seed", type=int, default=config.seed, help="default: %(default)s")
    tune.add_argument(
        "--distribute",
        choices=training.DISTRIBUTIONS,
        default=config.distribute,
        help="'mirrored': every trial trains under MirroredStrategy; 'multi_worker' is "
        "refused, KerasTuner does not support it (default: %(default)s)",
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


def _tune(args) -> int:
    from keras_seq import training, tuning

    options = dict(vars(args))
    search = {k: options.pop(k) for k in ("trials", "tuner", "cells", "units",
                                          "embedding_dims", "attention")}
    del options["command"]
    try:
        result = tuning.search(training.TrainingConfig(**options), **search)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as error:
        raise SystemExit(f"keras-seq tune: {error}") from None
    result.tuner.results_summary()
    metrics = result.metrics
    print(
        f"\nBest hyperparameters: {result.best_hyperparameters}\n"
        f"Held-out exact match of the best model: {metrics['test_exact_match']:.4%} "
        f"({metrics['test_correct']}/{metrics['test_examples']}), "
        f"total {metrics['seconds']['total']:.0f} s. Run written to {result.run_dir}"
    )
    return 0


def _check_positive(parser, args, *names):
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")


def _train(args) -> int:
    from keras_seq import training

    options = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        result = training.train(training.TrainingConfig(**options))
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as error:
        raise SystemExit(f"keras-seq train: {error}") from None
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

    try:
        outputs = training.translate_texts(
            args.run_dir, args.texts, beam_width=args.beam, length_penalty=args.length_penalty
        )
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"keras-seq translate: {error}") from None
    for output in outputs:
        print(output)
    return 0


def _generate(args) -> int:
    from keras_seq import training

    try:
        text = training.generate_text(
            args.run_dir, args.prompt, length=args.length, temperature=args.temperature,
            seed=args.seed,
        )
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise SystemExit(f"keras-seq generate: {error}") from None
    print(args.prompt + text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``keras-seq`` command."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Too late for this process: importing this module imported keras_seq, and
    # so Keras, whose backend is then fixed (KERAS_BACKEND, else
    # ~/.keras/keras.json, else TensorFlow). It reaches the processes a
    # command starts; this one is checked below.
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        require_tensorflow("keras-seq", "run it with KERAS_BACKEND=tensorflow")
    except RuntimeError as error:
        raise SystemExit(str(error)) from None
    if args.command == "train":
        _check_positive(
            parser, args, "epochs", "batch_size", "units", "layers", "train_size",
            "validation_size", "test_size", "learning_rate", "backup_every_steps", "context",
            "steps_per_epoch",
        )
        return _train(args)
    if args.command == "generate":
        _check_positive(parser, args, "length")
        if args.temperature < 0:
            parser.error(f"--temperature must be >= 0, got {args.temperature}")
        return _generate(args)
    if args.command == "tune":
        _check_positive(
            parser, args, "trials", "epochs", "batch_size", "train_size", "validation_size",
            "test_size",
        )
        for name in ("units", "embedding_dims"):
            if any(value <= 0 for value in getattr(args, name) or ()):
                parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
        return _tune(args)
    if args.command == "export":
        _check_positive(parser, args, "beam", "examples")
        from keras_seq.export import export_run

        written = export_run(
            args.run_dir,
            args.out,
            formats=tuple(args.formats),
            beam_width=args.beam,
            quantize=tuple(args.quantize),
            examples=args.examples,
        )
        for kind, path in written.items():
            print(f"{kind}: {path}")
        return 0
    if args.command == "verify":
        from keras_seq.export import verification_table, verify

        try:
            result = verify(args.out, json_path=args.json)
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f"keras-seq verify: {error}") from None
        print(verification_table(result))
        for failure in result["failures"]:
            print(f"FAIL {failure}", file=sys.stderr)
        return 0 if result["passed"] else 1
    if args.beam < 0:
        parser.error(f"--beam must be >= 0, got {args.beam}")
    return _translate(args)


if __name__ == "__main__":
    sys.exit(main())
