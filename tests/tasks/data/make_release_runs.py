"""How the run folders beside this script were made: run once with
KERAS_BACKEND=tensorflow at commit e32eb7e, the last release before tasks
became classes (`keras_seq.tasks`), when every model was a plain functional
`keras.Model` found by its layer names. `tests/tasks/test_release_runs.py`
checks that every command still reads them. Running it again writes run
folders of today's classes, which would no longer test that.

Each run is tiny (16 units, one epoch of a few batches); the TensorBoard logs
and the figures, which no command reads, are dropped to keep them small.

Usage: python tests/tasks/data/make_release_runs.py tests/tasks/data/release_runs
"""

import os
import shutil
import sys

from keras_seq import training

out = os.path.abspath(sys.argv[1])
work = out + ".work"
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

text = os.path.join(work, "text.txt")
with open(text, "w", encoding="utf-8") as f:
    f.write(("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
             "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die "
             "than to famish?\n") * 6)
labelled = os.path.join(work, "labelled.tsv")
with open(labelled, "w", encoding="utf-8") as f:
    for i in range(60):
        label = ("good", "bad", "meh")[i % 3]
        words = {"good": "fine great lovely", "bad": "awful poor sad", "meh": "so so okay"}[label]
        f.write(f"{label}\tit was {words} number {i}\n")

dates = dict(train_size=300, validation_size=30, test_size=40, units=16, batch_size=32,
             epochs=1, verbose=0)
lm = dict(task="lm", data=text, units=16, layers=1, context=8, batch_size=4,
          steps_per_epoch=3, epochs=1, validation_size=4, verbose=0)
runs = {
    "dates_gru_bahdanau": dict(dates),
    "dates_lstm_luong": dict(dates, cell="lstm", attention="luong"),
    "dates_transformer": dict(dates, model="transformer", layers=1),
    "dates_monotonic": dict(dates, attention="monotonic_bahdanau"),
    "lm_rnn": dict(lm, model="rnn"),
    "lm_transformer": dict(lm, model="transformer"),
    "lm_mingru": dict(lm, model="mingru"),
    "classify_rnn": dict(task="classify", data=labelled, units=8, epochs=1, verbose=0),
    "classify_fine_tuned": dict(task="classify", data=labelled, epochs=1, verbose=0,
                                init_from=os.path.join(out, "lm_mingru")),
    "bilm": dict(task="bilm", data=text, units=8, layers=1, context=8, batch_size=4,
                 steps_per_epoch=3, epochs=1, validation_size=4, verbose=0),
}
for name, options in runs.items():
    training.train(training.TrainingConfig(out=out, name=name, seed=0, **options))
    folder = os.path.join(out, name)
    shutil.rmtree(os.path.join(folder, "logs"), ignore_errors=True)
    for figure in ("attention.png", "confusion.png"):
        if os.path.exists(os.path.join(folder, figure)):
            os.remove(os.path.join(folder, figure))
    print(name, sorted(os.listdir(folder)), flush=True)
shutil.rmtree(work)
# The paths a run records (its data file, its language model) are the
# machine's; kept as bare names.
for name in runs:
    path = os.path.join(out, name, "metrics.json")
    with open(path, encoding="utf-8") as f:
        recorded = f.read()
    for folder in (work, out):
        recorded = recorded.replace(folder + os.sep, "").replace(f'"{folder}"', '"."')
    with open(path, "w", encoding="utf-8") as f:
        f.write(recorded)
