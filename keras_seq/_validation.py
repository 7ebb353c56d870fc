"""Argument checks for every public class and function: one rule, one wording.

The rule:

- integers: Python and NumPy integers are accepted; ``bool`` is not an
  integer here (``units=True`` is a mistake, not ``1``);
- a value of the right kind but outside the allowed range (``units=0``,
  ``num_heads=1.5``, ``dropout=1.0``, an unknown choice, a shape that does not
  fit) is a ``ValueError``;
- a value of the wrong kind (``units="8"``, ``units=True``, ``dropout=None``)
  is a ``TypeError``;
- every message names the owner (the class or function, and the layer's name
  when it has one), the argument and the value received::

      GRU: invalid value for argument `units`: expected a positive integer,
      received 0.

Shapes are checked with `shape_error` before any computation, so a mask of
the wrong length or a state of the wrong width never surfaces as a TensorFlow
runtime error.

**Messages that name arguments.** Every error the package raises on purpose
is an `Explained` error (`ArgumentValueError`, `ArgumentTypeError`,
`MissingFileError`, `ExistingFileError`, `BackendError`, and the package's
own error classes built on them): it keeps its owner and its message as
parts, some of which name an argument (`Arg`), quote a value (`Value`) or
point to a function (`Call`). ``str(error)`` speaks Python (``argument
`units```, ``fresh=True``, ``translate_texts``); the command line renders
the same parts in its own words with `Explained.render` (``--units``,
``--fresh``, ``keras-seq translate``), from its one table of flags, so that
neither side rewrites the other's messages::

    >>> error = invalid_value("TrainingConfig", "zoneout", "a number in [0, 1)", 1.5)
    >>> str(error)
    'TrainingConfig: invalid value for argument `zoneout`: expected a number in [0, 1), received 1.5.'
    >>> error.render(lambda part: "--" + part.name if isinstance(part, Arg) else python_words(part))
    'invalid value for --zoneout: expected a number in [0, 1), received 1.5.'
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Arg",
    "ArgumentTypeError",
    "ArgumentValueError",
    "BackendError",
    "Call",
    "ExistingFileError",
    "Explained",
    "MissingFileError",
    "Value",
    "check_activation",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_positive_int",
    "check_rate",
    "check_selection",
    "float_inputs",
    "invalid_type",
    "invalid_value",
    "owner_name",
    "shape_error",
]


_UNSET = object()


class Arg:
    """An argument named in a message: ``Arg("fresh", True)`` reads
    ``fresh=True`` in Python and ``--fresh`` on the command line;
    ``Arg("units", noun=True)`` reads ``argument `units``` and ``--units``.

    Args:
        name: the argument's Python name.
        value: the value given (optional).
        noun: without a value, say "argument" before the name (Python only).
    """

    __slots__ = ("name", "value", "has_value", "noun")

    def __init__(self, name: str, value: Any = _UNSET, noun: bool = False):
        self.name, self.noun = name, noun
        self.has_value = value is not _UNSET
        self.value = value if self.has_value else None

    def __reduce__(self):  # the sentinel of "no value" is not picklable
        if self.has_value:
            return (Arg, (self.name, self.value, self.noun))
        return (_named, (self.name, self.noun))


def _named(name: str, noun: bool) -> Arg:
    return Arg(name, noun=noun)


class Value:
    """A value quoted in a message: its ``repr`` in Python, as typed on a command line."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class Call:
    """A function a message points to, e.g. ``Call("translate_texts")``: its
    name in Python; the command line names the command that runs it."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def python_words(part) -> str:
    """``part`` of a message as Python speaks it."""
    if isinstance(part, Arg):
        if part.has_value:
            return f"{part.name}={part.value!r}"
        return f"argument `{part.name}`" if part.noun else f"`{part.name}`"
    if isinstance(part, Value):
        return repr(part.value)
    if isinstance(part, Call):
        return part.name
    return str(part)


class Explained(Exception):
    """An error raised on purpose, whose message names arguments (a mixin of
    the package's error classes; see the module docstring).

    Attributes:
        owner: who refused (``"TrainingConfig"``, ``"GRU 'gru_3'"``), or None
            when the message starts with what it is about (a file's line).
        parts: the message after the owner: strings, `Arg`, `Value`, `Call`.
    """

    def __init__(self, owner: Any, *parts):
        self.owner = None if owner is None else owner_name(owner)
        self.parts = parts
        super().__init__(str(self))

    def __reduce__(self):  # picklable across processes, as builtin errors are
        return (_rebuild, (type(self), self.owner, self.parts))

    def __str__(self) -> str:
        return self.render() if self.owner is None else f"{self.owner}: {self.render()}"

    def render(self, words=None) -> str:
        """The message without its owner; ``words(part)`` says each part
        (default: Python's, `python_words`). A command line passes its own."""
        words = words or python_words
        return "".join(words(part) for part in self.parts)


def _rebuild(cls, owner, parts):
    return cls(owner, *parts)


class ArgumentValueError(Explained, ValueError):
    """A value of the right kind that is not allowed, or options that contradict each other."""


class ArgumentTypeError(Explained, TypeError):
    """A value of the wrong kind."""


class MissingFileError(Explained, FileNotFoundError):
    """A file or folder that an argument names does not exist, or is not what it must be."""


class ExistingFileError(Explained, FileExistsError):
    """A file or folder would be replaced without the argument that allows it."""


class BackendError(Explained, RuntimeError):
    """A part of the package that needs another Keras backend."""


def owner_name(layer_or_name: Any) -> str:
    """``"GRU 'gru_3'"`` for a layer, the string itself for a string."""
    if isinstance(layer_or_name, str):
        return layer_or_name
    name = getattr(layer_or_name, "name", None)
    cls = type(layer_or_name).__name__
    return f"{cls} '{name}'" if name else cls


def invalid_value(owner: Any, argument: str, expected: Any, received: Any) -> ArgumentValueError:
    """The ``ValueError`` for a value of the right kind outside what is allowed.

    ``expected`` is a string, or a tuple of message parts (`Arg`, ...) when
    it names other arguments."""
    return ArgumentValueError(
        owner, "invalid value for ", Arg(argument, noun=True), ": expected ",
        *_parts(expected), ", received ", Value(received), ".")


def invalid_type(owner: Any, argument: str, expected: Any, received: Any) -> ArgumentTypeError:
    """The ``TypeError`` for a value of the wrong kind."""
    return ArgumentTypeError(
        owner, "invalid type for ", Arg(argument, noun=True), ": expected ", *_parts(expected),
        ", received ", Value(received), f" of type {type(received).__name__}.")


def shape_error(owner: Any, argument: str, expected: str, shape: Iterable) -> ArgumentValueError:
    """The ``ValueError`` for a tensor whose shape does not fit."""
    shape = tuple(None if d is None else int(d) for d in shape)
    return ArgumentValueError(owner, "invalid shape for ", Arg(argument, noun=True),
                              f": expected {expected}, received shape {shape}.")


def _parts(text) -> tuple:
    return tuple(text) if isinstance(text, (tuple, list)) else (text,)


def float_inputs(layer: Any, inputs: Any) -> Any:
    """``inputs`` cast to ``layer.compute_dtype`` when its dtype is not floating.

    Keras casts only floating inputs to the compute dtype (autocast); its own
    layers take integer inputs through their ops' type promotion. Ours cast
    integer (and bool) inputs here, at the start of ``call``, so every backend
    and every fast path sees the compute dtype. ``None`` passes through.
    """
    if inputs is None:
        return None
    from keras import backend, ops

    if backend.is_float_dtype(backend.standardize_dtype(inputs.dtype)):
        return inputs
    return ops.cast(inputs, layer.compute_dtype)


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def check_int(
    owner: Any,
    argument: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    allow_none: bool = False,
) -> int | None:
    """``value`` as a Python ``int`` in ``[minimum, maximum]`` (either bound optional).

    A non-integral number (``1.5``, ``8.0``) is a bad value: it is a number,
    just not a whole one (Keras' own layers raise ``ValueError`` for it too).
    """
    if value is None and allow_none:
        return None
    expected = _int_range(minimum, maximum) + (" or None" if allow_none else "")
    if _is_integer(value):
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise invalid_value(owner, argument, expected, value)
        return int(value)
    if isinstance(value, numbers.Real) and not _is_bool(value):
        raise invalid_value(owner, argument, expected, value)
    raise invalid_type(owner, argument, expected, value)


def _int_range(minimum, maximum) -> str:
    if minimum == 1 and maximum is None:
        return "a positive integer"
    if minimum == 0 and maximum is None:
        return "a non-negative integer"
    if minimum is not None and maximum is not None:
        return f"an integer in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def check_positive_int(owner: Any, argument: str, value: Any, allow_none: bool = False):
    """`check_int` with ``minimum=1``."""
    return check_int(owner, argument, value, minimum=1, allow_none=allow_none)


def check_float(
    owner: Any,
    argument: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    allow_none: bool = False,
) -> float | None:
    """``value`` as a Python ``float`` within the given bounds (integers accepted)."""
    if value is None and allow_none:
        return None
    expected = "a number" + _float_range(low, high, low_inclusive, high_inclusive)
    if allow_none:
        expected += " or None"
    if not isinstance(value, numbers.Real) or _is_bool(value):
        raise invalid_type(owner, argument, expected, value)
    number = float(value)
    too_low = low is not None and (number < low or (number == low and not low_inclusive))
    too_high = high is not None and (number > high or (number == high and not high_inclusive))
    if too_low or too_high or number != number:  # number != number: NaN
        raise invalid_value(owner, argument, expected, value)
    return number


def _float_range(low, high, low_inclusive, high_inclusive) -> str:
    if low is not None and high is not None:
        return f" in {'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
    if low is not None:
        return f" {'>=' if low_inclusive else '>'} {low}"
    if high is not None:
        return f" {'<=' if high_inclusive else '<'} {high}"
    return ""


def check_rate(owner: Any, argument: str, value: Any) -> float:
    """A dropout rate: a number in ``[0, 1)``."""
    return check_float(owner, argument, value, low=0.0, high=1.0, high_inclusive=False)


def check_zoneout(owner: Any, zoneout: Any):
    """A zoneout rate in ``[0, 1)``, or a non-empty list of them (one per state;
    the count is checked against a cell's states by the cell)."""
    if isinstance(zoneout, (list, tuple)):
        if not zoneout:
            raise invalid_value(owner, "zoneout", "a float in [0, 1) or one per state", "[]")
        return [check_rate(owner, "zoneout", z) for z in zoneout]
    return check_rate(owner, "zoneout", zoneout)


def check_bool(owner: Any, argument: str, value: Any) -> bool:
    """``True`` or ``False`` (NumPy bools accepted, integers not)."""
    if not _is_bool(value):
        raise invalid_type(owner, argument, "True or False", value)
    return bool(value)


def check_choice(owner: Any, argument: str, value: Any, choices: Iterable,
                 expected: Any = None) -> Any:
    """``value`` if it is one of ``choices`` (a bad choice is a ``ValueError``;
    ``expected`` says what was expected, by default the choices)."""
    choices = tuple(choices)
    if value not in choices:
        if expected is None:
            expected = "one of " + ", ".join(repr(c) for c in choices)
        raise invalid_value(owner, argument, expected, value)
    return value


def check_selection(
    owner: Any,
    argument: str,
    values: Any,
    choices: Iterable,
    allow_empty: bool = False,
    allow_single: bool = False,
) -> list:
    """``values`` as a list, each one of ``choices``.

    A sequence is required (a single string only with ``allow_single``, as a
    selection of one); an empty selection is a bad value unless ``allow_empty``.
    """
    choices = tuple(choices)
    expected = "a sequence of choices from " + ", ".join(repr(c) for c in choices)
    if isinstance(values, str) and allow_single:
        values = [values]
    elif isinstance(values, str) or not isinstance(values, Sequence):
        raise invalid_type(owner, argument, expected, values)
    values = list(values)
    if not values and not allow_empty:
        raise invalid_value(owner, argument, "at least one of " + ", ".join(map(repr, choices)),
                            values)
    for value in values:
        check_choice(owner, argument, value, choices)
    return values


def check_activation(owner: Any, argument: str, identifier: Any):
    """The Keras activation function for ``identifier`` (a name, a callable or None)."""
    if identifier is not None and not isinstance(identifier, (str, dict)) and not callable(
        identifier
    ):
        raise invalid_type(owner, argument, "a Keras activation name or a callable", identifier)
    import keras

    try:
        return keras.activations.get(identifier)
    except (ValueError, TypeError) as error:
        raise invalid_value(
            owner, argument, "a Keras activation name or a callable", identifier
        ) from error
