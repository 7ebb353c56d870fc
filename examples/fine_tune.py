"""Pre-train on unlabelled reviews, fine-tune on a few labelled ones (Dai & Le 2015; GPT).

    python examples/fine_tune.py --train TRAIN.tsv --test TEST.tsv --out results.json

``TRAIN.tsv`` and ``TEST.tsv`` hold labelled texts, one ``label<TAB>text``
per line (for example the Amazon Fine Food reviews, ``great`` or ``other``).
A character language model is pre-trained on the text of every training
review with its label dropped (``keras-seq train --task lm --data
TRAIN.tsv`` reads a ``.tsv`` file's texts). Then, for each number of labels
(``--sizes``) and each seed (``--seeds``), a subset of the training reviews
of that size is drawn with the labels' proportions, and each arm is trained
on it and tested on every review of ``TEST.tsv``:

- ``scratch``: the language model's kind, width and depth with a linear
  head, from random weights (``keras-seq train --task classify --model
  mingru``);
- ``fine_tuned``: the language model with a linear head, fine-tuned with the
  auxiliary loss L = L_task + 0.5 L_LM (``--init-from``);
- ``fine_tuned_no_aux``: the same without the auxiliary loss (``--lm-weight 0``);
- ``linear_probe``: the language model frozen, the head alone trained
  (``--freeze-body``);
- ``tfidf``: what one would do otherwise, TF-IDF of word 1- and 2-grams and
  logistic regression (scikit-learn, which the package installs for
  KerasTuner's Bayesian search).

Every arm that trains a network holds out 10% of its subset, by label, as
the validation split that ``keras-seq train`` reports; the test reviews are
never seen before the test. The recipe (measured in benchmarks/RESULTS.md,
"Pre-training that pays"): the head reads the mean of the hidden states
(``--pooling mean``), the first 256 characters of a review, a peak learning
rate of 2e-3 for the fine-tuned arms and scratch alike (the probe keeps its
5e-3), and 20 epochs, or for a larger subset the fewest (at least 8) that
make about 240 steps. ``--sizes 100 400 1000 --seeds 2 --arms scratch
fine_tuned`` takes about 30 minutes on a 2-core CPU, pre-training included. ``--out`` gets ``{"sizes", "accuracy": {arm:
[mean per size]}, "std": {arm: [...]}, "macro_f1": {...}, "macro_f1_std",
"majority", "lm": {"val_loss", "seconds"}, "seconds", "runs"}``: the means
and standard deviations over the seeds, the accuracy of always answering the
most frequent label of the training reviews, the language model's held-out
loss (nats per character) and seconds, the seconds per arm and size, and
every run's own numbers.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import statistics
import tempfile
import time

from keras_seq import data, training

ARMS = {
    "scratch": {},
    "fine_tuned": {"init_from": True},
    "fine_tuned_no_aux": {"init_from": True, "lm_weight": 0.0},
    "linear_probe": {"init_from": True, "freeze_body": True},
    "tfidf": None,
}


def subset(examples, size: int, seed: int):
    """``size`` examples drawn with the labels' proportions (all of them when
    ``size`` is at least their number)."""
    if size >= len(examples):
        return list(examples)
    return data.split_labelled(examples, validation_fraction=0.0,
                               test_fraction=size / len(examples), seed=seed)["test"]


def write_tsv(path: str, examples) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in examples)
    return path


def epochs_for(labelled: int, batch_size: int = 32) -> int:
    """20 epochs, or for a larger set the fewest (at least 8) that make about
    240 steps: the training split is 90% of the labelled texts."""
    steps_per_epoch = -(-int(labelled * 0.9) // batch_size)
    return max(8, min(20, -(-240 // steps_per_epoch)))


def tfidf_scores(train, test) -> tuple[float, float]:
    """Test accuracy and macro-F1 of TF-IDF (word 1- and 2-grams) and logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    vectorizer = TfidfVectorizer(ngram_range=(1, 2))
    features = vectorizer.fit_transform([text for _, text in train])
    # C = 10: the regularisation that gives the published baseline numbers.
    classifier = LogisticRegression(C=10.0, max_iter=1000).fit(
        features, [label for label, _ in train])
    predicted = classifier.predict(vectorizer.transform([text for _, text in test]))
    truth = [label for label, _ in test]
    return accuracy_score(truth, predicted), f1_score(truth, predicted, average="macro")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, help="labelled training texts, label<TAB>text")
    parser.add_argument("--test", required=True, help="labelled test texts, label<TAB>text")
    parser.add_argument("--out", required=True, help="the results JSON file")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 400, 1000, 4000],
                        help="labelled training texts per arm")
    parser.add_argument("--seeds", type=int, default=5, help="subsets drawn per size")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--lm-model", default="mingru", help="the language model's --model")
    parser.add_argument("--lm", help="a finished --task lm run to start from instead of "
                        "pre-training one")
    parser.add_argument("--max-length", type=int, default=256,
                        help="characters read of a text (--max-source-length)")
    parser.add_argument("--pooling", choices=["last", "mean"], default="mean",
                        help="what the linear head reads (keras-seq train --pooling)")
    parser.add_argument("--learning-rate", type=float, default=2e-3,
                        help="peak learning rate of the fine-tuned arms and scratch")
    parser.add_argument("--epochs", type=int,
                        help="epochs of every arm (default: 20, fewer for a large subset: "
                        "about 240 steps, at least 8 epochs)")
    parser.add_argument("--work", help="folder of the runs (default: a temporary folder)")
    args = parser.parse_args()
    for option in ("sizes", "seeds", "max_length", "epochs", "learning_rate"):
        values = getattr(args, option)
        if values is not None and min(values if isinstance(values, list) else [values]) <= 0:
            parser.error(f"--{option.replace('_', '-')} must be positive")
    if os.path.exists(args.out):
        parser.error(f"--out {args.out} exists; choose another file")
    # Each run traces its own training function; TensorFlow counts those
    # traces together and warns about "retracing", which is expected here.
    logging.getLogger("tensorflow").setLevel(logging.ERROR)

    train_examples = data.load_labelled_tsv(args.train)
    test_examples = data.load_labelled_tsv(args.test)
    work = args.work or tempfile.mkdtemp(prefix="fine_tune-")
    os.makedirs(work, exist_ok=True)
    started = time.perf_counter()
    results = {"sizes": [min(size, len(train_examples)) for size in args.sizes],
               "arms": args.arms, "seeds": args.seeds, "max_length": args.max_length,
               "majority": [], "lm": None, "seconds": {}, "runs": []}
    lm_dir, lm_metrics = args.lm, None
    if lm_dir is not None or any(ARMS[arm] and ARMS[arm].get("init_from") for arm in args.arms):
        if lm_dir is None:
            lm = training.train(task="lm", model=args.lm_model, data=args.train, out=work,
                                name="lm", verbose=2, fresh=True)
            lm_dir, lm_metrics = lm.run_dir, lm.metrics
        else:
            with open(os.path.join(lm_dir, "metrics.json"), encoding="utf-8") as f:
                lm_metrics = json.load(f)
        results["lm"] = {"run": lm_dir, "model": lm_metrics["config"]["model"],
                         "val_loss": lm_metrics["val_loss"],
                         "seconds": round(lm_metrics["seconds"]["total"], 1)}
        print(f"Language model: {lm_metrics['val_loss']:.3f} nats/character on the held-out "
              f"10%, {results['lm']['seconds']:.0f} s", flush=True)
    test_file = write_tsv(os.path.join(work, "test.tsv"), test_examples)
    scores = collections.defaultdict(list)  # (arm, size) -> [(accuracy, macro_f1)]
    for size in results["sizes"]:
        majority = []
        for seed in range(args.seeds):
            labelled = subset(train_examples, size, seed)
            most = collections.Counter(label for label, _ in labelled).most_common(1)[0][0]
            majority.append(sum(label == most for label, _ in test_examples)
                            / len(test_examples))
            train_file = write_tsv(os.path.join(work, f"train-{size}-{seed}.tsv"), labelled)
            epochs = args.epochs or epochs_for(len(labelled))
            for arm in args.arms:
                t0 = time.perf_counter()
                if arm == "tfidf":
                    accuracy, macro_f1 = tfidf_scores(labelled, test_examples)
                else:
                    options = dict(ARMS[arm])
                    if not options.get("freeze_body"):  # a probe keeps its own rate
                        options["learning_rate"] = args.learning_rate
                    if options.get("init_from"):
                        options["init_from"] = lm_dir
                    elif lm_metrics is None:  # the kind's own sizes
                        options["model"] = args.lm_model
                    else:  # the language model's kind and sizes, from random weights
                        options.update(model=lm_metrics["config"]["model"],
                                       units=lm_metrics["config"]["units"],
                                       layers=lm_metrics["config"]["layers"])
                    if options.get("init_from") or options["model"] in training.BLOCK_MODELS:
                        options["pooling"] = args.pooling  # a language model's body
                    run = training.train(
                        task="classify", data=train_file, test_data=test_file, out=work,
                        name=f"{arm}-{size}-{seed}", max_source_length=args.max_length,
                        epochs=epochs,
                        seed=seed, verbose=0, fresh=True, **options,
                    )
                    accuracy, macro_f1 = (run.metrics["test_accuracy"],
                                          run.metrics["test_macro_f1"])
                seconds = round(time.perf_counter() - t0, 1)
                scores[arm, size].append((accuracy, macro_f1))
                results["runs"].append({"arm": arm, "size": size, "seed": seed,
                                        "accuracy": accuracy, "macro_f1": macro_f1,
                                        "seconds": seconds})
                print(f"{size:5d} labelled, seed {seed}, {arm:18s} accuracy {accuracy:.3f}, "
                      f"macro-F1 {macro_f1:.3f} ({seconds:.0f} s)", flush=True)
        results["majority"].append(statistics.mean(majority))
    for key, column in (("accuracy", 0), ("macro_f1", 1)):
        std_key = "std" if key == "accuracy" else "macro_f1_std"
        results[key], results[std_key] = {}, {}
        for arm in args.arms:
            values = [[score[column] for score in scores[arm, size]] for size in results["sizes"]]
            results[key][arm] = [statistics.mean(v) for v in values]
            results[std_key][arm] = [statistics.pstdev(v) for v in values]
    for arm in args.arms:
        results["seconds"][arm] = [round(sum(r["seconds"] for r in results["runs"]
                                             if r["arm"] == arm and r["size"] == size), 1)
                                   for size in results["sizes"]]
    results["seconds"]["total"] = round(time.perf_counter() - started, 1)
    with open(args.out, "x", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"Written to {args.out} ({results['seconds']['total']:.0f} s in all)")


if __name__ == "__main__":
    main()
