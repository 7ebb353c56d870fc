"""Language models of a text (``--task lm`` and ``--task bilm``): a `keras_seq.tasks.CausalLM`
or ELMo's `keras_seq.tasks.BidirectionalLM`, trained on random windows of a text and
scored on its whole held-out tenth."""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_seq import model_kinds
from keras_seq._validation import Arg, ArgumentValueError, check_choice, check_int
from keras_seq.recipes.recipe import Recipe, needs, no_beam
from keras_seq.reserved_tokens import RESERVED_TOKENS, UNK_ID

__all__ = [
    "BILM_DEFAULTS",
    "BidirectionalLanguageModel",
    "LM_DEFAULTS",
    "LanguageModel",
    "PreparedText",
    "TOKENIZERS",
    "WORDPIECE_VOCAB_SIZE",
    "learn_wordpiece",
]

# Character language models (task="lm"): nanoGPT's CPU recipe for tiny
# Shakespeare (4 blocks of width 128 and 4 heads, context 64, batch 12,
# dropout 0, warm-up and cosine decay, Adam beta_2 0.99), with 1250 steps
# instead of 2000 and so a 2e-3 peak instead of 1e-3: its validation loss in
# less time on a 2-core CPU (see benchmarks/RESULTS.md). An epoch is
# `steps_per_epoch` batches of random windows.
# The residual recurrent blocks (models.language_model(kind="mingru", ...)):
# the Transformer's recipe, which they reach 1.88 with in less time on the
# 2-core CPU; the xLSTM's sLSTM blocks train step by step, so it takes 750
# steps instead of 1250 to stay within 5 minutes (see benchmarks/RESULTS.md,
# "Parallel recurrences"). The minGRU takes batches of 32 at a peak of 4e-3:
# 1.573 nats/char in 157 s against 1.690 in 82 s with 12 at 2e-3 (issue 44's
# goal: 1.60 within 5 minutes; benchmarks/RESULTS.md, "A better LM").
_BLOCK_LM_DEFAULTS = {"epochs": 5, "steps_per_epoch": 250, "batch_size": 12,
                      "learning_rate": 2e-3, "units": 128, "layers": 4, "context": 64,
                      "validation_size": 256}
LM_DEFAULTS = {
    "transformer": {"epochs": 5, "steps_per_epoch": 250, "batch_size": 12,
                    "learning_rate": 2e-3, "units": 128, "layers": 4, "context": 64,
                    "validation_size": 256},
    "rnn": {"epochs": 6, "steps_per_epoch": 250, "batch_size": 12,
            "learning_rate": 3e-3, "units": 256, "layers": 2, "context": 64,
            "validation_size": 256},
    **{kind: dict(_BLOCK_LM_DEFAULTS) for kind in model_kinds.BLOCK_MODELS},
    "mingru": {**_BLOCK_LM_DEFAULTS, "batch_size": 32, "learning_rate": 4e-3},
    "xlstm": {**_BLOCK_LM_DEFAULTS, "epochs": 3},
}
"""Per ``kind`` of language model: the defaults of ``task="lm"``."""
# ELMo's biLM (task="bilm", models.bidirectional_language_model): two stacks
# of 2 CIFG layers of 128 units each way; 1000 steps of 32 windows of 64
# characters.
BILM_DEFAULTS = {"epochs": 4, "steps_per_epoch": 250, "batch_size": 32,
                 "learning_rate": 3e-3, "units": 128, "layers": 2, "context": 64,
                 "validation_size": 256}
"""The defaults of ``task="bilm"``."""
TOKENIZERS = ("char", "wordpiece")
"""`TrainingConfig.tokenizer` choices: `keras_seq.text.CharTokenizer` or
`keras_seq.text.WordPieceTokenizer` (``task="bilm"`` and ``"classify"``)."""
# About 1.8 characters per token on tiny Shakespeare (1 MB): a 64-token window
# sees about 115 characters, and the embedding and softmax stay small next to
# the recurrent stacks, as befits a text this short.
WORDPIECE_VOCAB_SIZE = 1000
"""The default `TrainingConfig.vocab_size` of ``tokenizer="wordpiece"``."""


class LanguageModel(Recipe):
    """A character language model (`keras_seq.tasks.CausalLM`, `models.language_model`)
    of a text (``data``: a UTF-8 file, by default tiny Shakespeare; the texts
    of a ``.tsv`` file of labelled texts), split as nanoGPT splits it: the
    first 90% trains in random windows of ``context`` characters, the last
    10% is scored whole (``val_loss``, nats per character)."""

    name = "lm"
    summary = "a character language model of --data FILE.txt (default: tiny Shakespeare)"
    options = ("data", "context", "steps_per_epoch", "validation_size")
    models = ("transformer", "rnn", *model_kinds.BLOCK_MODELS)
    default_cell = "lstm"
    run_prefix = "lm-"
    noun = "language model"
    uses = "generate_text"
    data = "UTF-8 text file."
    formats = ("tflite", "onnx")
    formats_described = ("'tflite' (lm_step.tflite) and, for a recurrent model, 'onnx' "
                         "(lm_stream.onnx)")
    recorded_sizes = ("context",)
    bidirectional = False

    def family_defaults(self, model, cell):
        return dict(LM_DEFAULTS[model])

    def resolve(self, config):
        values = super().resolve(config)
        tokenizer = getattr(config, "tokenizer", "char")
        return {**values, **self._vocabulary(config, tokenizer)}

    def _vocabulary(self, config, tokenizer) -> dict:
        return {}

    # --- the data ---

    def read(self, config):
        """``(source file, training text, held-out text)``."""
        from keras_seq import data
        from keras_seq.folders import data_file

        source = data.tiny_shakespeare() if config.data is None else data_file(self.data,
                                                                              config.data)
        full_text = _language_model_text(source)
        train_text, held_out_text = data.split_text(full_text)
        if len(train_text) <= config.context or len(held_out_text) < 2:
            raise ArgumentValueError(
                "train", f"{source} has {len(full_text)} characters; ", Arg("task", self.name),
                " with ", Arg("context", config.context), f" needs more than {config.context} "
                "in its first 90% and at least 2 in its last 10%."
            )
        return source, train_text, held_out_text

    def training_examples(self, config) -> str:
        """The training text (the first 90% of the data)."""
        return self.read(config)[1]

    def prepare(self, config, loaded, replicas=1):
        import numpy as np
        import tensorflow as tf

        from keras_seq import data, text
        from keras_seq.data.pipeline import data_sharding

        source, train_text, held_out_text = loaded
        if config.tokenizer == "wordpiece":
            tokenizer = learn_wordpiece(config, source, [train_text], keep_newlines=True)
        else:
            tokenizer = text.CharTokenizer.from_corpus([train_text + held_out_text])
        # One string each: the WordPiece tokenizer cuts at newlines itself, so
        # this equals tokenizing line by line and joining with the newline id.
        train_ids, held_out_ids = (
            tokenizer.tokenize([part]).flat_values.numpy().astype(np.int32)
            for part in (train_text, held_out_text)
        )
        if len(train_ids) <= config.context or len(held_out_ids) < 2:
            # The character count was checked by `read`; tokens are fewer.
            raise ArgumentValueError(
                "train", f"{source} makes {len(train_ids)} {config.tokenizer} tokens in its "
                f"first 90% and {len(held_out_ids)} in its last 10%; ", Arg("task", self.name),
                " with ", Arg("context", config.context), f" needs more than {config.context} "
                "tokens in the first and at least 2 in the last (a longer text, or a smaller ",
                Arg("context"), ")."
            )
        inputs, targets = data.text_windows(held_out_ids, config.context)
        chosen = np.unique(np.linspace(0, len(inputs) - 1, config.validation_size).round()
                           .astype(int))
        validation_data = tf.data.Dataset.from_tensor_slices(
            (inputs[chosen], targets[chosen])).batch(config.batch_size)
        if self.bidirectional:
            validation_data = validation_data.map(bidirectional_targets)
        return PreparedText(
            train_ids, held_out_ids, tokenizer, config.context,
            validation_data.with_options(data_sharding()),
            config.batch_size, config.seed, config.steps_per_epoch, source, held_out_text,
            self.bidirectional, len(train_text),
        )

    # --- the model ---

    def build(self, config, prepared):
        from keras_seq.tasks import CausalLMPreprocessor

        task = language_model(config, prepared.tokenizer.vocabulary_size, dropout=0.0)
        task.preprocessor = CausalLMPreprocessor(prepared.tokenizer, config.context)
        return task

    def compile(self, model, config, steps):
        from keras_seq.metrics import Perplexity
        from keras_seq.recipes.optimization import compile_run, padded_cross_entropy
        from keras_seq.reserved_tokens import PAD_ID

        # β2 = 0.99 for the language models, as nanoGPT: few tokens per step.
        compile_run(model, config, steps, loss=padded_cross_entropy(),
                    metrics=[Perplexity(mask_token_id=PAD_ID)], beta_2=0.99)

    # --- the scores ---

    def score(self, task, prepared, config, replicas):
        import math

        from keras_seq.metrics import text_loss
        from keras_seq.run_folder import HELD_OUT_TEXT_FILE

        val_loss, count = text_loss(task, prepared.held_out_ids, prepared.context)
        metrics = self._metrics(prepared, config, replicas, val_loss, count, count)
        metrics["val_perplexity"] = math.exp(val_loss)
        return (metrics, (HELD_OUT_TEXT_FILE, prepared.held_out_text), {}, {})

    def _metrics(self, prepared, config, replicas, val_loss, count, characters) -> dict:
        import math

        return {
            "task": self.name,
            "val_loss": val_loss,
            "val_perplexity": math.exp(val_loss),
            "loss_unit": ("nats per token" if config.tokenizer == "wordpiece"
                          else "nats per character"),
            "val_characters": characters,
            "val_tokens": count,
            "train_characters": prepared.train_characters,
            "train_tokens": int(len(prepared.train_ids)),
            "steps": int(config.epochs) * prepared.steps_per_epoch,
            "replicas": replicas,
            "data": prepared.source,
        }

    def result_line(self, metrics):
        return (f"Held-out loss: {metrics['val_loss']:.4f} nats/character (perplexity "
                f"{metrics['val_perplexity']:.3f}) over {metrics['val_characters']} characters")

    # --- the exports ---

    def default_formats(self, run):
        return None  # the language model's own: its stream too when it is recurrent

    def export(self, run, out, formats, beam_width, quantize, examples, progress,
               calibration=None):
        from keras_seq.export.language_model_export import export_language_model

        no_beam(beam_width, "a language-model run exports a generation step")
        return export_language_model(run, out, formats, quantize, examples, progress,
                                     calibration)


class BidirectionalLanguageModel(LanguageModel):
    """ELMo's biLM (`keras_seq.tasks.BidirectionalLM`,
    `models.bidirectional_language_model`) of a text, in characters or
    WordPiece tokens learned from its training 90% (``tokenizer``), windowed
    as the language model's; scored by its forward and backward held-out
    losses (``val_forward_loss``, ``val_backward_loss``)."""

    name = "bilm"
    summary = ("ELMo's bidirectional language model of the same text, in characters or "
               "WordPiece tokens (--tokenizer)")
    options = (*LanguageModel.options, "tokenizer", "vocab_size")
    models = ("rnn",)
    default_cell = "coupled"
    run_prefix = "bilm-"
    noun = "bidirectional language model"
    uses = "keras_seq.models.contextual_embedder"
    formats = ()
    bidirectional = True

    def family_defaults(self, model, cell):
        return dict(BILM_DEFAULTS)

    def _vocabulary(self, config, tokenizer) -> dict:
        return {"vocab_size": wordpiece_vocab_size(config)}

    def build(self, config, prepared):
        from keras_seq.models.elmo import bidirectional_language_model
        from keras_seq.tasks import BidirectionalLMPreprocessor

        task = bidirectional_language_model(prepared.tokenizer.vocabulary_size,
                                            num_layers=config.layers, units=config.units,
                                            cell=config.cell)
        task.preprocessor = BidirectionalLMPreprocessor(prepared.tokenizer, config.context)
        return task

    def compile(self, model, config, steps):
        from keras_seq.recipes.optimization import compile_run, padded_cross_entropy

        # One loss per direction; Keras adds them.
        compile_run(model, config, steps, loss={"forward": padded_cross_entropy(),
                                                "backward": padded_cross_entropy()},
                    beta_2=0.99)

    def score(self, task, prepared, config, replicas):
        import math

        from keras_seq.metrics import bidirectional_text_loss, scored_characters
        from keras_seq.run_folder import HELD_OUT_TEXT_FILE

        ids = prepared.held_out_ids
        losses = bidirectional_text_loss(task, ids, prepared.context)
        (forward, count), (backward, backward_count) = losses["forward"], losses["backward"]
        characters, backward_characters = scored_characters(prepared.tokenizer, ids,
                                                            prepared.context)
        forward_per_character = forward * count / characters
        backward_per_character = backward * backward_count / backward_characters
        metrics = self._metrics(prepared, config, replicas, (forward + backward) / 2, count,
                                characters)
        metrics.update({
            "val_forward_loss": forward,
            "val_backward_loss": backward,
            "val_forward_perplexity": math.exp(forward),
            "val_backward_perplexity": math.exp(backward),
            "val_backward_tokens": backward_count,
            "val_backward_characters": backward_characters,
            "val_forward_loss_per_character": forward_per_character,
            "val_backward_loss_per_character": backward_per_character,
            "val_loss_per_character": (forward_per_character + backward_per_character) / 2,
            "val_unknown_tokens": int((ids == UNK_ID).sum()),
        })
        return (metrics, (HELD_OUT_TEXT_FILE, prepared.held_out_text), {}, {})

    def result_line(self, metrics):
        per_character = ""
        if metrics["loss_unit"] == "nats per token":
            per_character = (f" ({metrics['val_forward_loss_per_character']:.4f}, "
                             f"{metrics['val_backward_loss_per_character']:.4f} nats/character)")
        unit = metrics["loss_unit"].replace("nats per ", "nats/")
        return (f"Held-out loss: forward {metrics['val_forward_loss']:.4f}, backward "
                f"{metrics['val_backward_loss']:.4f} {unit}{per_character}")

    def export(self, run, out, formats, beam_width, quantize, examples, progress,
               calibration=None):
        raise ArgumentValueError(
            "export_run", f"{run.path} holds a bidirectional language model (",
            Arg("task", "bilm"), "): it has no export; load its model.keras and use "
            "keras_seq.models.contextual_embedder for contextual vectors.")


def wordpiece_vocab_size(config) -> int | None:
    """``vocab_size`` resolved: `WORDPIECE_VOCAB_SIZE` by default with WordPiece
    tokens, and refused with characters."""
    where = "TrainingConfig"
    check_choice(where, "tokenizer", config.tokenizer, TOKENIZERS)
    if config.tokenizer != "wordpiece":
        needs(where, config, "vocab_size", "tokenizer", "wordpiece",
              "is the size of a learned vocabulary (a character vocabulary is every "
              "character of the text)")
        return None
    # More than the reserved tokens and the newline.
    return check_int(where, "vocab_size", WORDPIECE_VOCAB_SIZE if config.vocab_size is None
                     else config.vocab_size, minimum=len(RESERVED_TOKENS) + 2)


def language_model(config, vocabulary_size: int, dropout: float):
    """The `models.language_model` of ``config`` (its ``model`` kind, sizes and cell)."""
    from keras_seq import models

    return models.language_model(
        vocabulary_size,
        kind=config.model,
        num_layers=config.layers,
        units=config.units,
        num_heads=4,
        # Griffin's MLP is 3 wide for the residual recurrent blocks.
        intermediate_dim=(3 if config.model in model_kinds.BLOCK_MODELS else 4) * config.units,
        cell=config.cell,
        dropout=dropout,
    )


def _language_model_text(source: str) -> str:
    """The text a language model reads of ``source``: a ``.tsv`` file's texts
    (``label<TAB>text`` lines, `keras_seq.data.load_labelled_tsv`), each on
    a line of its own with its label dropped, so that a classifier's labelled
    file pre-trains its language model; any other file whole."""
    from keras_seq import data

    if not source.lower().endswith(".tsv"):
        return data.load_text(source)
    return "".join(text + "\n" for _, text in data.load_labelled_tsv(source))


def learn_wordpiece(config, source: str, train_texts: list[str], keep_newlines: bool = False):
    """The WordPiece tokenizer of a run, learned from its training text only:
    the held-out text plays no part in the model, its vocabulary included
    (a held-out word the pieces cannot spell is one ``[UNK]``)."""
    from keras_seq import text

    tokenizer = text.WordPieceTokenizer.from_corpus(
        train_texts, vocab_size=config.vocab_size, keep_newlines=keep_newlines
    )
    if tokenizer.vocabulary_size > config.vocab_size:
        raise ArgumentValueError(
            "train", f"the WordPiece vocabulary of {source} needs at least "
            f"{tokenizer.vocabulary_size} tokens (every character of the text as a word start "
            "and as a ## suffix, the reserved tokens and the newline); ",
            Arg("vocab_size", config.vocab_size), " is smaller."
        )
    return tokenizer


def bidirectional_targets(inputs, targets):
    """``(inputs, {"forward": targets, "backward": previous})`` of a batch of
    text windows: at t the forward target is id t + 1 (``targets``), the
    backward one id t − 1 of the window (0, not scored, at t = 0 and at
    padding)."""
    import tensorflow as tf

    previous = tf.pad(inputs[:, :-1], [[0, 0], [1, 0]])
    previous = tf.where(tf.not_equal(inputs, 0), previous, tf.zeros_like(previous))
    return inputs, {"forward": targets, "backward": previous}


@dataclasses.dataclass
class PreparedText:
    """What a language model's `prepare` returns: the text, split and tokenized.

    Attributes:
        train_ids, held_out_ids: ``(N,)`` int32 ids of the first 90% and the
            last 10% of the text (`keras_seq.data.split_text`).
        tokenizer: the `keras_seq.text.CharTokenizer` of every character of
            the text, or (``tokenizer="wordpiece"``) the
            `keras_seq.text.WordPieceTokenizer` learned from the first 90%.
        context: the window length.
        validation_data: ``validation_size`` held-out windows
            (`keras_seq.data.text_windows`), evenly spread, in batches.
        batch_size, seed, steps_per_epoch: the config's, for `epochs_data`.
        source: the file the text was read from.
        held_out_text: the last 10% of the text (what ``held_out_ids`` encode).
        bidirectional: ``task="bilm"``: the targets are ``{"forward": next
            ids, "backward": previous ids}`` (`bidirectional_targets`).
        train_characters: characters of the first 90% of the text.
    """

    train_ids: Any
    held_out_ids: Any
    tokenizer: Any
    context: int
    validation_data: Any
    batch_size: int
    seed: int
    steps_per_epoch: int
    source: str
    held_out_text: str = ""
    bidirectional: bool = False
    train_characters: int = 0

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped (`keras_seq.data.make_text_dataset`)."""
        from keras_seq import data
        from keras_seq.data.pipeline import data_sharding

        batches = data.make_text_dataset(
            self.train_ids, self.batch_size, self.context, self.steps_per_epoch, self.seed,
            epochs=epochs, first_epoch=first_epoch,
        )
        if self.bidirectional:
            batches = batches.map(bidirectional_targets)
        return batches.skip(skip).with_options(data_sharding())
