"""`SequenceTagger`: one tag per token of a text (parts of speech, named entities, ...).

A bidirectional recurrent tagger over words and their characters, in the
shape of Plank et al. (2016) and Ma & Hovy (2016): each token is read as its
lower-cased word's embedding (``[UNK]`` for a word outside the vocabulary,
and for a random share of the training words, so that unknown words are
learned) beside a character CNN's max-pooled features of its spelling (case
kept); ``num_layers`` bidirectional recurrent layers of any registered cell
read the sentence; dropout and a linear layer give each token's tag logits.

Its `SequenceTaggerPreprocessor` holds the three vocabularies (words,
characters, tags) and turns strings into the model's inputs with TensorFlow
ops: the same ids in `SequenceTagger.tag`, in training and in the exported
SavedModel. `sequence_tagger` builds one.
"""

from __future__ import annotations

import json
import os

import keras
from keras import ops

from keras_seq.reserved_tokens import PAD_ID, UNK_ID
from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.task import Task

__all__ = [
    "CharacterCNN",
    "SequenceTagger",
    "SequenceTaggerPreprocessor",
    "VOCABULARIES_FILE",
    "WordDropout",
    "sequence_tagger",
    "tagger_vocabularies",
]

VOCABULARIES_FILE = "vocabularies.json"
"""The file that holds a tagger's words, characters and tags (its ``.keras``
file's assets, a run folder, a TFLite export's folder)."""

_RESERVED = ("[PAD]", "[UNK]")
# Texts tagged at once by `SequenceTagger.predict` and `tag`.
_BATCH = 256


@keras.saving.register_keras_serializable(package="keras_seq")
class SequenceTaggerPreprocessor(Preprocessor):
    """A tagger's strings: its word, character and tag vocabularies.

    A text is split on whitespace into tokens. Each token's word id is its
    lower-cased form's index in ``words`` (`UNK_ID` outside it); its
    characters' ids are their indices in ``characters`` (`UNK_ID` outside),
    ``word_length`` of them: a longer token keeps its first
    ``word_length // 2`` and its last ``word_length - word_length // 2``
    characters (its prefix and suffix). Padding is id 0 throughout. Tag id
    ``i`` is ``tags[i]``.

    Args:
        words: the word vocabulary, ``"[PAD]"`` and ``"[UNK]"`` first, then
            lower-cased words.
        characters: the character vocabulary, ``"[PAD]"`` and ``"[UNK]"`` first.
        tags: the tag names, in tag id order.
        word_length: int, the most characters read of a token.
    """

    def __init__(self, words=None, characters=None, tags=None, word_length: int = 16,
                 lowercase: bool = True, **kwargs):
        kwargs.pop("sequence_length", None)
        super().__init__(None, None, **kwargs)
        from keras_seq._validation import check_bool, check_positive_int

        where = "SequenceTaggerPreprocessor"
        self.word_length = check_positive_int(where, "word_length", word_length)
        self.lowercase = check_bool(where, "lowercase", lowercase)
        self.words = self.characters = self.tags = None
        self._tables = None
        if words is not None or characters is not None or tags is not None:
            self._set_vocabularies(words, characters, tags)

    def _set_vocabularies(self, words, characters, tags) -> None:
        from keras_seq._validation import ArgumentValueError

        where = "SequenceTaggerPreprocessor"
        for name, vocabulary in (("words", words), ("characters", characters)):
            if vocabulary is None or list(vocabulary[:2]) != list(_RESERVED):
                raise ArgumentValueError(
                    where, f"`{name}` must be a list of strings starting with "
                    f"{list(_RESERVED)} (ids {PAD_ID} and {UNK_ID}); received "
                    f"{None if vocabulary is None else list(vocabulary[:3])!r}...")
        if not tags:
            raise ArgumentValueError(where, f"`tags` must name at least one tag; received {tags!r}.")
        self.words = [str(w) for w in words]
        self.characters = [str(c) for c in characters]
        self.tags = [str(t) for t in tags]
        self._tables = None

    @property
    def vocabulary_size(self) -> int:
        """The number of word ids (the run folder's ``vocabulary_size``)."""
        return len(self.words)

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("sequence_length", None)
        return {**config, "word_length": self.word_length, "lowercase": self.lowercase}

    # --- files ---

    def save(self, directory) -> None:
        """Writes `VOCABULARIES_FILE` into ``directory``: ``{"words": [...],
        "characters": [...], "tags": [...], "word_length": n, "lowercase": true}``."""
        with open(os.path.join(directory, VOCABULARIES_FILE), "w", encoding="utf-8") as f:
            json.dump({"words": self.words, "characters": self.characters, "tags": self.tags,
                       "word_length": self.word_length, "lowercase": self.lowercase}, f,
                      ensure_ascii=False)

    def save_assets(self, dir_path) -> None:
        self.save(dir_path)

    def load_assets(self, dir_path) -> None:
        with open(os.path.join(dir_path, VOCABULARIES_FILE), encoding="utf-8") as f:
            saved = json.load(f)
        self._set_vocabularies(saved["words"], saved["characters"], saved["tags"])

    # --- strings to ids (TensorFlow ops) ---

    def lookup_tables(self):
        """The word and character lookup tables (TensorFlow resources an export saves)."""
        import tensorflow as tf

        if self._tables is None:
            def table(vocabulary):
                keys = tf.constant(vocabulary[len(_RESERVED):], tf.string)
                values = tf.range(len(_RESERVED), len(vocabulary), dtype=tf.int64)
                return tf.lookup.StaticHashTable(
                    tf.lookup.KeyValueTensorInitializer(keys, values), UNK_ID)

            self._tables = (table(self.words), table(self.characters))
        return self._tables

    def split(self, texts):
        """Each text's tokens (whitespace-separated): a ``tf.RaggedTensor`` ``(B, None)``."""
        import tensorflow as tf

        return tf.strings.split(tf.convert_to_tensor(texts, tf.string))

    def token_ids(self, tokens, ragged: bool = False):
        """``(word_ids (B, T), char_ids (B, T, word_length))`` int32 of a batch of
        token lists (a ``tf.RaggedTensor`` ``(B, None)`` of strings, or a list of
        lists), padded with 0 to the longest; ``ragged``: as ``tf.RaggedTensor``s
        ``(B, None)`` and ``(B, None, word_length)``, unpadded."""
        import tensorflow as tf

        if not isinstance(tokens, tf.RaggedTensor):
            tokens = [list(t) for t in tokens]
            tokens = tf.RaggedTensor.from_row_lengths(
                tf.constant([t for row in tokens for t in row], tf.string),
                tf.constant([len(row) for row in tokens], tf.int64))
        word_table, char_table = self.lookup_tables()
        words = tokens.flat_values
        if self.lowercase:
            words = tf.strings.lower(words, encoding="utf-8")
        word_ids = tokens.with_flat_values(tf.cast(word_table.lookup(words), tf.int32))
        characters = tf.strings.unicode_split(tokens.flat_values, "UTF-8")  # (N, None)
        char_ids = tf.cast(char_table.lookup(characters.to_tensor("")), tf.int32)  # (N, L)
        lengths = tf.cast(characters.row_lengths(), tf.int32)  # (N,)
        char_ids = _prefix_and_suffix(char_ids, lengths, self.word_length)  # (N, C)
        char_ids = tokens.with_flat_values(char_ids)
        if ragged:
            return word_ids, char_ids
        return (word_ids.to_tensor(PAD_ID),
                char_ids.to_tensor(PAD_ID, shape=[None, None, self.word_length]))

    def __call__(self, texts):
        """The model's inputs ``{"word_ids", "char_ids"}`` of a batch of texts."""
        word_ids, char_ids = self.token_ids(self.split(texts))
        return {"word_ids": word_ids, "char_ids": char_ids}


def _prefix_and_suffix(char_ids, lengths, width: int):
    """``(N, width)`` ids of each token's characters ``char_ids`` ``(N, L)``
    (``lengths`` real ones each): all of them, padded with 0, or for a longer
    token its first ``width // 2`` and last ``width - width // 2``."""
    import tensorflow as tf

    head = width // 2
    positions = tf.range(width)[None, :]  # (1, C)
    lengths = lengths[:, None]  # (N, 1)
    source = tf.where((lengths > width) & (positions >= head), lengths - width + positions,
                      positions)
    padded = tf.pad(char_ids, [[0, 0], [0, width]])  # every source index exists
    taken = tf.gather(padded, source, batch_dims=1)
    return tf.where(positions < tf.minimum(lengths, width), taken, PAD_ID)


def tagger_vocabularies(sentences, min_word_count: int = 1, lowercase: bool = True):
    """``(words, characters, tags)`` of tagged training sentences (lists of
    ``(token, tag)``): the words (lower-cased with ``lowercase``) seen at
    least ``min_word_count`` times and every character, most frequent first
    (ties in first-seen order), after ``"[PAD]"`` and ``"[UNK]"``; the tags
    sorted."""
    from collections import Counter

    word_counts, char_counts, tags = Counter(), Counter(), set()
    for sentence in sentences:
        for token, tag in sentence:
            word_counts[token.lower() if lowercase else token] += 1
            char_counts.update(token)
            tags.add(tag)
    words = [w for w, n in word_counts.most_common() if n >= min_word_count]
    characters = [c for c, _ in char_counts.most_common()]
    return [*_RESERVED, *words], [*_RESERVED, *characters], sorted(tags)


@keras.saving.register_keras_serializable(package="keras_seq")
class WordDropout(keras.layers.Layer):
    """In training, replaces each word id by `UNK_ID` with probability
    ``rate`` (padding kept), so that the model learns to tag an unknown word
    from its spelling and its context, and leans on the words' embeddings
    less; the identity at inference (Kiperwasser and Goldberg's word dropout,
    2016, at one rate for every word: dropping the rare words alone
    overfitted, benchmarks/RESULTS.md).

    Args:
        rate: float in [0, 1).
        seed: int or None.
    """

    def __init__(self, rate: float = 0.25, seed=None, **kwargs):
        super().__init__(**kwargs)
        from keras_seq._validation import check_rate

        self.rate = check_rate("WordDropout", "rate", rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def call(self, word_ids, training=False):
        if not training or self.rate == 0:
            return word_ids
        drop = keras.random.uniform(ops.shape(word_ids), seed=self.seed_generator) < self.rate
        return ops.where(drop & ops.not_equal(word_ids, PAD_ID), UNK_ID, word_ids)

    def compute_output_spec(self, word_ids, training=False):
        return keras.KerasTensor(word_ids.shape, word_ids.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


@keras.saving.register_keras_serializable(package="keras_seq")
class SequenceTagger(Task):
    """A sequence tagger: ``{"word_ids" (B, T), "char_ids" (B, T, C)}`` -> tag
    logits ``(B, T, num_tags)``.

    Its backbone reads the tokens into hidden states ``(B, T, d)``; dropout
    and a linear layer give each token's tag logits (KerasHub's token
    classifiers' shape). The logits carry the word ids' padding mask, so a
    padded position counts in no loss or metric. `sequence_tagger` builds one.

    Args:
        backbone: a `keras.Model` of the same inputs -> ``(B, T, d)``.
        num_tags: int.
        dropout: float, before the linear layer.
        output_layer: the linear layer (default: a new ``Dense(num_tags)``
            named ``"tag_logits"``).
        preprocessor: a `SequenceTaggerPreprocessor`, for strings.
    """

    _PARTS = ("backbone", "output_layer")
    _VALUES = ("num_tags", "dropout")

    def __init__(self, backbone=None, num_tags: int = 2, dropout: float = 0.33,
                 output_layer=None, preprocessor=None, **kwargs):
        from keras_seq._validation import check_positive_int, check_rate

        where = "SequenceTagger"
        num_tags = check_positive_int(where, "num_tags", num_tags)
        dropout = check_rate(where, "dropout", dropout)
        inputs = {"word_ids": keras.Input((None,), dtype="int32", name="word_ids"),
                  "char_ids": keras.Input((None, None), dtype="int32", name="char_ids")}
        hidden = backbone(inputs)
        hidden = keras.layers.Dropout(dropout, name="tag_dropout")(hidden)
        if output_layer is None:
            output_layer = keras.layers.Dense(num_tags, dtype="float32", name="tag_logits")
        logits = output_layer(hidden)
        kwargs.setdefault("name", "sequence_tagger")
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)
        self.backbone = backbone
        self.num_tags = num_tags
        self.dropout = dropout
        self.output_layer = output_layer

    # --- strings ---

    def predict(self, x, *args, batch_size=None, **kwargs):
        """Each text's tag probabilities: a list of ``(tokens, num_tags)`` float32
        arrays, one per text of a list of texts (or one text), read
        ``batch_size`` at a time (default 256); any other ``x`` is Keras'
        ``predict`` (the logits)."""
        if not _are_texts(x):
            return super().predict(x, *args, batch_size=batch_size, **kwargs)
        texts = [x] if isinstance(x, str) else list(x)
        return [p for _, p in self._tagged(texts, batch_size or _BATCH, "predict")]

    def tag(self, texts, batch_size: int = _BATCH) -> list[list[tuple[str, str]]]:
        """Each text's ``(token, tag)`` pairs: its whitespace-separated tokens and
        their most probable tags (a text, or a list of texts)."""
        from keras_seq._validation import invalid_type

        if not (isinstance(texts, str) or (isinstance(texts, (list, tuple))
                                           and all(isinstance(t, str) for t in texts))):
            raise invalid_type("SequenceTagger.tag", "texts", "a str or a list of str", texts)
        tags = self._require_preprocessor("tag").tags
        texts = [texts] if isinstance(texts, str) else list(texts)
        return [[(token, tags[i]) for token, i in zip(tokens, p.argmax(-1))]
                for tokens, p in self._tagged(texts, batch_size, "tag")]

    def tag_probabilities(self, word_ids, char_ids):
        """The softmax over the tags ``(B, T, num_tags)`` float32 of a batch of ids
        (`SequenceTaggerPreprocessor.token_ids`), in one `tf.function` traced
        once per tagger."""
        import tensorflow as tf

        function = getattr(self, "_tag_probabilities", None)
        if function is None:
            @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                          tf.TensorSpec([None, None, None], tf.int32)],
                         autograph=False)
            def function(word_ids, char_ids):
                logits = self({"word_ids": word_ids, "char_ids": char_ids}, training=False)
                return tf.nn.softmax(tf.cast(logits, tf.float32))

            object.__setattr__(self, "_tag_probabilities", function)
        return function(word_ids, char_ids)

    def _tagged(self, texts, batch_size, method):
        """``(tokens, probabilities (tokens, num_tags))`` of each text."""
        preprocessor = self._require_preprocessor(method)
        out = []
        for start in range(0, len(texts), batch_size):
            tokens = preprocessor.split(texts[start : start + batch_size])
            word_ids, char_ids = preprocessor.token_ids(tokens)
            batch = self.tag_probabilities(word_ids, char_ids).numpy()
            for row, words in enumerate(tokens.to_list()):
                out.append(([w.decode("utf-8") for w in words], batch[row, : len(words)]))
        return out


def _are_texts(x) -> bool:
    return isinstance(x, str) or (isinstance(x, (list, tuple)) and bool(x)
                                  and all(isinstance(t, str) for t in x))


@keras.saving.register_keras_serializable(package="keras_seq")
class CharacterCNN(keras.layers.Layer):
    """A token's spelling as one vector: character embeddings ``(B, T, C, e)``,
    a convolution of each of ``widths`` characters with ``filters`` ReLU
    outputs, and each output's maximum over the token's real characters,
    concatenated (``(B, T, filters * len(widths))``; zeros for a padding
    token, which the output's mask marks). A window reaching past the word
    sees the padding character's embedding, so that a filter can find a
    suffix or a prefix. Each convolution is a ``(1, width)`` Conv2D over
    ``(B, T, C)``, which TensorFlow Lite runs as a builtin.

    Args:
        vocabulary_size: int, character ids (0 = padding).
        embedding_dim: int.
        filters: int, per width.
        widths: ints, the characters of each convolution's window.
    """

    def __init__(self, vocabulary_size: int, embedding_dim: int = 32, filters: int = 64,
                 widths=(3, 5), **kwargs):
        super().__init__(**kwargs)
        from keras_seq._validation import check_positive_int

        where = "CharacterCNN"
        self.vocabulary_size = check_positive_int(where, "vocabulary_size", vocabulary_size)
        self.embedding_dim = check_positive_int(where, "embedding_dim", embedding_dim)
        self.filters = check_positive_int(where, "filters", filters)
        self.widths = tuple(check_positive_int(where, "widths", w) for w in widths)
        self.embedding = keras.layers.Embedding(vocabulary_size, embedding_dim,
                                                name="character_embedding")
        self.convolutions = [
            keras.layers.Conv2D(filters, (1, w), padding="same", activation="relu",
                                name=f"character_convolution_{w}") for w in self.widths]
        # Its output carries the tokens' padding mask (a token without a
        # character is padding): the word embedding's mask survives the
        # concatenation, which takes any position that one input keeps.
        self.supports_masking = True

    def build(self, char_ids_shape):
        self.embedding.build(char_ids_shape)
        for convolution in self.convolutions:
            convolution.build((*char_ids_shape, self.embedding_dim))

    def call(self, char_ids):
        x = self.embedding(char_ids)  # (B, T, C, e)
        real = ops.expand_dims(ops.cast(ops.not_equal(char_ids, PAD_ID), x.dtype), -1)
        pooled = [ops.max(convolution(x) * real, axis=2) for convolution in self.convolutions]
        return pooled[0] if len(pooled) == 1 else ops.concatenate(pooled, axis=-1)

    def compute_mask(self, char_ids, previous_mask=None):
        return ops.any(ops.not_equal(char_ids, PAD_ID), axis=-1)

    def compute_output_shape(self, char_ids_shape):
        return (*char_ids_shape[:2], self.filters * len(self.widths))

    def get_config(self) -> dict:
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim, "filters": self.filters,
                "widths": list(self.widths)}


def sequence_tagger(
    word_vocabulary_size: int,
    character_vocabulary_size: int,
    num_tags: int,
    cell: str = "lstm",
    units: int = 128,
    num_layers: int = 2,
    word_dim: int = 100,
    character_dim: int = 32,
    character_filters: int = 64,
    character_widths=(3, 5),
    word_dropout: float = 0.25,
    dropout: float = 0.33,
    preprocessor=None,
    name: str = "sequence_tagger",
) -> SequenceTagger:
    """A bidirectional recurrent tagger over words and characters.

    Word ids -> `WordDropout` -> embedding (``word_dim``, padding masked);
    character ids -> `CharacterCNN` (``character_dim``, ``character_filters``
    for each of ``character_widths``); the two concatenated, dropout, ``num_layers``
    bidirectional recurrent layers of ``units`` per direction (any
    registered ``cell``), dropout between them; dropout and
    the tag logits.

    Args:
        word_vocabulary_size: int, word ids (0 = padding, 1 = unknown).
        character_vocabulary_size: int, character ids.
        num_tags: int.
        cell: a registered cell's name (`keras_seq.layers.register_cell`).
        units: int, recurrent units per direction.
        num_layers: int.
        word_dim: int, the word embeddings' width.
        character_dim: int, the character embeddings' width.
        character_filters: int, the character CNN's filters per window.
        character_widths: ints, the character CNN's windows.
        word_dropout: float, the share of training words read as unknown.
        dropout: float, on the token features, between the layers and before
            the logits.
        preprocessor: a `SequenceTaggerPreprocessor`, or None.
        name: the model's name.

    Returns:
        A `SequenceTagger`.

    Examples:
        >>> model = sequence_tagger(50, 20, 5, units=8, num_layers=1)
        >>> inputs = {"word_ids": keras.ops.ones((2, 7), "int32"),
        ...           "char_ids": keras.ops.ones((2, 7, 16), "int32")}
        >>> tuple(model(inputs).shape)
        (2, 7, 5)
    """
    from keras_seq._validation import check_positive_int, check_rate
    from keras_seq.layers import Bidirectional
    from keras_seq.layers.recurrent.registry import check_cell, recurrent_layer

    where = "sequence_tagger"
    word_vocabulary_size = check_positive_int(where, "word_vocabulary_size",
                                              word_vocabulary_size)
    character_vocabulary_size = check_positive_int(where, "character_vocabulary_size",
                                                   character_vocabulary_size)
    units = check_positive_int(where, "units", units)
    num_layers = check_positive_int(where, "num_layers", num_layers)
    word_dim = check_positive_int(where, "word_dim", word_dim)
    dropout = check_rate(where, "dropout", dropout)
    check_cell(cell, where)
    word_ids = keras.Input((None,), dtype="int32", name="word_ids")
    char_ids = keras.Input((None, None), dtype="int32", name="char_ids")
    words = WordDropout(word_dropout, name="word_dropout")(word_ids)
    words = keras.layers.Embedding(word_vocabulary_size, word_dim, mask_zero=True,
                                   name="word_embedding")(words)
    spelling = CharacterCNN(character_vocabulary_size, character_dim, character_filters,
                            character_widths, name="character_cnn")(char_ids)
    x = keras.layers.Concatenate(name="token_features")([words, spelling])
    x = keras.layers.Dropout(dropout, name="feature_dropout")(x)
    for i in range(num_layers):
        if i:
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
        x = Bidirectional(recurrent_layer(cell, units, return_sequences=True),
                          name=f"bidirectional_{i}")(x)
    backbone = keras.Model({"word_ids": word_ids, "char_ids": char_ids}, x, name="encoder")
    return SequenceTagger(backbone, num_tags, dropout, preprocessor=preprocessor, name=name)
