"""The command line's words for the library's messages: its one table of flags.

The library's errors name their owner and keep their message as parts
(`keras_seq._validation.Explained`): an argument (`Arg`), a value (`Value`),
a function (`Call`). `CommandWords` says each part as the command's user
typed it: an argument is the flag or the placeholder that sets it
(``--batch-size``, ``OUT``; with its value, ``--task lm``, ``--fresh``), a
value as typed, a function the command that runs it (``translate_texts`` is
``keras-seq translate``). The flags are those each command's parser defined
(`keras_seq.cli.parser.build_parser` records them) and, for the library's
argument names that are not a flag's own, `ALIASES`: this is the one table.
Nothing here imports Keras.
"""

from __future__ import annotations

from keras_seq import recipes
from keras_seq._validation import Arg, Call, Value, python_words

__all__ = ["ALIASES", "COMMAND_OF_FUNCTION", "CommandWords"]

ALIASES = {"beam_width": "beam", "num_layers": "layers", "out_dir": "out",
           "max_trials": "trials", "text_file": "data", "texts": "texts"}
"""Library argument name -> the parser destination that sets it, where they differ."""

COMMAND_OF_FUNCTION = {
    "translate_texts": "translate",
    "generate_text": "generate",
    "export_run": "export",
    "train": "train",
    "verify": "verify",
    "search": "tune",
    **{recipe.uses: recipe.command for recipe in recipes.RECIPES.values() if recipe.command},
}
"""The library functions behind the commands (a recipe's `Recipe.uses`: its command)."""


class CommandWords:
    """Says a message's parts in the words of ``command``.

    Args:
        command: the command being run (``"export"``).
        flags: each command's ``{destination: flag or placeholder}``, as
            `keras_seq.cli.parser.build_parser` records them; the command's
            own come first, then the others' (a classifier's message may
            name ``train``'s ``--task``).
    """

    def __init__(self, command: str, flags: dict[str, dict[str, str]]):
        self.flags = {}
        for name in [command, *sorted(set(flags) - {command})]:
            for destination, flag in flags[name].items():
                self.flags.setdefault(destination, flag)

    def flag(self, argument: str) -> str:
        """The flag or placeholder that sets ``argument`` (its own name when none does)."""
        return self.flags.get(ALIASES.get(argument, argument), self.flags.get(argument, argument))

    def __call__(self, part) -> str:
        if isinstance(part, Arg):
            flag = self.flag(part.name)
            if not part.has_value:
                return flag
            if part.value is True and flag.startswith("--"):
                return flag
            return f"{flag} {_typed(part.value)}"
        if isinstance(part, Value):
            return _typed(part.value)
        if isinstance(part, Call):
            command = COMMAND_OF_FUNCTION.get(part.name)
            return f"keras-seq {command}" if command else part.name
        return python_words(part)


def _typed(value) -> str:
    """A value as typed on a command line: ``'lm'`` is ``lm``, a list its items."""
    if isinstance(value, (list, tuple)):
        return " ".join(_typed(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, str):
        return value if value and not any(c.isspace() for c in value) else repr(value)
    return str(value)
