"""Tasks: a `keras.Model` for each job, in KerasHub's shape.

A task owns its parts as attributes (never found by layer name), its
preprocessor (the tokenizer, and the label or tag vocabulary) and its step
functions, takes strings, and saves and loads as one ``.keras`` file
(``safe_mode=True``) with its preprocessor:

- `Seq2SeqLM`: the translator (a recurrent decoder with any attention,
  monotonic included, or Transformer blocks); ``generate(inputs, max_length,
  sampler)``; its cached step `Seq2SeqLM.call_with_cache`.
- `CausalLM`: a language model (Transformer, stacked recurrent layers, or
  residual recurrent blocks around any cell); ``generate``;
  `CausalLM.call_with_cache`.
- `BidirectionalLM`: ELMo's biLM; its `BidirectionalLM.contextual_embedder`.
- `TextClassifier`: ``predict(texts)`` (probabilities) and ``classify(texts)``.
- `SequenceTagger`: ``predict(texts)`` (each token's tag probabilities) and
  ``tag(texts)`` (``(token, tag)`` pairs); `sequence_tagger` builds one.

The builders of `keras_seq.models` return these; `from_run` loads a
``keras-seq train`` run folder as its task; `as_task` reads a model saved by
the release before tasks (a plain functional model) as one. The samplers
that `generate` takes are `keras_seq.samplers`.
"""

from keras_seq.tasks.bidirectional_lm import BidirectionalLM, BidirectionalLMPreprocessor
from keras_seq.tasks.causal_lm import CausalLM, CausalLMPreprocessor
from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.release import as_task
from keras_seq.tasks.seq2seq_lm import Seq2SeqLM, Seq2SeqLMPreprocessor
from keras_seq.tasks.sequence_tagger import (
    SequenceTagger,
    SequenceTaggerPreprocessor,
    sequence_tagger,
)
from keras_seq.tasks.task import Task
from keras_seq.tasks.text_classifier import TextClassifier, TextClassifierPreprocessor

__all__ = [
    "BidirectionalLM",
    "BidirectionalLMPreprocessor",
    "CausalLM",
    "CausalLMPreprocessor",
    "Preprocessor",
    "Seq2SeqLM",
    "Seq2SeqLMPreprocessor",
    "SequenceTagger",
    "SequenceTaggerPreprocessor",
    "Task",
    "TextClassifier",
    "TextClassifierPreprocessor",
    "as_task",
    "from_run",
    "sequence_tagger",
]


def from_run(run_dir):
    """The task of a ``keras-seq train`` run folder, with its preprocessor.

    Imports the modules of the run's user classes first (its
    ``metrics.json``'s ``user_modules``) and loads ``model.keras`` for
    inference (no optimizer); a run written by the release before tasks is
    read as its task (`as_task`), its preprocessor made from its tokenizer
    files and recorded lengths.

    Args:
        run_dir: the run folder, or its
            `keras_seq.run_folder.RunFolder`.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
        UserModuleError: a module of its user classes cannot be imported.
    """
    from keras_seq.run_folder import RunFolder, read_run
    from keras_seq.tasks.release import release_preprocessor

    run = run_dir if isinstance(run_dir, RunFolder) else read_run(run_dir, "from_run")
    task = as_task(run.load_model(compile=False), "from_run")
    if task.preprocessor is None:
        task.preprocessor = release_preprocessor(task, run.config, run.metrics,
                                                 run.load_tokenizer())
    return task
