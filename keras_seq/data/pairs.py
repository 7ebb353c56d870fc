"""Parallel corpora of your own: the TSV reader (`load_tsv`) and the seeded
train/validation/test split (`split_pairs`) that ``keras-seq train --data`` uses.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

from keras_seq._validation import check_int, invalid_value

__all__ = ["load_tsv", "split_pairs"]

def load_tsv(path: str | os.PathLike, max_examples: int | None = None) -> list[tuple[str, str]]:
    """Reads a parallel corpus `source<TAB>target[<TAB>anything]`, one pair a line.

    This is the Tatoeba/Anki export format; fields after the second (such as
    attribution) are ignored. Blank lines are skipped; the file is UTF-8 (a
    leading byte-order mark is allowed).

    Args:
        path: the file.
        max_examples: stop after this many pairs (`None`: read all).

    Returns:
        List of `(source, target)` pairs.

    Raises:
        ValueError: naming the file and 1-based line number, for a line with
            fewer than two fields, an empty source or target, or invalid UTF-8.
    """
    max_examples = check_int("load_tsv", "max_examples", max_examples, minimum=0, allow_none=True)
    path = os.fspath(path)
    pairs: list[tuple[str, str]] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if max_examples is not None and len(pairs) >= max_examples:
                break
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error}).") from None
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise ValueError(
                    f"{path}, line {number}: expected source<TAB>target, found no tab "
                    f"in {line[:60]!r}."
                )
            source, target = fields[0], fields[1]
            for field_name, value in (("source", source), ("target", target)):
                if not value.strip():
                    raise ValueError(f"{path}, line {number}: empty {field_name} in {line[:60]!r}.")
            pairs.append((source, target))
    return pairs


def split_pairs(
    pairs: Sequence[tuple[str, str]], validation_size: int, test_size: int, seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """Shuffles a corpus with ``seed`` and splits it into train, validation and test.

    The split ``keras-seq train --data FILE.tsv`` uses: after the shuffle,
    the first ``min(test_size, max(1, n // 10))`` pairs are the test split,
    the next ``min(validation_size, max(1, n // 20))`` the validation split,
    the rest the training split. The same arguments give the same split, so
    the test pairs can be drawn again later (`keras_seq.export.export_run`).

    Args:
        pairs: at least 3 ``(source, target)`` pairs.
        validation_size: the most validation pairs.
        test_size: the most test pairs.
        seed: seed of the shuffle.

    Returns:
        ``{"train": [...], "validation": [...], "test": [...]}`` as `date_task`.

    Examples:
        >>> split = split_pairs([(str(i), str(i)) for i in range(40)], 10, 10)
        >>> [len(split[k]) for k in ("train", "validation", "test")]
        [34, 2, 4]
    """
    where = "split_pairs"
    validation_size = check_int(where, "validation_size", validation_size, minimum=1)
    test_size = check_int(where, "test_size", test_size, minimum=1)
    pairs = list(pairs)
    if len(pairs) < 3:
        raise invalid_value(where, "pairs", "at least 3 pairs", f"{len(pairs)} pairs")
    random.Random(check_int(where, "seed", seed)).shuffle(pairs)
    n_test = min(test_size, max(1, len(pairs) // 10))
    n_validation = min(validation_size, max(1, len(pairs) // 20))
    return {
        "train": pairs[n_test + n_validation :],
        "validation": pairs[n_test : n_test + n_validation],
        "test": pairs[:n_test],
    }
