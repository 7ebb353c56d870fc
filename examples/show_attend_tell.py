"""Show, Attend and Tell on synthetic digit strips: attention over image regions.

    python examples/show_attend_tell.py [--out DIR] [--epochs N] [--train-size N] [--seed S]
                                        [--beam K]

Each image is a 16 x 48 canvas with one to four digits from a 5 x 7 bitmap
font, at random positions that do not overlap; its caption is the digits read
left to right, then ``[END]``. The model is the soft-attention captioner of
Xu et al. (2015) at toy scale:

    a = CNN(image)                            L = h·w annotation vectors a_j
    s_0 = tanh(W_init mean_j(a_j))
    e_tj = vᵀ tanh(W_q s_{t-1} + W_k a_j)     α_tj = softmax_j(e_tj)
    c_t = Σ_j α_tj a_j
    s_t = GRU([E y_{t-1}; c_t], s_{t-1})      p(y_t) = softmax(W_o [s_t; c_t])

The decoder is `keras_seq.models.RecurrentDecoder` (`BahdanauAttention` and
`GRUCell` inside); captions come from `keras_seq.decoding.greedy_decode_steps`
driving the decoder one step at a time through `CaptionSteps`, and with
``--beam K`` also from `keras_seq.decoding.beam_search_steps` over the same
steps (K beams per image). A convolutional feature map does not
know where it is, and reading left to right needs exactly that, so the image
gets two coordinate channels first (CoordConv, Liu et al. 2018).

Writes ``DIR/results.json`` (greedy exact match on held-out images, none of
them identical to a training image, and the beam-search exact match with
``--beam``) and ``DIR/attention.png`` (α over the
image for each output token).

References:
    Xu et al., 2015. Show, Attend and Tell: Neural Image Caption Generation
    with Visual Attention. https://arxiv.org/abs/1502.03044
    Liu et al., 2018. An Intriguing Failing of Convolutional Neural Networks
    and the CoordConv Solution. https://arxiv.org/abs/1807.03247
"""

from __future__ import annotations

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_seq import decoding
from keras_seq.models import RecurrentDecoder
from keras_seq.reserved_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID

# 5 x 7 glyphs, one string per row.
FONT = {
    0: ("01110", "10001", "10011", "10101", "11001", "10001", "01110"),
    1: ("00100", "01100", "00100", "00100", "00100", "00100", "01110"),
    2: ("01110", "10001", "00001", "00010", "00100", "01000", "11111"),
    3: ("11111", "00010", "00100", "00010", "00001", "10001", "01110"),
    4: ("00010", "00110", "01010", "10010", "11111", "00010", "00010"),
    5: ("11111", "10000", "11110", "00001", "00001", "10001", "01110"),
    6: ("00110", "01000", "10000", "11110", "10001", "10001", "01110"),
    7: ("11111", "00001", "00010", "00100", "01000", "01000", "01000"),
    8: ("01110", "10001", "10001", "01110", "10001", "10001", "01110"),
    9: ("01110", "10001", "10001", "01111", "00001", "00010", "01100"),
}
GLYPHS = {d: np.array([[c == "1" for c in row] for row in rows]) for d, rows in FONT.items()}
GLYPH_HEIGHT, GLYPH_WIDTH = 7, 5
HEIGHT, WIDTH = 16, 48
GAP = 2  # blank columns at least between two glyphs
MAX_DIGITS = 4
# Caption ids: the reserved tokens, then the digits 0-9.
DIGIT_OFFSET = len(RESERVED_TOKENS)
VOCABULARY_SIZE = DIGIT_OFFSET + 10
MAX_LENGTH = MAX_DIGITS + 1  # digits and [END]


def _draw(rng: np.random.Generator, max_digits: int):
    """One canvas and its glyphs ``[(x, y, digit), ...]`` in drawing order."""
    n = int(rng.integers(1, max_digits + 1))
    free = WIDTH - n * GLYPH_WIDTH - (n - 1) * GAP
    # Spread the free columns over the n + 1 gaps around the glyphs.
    cuts = np.sort(rng.integers(0, free + 1, size=n))
    extra = np.diff(np.concatenate([[0], cuts]))
    xs = np.cumsum(extra) + np.arange(n) * (GLYPH_WIDTH + GAP)
    ys = rng.integers(0, HEIGHT - GLYPH_HEIGHT + 1, size=n)
    digits = rng.integers(0, 10, size=n)
    glyphs = [(int(x), int(y), int(d)) for x, y, d in zip(xs, ys, digits)]
    glyphs = [glyphs[i] for i in rng.permutation(n)]  # drawn in any order
    image = np.zeros((HEIGHT, WIDTH), bool)
    for x, y, d in glyphs:
        image[y : y + GLYPH_HEIGHT, x : x + GLYPH_WIDTH] |= GLYPHS[d]
    return image, glyphs


def make_dataset(
    size: int, seed: int, max_digits: int = MAX_DIGITS, exclude: np.ndarray | None = None
) -> dict:
    """Digit-strip images and their captions, deterministic under ``seed``.

    Args:
        size: number of images.
        seed: seed of the NumPy generator.
        max_digits: at most this many digits per image (at least one).
        exclude: images ``(N, HEIGHT, WIDTH, 1)`` that must not occur (a
            training set, so that the held-out images are new); a draw equal
            to one of them is drawn again.

    Returns:
        ``images`` float32 ``(size, HEIGHT, WIDTH, 1)`` in {0, 1};
        ``captions`` int32 ``(size, max_digits + 1)``: digit ids left to right,
        ``[END]``, then ``[PAD]``; ``glyphs``: per image, the ``(x, y, digit)``
        of each glyph (top-left corner) in the order drawn.
    """
    if not 1 <= max_digits <= MAX_DIGITS:
        raise ValueError(f"make_dataset: max_digits must be in [1, {MAX_DIGITS}], got {max_digits}")
    rng = np.random.default_rng(seed)
    seen = set()
    if exclude is not None:
        seen = {(np.asarray(image)[..., 0] > 0.5).tobytes() for image in exclude}
    images = np.zeros((size, HEIGHT, WIDTH, 1), "float32")
    captions = np.full((size, max_digits + 1), PAD_ID, "int32")
    all_glyphs = []
    for i in range(size):
        image, glyphs = _draw(rng, max_digits)
        while image.tobytes() in seen:
            image, glyphs = _draw(rng, max_digits)
        images[i, ..., 0] = image
        left_to_right = [d for _, _, d in sorted(glyphs)]
        captions[i, : len(glyphs)] = np.array(left_to_right) + DIGIT_OFFSET
        captions[i, len(glyphs)] = END_ID
        all_glyphs.append(glyphs)
    return {"images": images, "captions": captions, "glyphs": all_glyphs}


def caption_text(ids) -> str:
    """The digits of a row of caption ids, up to ``[END]``."""
    digits = []
    for i in np.asarray(ids).tolist():
        if i == END_ID or i == PAD_ID:
            break
        digits.append(str(i - DIGIT_OFFSET) if i >= DIGIT_OFFSET else "?")
    return "".join(digits)


class CoordinateChannels(keras.layers.Layer):
    """Appends each pixel's column and row, scaled to [-1, 1], as two channels."""

    def call(self, images):
        height, width = images.shape[1], images.shape[2]
        rows, columns = np.meshgrid(
            np.linspace(-1, 1, height), np.linspace(-1, 1, width), indexing="ij"
        )
        grid = keras.ops.convert_to_tensor(np.stack([columns, rows], -1), images.dtype)
        grid = keras.ops.broadcast_to(grid[None], (keras.ops.shape(images)[0], height, width, 2))
        return keras.ops.concatenate([images, grid], axis=-1)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], input_shape[-1] + 2)


def build_model(
    units: int = 128,
    attention_units: int = 64,
    embedding_dim: int = 16,
    filters: tuple[int, ...] = (16, 32, 64),
) -> keras.Model:
    """The captioner: ``{"images", "decoder_inputs"} -> logits (B, T, VOCABULARY_SIZE)``.

    Parts by name: ``"encoder"`` (images -> annotations ``(B, L, filters[-1])``
    and s_0), ``"target_embedding"``, ``"decoder"`` (`RecurrentDecoder` with a
    GRU cell and Bahdanau attention), ``"logits"``. Each convolution but the
    first follows a 2 x 2 max-pool, so the annotation grid is
    ``HEIGHT / 2^(n-1)`` x ``WIDTH / 2^(n-1)`` for ``n = len(filters)``.
    """
    image = keras.Input((HEIGHT, WIDTH, 1), name="image")
    x = CoordinateChannels(name="coordinates")(image)
    for k, channels in enumerate(filters):
        if k:
            x = keras.layers.MaxPooling2D(2, name=f"pool_{k}")(x)
        x = keras.layers.Conv2D(channels, 3, padding="same", activation="relu", name=f"conv_{k}")(x)
    grid_height, grid_width = x.shape[1], x.shape[2]
    a = keras.layers.Reshape((grid_height * grid_width, filters[-1]), name="annotations")(x)
    s0 = keras.layers.Dense(units, activation="tanh", name="initial_state")(
        keras.layers.GlobalAveragePooling1D(name="mean_annotation")(a)
    )
    encoder = keras.Model(image, [a, s0], name="encoder")

    images = keras.Input((HEIGHT, WIDTH, 1), name="images")
    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    a, s0 = encoder(images)
    y = keras.layers.Embedding(
        VOCABULARY_SIZE, embedding_dim, mask_zero=True, name="target_embedding"
    )(decoder_inputs)
    o = RecurrentDecoder(units, cell="gru", attention_units=attention_units, name="decoder")(
        y, a, initial_state=[s0]
    )
    logits = keras.layers.Dense(VOCABULARY_SIZE, name="logits")(o)
    return keras.Model([images, decoder_inputs], logits, name="show_attend_tell")


def feature_grid(model: keras.Model) -> tuple[int, int]:
    """``(h, w)`` of the annotation grid: α over the L = h·w cells reshapes to it."""
    return tuple(model.get_layer("encoder").get_layer("annotations").input.shape[1:3])


class CaptionSteps:
    """The `keras_seq.decoding.DecoderSteps` of `build_model`'s captioner."""

    def __init__(self, model: keras.Model):
        self.encoder = model.get_layer("encoder")
        self.embedding = model.get_layer("target_embedding")
        self.decoder = model.get_layer("decoder")
        self.logits = model.get_layer("logits")

    def start(self, images, max_length):
        a, s0 = self.encoder(images, training=False)
        # W_k a_j does not depend on the decoder state: once per image.
        constants = {"a": a, "processed_key": self.decoder.precompute_keys(a)}
        return constants, {"s": [s0]}

    def step(self, tokens, t, constants, state):
        y = tf.identity(self.embedding(tokens))  # without the embedding's mask
        o, s, _ = self.decoder.step(
            y, state["s"], constants["a"], constants["processed_key"], training=False
        )
        return self.logits(o), {"s": s}

    def attention(self, images, decoder_inputs):
        a, s0 = self.encoder(images, training=False)
        y = self.embedding(decoder_inputs)
        _, alpha = self.decoder(y, a, initial_state=[s0], return_attention_scores=True)
        return alpha


def shift_right(captions: np.ndarray) -> np.ndarray:
    """Teacher-forcing inputs: ``[START]`` followed by the caption without its last id."""
    start = np.full((len(captions), 1), START_ID, "int32")
    return np.concatenate([start, np.asarray(captions, "int32")[:, :-1]], axis=1)


def greedy_caption(model: keras.Model, images, max_length: int = MAX_LENGTH):
    """Greedy captions and where the model looked for each token.

    Returns:
        ``ids`` int32 ``(B, max_length)`` (digit ids, ``[END]``, then
        ``[PAD]``), and ``alpha`` float ``(B, max_length, L)``: α_t over the L
        annotation cells for each output token, from the teacher-forced
        decoder fed the greedy output (the same computation as the greedy
        steps; rows after ``[END]`` are meaningless).
    """
    steps = CaptionSteps(model)
    images = tf.convert_to_tensor(images, "float32")
    ids = decoding.greedy_decode_steps(steps, images, max_length).numpy()
    alpha = steps.attention(images, tf.convert_to_tensor(shift_right(ids)))
    return ids, np.asarray(alpha)


def beam_caption(
    model: keras.Model,
    images,
    beam_width: int,
    max_length: int = MAX_LENGTH,
    length_penalty: float = 0.0,
):
    """Beam-search captions: the most probable caption among ``beam_width`` beams.

    Returns:
        ``ids`` int32 ``(B, max_length)``, laid out as `greedy_caption`'s, and
        ``log_probs`` float32 ``(B,)``: log p(caption | image), the sum of the
        log-probabilities of its tokens up to and including ``[END]``.
        ``beam_width=1`` gives the greedy captions.
    """
    images = tf.convert_to_tensor(images, "float32")
    ids, log_probs = decoding.beam_search_steps(
        CaptionSteps(model), images, max_length, beam_width, length_penalty
    )
    return ids.numpy(), log_probs.numpy()


def caption_hits(ids: np.ndarray, captions: np.ndarray) -> np.ndarray:
    """Per row: the output up to and including ``[END]`` equals the target caption."""
    return np.array(
        [caption_text(i) == caption_text(c) and END_ID in i for i, c in zip(ids, captions)]
    )


def attention_on_glyph(alpha: np.ndarray, glyphs: list, grid: tuple[int, int], margin: int = 2):
    """Share of digit tokens whose most-attended cell lies on the glyph they name.

    Token t of an image belongs to its t-th glyph from the left; it counts as
    a hit when the centre of its argmax cell falls inside that glyph's box
    grown by ``margin`` pixels. Meaningful for correctly captioned images.

    Args:
        alpha: ``(B, T, h·w)`` attention weights, T at least the digit count.
        glyphs: per image, its ``(x, y, digit)`` (as `make_dataset` reports).
        grid: ``(h, w)``, the annotation grid (`feature_grid`).
        margin: pixels added on every side of the glyph's box.
    """
    h, w = grid
    cell_height, cell_width = HEIGHT / h, WIDTH / w
    hits = []
    for a, image_glyphs in zip(alpha, glyphs):
        for t, (x, y, _) in enumerate(sorted(image_glyphs)):
            row, column = divmod(int(np.argmax(a[t])), w)
            cy, cx = (row + 0.5) * cell_height, (column + 0.5) * cell_width
            hits.append(
                x - margin <= cx <= x + GLYPH_WIDTH + margin
                and y - margin <= cy <= y + GLYPH_HEIGHT + margin
            )
    return float(np.mean(hits))


def attention_figure(model: keras.Model, images, path: str) -> list[str]:
    """Draws α over each image for every greedy output token (one row per image).

    Each panel's colours run from 0 to that panel's largest α (written in
    its title). Returns the greedy captions of ``images``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids, alpha = greedy_caption(model, images)
    grid = feature_grid(model)
    lengths = [list(row).index(END_ID) + 1 if END_ID in row else len(row) for row in ids]
    columns = 1 + max(lengths)
    fig, axes = plt.subplots(
        len(ids), columns, figsize=(1.9 * columns, 0.9 * len(ids)), squeeze=False
    )
    extent = (-0.5, WIDTH - 0.5, HEIGHT - 0.5, -0.5)  # α's cells stretched over the image
    for row, image, out, a, n in zip(axes, np.asarray(images), ids, alpha, lengths):
        for ax in row:
            ax.axis("off")
        row[0].imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
        row[0].set_title(f"caption: {caption_text(out) or '(empty)'}", fontsize=7)
        for t in range(n):
            token = "[END]" if out[t] == END_ID else caption_text(out[t : t + 1]) or "?"
            ax = row[t + 1]
            ax.imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
            ax.imshow(
                a[t].reshape(grid), cmap="jet", alpha=0.55, extent=extent,
                interpolation="bilinear", vmin=0,
            )
            ax.set_title(f"{token}  (max α {a[t].max():.2f})", fontsize=7)
    fig.suptitle("Bahdanau attention α over the CNN feature cells, per output token", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [caption_text(row) for row in ids]


def train(model: keras.Model, data: dict, epochs: int, batch_size: int, learning_rate: float):
    """Teacher-forced cross-entropy (padding ignored) with Adam; returns the Keras history."""
    steps = epochs * -(-len(data["images"]) // batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, max(steps, 1), alpha=0.05)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
    )
    inputs = {"images": data["images"], "decoder_inputs": shift_right(data["captions"])}
    return model.fit(inputs, data["captions"], epochs=epochs, batch_size=batch_size, verbose=2)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {value}")
    return number


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="show_attend_tell", help="folder for the results")
    parser.add_argument("--epochs", type=_positive, default=5)
    parser.add_argument("--train-size", type=_positive, default=20_000)
    parser.add_argument("--test-size", type=_positive, default=1_000)
    parser.add_argument("--batch-size", type=_positive, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--units", type=_positive, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--beam", type=_positive, default=None, metavar="K",
        help="also caption the held-out images by beam search with K beams",
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> tuple[keras.Model, dict]:
    """Generates the data, trains, captions the held-out images, writes the results.

    Returns the trained model and the contents of ``results.json``.
    """
    started = time.perf_counter()
    keras.utils.set_random_seed(args.seed)
    train_data = make_dataset(args.train_size, seed=args.seed)
    test_data = make_dataset(args.test_size, seed=args.seed + 1, exclude=train_data["images"])
    model = build_model(units=args.units)
    train_started = time.perf_counter()
    history = train(model, train_data, args.epochs, args.batch_size, args.learning_rate)
    train_seconds = time.perf_counter() - train_started

    ids, alpha = greedy_caption(model, test_data["images"])
    lengths = (test_data["captions"] != PAD_ID).sum(1) - 1
    hits = caption_hits(ids, test_data["captions"])
    correct = [g for g, hit in zip(test_data["glyphs"], hits) if hit]
    on_glyph = attention_on_glyph(alpha[hits], correct, feature_grid(model)) if correct else None
    os.makedirs(args.out, exist_ok=True)
    figure = os.path.join(args.out, "attention.png")
    attention_figure(model, test_data["images"][:6], figure)
    results = {
        "exact_match": float(hits.mean()),
        "exact_match_by_digits": {
            str(n): float(hits[lengths == n].mean()) for n in np.unique(lengths)
        },
        "attention_on_glyph": on_glyph,
        "test_images": args.test_size,
        "train_images": args.train_size,
        "epochs": args.epochs,
        "seed": args.seed,
        "final_loss": float(history.history["loss"][-1]),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.perf_counter() - started, 1),
        "figure": figure,
        "examples": [
            {"target": caption_text(c), "output": caption_text(i)}
            for i, c in zip(ids[:10], test_data["captions"][:10])
        ],
    }
    if args.beam is not None:
        beam_ids, _ = beam_caption(model, test_data["images"], args.beam)
        results["beam_width"] = args.beam
        results["beam_exact_match"] = float(caption_hits(beam_ids, test_data["captions"]).mean())
        results["beam_examples"] = [caption_text(i) for i in beam_ids[:10]]
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(
        f"greedy exact match on {args.test_size} held-out images: {results['exact_match']:.2%} "
        f"(train {train_seconds:.0f} s); figure: {figure}"
    )
    if args.beam is not None:
        print(f"beam search ({args.beam} beams) exact match: {results['beam_exact_match']:.2%}")
    return model, results


def main(argv: list[str] | None = None) -> dict:
    """The command line: ``results.json``'s contents."""
    return run(parse_args(argv))[1]


if __name__ == "__main__":
    main()
