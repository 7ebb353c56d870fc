"""The date task (`keras_seq.data.dates`), checked by an independent strptime parser."""

import collections
import datetime
import re
import time

import numpy as np
import pytest

from keras_seq import data

# The formats the task promises, written as strptime patterns; an ordinal day
# ("21st") is checked separately and then read as %d.
_STRPTIME_FORMATS = (
    "%A, %d %B %Y",
    "%A %d %B %Y",
    "%a, %d %b %Y",
    "%A, %B %d, %Y",
    "%a, %b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%d %b %y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%d of %B %Y",
    "%d-%b-%Y",
    "%d-%b-%y",
    "%Y %m %d",
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%Y.%m.%d",
    "%Y%m%d",
    "%d.%m.%Y",
    "%d.%m.%y",
    "%d/%m/%Y",
    "%d/%m/%y",
    "%d-%m-%Y",
    "%d-%m-%y",
    "%d %m %Y",
)
_ORDINAL = re.compile(r"\b(\d{1,2})(st|nd|rd|th)\b", re.IGNORECASE)


def _english_ordinal_suffix(n):
    if 10 <= n % 100 <= 20:
        return "th"
    return ["th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th"][n % 10]


def _parse_all(source):
    """Every (date, format) that `source` can be read as, over all promised formats."""

    def strip_ordinal(match):
        day, suffix = int(match.group(1)), match.group(2).lower()
        assert suffix == _english_ordinal_suffix(day), source
        return match.group(1)

    plain = _ORDINAL.sub(strip_ordinal, source)
    readings = set()
    for pattern in _STRPTIME_FORMATS:
        try:
            parsed = time.strptime(plain, pattern)
        except ValueError:
            continue
        date = datetime.date(parsed.tm_year, parsed.tm_mon, parsed.tm_mday)
        # strptime reads a weekday name without checking it against the date.
        if "%a" in pattern.lower():
            assert parsed.tm_wday == date.weekday(), source
        readings.add((date, pattern))
    return readings


def _posix_pivot(two_digits):
    return (1900 if two_digits >= 69 else 2000) + two_digits


def test_every_source_names_exactly_its_target(small_task):
    used_patterns = set()
    cases = collections.Counter()
    for split in small_task.values():
        for source, target in split:
            readings = _parse_all(source)
            dates = {date for date, _ in readings}
            assert dates == {datetime.date.fromisoformat(target)}, (source, target, readings)
            used_patterns |= {pattern for _, pattern in readings}
            letters = re.sub(r"[^A-Za-z]", "", source)
            if letters:
                cases[
                    "lower" if letters.islower() else "upper" if letters.isupper() else "mixed"
                ] += 1
    assert used_patterns == set(_STRPTIME_FORMATS)
    assert min(cases.values()) > 0 and len(cases) == 3


def test_two_digit_years_follow_posix_pivot(small_task):
    seen_centuries = set()
    for source, target in small_task["train"]:
        match = re.fullmatch(r"\d{1,2}[./-]\d{1,2}[./-](\d{2})|\d{1,2}[ -]\w{3}[ -](\d{2})", source)
        if match:
            two_digits = int(match.group(1) or match.group(2))
            assert int(target[:4]) == _posix_pivot(two_digits), source
            seen_centuries.add(target[:2])
    assert seen_centuries == {"19", "20"}


def test_targets_are_iso_dates_spread_over_the_century(small_task):
    dates = [datetime.date.fromisoformat(t) for split in small_task.values() for _, t in split]
    for split in small_task.values():
        for _, target in split:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target)
    assert min(dates) >= datetime.date(1969, 1, 1) and max(dates) <= datetime.date(2068, 12, 31)
    # Uniform over 36,525 days: each decade holds ~10% of the 4,000 dates.
    decades = np.bincount([(d.year - 1969) // 10 for d in dates], minlength=10)
    assert (
        decades.size == 10
        and decades.min() > 0.07 * len(dates)
        and decades.max() < 0.13 * len(dates)
    )


def test_splits_are_disjoint_and_sized(small_task):
    sources = {name: [s for s, _ in pairs] for name, pairs in small_task.items()}
    assert {name: len(s) for name, s in sources.items()} == {
        "train": 3000,
        "validation": 500,
        "test": 500,
    }
    all_sources = [s for split in sources.values() for s in split]
    assert len(set(all_sources)) == len(all_sources)


def test_date_task_is_deterministic_in_seed(small_task):
    again = data.date_task(train_size=3000, validation_size=500, test_size=500, seed=7)
    other = data.date_task(train_size=3000, validation_size=500, test_size=500, seed=8)
    assert again == small_task
    assert data.date_task(3000, 500, 500, seed=np.int64(7)) == small_task
    assert other["train"] != small_task["train"]


def test_test_split_does_not_depend_on_train_size(small_task):
    smaller = data.date_task(train_size=10, validation_size=500, test_size=500, seed=7)
    assert smaller["test"] == small_task["test"]
    assert smaller["train"] == small_task["train"][:10]


def test_date_task_rejects_bad_sizes():
    with pytest.raises(ValueError, match="train_size"):
        data.date_task(train_size=-1)
    with pytest.raises(ValueError, match="test_size"):
        data.date_task(test_size=2.5)
    with pytest.raises(TypeError, match="seed"):
        data.date_task(seed="0")
