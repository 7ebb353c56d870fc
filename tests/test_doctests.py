"""Every `>>>` example in the package's docstrings runs and prints what it shows.

The examples are collected with `doctest.DocTestFinder` from every module of
`keras_seq`, one test per module. Each module starts from the same seed and
NumPy print options, so examples that draw random weights are reproducible.
Whitespace differences are ignored and `...` matches anything
(NORMALIZE_WHITESPACE | ELLIPSIS), as in most doctest suites.
"""

import doctest
import importlib
import pkgutil
import tempfile

import keras
import numpy as np
import pytest

import keras_seq

# Run as a script in a process that must not import keras_seq; importing it
# here would install its import blocker in the test process.
_NOT_IMPORTABLE = {"keras_seq.export._verify_worker"}

_MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(keras_seq.__path__, prefix="keras_seq.")
    if info.name not in _NOT_IMPORTABLE
)
_OPTIONS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    # DocTestFinder also follows names a module imports from elsewhere; keep
    # only the docstrings defined in this module so each example runs once.
    return [t for t in finder.find(module) if t.name.startswith(module_name)]


def test_doctests_are_collected_from_the_package():
    # Guards the collection itself: an import error or a finder change that
    # silently yields no examples would make every test below pass vacuously.
    total = sum(len(t.examples) for name in _MODULES for t in _examples(name))
    assert total >= 90, total


@pytest.mark.slow
@pytest.mark.parametrize("module_name", _MODULES)
def test_docstring_examples_run(module_name, tmp_path, monkeypatch):
    # Examples that write files (relative paths, tempfile.mkdtemp()) write them here.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    keras.utils.set_random_seed(0)
    runner = doctest.DocTestRunner(optionflags=_OPTIONS)
    saved = np.get_printoptions()
    np.set_printoptions(precision=4, suppress=True)
    try:
        for test in _examples(module_name):
            runner.run(test)
    finally:
        np.set_printoptions(**saved)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed (see above)"
