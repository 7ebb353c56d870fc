"""The documentation site builds with `--strict` and documents every public name.

`mkdocs build --strict` fails on any warning: a broken link, a page missing
from the nav, or a griffe complaint about a docstring (an `Args:` entry that
names no parameter, an entry it cannot parse).
"""

import contextlib
import importlib
import io
import os
import re
import subprocess
import sys

import pytest

from keras_seq import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Reference page (under docs/reference/) of each public module.
PAGES = {
    "keras_seq.layers": "layers",
    "keras_seq.models": "models",
    "keras_seq.decoding": "decoding",
    "keras_seq.metrics": "metrics",
    "keras_seq.text": "text",
    "keras_seq.data": "data",
    "keras_seq.export": "export",
    "keras_seq.tuning": "tuning",
    "keras_seq.distribute": "distribute",
    "keras_seq.training": "training",
    "keras_seq.reserved_tokens": "reserved_tokens",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        "mkdocs build --strict failed (pip install -e '.[dev]' installs mkdocs):\n"
        + result.stdout
        + result.stderr
    )
    return site_dir


def _public_names(module_name):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:  # the functions and classes the module defines itself
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module_name
        ]
    # Submodules are documented through the names they define, not as pages.
    return [n for n in names if not _is_module(getattr(module, n))]


def _is_module(value):
    return type(value).__name__ == "module"


@pytest.mark.slow
def test_docs_build_strict(site):
    for page in ["index", "contract", "cli", *(f"reference/{p}" for p in PAGES.values())]:
        assert os.path.isfile(os.path.join(site, page, "index.html")) or page == "index", page
    assert os.path.isfile(os.path.join(site, "index.html"))


@pytest.mark.slow
@pytest.mark.parametrize("module_name", sorted(PAGES))
def test_every_public_name_has_a_reference_entry(site, module_name):
    with open(os.path.join(site, "reference", PAGES[module_name], "index.html"), encoding="utf-8") as f:
        anchors = set(re.findall(r'id="(keras_seq\.[\w.]+)"', f.read()))
    documented = {_documented_name(module_name, a) for a in anchors}
    names = [name for name in _public_names(module_name) if name not in documented]
    assert names == [], f"{module_name}: no entry on reference/{PAGES[module_name]}.md for {names}"


def _documented_name(module_name, anchor):
    """`name` for the anchor `module.name`, or `module.name.name` (a function
    named like its own module, documented by its full path); else None."""
    parts = anchor.split(".")
    depth = module_name.count(".") + 1
    if anchor.startswith(module_name + ".") and (
        len(parts) == depth + 1 or (len(parts) == depth + 2 and parts[-1] == parts[-2])
    ):
        return parts[-1]
    return None


def _help(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return out.getvalue()


def test_cli_page_documents_every_command_and_option():
    with open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8") as f:
        page = f.read()
    commands = re.search(r"\{([\w,-]+)\}", _help()).group(1).split(",")
    assert commands, "no sub-commands found in `keras-seq --help`"
    missing = []
    for command in commands:
        if f"## `keras-seq {command}`" not in page:
            missing.append(command)
            continue
        section = page.split(f"## `keras-seq {command}`", 1)[1].split("\n## ", 1)[0]
        options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", _help(command))) - {"--help"}
        missing += [f"{command} {o}" for o in sorted(options) if f"`{o}" not in section]
    assert missing == [], f"docs/cli.md does not document: {missing}"
