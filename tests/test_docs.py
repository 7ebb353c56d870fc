"""The documentation site builds with `--strict` and documents every public name.

`mkdocs build --strict` fails on any warning: a broken link, a page missing
from the nav, or a griffe complaint about a docstring (an `Args:` entry that
names no parameter, an entry it cannot parse).
"""

import contextlib
import doctest
import html.parser
import importlib
import inspect
import io
import os
import re
import subprocess
import sys

import pytest

from keras_seq import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
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
    "keras_seq.run_config": "run_config",
    "keras_seq.reserved_tokens": "reserved_tokens",
    "keras_seq.model_kinds": "model_kinds",
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
    for page in ["index", "contract", "cli", "guides/translator", "guides/phone",
                 "guides/streaming", "guides/backends", *(f"reference/{p}" for p in PAGES.values())]:
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


class _PageText(html.parser.HTMLParser):
    """The text of a page's code blocks (`<pre>`) and of its paragraphs
    (`<p>`, without their inline `<code>`)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.code_blocks, self.paragraphs = [], []
        self._pre = self._paragraph = None
        self._inline_code = 0

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._pre = []
        elif tag == "p" and self._pre is None:
            self._paragraph = []
        elif tag == "code":
            self._inline_code += 1

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre is not None:
            self.code_blocks.append(_squash("".join(self._pre)))
            self._pre = None
        elif tag == "p" and self._paragraph is not None:
            self.paragraphs.append(_squash("".join(self._paragraph)))
            self._paragraph = None
        elif tag == "code":
            self._inline_code -= 1

    def handle_data(self, data):
        if self._pre is not None:
            self._pre.append(data)
        elif self._paragraph is not None and not self._inline_code:
            self._paragraph.append(data)


def _squash(text):
    return " ".join(text.split())


def _resolve(path):
    """The object named by a dotted path, importing the longest module prefix."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
        return obj
    return None


def _own_docstring(obj):
    """The docstring the site renders for `obj` (a class with its `__init__`'s),
    or "" for a value or a name defined outside the package."""
    if isinstance(obj, property):
        obj = obj.fget
    if inspect.ismodule(obj):
        home = obj.__name__
    elif inspect.isclass(obj) or inspect.isroutine(obj):
        home = getattr(obj, "__module__", None) or ""
    else:
        return ""
    if not home.startswith("keras_seq"):
        return ""
    doc = inspect.cleandoc(obj.__doc__ or "")
    init = vars(obj).get("__init__") if inspect.isclass(obj) else None
    if init is not None and init.__doc__:
        doc += "\n\n" + inspect.cleandoc(init.__doc__)
    return doc


def _example_lines(docstring):
    """The lines of a docstring's examples: the source and output of its
    doctests and the contents of its fenced code blocks, whitespace squashed."""
    lines = []
    for example in doctest.DocTestParser().get_examples(docstring):
        lines += example.source.splitlines() + example.want.splitlines()
    for block in re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", docstring, re.M | re.S):
        lines += block.splitlines()
    # The rendered examples drop doctest directives and <BLANKLINE> markers.
    lines = [re.sub(r"\s*#\s*doctest:.*$", "", line) for line in lines]
    return [_squash(line) for line in lines if line.strip() and line.strip() != "<BLANKLINE>"]


@pytest.mark.slow
def test_docstring_examples_render_as_code_blocks(site):
    # Griffe turns only an indented `Examples:` section into code blocks; a
    # `>>>` line anywhere else renders as a Markdown paragraph (a quote).
    checked, not_code, in_prose = 0, [], []
    for page in sorted(set(PAGES.values())):
        with open(os.path.join(site, "reference", page, "index.html"), encoding="utf-8") as f:
            html_text = f.read()
        text = _PageText()
        text.feed(html_text)
        with open(os.path.join(ROOT, "docs", "reference", f"{page}.md"), encoding="utf-8") as f:
            paths = set(re.findall(r"^::: ([\w.]+)", f.read(), re.M))
        paths |= set(re.findall(r'id="(keras_seq\.[\w.]+)"', html_text))
        for path in sorted(paths):
            docstring = _own_docstring(_resolve(path))
            for line in _example_lines(docstring):
                checked += 1
                if not any(line in block for block in text.code_blocks):
                    not_code.append(f"{page}: {path}: {line}")
                whole_line = re.compile(r"(?<!\S)" + re.escape(line) + r"(?!\S)")
                if ">>> " + line in docstring and any(whole_line.search(p) for p in text.paragraphs):
                    in_prose.append(f"{page}: {path}: {line}")
    assert checked > 300, f"only {checked} example lines found on the reference pages"
    assert not_code == [], "example lines not in a code block:\n" + "\n".join(not_code)
    assert in_prose == [], "example lines rendered as a paragraph:\n" + "\n".join(in_prose)


@pytest.mark.slow
def test_layers_page_shows_peephole_lstm_example_as_code(site):
    with open(os.path.join(site, "reference", "layers", "index.html"), encoding="utf-8") as f:
        text = _PageText()
        text.feed(f.read())
    line = "from keras_seq.layers import PeepholeLSTM"
    assert any(">>> " + line in block for block in text.code_blocks)
    assert not any(line in p for p in text.paragraphs)


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


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_readme_layer_table_lists_every_public_layer():
    import keras

    import keras_seq.layers

    section = _read(README).split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    public_layers = {name for name in keras_seq.layers.__all__
                     if isinstance(getattr(keras_seq.layers, name), type)
                     and issubclass(getattr(keras_seq.layers, name), keras.layers.Layer)}
    missing = sorted(public_layers - listed)
    assert missing == [], f"the README's layer table leaves out {missing}"


def test_docs_index_links_every_reference_page():
    import yaml  # installed with mkdocs

    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = yaml.safe_load(f)["nav"]
    reference = next(entry["Reference"] for entry in nav if "Reference" in entry)
    index = _read(os.path.join(ROOT, "docs", "index.md"))
    missing = [
        module
        for entry in reference
        for module, page in entry.items()
        if module.startswith("keras_seq") and f"[`{module}`]({page})" not in index
    ]
    assert missing == [], f"docs/index.md does not link {missing}"


def test_docs_site_opens_on_getting_started_then_the_guides_then_the_reference():
    import yaml  # installed with mkdocs

    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = yaml.safe_load(f)["nav"]
    assert [next(iter(entry)) for entry in nav] == ["Getting started", "Guides", "Reference"]
    assert nav[0]["Getting started"] == "index.md"
    guides = [next(iter(entry)) for entry in nav[1]["Guides"]]
    assert guides == ["Train your own translator", "Deploy to a phone", "Stream a sensor model",
                      "Use JAX or PyTorch", "Write your own cell", "Classify your own texts"]


def test_cli_page_distribute_choices_are_the_commands_choices():
    page = _read(os.path.join(ROOT, "docs", "cli.md"))
    for command in ("train", "tune"):
        synopsis = page.split(f"## `keras-seq {command}`", 1)[1].split("```text\n", 1)[1]
        synopsis = synopsis.split("```", 1)[0]
        choices = re.search(r"--distribute \{([\w,]+)\}", _help(command)).group(1).split(",")
        documented = re.search(r"--distribute \{([\w,]+)\}", synopsis).group(1).split(",")
        assert documented == choices, f"docs/cli.md, keras-seq {command}"


def test_readme_keeps_the_two_commands_a_newcomer_copies():
    lines = _read(README).splitlines()
    assert lines.count("pip install -e . && keras-seq train") == 1
    assert lines.count('pip install -e ".[dev]" && bash tests/run.sh') == 1
    assert len(lines) <= 250


def test_readme_and_contract_say_to_import_keras_seq_before_loading():
    # Keras finds our classes only once `import keras_seq` has registered them.
    for path in (README, os.path.join(ROOT, "docs", "contract.md")):
        text = " ".join(_read(path).split())
        assert "import keras_seq" in text and "Could not locate class" in text, path
