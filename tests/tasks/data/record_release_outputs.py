"""What the release's commands printed for the run folders beside this script:
run once at commit e32eb7e, right after `make_release_runs.py`, into
``release_outputs.json``. `tests/tasks/test_release_runs.py` checks that the
commands of today print the same for the same runs.

Usage: python tests/tasks/data/record_release_outputs.py tests/tasks/data
"""

import json
import os
import sys

from keras_seq import training

data = sys.argv[1]
runs = os.path.join(data, "release_runs")
sources = ["Saturday, 21 November 2026", "3/4/1999", "June 1, 2001", "nonsense"]
outputs = {}
for name in ("dates_gru_bahdanau", "dates_lstm_luong", "dates_transformer", "dates_monotonic"):
    folder = os.path.join(runs, name)
    outputs[name] = {
        "sources": sources,
        "greedy": training.translate_texts(folder, sources),
        "beam_3": training.translate_texts(folder, sources, beam_width=3),
    }
for name in ("lm_rnn", "lm_transformer", "lm_mingru"):
    folder = os.path.join(runs, name)
    outputs[name] = {"prompt": "First", "greedy_30": training.generate_text(
        folder, "First", length=30, temperature=0.0)}
texts = ["it was fine great lovely", "awful poor sad", "so so okay", "number 7"]
for name in ("classify_rnn", "classify_fine_tuned"):
    folder = os.path.join(runs, name)
    outputs[name] = {"texts": texts, "labels": [
        [label, round(p, 5)] for label, p in training.classify_texts(folder, texts)]}
with open(os.path.join(data, "release_outputs.json"), "w", encoding="utf-8") as f:
    json.dump(outputs, f, indent=1, ensure_ascii=False)
    f.write("\n")
