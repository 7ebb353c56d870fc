"""Pre-train, then fine-tune (GPT, Radford et al. 2018): who speaks this speech?

    python examples/fine_tune.py [--data FILE.txt] --out results.json

A character language model is pre-trained on the first 90% of a play text
(``keras-seq train --task lm``, which holds out the last 10%); then the
speeches of the held-out last 10% are labelled with their speaker, among the
10 who speak most often there, and split by speaker into test speeches and a
pool of labelled training speeches. For each number of labelled speeches
(``--sizes``; 0 = the whole pool) four classifiers are trained with
``keras-seq train --task classify`` (`keras_seq.training.train`), each tested
on the same test speeches:

- ``scratch``: `models.sequence_classifier` with the language model's kind,
  width and depth, from random weights;
- ``fine_tuned``: the language model fine-tuned with a linear head on the last
  character's hidden state and the auxiliary loss L = L_task + 0.5 L_LM;
- ``fine_tuned_no_aux``: the same without the auxiliary loss;
- ``linear_probe``: the language model frozen, only the linear head trained.

Why the speakers of the last 10%: the language model must never have read a
test speech, and the plays of a text like tiny Shakespeare follow one another,
so the speakers of its last 10% (there: The Taming of the Shrew's end and The
Tempest) are not those of the first 90%. Labelled training speeches and test
speeches are therefore both drawn from the held-out part, which the language
model never saw; a speech is read up to ``--max-length`` characters.

``--out`` gets ``{"sizes": [...], "accuracy": {"scratch": [...], "fine_tuned":
[...], "fine_tuned_no_aux": [...], "linear_probe": [...]}}`` (test accuracy per
size, in ``sizes`` order), with ``macro_f1`` in the same layout, the accuracy
of always answering the most frequent speaker of the training speeches
(``majority``), the language model's held-out loss, the speakers, the
split's sizes and the seconds each step took. The defaults finish in about
half an hour on a 2-core CPU, pre-training included.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import tempfile
import time

from keras_seq import data, training

ARMS = {
    "scratch": {},
    "fine_tuned": {"init_from": True},
    "fine_tuned_no_aux": {"init_from": True, "lm_weight": 0.0},
    "linear_probe": {"init_from": True, "freeze_body": True},
}


def speeches(text: str) -> list[tuple[str, str]]:
    """``(speaker, speech)`` of each block ``NAME:\\nlines`` of a play text
    (blocks are separated by blank lines); other blocks are skipped."""
    found = []
    for block in text.split("\n\n"):
        name, _, speech = block.strip("\n").partition("\n")
        if name.endswith(":") and name[:-1].strip() and speech.strip():
            # One line per text in a TSV: the speech's line breaks become spaces.
            found.append((name[:-1].strip(), " ".join(speech.split("\n"))))
    return found


def labelled_split(text: str, speakers: int, test_fraction: float, seed: int):
    """The speeches of the held-out 10% by their ``speakers`` most frequent
    speakers, split by speaker into ``(pool, test)``."""
    _, held_out = data.split_text(text)
    # The held-out part starts inside a block: its first block is not a speech's start.
    found = speeches(held_out.partition("\n\n")[2])
    chosen = {name for name, _ in collections.Counter(s for s, _ in found).most_common(speakers)}
    split = data.split_labelled([s for s in found if s[0] in chosen], validation_fraction=0.0,
                                test_fraction=test_fraction, seed=seed)
    return split["train"], split["test"]


def subset(pool, size: int, seed: int):
    """``size`` speeches of the pool in the speakers' proportions (all for 0)."""
    if size == 0 or size >= len(pool):
        return list(pool)
    return data.split_labelled(pool, validation_fraction=0.0, test_fraction=size / len(pool),
                               seed=seed)["test"]


def write_tsv(path: str, examples) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in examples)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a play text, NAME: then the speech, blocks separated "
                        "by blank lines (default: tiny Shakespeare, shipped with the package)")
    parser.add_argument("--out", required=True, help="the results JSON file")
    parser.add_argument("--work", help="folder of the runs (default: a temporary folder)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 0],
                        help="labelled training speeches (0: the whole pool)")
    parser.add_argument("--speakers", type=int, default=10)
    parser.add_argument("--test-fraction", type=float, default=0.35)
    parser.add_argument("--max-length", type=int, default=128,
                        help="characters read of a speech")
    parser.add_argument("--lm-steps", type=int, default=2000,
                        help="pre-training steps (of 12 windows of --context characters)")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--min-steps", type=int, default=150,
                        help="the fewest training steps of a classifier: a small set gets "
                        "more epochs (at least 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # Each of the 16 runs traces its own training function; TensorFlow counts
    # those traces together and warns about "retracing", which is expected here.
    logging.getLogger("tensorflow").setLevel(logging.ERROR)

    path = args.data or data.tiny_shakespeare()
    work = args.work or tempfile.mkdtemp(prefix="fine_tune-")
    seconds = {}
    started = time.perf_counter()
    lm = training.train(
        task="lm", data=path, out=work, name="lm", context=args.context, epochs=4,
        steps_per_epoch=args.lm_steps // 4, seed=args.seed, verbose=2, fresh=True,
    )
    seconds["pre-training"] = round(time.perf_counter() - started, 1)
    print(f"Language model: {lm.metrics['val_loss']:.3f} nats/character on the held-out "
          f"10%, {seconds['pre-training']:.0f} s", flush=True)

    pool, test = labelled_split(data.load_text(path), args.speakers, args.test_fraction,
                                args.seed)
    test_file = write_tsv(os.path.join(work, "test.tsv"), test)
    sizes = [size if size else len(pool) for size in args.sizes]
    results = {"sizes": sizes, "accuracy": {arm: [] for arm in ARMS},
               "macro_f1": {arm: [] for arm in ARMS}, "majority": [],
               "lm_val_loss": lm.metrics["val_loss"], "speakers": sorted({s for s, _ in test}),
               "test_speeches": len(test), "pool_speeches": len(pool), "seconds": seconds}
    for size in sizes:
        labelled = subset(pool, size, args.seed)
        train_file = write_tsv(os.path.join(work, f"train-{size}.tsv"), labelled)
        most = collections.Counter(s for s, _ in labelled).most_common(1)[0][0]
        results["majority"].append(sum(s == most for s, _ in test) / len(test))
        batches = -(-int(size * 0.9) // 32)
        epochs = max(10, -(-args.min_steps // batches))
        for arm, options in ARMS.items():
            if options.get("init_from"):
                options = {**options, "init_from": lm.run_dir}
            else:  # the language model's kind and sizes, from random weights
                options = {"model": lm.metrics["config"]["model"],
                           "units": lm.metrics["config"]["units"],
                           "layers": lm.metrics["config"]["layers"]}
            t0 = time.perf_counter()
            run = training.train(
                task="classify", data=train_file, test_data=test_file, out=work,
                name=f"{arm}-{size}", epochs=epochs, max_source_length=args.max_length,
                seed=args.seed, verbose=0, fresh=True, **options,
            )
            seconds[f"{arm}-{size}"] = round(time.perf_counter() - t0, 1)
            results["accuracy"][arm].append(run.metrics["test_accuracy"])
            results["macro_f1"][arm].append(run.metrics["test_macro_f1"])
            print(f"{size:5d} labelled, {arm:18s} accuracy {run.metrics['test_accuracy']:.2%}, "
                  f"macro-F1 {run.metrics['test_macro_f1']:.3f} ({epochs} epochs, "
                  f"{seconds[f'{arm}-{size}']:.0f} s)", flush=True)
    seconds["total"] = round(time.perf_counter() - started, 1)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"Written to {args.out} ({seconds['total']:.0f} s in all)")


if __name__ == "__main__":
    main()
