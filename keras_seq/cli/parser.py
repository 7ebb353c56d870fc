"""The argument parser of ``keras-seq``: every command's options, with the
defaults of `keras_seq.run_config` (no Keras, no TensorFlow)."""

from __future__ import annotations

import argparse

from keras_seq import recipes, run_config
from keras_seq.model_kinds import BUILT_IN_CELLS, LANGUAGE_MODEL_KINDS

__all__ = ["build_parser"]


class _Parser(argparse.ArgumentParser):
    """An argument parser that records the flag of each destination it
    defines (`flags`: ``{"batch_size": "--batch-size", "out": "OUT"}``): the
    command line's table of flags (`keras_seq.cli.words`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flags: dict[str, str] = {}

    def error(self, message):
        """An argument error: the short usage line, then the error (exit 2),
        as git and pip print theirs; the options are in ``--help``."""
        self.exit(2, f"usage: {self.short_usage()}\n{self.prog}: error: {message}\n")

    def short_usage(self) -> str:
        """``keras-seq translate [options] RUN_DIR [TEXT ...]``: the positionals
        alone, and where the options are."""
        words = [self.prog]
        if any(action.option_strings for action in self._actions):
            words.append("[options]")
        for action in self._get_positional_actions():
            if action.choices is not None and action.metavar is None:  # the commands
                name = "{" + ",".join(action.choices) + "}"
            else:
                name = action.metavar or action.dest.upper()
            words.append({"*": f"[{name} ...]", "+": f"{name} [{name} ...]",
                          "?": f"[{name}]"}.get(action.nargs, name))
        return f"{' '.join(words)}  (see {self.prog} --help)"

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.dest != "help":
            self.flags[action.dest] = (action.option_strings[-1] if action.option_strings
                                       else action.metavar or action.dest.upper())
        return action


def _family_default(training, key: str, lm: bool = True) -> str:
    """The default of a per-family option: "2 (rnn), 4 (LSTM cells and transformer);
    --task lm: 5 (transformer), 6 (rnn)"."""

    def listed(families):
        if len(families) == 1:
            return str(next(iter(families)))
        return ", ".join(f"{value} ({' and '.join(names)})" for value, names in families.items())

    families = {}  # default -> the model families that have it
    rnn = training.default_for(key, "rnn")  # the default cell, the GRU
    families.setdefault(rnn, []).append("rnn")
    # The LSTM family (cells with states h and c) where its default differs:
    # told apart without naming a cell, which would load Keras.
    lstm = training.LSTM_FAMILY_DEFAULTS.get(key, rnn)
    if lstm != rnn:
        families.setdefault(lstm, []).append("LSTM cells")
    families.setdefault(training.default_for(key, "transformer"), []).append("transformer")
    lm_families = {}
    for model in LANGUAGE_MODEL_KINDS:
        lm_families.setdefault(training.default_for(key, model, task="lm"), []).append(model)
    classify = {model: training.default_for(key, model, task="classify")
                for model in ("rnn", "transformer")}
    classify = (str(classify["rnn"]) if len(set(classify.values())) == 1 else
                ", ".join(f"{v} ({m})" for m, v in classify.items()))
    fine_tune = training.FINE_TUNE_DEFAULTS.get(key, "the language model's")
    return listed(families) + (f"; --task lm: {listed(lm_families)}" if lm else "") + (
        f"; --task classify: {classify}, with --init-from: {fine_tune}")


def _cell_name(name: str) -> str:
    """A ``--cell`` value: checked against the cell registry by the command
    (`keras_seq.cli.commands`), once ``--import`` has registered a user's cells;
    a built-in name is checked without loading Keras."""
    if not name:
        raise argparse.ArgumentTypeError("expected a cell name, got ''")
    return name


_IMPORT_HELP = ("import MODULE first (repeatable): a module that registers cells of your own "
                "(keras_seq.models.register_cell), whose names --cell then takes; installed "
                "or on PYTHONPATH. The run records it, as for a run trained in Python")


def _lm_default(training, key: str) -> str:
    values = {}  # default -> the models that have it
    for model in LANGUAGE_MODEL_KINDS:
        values.setdefault(training.default_for(key, model, task="lm"), []).append(model)
    if len(values) == 1:
        return str(next(iter(values)))
    return ", ".join(f"{v} ({', '.join(m)})" for v, m in values.items())


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and each command's own (for its usage line)."""
    training = run_config  # the choices and defaults, without Keras
    config = training.TrainingConfig()
    parser = _Parser(
        prog="keras-seq",
        description="Train and use keras-seq sequence-to-sequence and language models.",
    )
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser(
        "train",
        help="train a model (default: the date task) and write runs/<name>/",
        description="Train a seq2seq model (or, with --task lm, a character language model; "
        "with --task classify, a text classifier) and write model.keras, vocab.txt, "
        "TensorBoard logs, history.csv, metrics.json and (seq2seq models with attention) "
        "attention.png, (classifiers) confusion.png to OUT/NAME.",
    )
    train.add_argument(
        "--task",
        choices=training.TASKS,
        help="; ".join(f"{recipe.name}: {recipe.summary}" for recipe in recipes.RECIPES.values())
        + " (default: dates, or translate when --data is given)",
    )
    train.add_argument(
        "--model", choices=training.MODELS,
        help="default: rnn; transformer with --task lm, which also takes the residual "
        f"recurrent blocks {', '.join(training.BLOCK_MODELS)}; the language model's with "
        "--init-from",
    )
    train.add_argument(
        "--cell",
        type=_cell_name, metavar="CELL",
        help=f"recurrent cell of --model rnn: {', '.join(BUILT_IN_CELLS)}, or a cell of "
        "your own with --import (default: gru; lstm with --task lm)",
    )
    train.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                       help=_IMPORT_HELP)
    train.add_argument(
        "--attention",
        choices=training.ATTENTIONS,
        help=f"attention of --model rnn translation models (default: {config.attention})",
    )
    train.add_argument(
        "--zoneout", type=float, metavar="Z",
        help="zoneout rate of the recurrent layers of --model rnn translation models, in "
        "[0, 1) (Krueger et al. 2017) "
        f"(default: {config.zoneout})",
    )
    train.add_argument(
        "--scheduled-sampling", type=float, metavar="P",
        help="--model rnn translation models: in training, feed the decoder with probability "
        "P a token sampled from its own prediction instead of the reference token "
        f"(Bengio et al. 2015) (default: {config.scheduled_sampling}, teacher forcing)",
    )
    train.add_argument(
        "--sampling-schedule", choices=training.SAMPLING_SCHEDULES,
        help="how the probability of --scheduled-sampling grows over the training steps: "
        "P throughout, linearly from 0 to P, or Bengio et al.'s inverse sigmoid "
        f"(P/2 halfway) (default: {config.sampling_schedule})",
    )
    train.add_argument(
        "--data", metavar="FILE",
        help="--task translate: a parallel corpus source<TAB>target (FILE.tsv); --task lm: a "
        "UTF-8 text (FILE.txt; default: tiny Shakespeare, shipped with the package); "
        "--task classify: labelled texts label<TAB>text (FILE.tsv), split 80/10/10 by label; "
        "--task tag: tagged sentences, token<TAB>tag lines and a blank line between sentences, "
        "split 85/5/10",
    )
    train.add_argument(
        "--test-data", metavar="FILE.tsv",
        help="--task classify: the test texts (label<TAB>text); --data is then split 90/10 "
        "into training and validation (default: 10%% of --data); --task tag: the test "
        "sentences (token<TAB>tag), --data then split 95/5",
    )
    train.add_argument(
        "--class-weight", choices=training.CLASS_WEIGHTS, default=config.class_weight,
        help="--task classify: balanced weighs each training text of class c by "
        "n / (classes x n_c) (default: %(default)s)",
    )
    train.add_argument(
        "--init-from", metavar="LM_RUN_DIR",
        help="--task classify: start the classifier's embedding and blocks from this --task "
        "lm run (same tokenizer, kind and sizes) and fine-tune them with a linear head on the "
        "last token's hidden state (GPT)",
    )
    train.add_argument(
        "--lm-weight", type=float, metavar="LAMBDA",
        help="with --init-from: weight of the auxiliary language-model loss, L = L_task + "
        f"LAMBDA * L_LM on the same texts; 0 fine-tunes on the task alone (default: "
        f"{training.AUXILIARY_LM_WEIGHT})",
    )
    train.add_argument(
        "--freeze-body", action="store_true",
        help="with --init-from: train the linear head only (a linear probe of the language "
        f"model; learning rate {training.LINEAR_PROBE_LEARNING_RATE} by default)",
    )
    train.add_argument(
        "--pooling", choices=training.POOLINGS, default=config.pooling,
        help="--task classify on a language model's body (--init-from, or --model "
        f"{'|'.join(training.BLOCK_MODELS)}): the linear head reads the hidden state at the "
        "last real token (last) or their mean over the real tokens (mean) "
        "(default: %(default)s)",
    )
    train.add_argument(
        "--tokenizer", choices=training.TOKENIZERS, default=config.tokenizer,
        help="tokens of --task bilm and --task classify: char (every character of the "
        "text) or wordpiece (learned from the training text, newlines kept); other tasks read "
        "characters (default: %(default)s)",
    )
    train.add_argument(
        "--vocab-size", type=int, metavar="N",
        help="--tokenizer wordpiece: the largest vocabulary to learn, reserved tokens and "
        f"the newline included (default: {training.WORDPIECE_VOCAB_SIZE})",
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
    train.add_argument("--max-source-length", type=int, help=hidden)
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

    for recipe in recipes.RECIPES.values():
        if recipe.command is None:
            continue
        # A command that applies a run to texts: the run, the texts or a file.
        command = commands.add_parser(recipe.command, help=recipe.command_help,
                                      description=recipe.command_description)
        command.add_argument("run_dir", metavar="RUN_DIR")
        command.add_argument("texts", metavar="TEXT", nargs="*",
                             help=f"texts to {recipe.command} (or give --input)")
        command.add_argument(
            "--input", metavar="FILE",
            help="read the texts from FILE, one per line (UTF-8); - reads standard input",
        )

    translate = commands.add_parser(
        "translate",
        help="print a trained model's outputs for the given texts",
        description="Decode each TEXT (or each line of --input FILE) with the model in RUN_DIR "
        "and print one output per line, in order.",
    )
    translate.add_argument("run_dir", metavar="RUN_DIR")
    translate.add_argument("texts", metavar="TEXT", nargs="*",
                           help="inputs to translate (or give --input)")
    translate.add_argument(
        "--input", metavar="FILE",
        help="read the inputs from FILE, one per line (UTF-8); - reads standard input",
    )
    translate.add_argument(
        "--beam", type=int, default=1,
        help="beam width; 1 is greedy decoding, as in export (default: %(default)s)",
    )
    translate.add_argument(
        "--length-penalty", type=float, metavar="ALPHA",
        help="GNMT length penalty α of the beam search; needs --beam N with N > 1 (default: 0)",
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
        "serving/README.md. A language-model run writes OUT/lm_step.tflite, one generation "
        "step for a device's loop, and Keras' greedy continuations of held-out prompts.",
    )
    export.add_argument("run_dir", metavar="RUN_DIR")
    export.add_argument("out", metavar="OUT")
    export.add_argument(
        "--formats",
        nargs="+",
        choices=("savedmodel", "tflite", "onnx"),
        default=None,
        help="default: savedmodel tflite onnx for a translation run, savedmodel tflite for a "
        "classifier; a language-model run has one, tflite: OUT/lm_step.tflite, one "
        "generation step",
    )
    export.add_argument(
        "--quantize",
        nargs="+",
        choices=("dynamic", "float16", "int8", "int16x8"),
        default=[],
        help="also write quantized TFLite files: OUT/tflite_dynamic/ (int8 weights), "
        "OUT/tflite_float16/, and the integer-only OUT/tflite_int8/ and OUT/tflite_int16x8/ "
        "(every op an integer kernel, int8 or int16 activations, batch 1, calibrated on the "
        "run's training data) (a "
        "language model: OUT/lm_step_<mode>.tflite) (default: none)",
    )
    export.add_argument(
        "--calibration-examples",
        type=int,
        default=recipes.recipe.CALIBRATION_EXAMPLES,
        metavar="N",
        help="examples of the run's training split that calibrate each integer file "
        "(a step: the inputs it is fed over them) (default: %(default)s)",
    )
    export.add_argument(
        "--beam", type=int, default=1,
        help="beam width of the SavedModel's decoding; 1 is greedy decoding, as in translate "
        "(default: %(default)s)",
    )
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
        "from Keras, a quantized one agrees on fewer than 99.5%, an int8 one on fewer "
        "than 95% or an int16x8 one on fewer than 99%.",
    )
    verify.add_argument("out", metavar="OUT")
    verify.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    for command in commands.choices.values():
        # Also after the command's name; SUPPRESS keeps a --debug given before it.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=_DEBUG_HELP)
    return parser, commands.choices


_DEBUG_HELP = ("on a failure, print Python's traceback instead of one line (also: the "
               "environment variable KERAS_SEQ_DEBUG=1)")


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
    tune.add_argument("--cells", nargs="+", type=_cell_name, metavar="CELL",
                      help=f"cell types to search, of {', '.join(BUILT_IN_CELLS)} or cells of "
                      "your own with --import (default: all)")
    tune.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                      help=_IMPORT_HELP)
    tune.add_argument("--units", nargs="+", type=int, metavar="N",
                      help="recurrent widths to search (default: "
                      f"{' '.join(map(str, training.SEARCH_UNITS))})")
    tune.add_argument("--embedding-dims", nargs="+", type=int, metavar="N",
                      help="embedding widths to search (default: "
                      f"{' '.join(map(str, training.SEARCH_EMBEDDING_DIMS))})")
    tune.add_argument("--attention", nargs="+", choices=training.TUNE_ATTENTIONS,
                      help="attention choices to search (default: all)")
    tune.add_argument(
        "--out", default=config.out, help="parent folder of the run (default: %(default)s)"
    )
    tune.add_argument("--name", help="run name (default: tune-<tuner>-<time>)")
    tune.add_argument(
        "--fresh", action="store_true",
        help="search again over a finished run of the same name and replace it (without it, "
        "a finished run is refused)",
    )
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
