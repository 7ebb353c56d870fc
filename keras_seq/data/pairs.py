"""Data of your own in TSV files: parallel corpora (`load_tsv`, split by
`split_pairs`) that ``keras-seq train --data`` translates, and labelled texts
(`load_labelled_tsv`, split by label by `split_labelled`) that
``keras-seq train --task classify`` classifies.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence

from keras_seq._validation import ArgumentValueError, check_float, check_int, invalid_value

__all__ = ["load_labelled_tsv", "load_tsv", "split_labelled", "split_pairs"]


def _tsv_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(1-based line number, line)`` of each non-blank line of a UTF-8 file, line
    ends dropped (a leading byte-order mark is allowed)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise ArgumentValueError(None, f"{path}, line {number}: not valid UTF-8 ({error}).") from None
            line = line.rstrip("\r\n")
            if line.strip():
                yield number, line


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
    if max_examples == 0:
        return pairs
    for number, line in _tsv_lines(path):
        fields = line.split("\t")
        if len(fields) < 2:
            raise ArgumentValueError(
                None, f"{path}, line {number}: expected source<TAB>target, found no tab "
                f"in {line[:60]!r}."
            )
        source, target = fields[0], fields[1]
        for field_name, value in (("source", source), ("target", target)):
            if not value.strip():
                raise ArgumentValueError(
                    None, f"{path}, line {number}: empty {field_name} in {line[:60]!r}.")
        pairs.append((source, target))
        if len(pairs) == max_examples:  # the lines after it are not read
            break
    return pairs


def load_labelled_tsv(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Reads labelled texts ``label<TAB>text``, one a line.

    The label is the field before the first tab, with surrounding whitespace
    removed (any other string is a label); the text is the rest of the line,
    kept as it is (tabs included). Blank lines are skipped; the file is UTF-8
    (a leading byte-order mark is allowed).

    Args:
        path: the file.

    Returns:
        List of ``(label, text)`` pairs, in file order.

    Raises:
        ValueError: naming the file and 1-based line number, for a line without
            a tab, an empty label or text, or invalid UTF-8.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "reviews.tsv")
        >>> _ = open(path, "w").write("pos\\tA fine film.\\nneg \\tDull.\\tToo long.\\n")
        >>> load_labelled_tsv(path)
        [('pos', 'A fine film.'), ('neg', 'Dull.\\tToo long.')]
    """
    path = os.fspath(path)
    examples: list[tuple[str, str]] = []
    for number, line in _tsv_lines(path):
        label, tab, text = line.partition("\t")
        label = label.strip()
        if not tab:
            raise ArgumentValueError(
                None, f"{path}, line {number}: expected label<TAB>text, found no tab in "
                f"{line[:60]!r}."
            )
        for field_name, value in (("label", label), ("text", text)):
            if not value.strip():
                raise ArgumentValueError(
                    None, f"{path}, line {number}: empty {field_name} in {line[:60]!r} "
                    "(expected label<TAB>text)."
                )
        examples.append((label, text))
    return examples


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


def split_labelled(
    examples: Sequence[tuple[str, str]],
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Splits labelled texts into train, validation and test, stratified by label.

    The split of ``keras-seq train --task classify``: the test split takes
    round(``test_fraction`` · n) texts and the validation split
    round(``validation_fraction`` · n), shared among the labels in proportion
    to their counts (each label gets the whole part of its share, and the
    texts left over go to the labels with the largest remainders, ties to the
    first label in sorted order), so that every split has about the labels'
    proportions; every label keeps at least one training text. Which texts of a
    label go where is drawn with ``seed``; each split is shuffled. The same
    arguments give the same split.

    Args:
        examples: ``(label, text)`` pairs (`load_labelled_tsv`).
        validation_fraction: float in [0, 1), the validation share.
        test_fraction: float in [0, 1), the test share.
        seed: seed of the draw.

    Returns:
        ``{"train": [...], "validation": [...], "test": [...]}`` lists of
        ``(label, text)``.

    Examples:
        >>> examples = [("a", str(i)) for i in range(30)] + [("b", str(i)) for i in range(10)]
        >>> split = split_labelled(examples, seed=0)
        >>> [sorted({lab: sum(1 for l, _ in split[k] if l == lab) for lab in "ab"}.items())
        ...  for k in ("train", "validation", "test")]
        [[('a', 24), ('b', 8)], [('a', 3), ('b', 1)], [('a', 3), ('b', 1)]]
    """
    where = "split_labelled"
    fractions = [
        check_float(where, name, value, low=0.0, high=1.0, high_inclusive=False)
        for name, value in (("test_fraction", test_fraction),
                            ("validation_fraction", validation_fraction))
    ]
    rng = random.Random(check_int(where, "seed", seed))
    by_label: dict[str, list[tuple[str, str]]] = {}
    for example in examples:
        if len(example) != 2 or not all(isinstance(s, str) for s in example):
            raise invalid_value(where, "examples", "(label, text) pairs of str", example)
        by_label.setdefault(example[0], []).append(example)
    labels = sorted(by_label)
    for label in labels:
        rng.shuffle(by_label[label])
    counts = [len(by_label[label]) for label in labels]
    # Held-out texts per label, test first; one text of each label stays to train.
    spare = [n - 1 for n in counts]
    held = []
    for fraction in fractions:
        taken = _shares(counts, fraction, spare)
        spare = [s - t for s, t in zip(spare, taken)]
        held.append(taken)
    split = {"train": [], "validation": [], "test": []}
    for label, n_test, n_validation in zip(labels, *held):
        items = by_label[label]
        split["test"] += items[:n_test]
        split["validation"] += items[n_test : n_test + n_validation]
        split["train"] += items[n_test + n_validation :]
    for part in split.values():
        rng.shuffle(part)
    return split


def _shares(counts: list[int], fraction: float, capacity: list[int]) -> list[int]:
    """round(fraction · sum(counts)) texts shared by largest remainders, at most
    ``capacity[i]`` for label i."""
    total = int(fraction * sum(counts) + 0.5)
    quotas = [fraction * n for n in counts]
    shares = [min(int(q), c) for q, c in zip(quotas, capacity)]
    # Largest remainder first; among equal ones, the first label.
    order = sorted(range(len(counts)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    while sum(shares) < total and any(s < c for s, c in zip(shares, capacity)):
        for i in order:
            if sum(shares) < total and shares[i] < capacity[i]:
                shares[i] += 1
    return shares
