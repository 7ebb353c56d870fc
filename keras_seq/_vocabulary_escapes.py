"""The escaping of tokens in a tokenizer's ``vocab.txt``: one token per line,
whatever characters it holds (`keras_seq.text` writes and reads the file)."""

from __future__ import annotations

import re

from keras_seq._validation import ArgumentValueError

__all__ = ["escape_token", "unescape_token"]


def escape_token(token: str) -> str:
    r"""``token`` as one line of ``vocab.txt``: ``\\`` for a backslash,
    ``\s`` for a space, ``\uXXXX`` / ``\UXXXXXXXX`` for other whitespace and
    unprintable characters."""
    out = []
    for ch in token:
        if ch == "\\":
            out.append("\\\\")
        elif ch == " ":
            out.append("\\s")
        elif ch.isspace() or not ch.isprintable():
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


_ESCAPE = re.compile(r"\\(\\|s|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def unescape_token(line: str, path: str, line_number: int) -> str:
    r"""The token of one ``vocab.txt`` line (`escape_token` undone); an
    unknown escape is a ``ValueError`` naming the file and line."""
    def replace(match: re.Match) -> str:
        code = match.group(1)
        if code == "\\":
            return "\\"
        if code == "s":
            return " "
        return chr(int(code[1:], 16))

    token = _ESCAPE.sub(replace, line)
    # A backslash left over means an escape we do not know: fail loudly rather
    # than load a vocabulary that silently differs from the one saved.
    if "\\" in _ESCAPE.sub("", line):
        raise ArgumentValueError(
            None, f"{path}, line {line_number}: unknown escape sequence in token {line!r}; "
            "expected \\\\, \\s, \\uXXXX or \\UXXXXXXXX."
        )
    return token
