"""`keras-seq export --beam N` and `verify` of beam runs, for both model families.

The exported SavedModel decodes with `decoding.beam_search`; `verify`
compares it, in a process without keras_seq, with Keras' beam outputs
that the export records. The runs are tiny: what is tested is that the
search traces and exports, not what the model learned.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, text
from keras_seq.cli import main
from keras_seq.run_folder import read_run

pytestmark = pytest.mark.slow

BEAM = 3


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory, tiny_run_args):
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", "--model", "transformer", "--layers", "1", "--out", str(out),
                 "--name", "transformer", *tiny_run_args]) == 0
    return out / "transformer"


@pytest.fixture(scope="module")
def runs(tiny_date_run, transformer_run):
    return {"rnn": tiny_date_run.run_dir, "transformer": str(transformer_run)}


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_export_beam_and_verify_agree_with_in_process_beam_search(kind, runs, tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["export", runs[kind], str(out), "--formats", "savedmodel", "--beam", str(BEAM),
                 "--examples", "12"]) == 0
    assert main(["verify", str(out), "--json", str(tmp_path / "verify.json")]) == 0
    (row,) = json.loads((tmp_path / "verify.json").read_text())["artifacts"]
    assert row["artifact"] == "translator/1" and row["string_match"] == 1.0

    # The recorded Keras beam outputs are beam_search's, run eagerly here,
    # and the SavedModel (strings in, strings out) answers the same.
    reference = np.load(out / "reference.npz")
    run = read_run(runs[kind], "test")
    model, tokenizer = run.load_model(compile=False), text.load_tokenizer(runs[kind])
    ids, _ = decoding.beam_search(model, reference["source_ids"], run.config["target_length"],
                                  beam_width=BEAM)
    np.testing.assert_array_equal(reference["keras_beam_ids"], ids)
    served = tf.saved_model.load(str(out / "translator" / "1")).signatures["serving_default"]
    outputs = served(inputs=tf.constant(reference["sources"]))["outputs"]
    assert [s.decode("utf-8") for s in outputs.numpy()] == list(reference["keras_beam_outputs"])
    assert list(reference["keras_beam_outputs"]) == [
        s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()
    ]
