"""Classify written dates by century with `models.sequence_classifier` or the DCNN.

    python examples/classify.py [--model rnn|transformer|dcnn]

``--model dcnn`` trains `models.dcnn_classifier` (Kalchbrenner et al. 2014)
with its defaults; ``--kind`` is the older name of ``--model``.

The label is whether the date (from the embedded date task) lies in the 1900s
or the 2000s, which needs the year and, for two-digit years, the POSIX pivot
(69-99 -> 19xx, 00-68 -> 20xx).
"""

import argparse

import keras
import numpy as np

from keras_seq import data, models, text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", "--kind", dest="model", choices=("rnn", "transformer", "dcnn"),
                        default="rnn")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=10_000)
    args = parser.parse_args()

    task = data.date_task(train_size=args.train_size, validation_size=500, test_size=2_000)
    tokenizer = text.CharTokenizer.from_corpus(s for s, _ in task["train"])

    def arrays(pairs):
        ids = tokenizer.encode([s for s, _ in pairs], 40).numpy()
        labels = np.array([int(t[:2] == "20") for _, t in pairs])
        return ids, labels

    if args.model == "dcnn":
        model = models.dcnn_classifier(tokenizer.vocabulary_size, 2)
    else:
        model = models.sequence_classifier(tokenizer.vocabulary_size, 2, kind=args.model, units=64)
    model.compile(
        keras.optimizers.Adam(2e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(*arrays(task["train"]), epochs=args.epochs, batch_size=64,
              validation_data=arrays(task["validation"]))
    _, accuracy = model.evaluate(*arrays(task["test"]), verbose=0)
    print(f"{args.model} classifier, held-out accuracy: {accuracy:.2%}")


if __name__ == "__main__":
    main()
