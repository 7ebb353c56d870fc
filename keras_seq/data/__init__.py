"""Data: the embedded date-normalisation task, a TSV loader, text for language
models, the Neural Turing Machine's tasks and the tf.data pipelines.

One module per kind of data; every public name is importable from
``keras_seq.data`` itself:

- `keras_seq.data.dates`: the date-normalisation task (`date_task`), which
  ships with the package and needs no download.
- `keras_seq.data.pairs`: data of your own in TSV files: parallel corpora
  (`load_tsv`, split into train, validation and test by `split_pairs`) and
  labelled texts (`load_labelled_tsv`, split by label by `split_labelled`).
- `keras_seq.data.pipeline`: the teacher-forcing `tf.data` pipeline of
  sequence-to-sequence pairs (`make_dataset`), with length bucketing, the
  pipeline of labelled texts (`make_classification_dataset`) and random
  windows of a text (`make_text_dataset`).
- `keras_seq.data.text`: text for character language models
  (`tiny_shakespeare`, `load_text`, `split_text`, `text_windows`).
- `keras_seq.data.algorithmic`: the algorithmic tasks of the Neural Turing
  Machine paper (`copy_task`, `repeat_copy_task`, `associative_recall_task`,
  `priority_sort_task`), scored with `bit_errors`.

The modules of files and text need no TensorFlow; `pipeline` and
`algorithmic` are imported when one of their names is first used.
"""

import importlib
from typing import TYPE_CHECKING

from keras_seq.data.dates import DATE_FORMATS, FIRST_DATE, LAST_DATE, date_task
from keras_seq.data.pairs import load_labelled_tsv, load_tsv, split_labelled, split_pairs
from keras_seq.data.text import (
    HELD_OUT_FRACTION,
    TINY_SHAKESPEARE_SHA256,
    TINY_SHAKESPEARE_URL,
    load_text,
    split_text,
    text_windows,
    tiny_shakespeare,
)

# The modules that build tf.data pipelines are imported on first use, so that
# reading and checking data files (`keras-seq train` does, before anything
# else) does not load TensorFlow.
_TENSORFLOW_MODULES = {
    "keras_seq.data.pipeline": ("classification_ids", "make_classification_dataset",
                                "make_dataset", "make_text_dataset"),
    "keras_seq.data.algorithmic": ("associative_recall_task", "bit_errors", "copy_task",
                                   "priority_sort_task", "repeat_copy_task"),
}
_MODULE_OF = {name: module for module, names in _TENSORFLOW_MODULES.items() for name in names}

if TYPE_CHECKING:  # what the lazy names are, for readers and tools
    from keras_seq.data.algorithmic import (
        associative_recall_task,
        bit_errors,
        copy_task,
        priority_sort_task,
        repeat_copy_task,
    )
    from keras_seq.data.pipeline import (
        classification_ids,
        make_classification_dataset,
        make_dataset,
        make_text_dataset,
    )


def __getattr__(name: str):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keras_seq.data' has no attribute {name!r}")


__all__ = [
    "classification_ids",
    "FIRST_DATE",
    "LAST_DATE",
    "DATE_FORMATS",
    "HELD_OUT_FRACTION",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_URL",
    "date_task",
    "load_labelled_tsv",
    "load_text",
    "load_tsv",
    "make_classification_dataset",
    "make_dataset",
    "make_text_dataset",
    "split_labelled",
    "split_pairs",
    "split_text",
    "text_windows",
    "tiny_shakespeare",
    "copy_task",
    "repeat_copy_task",
    "associative_recall_task",
    "priority_sort_task",
    "bit_errors",
]
