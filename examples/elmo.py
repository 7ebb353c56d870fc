"""ELMo in miniature: a word-level biLM whose vectors depend on context, and what that buys.

    python examples/elmo.py [--data FILE.txt] [--epochs 10] [--units 64]

1. Trains `bidirectional_language_model` on a text (``--data``; default a few
   paragraphs written for this example, `TEXT`) together with
   ``--unlabelled`` unlabelled sentences from the small grammar of step 3
   (text from the task's domain, as ELMo is pretrained on unlabelled text).
2. Prints cosine similarities between the vectors of "stick" in four
   sentences, two where it is a noun ("give me the stick") and two where it
   is a verb ("let's stick to the plan"). The token embedding gives the same
   vector everywhere (similarity 1); the biLM's layers (the mean of the
   contextual layers of `contextual_embedder`) give vectors that are closer
   for two uses of one sense than across senses.
3. The payoff: a labelled task where context decides the label. Sentences
   from a grammar use one of `AMBIGUOUS` ("watch", "book", "light", ...)
   either as a noun ("the old watch stopped") or as a verb ("we often watch
   the game"); the label is the use. Two classifiers read the same
   ``--labelled`` examples and predict the label from the vector at the
   ambiguous word: (a) `ScalarMix` of the frozen embedder's layers, then a
   linear layer; (b) a trainable token embedding alone (no context), then
   the same linear layer. Both are scored on ``--held-out`` new sentences.
   Without context the word alone cannot tell its use (about chance).

`main(argv)` returns the numbers as a dict.
"""

from __future__ import annotations

import argparse
import re

import keras
import numpy as np
from keras import ops

from keras_seq.layers.scalar_mix import ScalarMix
from keras_seq.models.elmo import bidirectional_language_model, contextual_embedder

TEXT = """\
On Saturday morning the dog found a stick in the park and carried it home. Give me the
stick, I said, and it dropped the stick at my feet. The stick was wet and covered in mud.

Our team has a plan for the new season. We always stick together, and when things get hard
we stick to the plan. Let's stick to the plan, said the coach, and nobody argued.

My grandmother keeps an old watch in a drawer. The watch stopped years ago, but she likes to
watch the birds in the garden with it on her wrist. In the evening we watch the news and she
tells us stories about the war.

I want to book a room by the sea for the summer. The book I am reading is about a lighthouse.
Its keeper would light the lamp every night, and the light could be seen from the town.
Please light a candle, she wrote, the light in the hall is broken.

They park the car near the station and take the train to the city. The train was late again.
Coaches train the young players every day, and the players train hard before a match.
"""

# The labelled task's grammar. Each ambiguous word is a noun after a
# determiner (and maybe one adjective), a verb after a subject (and maybe one
# adverb) or after "to" / "will"; a verb's object is its own, a noun's tail is
# shared by all.
AMBIGUOUS = {
    "stick": ["to the plan", "together", "with the team"],
    "watch": ["the game", "the birds", "the news"],
    "book": ["a table", "the tickets", "a room"],
    "light": ["the fire", "a candle", "the lamp"],
    "park": ["the car", "near the house", "the bike"],
    "train": ["the dog", "every day", "the new players"],
}
DETERMINERS = ["the", "a", "my", "your", "our", "this", "that"]
ADJECTIVES = ["old", "new", "small", "long", "broken"]
SUBJECTS = ["we", "they", "i", "you"]
ADVERBS = ["often", "always", "rarely", "never"]
AUXILIARIES = ["will", "want to", "like to", "can"]
NOUN_TAILS = ["is on the table", "was very old", "fell on the floor", "is in the box",
              "looked nice", "was gone"]
NOUN_STARTS = ["", "she found", "he lost", "we saw", "look at"]


def labelled_examples(n: int, rng: np.random.Generator) -> list[tuple[list[str], int, int]]:
    """``n`` sentences ``(words, position, label)``: ``words[position]`` is an
    ambiguous word, ``label`` 1 where it is a verb and 0 where it is a noun
    (alternating, so both senses are equally frequent)."""
    examples = []
    words_list = list(AMBIGUOUS)
    for i in range(n):
        word = words_list[rng.integers(len(words_list))]
        label = i % 2
        if label:  # verb: subject [adverb | auxiliary] WORD object .
            left = [str(rng.choice(SUBJECTS))]
            kind = rng.integers(3)
            if kind == 1:
                left.append(str(rng.choice(ADVERBS)))
            elif kind == 2:
                left += str(rng.choice(AUXILIARIES)).split()
            right = str(rng.choice(AMBIGUOUS[word])).split()
        else:  # noun: [start] determiner [adjective] WORD [tail] .
            left = str(rng.choice(NOUN_STARTS)).split() + [str(rng.choice(DETERMINERS))]
            if rng.random() < 0.5:
                left.append(str(rng.choice(ADJECTIVES)))
            right = str(rng.choice(NOUN_TAILS)).split() if len(left) <= 2 else []
        examples.append((left + [word] + right + ["."], len(left), label))
    return examples


def split_sentences(text: str) -> list[list[str]]:
    """Lower-cased words and punctuation, one list per sentence."""
    sentences, current = [], []
    for token in re.findall(r"[a-z]+(?:'[a-z]+)?|[.,!?;:]", text.lower()):
        current.append(token)
        if token in ".!?":
            sentences.append(current)
            current = []
    return sentences + ([current] if current else [])


def encode(sentences, vocabulary, max_length):
    """Padded ids ``(N, T)``: 0 = padding, 1 = an unknown word; long sentences cut."""
    length = min(max_length, max(len(s) for s in sentences))
    ids = np.zeros((len(sentences), length), "int32")
    for row, sentence in enumerate(sentences):
        words = sentence[:length]
        ids[row, : len(words)] = [vocabulary.get(w, 1) for w in words]
    return ids


def language_model_targets(ids):
    """Targets of the two directions: token t + 1 and token t − 1 (0 where none)."""
    forward, backward = np.zeros_like(ids), np.zeros_like(ids)
    forward[:, :-1], backward[:, 1:] = ids[:, 1:], ids[:, :-1]
    return {"forward": forward, "backward": backward}


def cosine(u, v) -> float:
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v) + 1e-12))


SENSES = {  # "stick" as a noun and as a verb
    "noun": ["give me the stick .", "the dog dropped the wet stick at my feet ."],
    "verb": ["let's stick to the plan .", "we always stick together ."],
}


def sense_similarities(embedder, vocabulary, word="stick"):
    """Cosine similarities of ``word``'s contextual vectors (the mean of the
    embedder's layers 1 … L) within and across the senses of `SENSES`."""
    vectors = {}
    for sense, sentences in SENSES.items():
        split = [split_sentences(s)[0] for s in sentences]
        r = ops.convert_to_numpy(embedder(encode(split, vocabulary, 64)))  # (N, L+1, T, 2u)
        vectors[sense] = [r[i, 1:, s.index(word)].mean(axis=0) for i, s in enumerate(split)]
    noun, verb = vectors["noun"], vectors["verb"]
    same = [cosine(*noun), cosine(*verb)]
    different = [cosine(a, b) for a in noun for b in verb]
    return float(np.mean(same)), float(np.mean(different)), same, different


def _at_position(h, position):
    """``h (B, T, F)`` at ``position (B,)``: (B, F)."""
    index = ops.reshape(ops.cast(position, "int32"), (-1, 1, 1))
    return ops.squeeze(ops.take_along_axis(h, index, axis=1), axis=1)


def elmo_classifier(embedder, num_layers):
    """Sense from `ScalarMix` of the frozen embedder's L + 1 layers at the word."""
    embedder.trainable = False
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    position = keras.Input((), dtype="int32", name="position")
    r = embedder(token_ids)  # (B, L + 1, T, 2u)
    mixed = ScalarMix(name="scalar_mix")([r[:, j] for j in range(num_layers + 1)])
    logits = keras.layers.Dense(2, name="sense")(_at_position(mixed, position))
    return keras.Model([token_ids, position], logits, name="elmo_classifier")


def token_classifier(vocabulary_size, width):
    """Sense from a trainable embedding of the word alone (no context)."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    position = keras.Input((), dtype="int32", name="position")
    e = keras.layers.Embedding(vocabulary_size, width, name="embedding")(token_ids)
    logits = keras.layers.Dense(2, name="sense")(_at_position(e, position))
    return keras.Model([token_ids, position], logits, name="token_classifier")


def accuracy_after_training(model, train, test, epochs, batch_size):
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(train[0], train[1], epochs=epochs, batch_size=batch_size, verbose=0)
    return float(model.evaluate(test[0], test[1], verbose=0)[1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="a .txt file (default: the built-in TEXT)")
    parser.add_argument("--unlabelled", type=int, default=2000,
                        help="unlabelled grammar sentences added to the biLM's text")
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10, help="biLM epochs")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--labelled", type=int, default=300, help="labelled training sentences")
    parser.add_argument("--held-out", type=int, default=300)
    parser.add_argument("--classifier-epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if args.data:
        with open(args.data, encoding="utf-8") as f:
            text = f.read()
    else:
        text = TEXT
    unlabelled = [words for words, _, _ in labelled_examples(args.unlabelled, rng)]
    corpus = split_sentences(text) + unlabelled
    words = sorted({w for s in corpus for w in s})
    vocabulary = {w: i + 2 for i, w in enumerate(words)}  # 0 = padding, 1 = unknown
    vocabulary_size = len(vocabulary) + 2

    # 1. The biLM.
    ids = encode(corpus, vocabulary, args.max_length)
    bilm = bidirectional_language_model(vocabulary_size, num_layers=args.num_layers,
                                        units=args.units, dropout=0.1)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    bilm.compile(keras.optimizers.Adam(5e-3), {"forward": loss, "backward": loss})
    print(f"biLM: {len(corpus)} sentences, {int((ids > 0).sum())} tokens, "
          f"vocabulary {vocabulary_size}, {bilm.count_params()} weights")
    history = bilm.fit(ids, language_model_targets(ids), batch_size=args.batch_size,
                       epochs=args.epochs, shuffle=True, verbose=2).history
    forward_loss, backward_loss = history["forward_loss"][-1], history["backward_loss"][-1]
    print(f"biLM cross-entropy: forward {forward_loss:.3f}, backward {backward_loss:.3f} "
          f"(uniform: {np.log(vocabulary_size):.3f})")

    # 2. One word, different vectors.
    embedder = contextual_embedder(bilm)
    same, different, same_pairs, different_pairs = sense_similarities(embedder, vocabulary)
    print("\ncosine similarity of 'stick' (mean of the biLM layers; the token embedding "
          "gives 1.000 for every pair):")
    for sense, sentences in SENSES.items():
        print(f"  {sense}: " + " | ".join(sentences))
    print(f"  same sense      (noun-noun, verb-verb): "
          f"{', '.join(f'{s:.3f}' for s in same_pairs)}  mean {same:.3f}")
    print(f"  different sense (noun-verb x4):         "
          f"{', '.join(f'{s:.3f}' for s in different_pairs)}  mean {different:.3f}")

    # 3. Context decides the label.
    def arrays(examples):
        ids = encode([w for w, _, _ in examples], vocabulary, args.max_length)
        positions = np.array([p for _, p, _ in examples], "int32")
        return [ids, positions], np.array([label for _, _, label in examples], "int32")

    train = arrays(labelled_examples(args.labelled, np.random.default_rng(args.seed + 1)))
    test = arrays(labelled_examples(args.held_out, np.random.default_rng(args.seed + 2)))
    fit = dict(epochs=args.classifier_epochs, batch_size=args.batch_size)
    accuracy_elmo = accuracy_after_training(
        elmo_classifier(embedder, args.num_layers), train, test, **fit)
    accuracy_token = accuracy_after_training(
        token_classifier(vocabulary_size, 2 * args.units), train, test, **fit)
    print(f"\nnoun or verb use of {', '.join(AMBIGUOUS)}: {args.labelled} labelled sentences, "
          f"{args.held_out} held out")
    print(f"  held-out accuracy, ScalarMix of the frozen biLM layers: {accuracy_elmo:.3f}")
    print(f"  held-out accuracy, trainable token embedding alone:     {accuracy_token:.3f}")
    return {
        "forward_loss": float(forward_loss),
        "backward_loss": float(backward_loss),
        "similarity_same_sense": same,
        "similarity_different_sense": different,
        "accuracy_elmo": accuracy_elmo,
        "accuracy_token_embedding": accuracy_token,
    }


if __name__ == "__main__":
    main()
