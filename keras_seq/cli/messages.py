"""A library error in the command's words: flags, command names, quoted user text.

The library's messages name the Python function that refused
(``export_run: ...``) and its arguments (``overwrite=True``, `` `out_dir` ``),
as a Python caller needs. `command_message` rewrites them for the command
line, from the command's own parser: the function prefixes go (the line
already names the command), an argument becomes the flag or the placeholder
that sets it (``--overwrite``, ``OUT``), a function the message points to
becomes its command (``translate_texts`` -> ``keras-seq translate``). Nothing
here imports Keras: errors found before it loads pass through too.
"""

from __future__ import annotations

import re

__all__ = ["command_message"]

# The functions behind the commands that a message may point to (`train`,
# `search` and `verify` are common words too: only their prefix goes).
_COMMAND_OF_FUNCTION = {
    "translate_texts": "translate",
    "classify_texts": "classify",
    "generate_text": "generate",
    "export_run": "export",
}
# Library argument names that differ from the parser's destinations.
_ALIASES = {"beam_width": "beam", "num_layers": "layers", "out_dir": "out",
            "path": "data", "text_file": "data", "max_trials": "trials"}
# A leading "name: " naming a Python function, method or module.
_PREFIX = re.compile(r"^((?:keras_seq\.)?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?(?:\(\))?): ")
_VALUE = r"('[^']*'|\"[^\"]*\"|\[[^\]]*\]|\([^)]*\)|[^\s,;)]+)"


def _is_python_name(token: str) -> bool:
    parts = token.removesuffix("()").split(".")
    if token.startswith("keras_seq."):
        return True
    # A file name such as empty.tsv is not: a second part must name a
    # method of a class (WordPieceTokenizer.from_corpus).
    return len(parts) == 1 or parts[0][:1].isupper()


def _flags(subparser) -> dict[str, str]:
    """Argument name -> the flag (``--batch-size``) or placeholder (``OUT``) that sets it."""
    flags = {}
    for action in subparser._actions:
        if action.dest == "help":
            continue
        flags[action.dest] = action.option_strings[-1] if action.option_strings else (
            action.metavar or action.dest.upper())
    for alias, dest in _ALIASES.items():
        if dest in flags:
            flags.setdefault(alias, flags[dest])
    return flags


def command_message(command: str, message: str, subparsers=None) -> str:
    """``message`` (one line) as ``keras-seq command`` should say it.

    Args:
        command: the command's name (``"export"``).
        message: the library's message.
        subparsers: each command's `argparse` parser, by name: the flags an
            argument name becomes (the command's own first, then the other
            commands': a classifier's message may point to ``train``'s
            ``--task``); None: the argument names stay.
    """
    text = message
    while True:
        match = _PREFIX.match(text)
        if not match or not _is_python_name(match.group(1)):
            break
        text = text[match.end():]
    flags = {}
    if subparsers:
        for name in [command, *sorted(set(subparsers) - {command})]:
            for argument, flag in _flags(subparsers[name]).items():
                flags.setdefault(argument, flag)

    def flag_value(match):
        name, value = match.group(1), match.group(2)
        flag = flags.get(name)
        if flag is None:
            return match.group(0)
        if value == "True" and flag.startswith("--"):
            return flag
        return f"{flag} {_plain(value)}"

    # "pass --overwrite (overwrite=True)": the flag is already there.
    def parenthetical(match):
        name = match.group(1)
        flag = flags.get(name)
        if flag is not None and flag in text:
            return ""
        return match.group(0)

    text = re.sub(r" \((\w+)=" + _VALUE + r"\)", parenthetical, text)
    text = re.sub(r"(?<![\w.-])([a-z_]\w*)=" + _VALUE, flag_value, text)
    text = re.sub(r"`([a-z_]\w*)`", lambda m: flags.get(m.group(1), m.group(1)), text)
    for function, name in _COMMAND_OF_FUNCTION.items():
        text = re.sub(rf"\b{function}\b(?: \(keras-seq {name}\))?", f"keras-seq {name}", text)
    return text


def _plain(value: str) -> str:
    """A Python literal as typed on the command line: ``'classify'`` -> ``classify``."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner if inner and " " not in inner else value
    return value
