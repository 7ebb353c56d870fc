"""The date-normalisation task: human-written dates -> ISO 8601 (`date_task`).

The task ships with the package and needs no download: dates drawn
uniformly from 1969-01-01 to 2068-12-31, written in one of `DATE_FORMATS`
(weekday and month names, ordinals, numeric day-first dates with `.`, `/`, `-`
or space separators, two-digit years) in original, lower or upper case, paired
with the ISO 8601 date "YYYY-MM-DD". Two-digit years follow the POSIX pivot
(69-99 -> 1969-1999, 00-68 -> 2000-2068), which is why the date range is
exactly the century those years can name; numeric dates are always day first
unless the year comes first with four digits, so every source names one date.
"""

from __future__ import annotations

import datetime
import random

from keras_seq._validation import ArgumentValueError, check_int

__all__ = ["FIRST_DATE", "LAST_DATE", "DATE_FORMATS", "date_task"]

FIRST_DATE = datetime.date(1969, 1, 1)
LAST_DATE = datetime.date(2068, 12, 31)

# Placeholders: {A}/{a} weekday name full/abbreviated, {B}/{b} month name
# full/abbreviated, {d}/{dd} day unpadded/zero-padded, {o} ordinal day ("21st"),
# {m}/{mm} month number unpadded/zero-padded, {Y} four-digit and {y} two-digit year.
DATE_FORMATS = (
    "{A}, {d} {B} {Y}",  # Saturday, 21 November 2026
    "{A} {d} {B} {Y}",
    "{a}, {d} {b} {Y}",  # Sat, 21 Nov 2026
    "{A}, {B} {o}, {Y}",  # Saturday, November 21st, 2026
    "{a}, {b} {d}, {Y}",  # Sat, Nov 21, 2026
    "{d} {B} {Y}",
    "{d} {b} {Y}",  # 21 Nov 2026
    "{dd} {b} {Y}",
    "{d} {b} {y}",  # 21 Nov 26
    "{B} {d}, {Y}",  # November 21, 2026
    "{b} {d}, {Y}",
    "{b} {o}, {Y}",  # Nov 21st, 2026
    "{B} {o}, {Y}",
    "{o} {B} {Y}",  # 21st November 2026
    "{o} of {B} {Y}",  # 21st of November 2026
    "{dd}-{b}-{Y}",  # 21-Nov-2026
    "{dd}-{b}-{y}",
    "{Y} {mm} {dd}",  # 2026 11 21
    "{Y}-{mm}-{dd}",
    "{Y}/{mm}/{dd}",
    "{Y}.{mm}.{dd}",
    "{Y}{mm}{dd}",  # 20261121
    "{dd}.{mm}.{Y}",  # 21.11.2026
    "{d}.{m}.{Y}",
    "{dd}.{mm}.{y}",
    "{dd}/{mm}/{Y}",
    "{dd}/{mm}/{y}",  # 21/11/26
    "{d}/{m}/{y}",
    "{dd}-{mm}-{Y}",
    "{dd}-{mm}-{y}",
    "{dd} {mm} {Y}",
)

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_CASES = (str, str.lower, str.upper)
# Far more distinct strings exist (about 36,525 dates x 31 formats x 3 cases);
# the cap keeps rejection sampling of unseen strings fast.
_MAX_DATE_EXAMPLES = 1_000_000


def _ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}" + {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _date_fields(date: datetime.date) -> dict[str, str]:
    weekday, month = _WEEKDAYS[date.weekday()], _MONTHS[date.month - 1]
    return {
        "A": weekday,
        "a": weekday[:3],
        "B": month,
        "b": month[:3],
        "d": str(date.day),
        "dd": f"{date.day:02d}",
        "o": _ordinal(date.day),
        "m": str(date.month),
        "mm": f"{date.month:02d}",
        "Y": f"{date.year:04d}",
        "y": f"{date.year % 100:02d}",
    }


def date_task(
    train_size: int = 50_000,
    validation_size: int = 5_000,
    test_size: int = 10_000,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Generates the date-normalisation task: human-written dates -> ISO 8601.

    The splits are drawn test first, then validation, then train, from one
    random stream, and no source string is drawn twice, so no input appears in
    two splits (or twice in one), and the test split does not change with
    `train_size`. The same arguments always give the same pairs.

    Args:
        train_size: number of training pairs.
        validation_size: number of validation pairs.
        test_size: number of test pairs.
        seed: seed of the random stream.

    Returns:
        `{"train": [...], "validation": [...], "test": [...]}`, each a list of
        `(source, target)` pairs such as `("Nov 21st, 2026", "2026-11-21")`.

    Examples:
        >>> task = date_task(train_size=3, validation_size=1, test_size=1, seed=1)
        >>> sorted(task)
        ['test', 'train', 'validation']
        >>> len(task["train"])
        3
    """
    sizes = {"test": test_size, "validation": validation_size, "train": train_size}
    sizes = {name: check_int("date_task", f"{name}_size", n, minimum=0) for name, n in sizes.items()}
    if sum(sizes.values()) > _MAX_DATE_EXAMPLES:
        raise ArgumentValueError(
            "date_task", f"at most {_MAX_DATE_EXAMPLES} examples in all, received "
            f"{sum(sizes.values())}."
        )
    seed = check_int("date_task", "seed", seed)

    rng = random.Random(int(seed))
    first = FIRST_DATE.toordinal()
    num_days = LAST_DATE.toordinal() - first + 1
    seen: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    for name, size in sizes.items():
        pairs: list[tuple[str, str]] = []
        while len(pairs) < size:
            date = datetime.date.fromordinal(first + rng.randrange(num_days))
            template = DATE_FORMATS[rng.randrange(len(DATE_FORMATS))]
            source = _CASES[rng.randrange(len(_CASES))](template.format(**_date_fields(date)))
            if source in seen:
                continue
            seen.add(source)
            pairs.append((source, date.isoformat()))
        splits[name] = pairs
    return {"train": splits["train"], "validation": splits["validation"], "test": splits["test"]}
