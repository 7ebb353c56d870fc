"""User classes in runs: a run records the modules of its model's user classes,
and every command that loads the run imports them first (docs/contract.md,
*User classes in runs*).

The end-to-end tests train one tiny classifier with a user's cell, in a
process of its own, and use it from fresh ``keras-seq`` processes: the
module must never be imported by the test process, whose cell registry the
other tests read.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
from keras import ops

import keras_seq
from keras_seq.cli import main
from keras_seq.layers import RNN, RecurrentCell
from keras_seq.run_folder import (
    UserModuleError,
    read_run,
    user_modules,
    warn_about_script_classes,
)
from keras_seq.training import with_language_model

# A user's module: the JANET cell (van der Westhuizen & Lasenby 2018, "The
# unreasonable effectiveness of the forget gate"), keras.ops only, registered
# under a cell name. Its file lies in a folder of its own, outside every
# process's working directory, so that only PYTHONPATH can make it importable.
JANET_MODULE = textwrap.dedent('''
    """JANET: an LSTM with the forget gate alone."""
    import keras
    from keras import ops

    from keras_seq.layers import RecurrentCell
    from keras_seq.models import register_cell


    @keras.saving.register_keras_serializable(package="my_cells")
    class JANETCell(RecurrentCell):
        """s = W_f x + U_f h + b_f; c~ = tanh(W_c x + U_c h + b_c);
        c = sigmoid(s) * c + (1 - sigmoid(s - beta)) * c~; h = c."""

        def __init__(self, units, beta=1.0, **kwargs):
            super().__init__(**kwargs)
            self.units, self.beta = units, beta
            self.state_size = units

        def build(self, input_shape):
            u = self.units
            self.kernel = self.add_weight(shape=(input_shape[-1], 2 * u), name="kernel")
            self.recurrent_kernel = self.add_weight(
                shape=(u, 2 * u), name="recurrent_kernel", initializer="orthogonal")
            self.bias = self.add_weight(shape=(2 * u,), name="bias", initializer="zeros")

        def project(self, sequence):
            return ops.matmul(sequence, self.kernel) + self.bias  # (B, T, 2u)

        def step(self, inputs, states, training=False):
            h = states[0]
            s, c_tilde = ops.split(inputs + ops.matmul(h, self.recurrent_kernel), 2, axis=-1)
            c = ops.sigmoid(s) * h + (1.0 - ops.sigmoid(s - self.beta)) * ops.tanh(c_tilde)
            return c, [c]

        def get_config(self):
            return {**super().get_config(), "units": self.units, "beta": self.beta}


    register_cell("janet", JANETCell)
''')

TEXTS = ["aaxa", "b by bb", "xyx", ""]

_TRAIN = textwrap.dedent('''
    import json, sys
    import numpy as np
    import janet_cell  # noqa: F401  (registers the cell)
    from keras_seq import training
    from keras_seq.data import classification_ids

    data, out, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    result = training.train(training.TrainingConfig(
        task="classify", cell="janet", data=data, units=8, batch_size=16, epochs=1,
        verbose=0, out=out, name="janet"))
    ids = classification_ids(result.tokenizer, texts, result.metrics["config"]["source_length"])
    logits = np.asarray(result.model(ids), np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    labels = result.metrics["labels"]
    print(json.dumps([[labels[i], float(row[i])] for row, i in zip(p, p.argmax(-1))]))
''')


def _environment(*folders):
    """This process's environment with PYTHONPATH = ``folders`` and this keras_seq."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(keras_seq.__file__)))
    # Without this suite's TF_CPP_MIN_LOG_LEVEL: the command's own, as a user has it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL")}
    env.update(PYTHONPATH=os.pathsep.join([*map(str, folders), package_root]),
               KERAS_BACKEND="tensorflow")
    return env


def _keras_seq(cwd, env, *argv):
    """``keras-seq ARGV...``, the console script, in a fresh process run from ``cwd``."""
    command = shutil.which("keras-seq")
    assert command, "the keras-seq console script is installed with the package"
    return subprocess.run([command, *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def janet_run(tmp_path_factory):
    """A tiny classifier run with the user's JANET cell, trained in a process of
    its own: the run folder, the trained model's labels and probabilities of
    `TEXTS` in that process, an environment whose PYTHONPATH finds the
    module, and a working folder without it."""
    root = tmp_path_factory.mktemp("user_classes")
    modules, work = root / "modules", root / "work"
    modules.mkdir()
    work.mkdir()
    (modules / "janet_cell.py").write_text(JANET_MODULE, encoding="utf-8")
    rng = np.random.default_rng(0)
    lines = []
    for i in range(48):
        label, letter = ("a", "a") if i % 2 else ("b", "b")
        lines.append(f"{label}\t{''.join(rng.choice([letter, letter, 'x', 'y'], size=8))}\n")
    data = root / "labelled.tsv"
    data.write_text("".join(lines), encoding="utf-8")
    env = _environment(modules)
    done = subprocess.run([sys.executable, "-c", _TRAIN, str(data), str(root), json.dumps(TEXTS)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"run_dir": root / "janet", "labels": json.loads(done.stdout.splitlines()[-1]),
            "env": env, "work": work, "data": data}


# ---------------------------------------------------------------------------
# What a run records


@keras.saving.register_keras_serializable(package="keras_seq_tests")  # Bidirectional copies it
class _UserCell(RecurrentCell):
    """h = tanh(x W + h U): a cell of this test module, a user's module."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1] + self.units, self.units),
                                      name="kernel")

    def step(self, inputs, states, training=False):
        h = ops.tanh(ops.matmul(ops.concatenate([inputs, states[0]], axis=-1), self.kernel))
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class _ScriptCell(_UserCell):
    """As defined in a script that is run (``python script.py``)."""


_ScriptCell.__module__ = "__main__"


def _model(*layers):
    x = inputs = keras.Input((5, 3))
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def test_user_modules_finds_cells_inside_wrappers_and_stacked_cells():
    stacked = keras.layers.RNN(keras.layers.StackedRNNCells(
        [keras.layers.GRUCell(4), _UserCell(4)]), return_sequences=True)
    model = _model(keras.layers.Bidirectional(RNN(_UserCell(4), return_sequences=True)), stacked)
    assert user_modules(model) == [_UserCell.__module__]
    # Keras' and this package's classes are not recorded.
    assert user_modules(_model(keras.layers.Bidirectional(RNN(keras.layers.GRUCell(4))))) == []


def test_a_class_defined_in_a_script_is_recorded_and_warned_about_by_name():
    model = _model(RNN(_ScriptCell(4)))
    assert user_modules(model) == ["__main__"]
    with pytest.warns(UserWarning, match=r"train: _ScriptCell is defined in the script being "
                      r"run \(module __main__\)"):
        warn_about_script_classes(model, "train")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_about_script_classes(_model(RNN(_UserCell(4))), "train")


# ---------------------------------------------------------------------------
# Loading a run


def _fake_run(folder, user_modules=None, task="classify", model=None):
    """A run folder's metrics.json and tokenizer files (and ``model.keras``)."""
    from keras_seq import text

    folder.mkdir(parents=True, exist_ok=True)
    metrics = {"task": task, "labels": ["a", "b"],
               "config": {"task": task, "source_length": 8, "model": "rnn", "cell": "gru",
                          "units": 4, "layers": 1, "tokenizer": "char"}}
    if user_modules is not None:
        metrics["user_modules"] = user_modules
    (folder / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    text.CharTokenizer.from_corpus(["abxy"]).save(folder)
    if model is not None:
        model.save(folder / "model.keras")
    return folder


def test_a_module_that_cannot_be_imported_is_one_line_naming_it_and_the_run(tmp_path, capsys):
    run_dir = _fake_run(tmp_path / "run", ["no_such_cells_module"])
    with pytest.raises(UserModuleError, match="no_such_cells_module") as caught:
        read_run(run_dir, "test").load_model()
    assert isinstance(caught.value, ImportError) and str(run_dir) in str(caught.value)
    assert caught.value.name == "no_such_cells_module"
    for argv in (["classify", run_dir, "aa"], ["export", run_dir, tmp_path / "out"]):
        assert main(list(map(str, argv))) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"keras-seq {argv[0]}: "), err
        assert "no_such_cells_module" in err and str(run_dir) in err and "PYTHONPATH" in err
    assert not (tmp_path / "out").exists()


def test_a_module_that_fails_on_import_is_named_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "broken_cells.py").write_text("import no_such_dependency\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    run_dir = _fake_run(tmp_path / "run", ["broken_cells"])
    with pytest.raises(UserModuleError, match=r"broken_cells.*No module named "
                       r"'no_such_dependency'"):
        read_run(run_dir, "test").load_model()


@pytest.mark.parametrize("recorded", [["../cells"], [3], "janet_cell", ["a..b"]])
def test_a_malformed_user_modules_entry_is_a_value_error(tmp_path, recorded):
    run_dir = _fake_run(tmp_path / "run", recorded)
    with pytest.raises(ValueError, match=r"metrics.json.*user_modules"):
        read_run(run_dir, "test").load_model()


def test_a_run_trained_in_a_script_says_so_when_its_classes_are_missing(tmp_path, capsys):
    run_dir = _fake_run(tmp_path / "run", ["__main__"], model=_model(RNN(_ScriptCell(4))))
    with pytest.raises(UserModuleError, match=r"__main__") as caught:
        read_run(run_dir, "test").load_model()
    assert str(run_dir) in str(caught.value) and len(str(caught.value)) < 400
    assert main(["classify", str(run_dir), "aa"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_other_load_failures_keep_their_own_messages(tmp_path):
    """An importable module changes nothing else: a broken model.keras fails as before."""
    errors = []
    for name, recorded in (("old", None), ("new", ["json"])):
        run_dir = _fake_run(tmp_path / name, recorded)
        (run_dir / "model.keras").write_bytes(b"not a zip file")
        with pytest.raises(Exception) as caught:
            read_run(run_dir, "test").load_model()
        assert not isinstance(caught.value, UserModuleError)
        errors.append((type(caught.value), str(caught.value).replace(name, "RUN")))
    assert errors[0] == errors[1]


def test_fine_tuning_imports_the_language_models_modules_first(tmp_path):
    from keras_seq.training import TrainingConfig

    lm = _fake_run(tmp_path / "lm", ["no_such_cells_module"], task="lm")
    config = TrainingConfig(task="classify", data="unused.tsv", init_from=str(lm),
                            out=str(tmp_path)).resolved()
    with pytest.raises(UserModuleError, match="no_such_cells_module"):
        with_language_model(config)


# ---------------------------------------------------------------------------
# End to end: a user's cell from the command line


@pytest.mark.slow
def test_a_run_records_the_module_of_its_user_cell(janet_run):
    metrics = json.loads((janet_run["run_dir"] / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["user_modules"] == ["janet_cell"]
    assert metrics["config"]["cell"] == "janet"


@pytest.mark.slow
def test_classify_and_export_import_the_module_from_pythonpath(janet_run, capsys):
    run_dir, env, work = janet_run["run_dir"], janet_run["env"], janet_run["work"]
    done = _keras_seq(work, env, "classify", run_dir, *TEXTS)
    assert done.returncode == 0, done.stderr[-3000:]
    # No line but the warning about the empty text (no TensorFlow notes).
    assert [line for line in done.stderr.splitlines()
            if not line.startswith("keras-seq classify: warning: ")] == [], done.stderr
    printed = [line.split("\t") for line in done.stdout.splitlines()]
    assert [label for label, _ in printed] == [label for label, _ in janet_run["labels"]]
    np.testing.assert_allclose([float(p) for _, p in printed],
                               [p for _, p in janet_run["labels"]], atol=1e-4)
    out = work / "export"
    # One format: what is checked is that the command loads the run.
    done = _keras_seq(work, env, "export", run_dir, out, "--formats", "tflite", "--examples", "8")
    assert done.returncode == 0, done.stderr[-3000:]
    # verify runs the artifacts in a process of its own, without keras_seq: it
    # needs no user module.
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err


@pytest.mark.slow
def test_without_the_module_classify_is_one_line_naming_it_and_the_run(janet_run, capsys):
    # This process never imports janet_cell, and its folder is not on sys.path.
    run_dir = janet_run["run_dir"]
    capsys.readouterr()
    assert main(["classify", str(run_dir), "aa"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keras-seq classify: "), err
    assert "janet_cell" in err and str(run_dir) in err and "PYTHONPATH" in err


# ---------------------------------------------------------------------------
# Your own cell from the command line: train --import MODULE --cell NAME


@pytest.mark.slow
def test_train_imports_the_module_and_trains_its_cell_as_a_user_runs_it(janet_run, tmp_path):
    env, work = janet_run["env"], janet_run["work"]
    done = _keras_seq(work, env, "train", "--import", "janet_cell", "--cell", "janet",
                      "--task", "classify", "--data", janet_run["data"], "--units", "8",
                      "--batch-size", "16", "--epochs", "1", "--verbose", "0",
                      "--out", tmp_path, "--name", "cli")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""  # nothing of TensorFlow's start-up log
    metrics = json.loads((tmp_path / "cli" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["user_modules"] == ["janet_cell"]  # what the other commands import
    assert metrics["config"]["cell"] == "janet"
    assert "JANETCell" in (tmp_path / "cli" / "model.keras").read_bytes().decode("latin-1")


@pytest.mark.parametrize("argv, message", [
    # (The names listed are the registry's: this process may hold cells of other tests.)
    (["train", "--cell", "unregistered"], "argument --cell: invalid choice: 'unregistered' "
     "(choose from gru, lstm, peephole, coupled, simple, layernorm_lstm, mingru, minlstm"),
    (["tune", "--cells", "gru", "unregistered"],
     "argument --cells: invalid choice: 'unregistered'"),
    (["train", "--import", "no_such_cells_module", "--cell", "unregistered"],
     "argument --import: no module named 'no_such_cells_module'; install it or add its "
     "folder to PYTHONPATH"),
])
def test_an_unknown_cell_or_module_is_an_argument_error_that_says_what_to_do(
        argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    usage, error = err.splitlines()  # the short usage line, then the error
    assert usage.startswith(f"usage: keras-seq {argv[0]} [options]")
    assert error.startswith(f"keras-seq {argv[0]}: error: {message}"), error
    if "--import" not in argv:
        assert "; a cell of your own: --import MODULE, the module that registers it" in error


def test_a_module_that_registers_no_such_cell_is_an_argument_error(tmp_path, monkeypatch,
                                                                 capsys):
    (tmp_path / "registers_nothing.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        main(["train", "--import", "registers_nothing", "--cell", "unregistered"])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 2, err
    assert ("argument --cell: invalid choice: 'unregistered': --import registers_nothing "
            "registered no such cell") in err


@pytest.mark.slow
def test_tune_imports_the_module_and_searches_its_cell(tmp_path, monkeypatch, capsys):
    # The same cell under other names: this process must not import janet_cell.
    module = JANET_MODULE.replace('package="my_cells"', 'package="my_tuned_cells"').replace(
        'register_cell("janet"', 'register_cell("janet_tuned"')
    (tmp_path / "tuned_cells.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcd"), size=rng.integers(1, 4))) for _ in range(120)]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{w}\t{w[0]}\n" for w in words), encoding="utf-8")
    assert main(["tune", "--import", "tuned_cells", "--cells", "janet_tuned", "--trials", "1",
                 "--data", str(data), "--out", str(tmp_path), "--name", "best", "--units", "8",
                 "--embedding-dims", "8", "--epochs", "1", "--batch-size", "16",
                 "--test-size", "20", "--validation-size", "20", "--verbose", "0"]) == 0
    metrics = json.loads((tmp_path / "best" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["config"]["cell"] == "janet_tuned"
    assert metrics["user_modules"] == ["tuned_cells"]
