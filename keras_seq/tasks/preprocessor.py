"""`Preprocessor`: the strings side of a task, saved in its ``.keras`` file."""

from __future__ import annotations

import keras

__all__ = ["Preprocessor"]


@keras.saving.register_keras_serializable(package="keras_seq")
class Preprocessor(keras.layers.Layer):
    """A task's tokenizer and the sizes it reads strings with (KerasHub's preprocessor).

    The tokenizer (`keras_seq.text.CharTokenizer` or `WordPieceTokenizer`)
    is saved as the ``.keras`` file's assets (its ``vocab.txt`` and
    ``tokenizer.json``, as in a run folder); the other settings are the
    layer's config. Each task's preprocessor adds what its strings need:
    the source and target lengths of a translator, the context of a language
    model, the labels of a classifier, the tags of a tagger.

    Args:
        tokenizer: the tokenizer, or None (a preprocessor being loaded gets
            its tokenizer from the file's assets).
        sequence_length: int or None, the most tokens read of an input.
    """

    def __init__(self, tokenizer=None, sequence_length: int | None = None, **kwargs):
        super().__init__(**kwargs)
        from keras_seq._validation import check_positive_int

        self.tokenizer = tokenizer
        self.sequence_length = check_positive_int(type(self).__name__, "sequence_length",
                                                  sequence_length, allow_none=True)

    def save_assets(self, dir_path) -> None:
        if self.tokenizer is not None:
            self.tokenizer.save(dir_path)

    def load_assets(self, dir_path) -> None:
        import os

        from keras_seq import text

        if os.path.isfile(os.path.join(dir_path, text.VOCABULARY_FILE)):
            self.tokenizer = text.load_tokenizer(dir_path)

    def get_config(self) -> dict:
        return {**super().get_config(), "sequence_length": self.sequence_length}
