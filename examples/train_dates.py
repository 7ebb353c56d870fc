"""Train the date normaliser with the Python API instead of `keras-seq train`.

    python examples/train_dates.py [--train-size 20000] [--epochs 1]

Builds the character tokenizer and tf.data pipeline, trains
`models.rnn_seq2seq` (bidirectional GRU + Bahdanau attention) with teacher
forcing, then normalises held-out dates with greedy decoding and beam search.
"""

import argparse

import keras
import tensorflow as tf

from keras_seq import data, decoding, models, text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-size", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()

    task = data.date_task(train_size=args.train_size, validation_size=500, test_size=1_000)
    tokenizer = text.CharTokenizer.from_corpus(s for pair in task["train"] for s in pair)
    source_length, target_length = 40, 12  # "YYYY-MM-DD" + [START]/[END]
    train = data.make_dataset(task["train"], tokenizer, tokenizer, 128, source_length,
                              target_length, shuffle_seed=0)

    model = models.rnn_seq2seq(tokenizer.vocabulary_size, tokenizer.vocabulary_size, units=128)
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=text.PAD_ID),
    )
    model.fit(train, epochs=args.epochs)

    sources = [s for s, _ in task["test"]]
    targets = [t for _, t in task["test"]]
    greedy = tf.function(lambda ids: decoding.greedy_decode(model, ids, target_length))
    outputs = tokenizer.detokenize(greedy(tokenizer.encode(sources, source_length)))
    outputs = [o.decode() for o in outputs.numpy()]
    accuracy = sum(o == t for o, t in zip(outputs, targets)) / len(targets)
    print(f"greedy exact match on {len(targets)} held-out dates: {accuracy:.2%}")

    examples = ["Saturday, 21 November 2026", "21/11/26", "nov 21st, 2026"]
    ids, log_probs = decoding.beam_search(
        model, tokenizer.encode(examples, source_length), target_length, beam_width=4
    )
    for source, output, log_prob in zip(examples, tokenizer.detokenize(ids).numpy(), log_probs):
        print(f"{source!r:32} -> {output.decode()}   (log p = {float(log_prob):.4f})")


if __name__ == "__main__":
    main()
