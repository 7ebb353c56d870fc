"""The main job as a library function: train a model and write a run folder.

`train` is what ``keras-seq train`` runs; the command only parses its
arguments into a `TrainingConfig` and prints the result:

    >>> from keras_seq import training
    >>> result = training.train(training.TrainingConfig(  # doctest: +SKIP
    ...     train_size=2_000, epochs=1, out="runs", name="dates"))
    >>> result.metrics["test_exact_match"]  # doctest: +SKIP
    0.93

The tasks (``task=``): ``"dates"`` (the default) and ``"translate"``
(``data=`` a TSV file) train a translation model; ``"lm"`` trains a
character language model (see *Language models* below), ``"bilm"`` ELMo's
biLM, ``"classify"`` a text classifier (see *Classifiers* below) and
``"tag"`` a sequence tagger (`tag_texts`). Each is a recipe of
`keras_seq.recipes`, which `train` asks for the data, the model, the loss
and the scores.

The translation pipeline, one step a function: the pairs (`load_pairs`: the embedded date
task, or a shuffled split of a TSV file), a character tokenizer shared by
source and target, `tf.data` datasets, the model under a `tf.distribute`
strategy, Adam with warm-up and cosine decay on the padding-masked
cross-entropy, `fit`, greedy decoding of the test split, then the run folder:

- ``model.keras`` — the trained model (loads with ``safe_mode=True``);
- ``vocab.txt`` and ``tokenizer.json`` — the shared character vocabulary;
- ``logs/`` — TensorBoard logs;
- ``metrics.json`` — held-out exact-match accuracy (greedy decoding),
  timings, the full configuration and ``user_modules``, the modules that
  define the model's user classes (`user_modules`);
- ``test.tsv`` — the held-out pairs it was scored on (`run_folder`);
- ``attention.png`` — attention heatmaps for a few test examples (models with
  attention);
- ``history.csv`` — one row per epoch: ``epoch``, ``step`` (training steps
  done), ``wall_seconds`` (since this `train` call started: data, model and
  training so far; a resumed run's rows restart from its own start),
  ``loss``, ``val_loss``, and for language models ``perplexity`` and
  ``val_perplexity``;
- ``backup/`` — only while the run trains: the training state after the
  last finished epoch (and every ``backup_every_steps`` steps).

While it trains, the run holds `folder_lock` on its folder: a second `train`
(or `keras_seq.tuning.search`) into the same folder raises `FolderInUseError`
naming the first one's process id, and a finished run is never replaced
unless ``fresh=True``.

**Language models** (``task="lm"``). The text (``data=`` a UTF-8 file, by
default tiny Shakespeare, `keras_seq.data.tiny_shakespeare`) is split as
nanoGPT splits it: the first 90% trains, the last 10% is held out
(`keras_seq.data.split_text`); a `keras_seq.text.CharTokenizer` holds every
character of the whole text. `models.language_model` trains on batches of
random windows of ``context`` characters (`keras_seq.data.make_text_dataset`),
an epoch being ``steps_per_epoch`` batches; after each epoch, the loss and
`keras_seq.metrics.Perplexity` are measured on ``validation_size`` held-out
windows spread evenly over the held-out text. At the end, ``metrics.json``
gets ``val_loss``, the mean cross-entropy in nats per character over the
whole held-out text, and ``val_perplexity`` = exp(``val_loss``): the held-out
text is cut into consecutive windows of ``context + 1`` characters that share
their first character with the previous window's last
(`keras_seq.data.text_windows`), so every held-out character but the first is
predicted exactly once, from the preceding characters of its window (1 to
``context`` of them), as in training (`text_loss`). The run folder holds
``model.keras``, the tokenizer files, ``logs/``, ``history.csv``,
``metrics.json`` and the held-out text ``test.txt`` (no ``attention.png``);
`generate_text` samples from it (``keras-seq generate``) and
`keras_seq.export.export_run` exports its generation step for devices.

**Resuming.** A run killed at any moment (SIGKILL included) and started again
with the same configuration resumes from its backup: it prints ``Resuming from
epoch k``, does not redo finished epochs or steps, and ends with the weights of
an uninterrupted run. The backup holds the weights, the optimizer's variables
(its step counter drives the learning-rate schedule) and the dropout seed
states; the data order of epoch ``e`` is a function of ``(seed, e)``
(`keras_seq.data.make_dataset` with ``epochs=``). Each backup is written to new
files and then published by an atomic rename of ``backup/state.json``, so a kill
during a write leaves the previous backup intact. Without ``name``, the newest
run folder of the same model family in ``out`` whose backup was written by the
same configuration is resumed. A run folder that already holds a finished run
(``metrics.json`` and no backup) is not trained again: `train` raises
``FileExistsError`` unless ``fresh=True``, which deletes the backup and the
TensorBoard logs and starts over. A finished run deletes its backup after
writing ``metrics.json``. Under ``MultiWorkerMirroredStrategy`` only the chief
writes the run folder and the backup (the other workers write theirs to a
temporary folder that they delete when they end, also on an error) and every
worker restores from the chief's, so the run folder
must be on storage that every worker sees. The tests check the equality on
CPU, where TensorFlow's kernels are deterministic; on a GPU, call
``tf.config.experimental.enable_op_determinism()`` first for the same
guarantee (`train` does not, as some GPU kernels then refuse to run).

**Classifiers** (``task="classify"``). ``data=`` is a ``label<TAB>text``
file (`keras_seq.data.load_labelled_tsv`), split 80/10/10 by label with the
seed (`keras_seq.data.split_labelled`; with ``test_data=`` a file of test
texts, 90/10); the labels are the class names in sorted order. From scratch,
the texts are tokenized in characters or WordPiece tokens learned from the
training texts and `models.sequence_classifier` is trained on the
cross-entropy (with ``class_weight="balanced"``, each text weighs
n / (classes · n_class)). With ``init_from=`` a ``task="lm"`` run folder,
`with_language_model` takes the language model's kind and sizes (a
different ``model``, ``cell``, ``units``, ``layers`` or ``tokenizer`` is an
error naming both runs), the tokenizer is the language model's, and
`models.classifier_from_language_model` is fine-tuned from its weights on
L = L_task + λ·L_LM (``lm_weight`` λ, 0.5 by default; 0: the task alone),
or with ``freeze_body=True`` its head alone (a linear probe). Texts longer
than ``max_source_length`` tokens (256) are read up to there; `train` says
so, as it says how balanced the classes are. The run folder holds
``model.keras`` (the classifier: ``token_ids (B, T) -> logits``), the
tokenizer files, ``logs/``, ``history.csv``, ``test.tsv`` (the test texts),
``confusion.png`` and ``metrics.json`` with ``test_accuracy``,
``test_macro_f1``, the ``confusion_matrix``, ``per_class`` scores and
``class_counts`` (`evaluate_classifier_and_save`); `classify_texts` labels
texts with it (``keras-seq classify``).

`translate_texts` decodes strings with a run folder (``keras-seq translate``).

**Modules**, one job each: `keras_seq.run_config` (the options and their
defaults, without Keras), `pipeline` (`train`), `prepare` (the data),
`model` (model and optimizer), `scheduled_sampling` (``--scheduled-sampling``),
`backup` (resuming and ``history.csv``),
`evaluation` (scoring and the run folder's files), `inference` (translate and
generate), `run_folder` (the one reader of a run folder) and `locking`
(one process at a time in a run or export folder).
"""

from keras_seq.recipes.optimization import build_optimizer
from keras_seq.run_config import (
    ATTENTIONS,
    BACKUP_DIR,
    BLOCK_MODELS,
    CELLS,
    DISTRIBUTIONS,
    LM_DEFAULTS,
    MODEL_DEFAULTS,
    MODELS,
    NOT_IN_BACKUP,
    PRECISIONS,
    SAMPLING_SCHEDULES,
    SEARCH_EMBEDDING_DIMS,
    SEARCH_UNITS,
    TASKS,
    TOKENIZERS,
    TUNERS,
    WORDPIECE_VOCAB_SIZE,
    TrainingConfig,
    default_for,
)
from keras_seq.run_folder import UserModuleError, user_modules
from keras_seq.tasks.scheduled_sampling import (
    ScheduledSampling,
    sampled_decoding,
    sampling_probability,
)
from keras_seq.tasks.text_classifier import class_probabilities
from keras_seq.training.backup import HISTORY_FILE
from keras_seq.training.evaluation import (
    classification_scores,
    evaluate_and_save,
    text_loss,
)
from keras_seq.training.inference import (
    InputWarning,
    classify_texts,
    generate_text,
    make_decoder,
    tag_texts,
    translate_strings,
    translate_texts,
    warn_about_inputs,
)
from keras_seq.training.locking import FolderInUseError, folder_lock
from keras_seq.training.pipeline import TrainingResult, train
from keras_seq.training.prepare import (
    PreparedData,
    PreparedLabels,
    PreparedText,
    length_buckets,
    load_data,
    load_labelled,
    load_pairs,
    prepare_data,
    with_language_model,
)

__all__ = [
    "ATTENTIONS",
    "BACKUP_DIR",
    "BLOCK_MODELS",
    "CELLS",
    "DISTRIBUTIONS",
    "FolderInUseError",
    "HISTORY_FILE",
    "InputWarning",
    "LM_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "NOT_IN_BACKUP",
    "PRECISIONS",
    "PreparedData",
    "PreparedLabels",
    "PreparedText",
    "SAMPLING_SCHEDULES",
    "SEARCH_EMBEDDING_DIMS",
    "ScheduledSampling",
    "SEARCH_UNITS",
    "TASKS",
    "TOKENIZERS",
    "TUNERS",
    "WORDPIECE_VOCAB_SIZE",
    "TrainingConfig",
    "TrainingResult",
    "UserModuleError",
    "build_optimizer",
    "class_probabilities",
    "classification_scores",
    "classify_texts",
    "default_for",
    "evaluate_and_save",
    "folder_lock",
    "generate_text",
    "length_buckets",
    "load_data",
    "load_labelled",
    "load_pairs",
    "make_decoder",
    "prepare_data",
    "sampled_decoding",
    "sampling_probability",
    "text_loss",
    "train",
    "tag_texts",
    "translate_strings",
    "translate_texts",
    "user_modules",
    "warn_about_inputs",
    "with_language_model",
]
