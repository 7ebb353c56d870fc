"""Train the date normaliser with the Python API instead of `keras-seq train`.

    python examples/train_dates.py [--train-size 20000] [--epochs 1] [--out runs]

`keras_seq.training.train` runs the same pipeline as `keras-seq train`
(character tokenizer, tf.data, `models.rnn_seq2seq` with a bidirectional GRU
and Bahdanau attention, teacher forcing, greedy evaluation) and writes the
same run folder; the trained model then normalises a few dates with beam search.
"""

import argparse

from keras_seq import decoding, training


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-size", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default="runs")
    args = parser.parse_args()

    result = training.train(
        training.TrainingConfig(
            train_size=args.train_size,
            validation_size=500,
            test_size=1_000,
            epochs=args.epochs,
            units=128,
            out=args.out,
            name="example-dates",
            fresh=True,  # each run of the example starts over in the same folder
        )
    )
    metrics = result.metrics
    print(
        f"greedy exact match on {metrics['test_examples']} held-out dates: "
        f"{metrics['test_exact_match']:.2%} (run folder: {result.run_dir})"
    )

    config, tokenizer = metrics["config"], result.tokenizer
    examples = ["Saturday, 21 November 2026", "21/11/26", "nov 21st, 2026"]
    ids, log_probs = decoding.beam_search(
        result.model,
        tokenizer.encode(examples, config["source_length"]),
        config["target_length"],
        beam_width=4,
    )
    for source, output, log_prob in zip(examples, tokenizer.detokenize(ids).numpy(), log_probs):
        print(f"{source!r:32} -> {output.decode()}   (log p = {float(log_prob):.4f})")


if __name__ == "__main__":
    main()
