"""Each ``keras-seq`` command: its argument check (before anything is loaded)
and its run (a library function, then printing)."""

from __future__ import annotations

import os
import sys
import warnings

from keras_seq import recipes
from keras_seq._validation import Explained

__all__ = ["COMMANDS", "UsageError", "WITHOUT_KERAS"]


class UsageError(ValueError):
    """An argument error found after parsing: exit 2 with the command's usage.

    Its argument is a message in the command's words, or the library's error
    (`keras_seq._validation.Explained`) that `say` renders in them.
    """

    def say(self, words) -> str:
        """The message, in ``words`` (`keras_seq.cli.words.CommandWords`)."""
        error = self.args[0]
        if isinstance(error, Explained):
            return error.render(words)
        return str(error)


def _positive(args, *names) -> None:
    for name in names:
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        if any(v is not None and v <= 0 for v in values):
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")


def _config_options(args, *search) -> dict:
    """`TrainingConfig` fields from the parsed arguments (options left unset are
    left out, so the config's own defaults apply)."""
    return {
        k: v for k, v in vars(args).items()
        if k not in ("command", "debug", "imports", *search) and not (
            k in ("attention", "zoneout", "scheduled_sampling", "sampling_schedule")
            and v is None)
    }


def _check_train(args) -> None:
    from keras_seq.run_config import TrainingConfig

    _positive(
        args, "epochs", "batch_size", "units", "layers", "train_size", "validation_size",
        "test_size", "learning_rate", "backup_every_steps", "context", "steps_per_epoch",
        "vocab_size",
    )
    options = _config_options(args)
    try:
        # First without the cell, whose defaults are read from its class
        # (which loads Keras): every other option, and these combinations,
        # are checked in well under a second.
        config = TrainingConfig(**{**options, "cell": None}).resolved()
        _check_cell_names(args, "--cell", [args.cell] if args.cell is not None else [])
        if args.cell is not None and not args.imports:
            # The cell's defaults are read from its class: Keras loads (its
            # start-up notes dropped) unless another option is wrong first.
            # With --import, `_train` checks once the modules are imported.
            from keras_seq.cli.quiet import tensorflow_notes_dropped

            with tensorflow_notes_dropped():
                config = TrainingConfig(**options).resolved()
    except (ValueError, TypeError) as error:
        raise UsageError(error) from None
    _check_files(config)


def _check_cell_names(args, flag: str, names) -> None:
    """Before Keras: every name in ``names`` is a cell of the registry, unless
    ``--import`` names modules (found, not yet imported) that may register one.
    Until the registry is imported (which imports Keras) it holds the built-in
    names alone; a process that registered a cell of its own has imported it."""
    import importlib.util

    from keras_seq.model_kinds import BUILT_IN_CELLS

    registry = sys.modules.get("keras_seq.layers.recurrent.registry")
    known = BUILT_IN_CELLS if registry is None else registry.cell_names()

    for module in args.imports or ():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(f"argument --import: no module named {module!r}; install it or "
                             "add its folder to PYTHONPATH")
    unknown = [name for name in names if name not in known]
    if unknown and not args.imports:
        raise UsageError(
            f"argument {flag}: invalid choice: {unknown[0]!r} (choose from "
            f"{', '.join(known)}; a cell of your own: --import MODULE, the module "
            "that registers it with keras_seq.models.register_cell)")


def _import_cells(args, flag: str, names) -> None:
    """Once Keras is loaded: ``--import``'s modules imported, and every name in
    ``names`` then a registered cell (exit 2 otherwise)."""
    import importlib

    from keras_seq.layers.recurrent.registry import cell_names

    for module in args.imports or ():
        try:
            importlib.import_module(module)
        except Exception as error:  # whatever the module raises: one line
            reason = f"{type(error).__name__}: {error}".replace("\n", " ")
            raise UsageError(f"argument --import: cannot import {module} ({reason})") from None
    registered = cell_names()
    for name in names:
        if name not in registered:
            modules = " ".join(args.imports)
            raise UsageError(
                f"argument {flag}: invalid choice: {name!r}: --import {modules} registered no "
                f"such cell (choose from {', '.join(registered)})")


def _resolved_config(args, *search):
    """The run's `TrainingConfig`, checked with its cell (exit 2 on a bad combination)."""
    from keras_seq.run_config import TrainingConfig

    config = TrainingConfig(**_config_options(args, *search))
    try:
        config.resolved()
    except (ValueError, TypeError) as error:
        raise UsageError(error) from None
    return config


def _check_files(config) -> None:
    """The data files a run names, read and checked as `train` reads them
    (its recipe's `keras_seq.recipes.Recipe.read`), and the language-model run
    it names: exit 1, before Keras is loaded."""
    from keras_seq import recipes
    from keras_seq.folders import data_file, run_metrics_path

    recipe = recipes.get(config.task)
    if config.data is not None:
        recipe.read(config)
    elif config.test_data is not None:
        data_file(recipe.data, config.test_data, "test_data")
    if config.init_from is not None:
        run_metrics_path(config.init_from, "train")


def _check_tune(args) -> None:
    from keras_seq.run_config import TrainingConfig

    _positive(args, "trials", "epochs", "batch_size", "train_size", "validation_size",
              "test_size", "units", "embedding_dims")
    try:
        TrainingConfig(**_config_options(args, *_SEARCH_OPTIONS)).resolved()
    except (ValueError, TypeError) as error:
        raise UsageError(error) from None
    _check_cell_names(args, "--cells", args.cells or [])


def _check_inputs(args, verb: str) -> None:
    if bool(args.texts) == (args.input is not None):
        raise UsageError("give the inputs either as TEXT arguments or as --input FILE (- for "
                         "standard input), not both" if args.texts else
                         f"nothing to {verb}: give TEXT arguments or --input FILE (- for "
                         "standard input)")
    if args.input not in (None, "-") and not os.path.isfile(args.input):
        from keras_seq._validation import Arg, MissingFileError

        raise MissingFileError(
            verb, f"the input file {args.input} does not exist"
            + (" (it is a folder)" if os.path.isdir(args.input) else "") + "; ",
            Arg("input"), " takes a file of one text per line, or - for standard input")


def _check_translate(args) -> None:
    if args.beam < 0:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if args.beam == 0:
        from keras_seq.run_config import GREEDY_ZERO_DEPRECATED

        print(f"keras-seq translate: warning: --beam 0: {GREEDY_ZERO_DEPRECATED}; use --beam 1",
              file=sys.stderr)
        args.beam = 1
    if args.length_penalty is not None:
        if args.length_penalty < 0:
            raise UsageError(f"--length-penalty must be >= 0, got {args.length_penalty}")
        if args.beam == 1:
            raise UsageError(
                "--length-penalty applies to beam search only; add --beam N (N > 1)"
            )
    _check_inputs(args, "translate")
    _check_run_folder(args, "translate_texts")


def _check_run_folder(args, where: str) -> None:
    """RUN_DIR is a run folder (exit 1, before Keras is loaded); ``where``:
    the library function that reads it, which names it the same way."""
    from keras_seq.folders import run_metrics_path

    run_metrics_path(args.run_dir, where)


def _read_inputs(path: str) -> list[str]:
    """One input per line of ``path`` (``-``: standard input), line ends dropped."""
    if path == "-":
        return sys.stdin.read().splitlines()
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _check_generate(args) -> None:
    if not args.prompt:
        raise UsageError("--prompt must hold at least one character (generation continues "
                         "it), got ''")
    _positive(args, "length")
    if args.temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {args.temperature}")
    _check_run_folder(args, "generate_text")


def _check_export(args) -> None:
    """The counts, then OUT and RUN_DIR in `export_run`'s order (exit 1,
    before Keras is loaded)."""
    from keras_seq.folders import check_export_destination, run_metrics_path

    _positive(args, "beam", "examples", "calibration_examples")
    check_export_destination(args.out, args.overwrite, "export_run")
    run_metrics_path(args.run_dir, "export_run")


def _check_verify(args) -> None:
    """OUT holds an export (exit 1, before Keras is loaded)."""
    from keras_seq.folders import export_manifest_path

    export_manifest_path(args.out, "verify")


_SEARCH_OPTIONS = ("trials", "tuner", "cells", "units", "embedding_dims", "attention")


def _tune(args) -> int:
    from keras_seq import tuning

    _import_cells(args, "--cells", args.cells or [])
    search = {k: getattr(args, k) for k in _SEARCH_OPTIONS}
    result = tuning.search(_resolved_config(args, *_SEARCH_OPTIONS), **search)
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
    from keras_seq.recipes import RunResultWarning
    from keras_seq.training.pipeline import result_summary

    _import_cells(args, "--cell", [args.cell] if args.cell is not None else [])
    config = _resolved_config(args)
    with warnings.catch_warnings():
        # A result the run's options explain: one line, in the command's words.
        warnings.showwarning = _warning_line("train", RunResultWarning, warnings.showwarning)
        result = training.train(config)
    if not config.verbose:  # (with it, `train` has printed the line)
        print(result_summary(result.metrics, result.run_dir))
    return 0


def _translate(args) -> int:
    from keras_seq import training

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", training.InputWarning)
        texts = args.texts if args.input is None else _read_inputs(args.input)
        outputs = training.translate_texts(
            args.run_dir, texts, beam_width=args.beam,
            length_penalty=args.length_penalty or 0.0,
        )
    _print_warnings("translate", caught, training.InputWarning)
    for output in outputs:
        print(output)
    return 0


def _texts_command(recipe):
    """The check and the run of ``recipe``'s command (`keras_seq.recipes.Recipe.command`):
    RUN_DIR applied to TEXT... or the lines of --input, its lines printed."""

    def check(args) -> None:
        _check_inputs(args, recipe.command)
        _check_run_folder(args, recipe.uses)

    def run(args) -> int:
        from keras_seq import training

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", training.InputWarning)
            texts = args.texts if args.input is None else _read_inputs(args.input)
            lines = recipe.use(args.run_dir, texts)
        _print_warnings(recipe.command, caught, training.InputWarning)
        for line in lines:
            print(line)
        return 0

    return check, run


def _print_warnings(command: str, caught, category) -> None:
    """The caught warnings of ``category`` as ``keras-seq <command>: warning: ...``
    lines (each message once), the others as Python shows them."""
    printed = set()
    for warning in caught:
        if not issubclass(warning.category, category):
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
        elif str(warning.message) not in printed:
            printed.add(str(warning.message))
            print(f"keras-seq {command}: warning: {warning.message}", file=sys.stderr)


def _warning_line(command: str, category, shown):
    """A ``warnings.showwarning`` that prints ``category`` as ``keras-seq
    <command>: warning: ...`` at once, and the others as ``shown`` does."""

    def show(message, warned, filename, lineno, file=None, line=None):
        if issubclass(warned, category):
            print(f"keras-seq {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, warned, filename, lineno, file, line)

    return show


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
    from keras_seq.run_folder import read_run

    formats = args.formats
    if formats is None:
        try:
            run = read_run(args.run_dir, "export_run")
            formats = recipes.recipe_of_run(run.config).default_formats(run)
        except (OSError, ValueError):
            pass  # export_run says what is wrong, in its order
    with warnings.catch_warnings(record=True) as caught:
        # The converters' notes (a layer that keeps its loop, a node that a
        # runtime computes otherwise) are for the user, one line each.
        warnings.simplefilter("always", UserWarning)
        written = export_run(
            args.run_dir, args.out, formats=formats, beam_width=args.beam,
            quantize=tuple(args.quantize), examples=args.examples, overwrite=args.overwrite,
            verbose=True, calibration_examples=args.calibration_examples,
        )
    _print_warnings("export", caught, UserWarning)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


def _verify(args) -> int:
    from keras_seq.verification import verification_table, verify

    result = verify(args.out, json_path=args.json)
    print(verification_table(result))
    for failure in result["failures"]:
        print(f"FAIL {failure}", file=sys.stderr)
    return 0 if result["passed"] else 1


# command -> (argument check without TensorFlow, the command)
COMMANDS = {
    "train": (_check_train, _train),
    "tune": (_check_tune, _tune),
    "translate": (_check_translate, _translate),
    "generate": (_check_generate, _generate),
    "export": (_check_export, _export),
    "verify": (_check_verify, _verify),
}
for _recipe in recipes.RECIPES.values():
    if _recipe.command is not None:
        COMMANDS[_recipe.command] = _texts_command(_recipe)

# The commands that run without Keras, and so without TensorFlow's import, on
# any backend: `verify` reads the export's files and runs each artifact in a
# child process that cannot import keras_seq.
WITHOUT_KERAS = frozenset({"verify"})
