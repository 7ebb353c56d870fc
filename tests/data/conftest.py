"""Fixtures shared by the tests of `keras_seq.data`: a small date task and
character tokenizers fitted to it."""

import pytest

from keras_seq import data, text


@pytest.fixture(scope="module")
def small_task():
    return data.date_task(train_size=3000, validation_size=500, test_size=500, seed=7)


@pytest.fixture(scope="module")
def tokenizers(small_task):
    source = text.CharTokenizer.from_corpus(s for s, _ in small_task["train"])
    target = text.CharTokenizer.from_corpus(t for _, t in small_task["train"])
    return source, target
