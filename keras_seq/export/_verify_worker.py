"""Runs every artifact of a ``keras-seq export`` folder without keras_seq.

Started by `keras_seq.export.verify` as ``python _verify_worker.py OUT RESULTS``
(through `keras_seq._unused_imports.python_command`, on TensorFlow) in a
fresh process, the way a server or a device would use the files: it may
import NumPy, TensorFlow (the SavedModel), onnxruntime and ai_edge_litert, and
a meta-path finder makes ``import keras_seq`` fail. Tokenizing and
detokenizing use the vocabulary files next to each host-side artifact.

For each artifact it appends one JSON line to RESULTS: the decoded strings'
agreement with Keras and with the targets, the largest logit error along
Keras' greedy tokens, the operators of the files (TFLite builtins, ONNX op
types), the size and the batch-1 latency. An ONNX artifact gets one line per
execution provider that onnxruntime has here (`onnx_providers`), each session
created with that provider first and the CPU provider for the nodes it does
not take. A language model's generation step (``lm_step*.tflite``) and its
streaming ONNX (``lm_stream.onnx``, fed one token per call) are run in the
generation loop of `keras_seq.decoding.sample` at temperature 0, in NumPy:
the prompts' continuations are compared with Keras' whole, and the step's
choices along Keras' tokens token by token. A ``{"running": ...}`` line
comes first, so that a crash inside a runtime is attributed to its artifact.
A classifier's artifacts (``classifier/1``, ``tflite*/classifier.tflite``,
``onnx/classifier.onnx``) label the held-out texts: their labels and
probabilities are compared with Keras'.
"""

import importlib.abc
import json
import os
import re
import statistics
import sys
import time


class _NoKerasSeq(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "keras_seq":
            raise ImportError(f"{name}: the artifacts are verified without keras_seq")
        return None


sys.meta_path.insert(0, _NoKerasSeq())
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

_BATCH = 256
_LATENCY_RUNS = 7
_TEXT_OPS = {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"}
_ESCAPE = re.compile(r"\\(\\|s|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


# ---------------------------------------------------------------------------
# Host-side tokenizer, from vocab.txt + tokenizer.json + export.json


class HostTokenizer:
    def __init__(self, folder):
        with open(os.path.join(folder, "export.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            self.kind = json.load(f)["type"]
        with open(os.path.join(folder, "vocab.txt"), encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.vocabulary = [_ESCAPE.sub(_unescape, line) for line in lines]
        self.ids = {token: i for i, token in enumerate(self.vocabulary) if i >= 4}

    def encode(self, sources, reference_ids, pad_to_longest=False):
        """Character tokenizers are re-implemented here; WordPiece keeps Keras' ids.

        Each source's first ``source_length`` characters, padded to
        ``source_length`` or (``pad_to_longest``, a classifier's input) to the
        longest of ``sources`` (at least 1)."""
        if self.kind != "char":
            return np.asarray(reference_ids, np.int32)
        length, unk = self.config["source_length"], self.config["unk_id"]
        width = length
        if pad_to_longest:
            width = max(1, min(length, max((len(s) for s in sources), default=0)))
        ids = np.full((len(sources), width), self.config["pad_id"], np.int32)
        for row, source in enumerate(sources):
            tokens = [self.ids.get(ch, unk) for ch in source[:length]]
            ids[row, : len(tokens)] = tokens
        return ids

    def decode(self, ids):
        c = self.config
        strings = []
        for row in ids:
            pieces = []
            for i in row:
                if i == c["end_id"]:
                    break
                if i in (c["pad_id"], c["start_id"]):
                    continue
                if i == c["unk_id"] or not 0 <= i < len(self.vocabulary):
                    pieces.append("\ufffd")
                    continue
                token = self.vocabulary[i]
                if self.kind != "char" and token.startswith("##") and len(token) > 2:
                    token = token[2:]
                pieces.append(token)
            strings.append("".join(pieces))
        return strings


def _unescape(match):
    code = match.group(1)
    return {"\\": "\\", "s": " "}.get(code) or chr(int(code[1:], 16))


# ---------------------------------------------------------------------------
# Runtimes: a list of arrays in, a list of arrays out


class TFLiteModel:
    def __init__(self, path, num_threads=None):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=path, num_threads=num_threads)
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()
        self.num_outputs = len(self.outputs)
        self._shapes = None

        # An integer-only file has static shapes (its loops unrolled): batch 1,
        # ids padded to its length.
        self.static = all(-1 not in d["shape_signature"] for d in self.inputs)

    def __call__(self, *inputs):
        if self.static:
            return self._row_by_row(inputs)
        return self._invoke(inputs)

    def _row_by_row(self, inputs):
        batch = next((np.shape(x)[0] for x in inputs if np.ndim(x) > 0), 1)
        if batch == 1 and all(np.ndim(x) == 0 or tuple(np.shape(x)) == tuple(d["shape"])
                              for d, x in zip(self.inputs, inputs)):
            return self._invoke(inputs)  # a device's call: nothing to pad
        results = []
        for b in range(batch):
            fed = []
            for d, x in zip(self.inputs, inputs):
                x = np.asarray(x)
                if x.ndim > 0:
                    x = x[b : b + 1]
                    room = [int(n) - m for n, m in zip(d["shape"], x.shape)]
                    if any(r < 0 for r in room):
                        raise ValueError(f"input {d['name']!r} of shape {x.shape} is longer "
                                         f"than the file's static {tuple(d['shape'])}")
                    x = np.pad(x, [(0, r) for r in room])
                fed.append(x)
            results.append(self._invoke(fed))
        return [np.concatenate(parts) for parts in zip(*results)]

    def _invoke(self, inputs):
        shapes = [np.shape(x) for x in inputs]
        if shapes != self._shapes:
            for d, shape in zip(self.inputs, shapes):
                self.interpreter.resize_tensor_input(d["index"], shape, strict=False)
            self.interpreter.allocate_tensors()
            self._shapes = shapes
        for d, x in zip(self.inputs, inputs):
            self.interpreter.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]) for d in self.outputs]


# Providers that run no kernel here (remote inference endpoints).
_NOT_LOCAL_PROVIDERS = {"AzureExecutionProvider"}


def onnx_providers():
    """The execution providers onnxruntime offers in this process, CPU first."""
    import onnxruntime

    available = [p for p in onnxruntime.get_available_providers() if p not in _NOT_LOCAL_PROVIDERS]
    return sorted(available, key=lambda p: p != "CPUExecutionProvider")


class ONNXModel:
    def __init__(self, path, provider="CPUExecutionProvider", num_threads=None):
        import onnxruntime

        providers = [provider] + (["CPUExecutionProvider"] if provider != "CPUExecutionProvider"
                                  else [])
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = options.inter_op_num_threads = num_threads
        self.session = onnxruntime.InferenceSession(path, options, providers=providers)
        self.names = [i.name for i in self.session.get_inputs()]
        self.num_outputs = len(self.session.get_outputs())

    def __call__(self, *inputs):
        return self.session.run(None, {n: np.asarray(x) for n, x in zip(self.names, inputs)})


class ONNXStreamStep:
    """A streaming language model in ONNX (``lm_stream.onnx``) as a one-token step.

    Its inputs are ``token_ids (B, T)`` and the states, its outputs the logits
    ``(B, T, V)`` and the new states; fed one token per call it is the step
    that `lm_generate` runs.
    """

    def __init__(self, path, provider):
        self.model = ONNXModel(path, provider, num_threads=LM_THREADS)
        self.state_widths = [i.shape[-1] for i in self.model.session.get_inputs()[1:]]

    def initial_state(self, batch):
        return [np.zeros((batch, width), np.float32) for width in self.state_widths]

    def __call__(self, token, *state):
        logits, *state = self.model(token[:, None].astype(np.int32), *state)
        return [logits[:, -1], *state]


def onnx_op_types(path):
    import onnx

    def walk(graph):
        for node in graph.node:
            yield node.op_type
            for attribute in node.attribute:
                for subgraph in [attribute.g, *attribute.graphs]:
                    yield from walk(subgraph)

    return set(walk(onnx.load(path).graph))


def tflite_op_names(path):
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        m = schema.Model.GetRootAsModel(f.read(), 0)
    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        custom = code == schema.BuiltinOperator.CUSTOM
        codes.append("CUSTOM:" + oc.CustomCode().decode() if custom else builtin.get(code, str(code)))
    return {
        codes[m.Subgraphs(s).Operators(o).OpcodeIndex()]
        for s in range(m.SubgraphsLength())
        for o in range(m.Subgraphs(s).OperatorsLength())
    }


# ---------------------------------------------------------------------------
# Host loops


def start(encoder, step, source_ids):
    outputs = encoder(source_ids)
    num_state = step.num_outputs - 1
    return outputs[: len(outputs) - num_state], outputs[len(outputs) - num_state :]


def greedy(encoder, step, source_ids, config):
    """The device's greedy loop: argmax fed back, [PAD] after [END]."""
    batch, length = source_ids.shape[0], config["target_length"]
    constants, state = start(encoder, step, source_ids)
    ids = np.zeros((batch, length), np.int32)
    tokens = np.full((batch,), config["start_id"], np.int32)
    finished = np.zeros((batch,), bool)
    for t in range(length):
        if finished.all():
            break
        logits, *state = step(tokens, np.int32(t), *constants, *state)
        tokens = np.where(finished, config["pad_id"], np.argmax(logits, -1)).astype(np.int32)
        ids[:, t] = tokens
        finished |= tokens == config["end_id"]
    return ids


def teacher_forced_step_logits(encoder, step, source_ids, keras_ids, config):
    """Step logits ``(B, T, V)`` with Keras' greedy tokens fed back."""
    constants, state = start(encoder, step, source_ids)
    batch, length = keras_ids.shape
    tokens = np.full((batch,), config["start_id"], np.int32)
    logits = []
    for t in range(length):
        step_logits, *state = step(tokens, np.int32(t), *constants, *state)
        logits.append(step_logits)
        tokens = keras_ids[:, t]
    return np.stack(logits, 1)


def median_ms(function):
    function()  # warm-up: allocation, first-call tracing
    times = []
    for _ in range(_LATENCY_RUNS):
        t0 = time.perf_counter()
        function()
        times.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(times), 3)


# ---------------------------------------------------------------------------
# Artifacts


def fraction_equal(strings, expected):
    return float(np.mean([a == b for a, b in zip(strings, expected)])) if len(expected) else 0.0


def host_source_ids(folder, reference, problems):
    """The folder's host tokenizer and its ids of the reference sources,
    noting in ``problems`` where they differ from Keras'."""
    tokenizer = HostTokenizer(folder)
    source_ids = tokenizer.encode([str(s) for s in reference["sources"]],
                                  reference["source_ids"])
    if not np.array_equal(source_ids, reference["source_ids"]):
        problems.append(f"{folder}: the host tokenizer's ids differ from Keras' source ids")
    return tokenizer, source_ids


def host_artifact(folder, runtime, suffix, reference, problems):
    tokenizer, source_ids = host_source_ids(folder, reference, problems)
    config = tokenizer.config
    encoder = runtime(os.path.join(folder, "encoder" + suffix))
    step = runtime(os.path.join(folder, "decoder_step" + suffix))
    ids = np.concatenate(
        [greedy(encoder, step, source_ids[i : i + _BATCH], config)
         for i in range(0, len(source_ids), _BATCH)]
        or [np.zeros((0, config["target_length"]), np.int32)]
    )
    decoded = tokenizer.decode(ids)

    rows, steps = reference["logit_rows"], reference["logit_steps"]
    keras_logits = reference["keras_logits"]
    errors = []
    if len(rows):
        n = int(rows.max()) + 1
        logits = teacher_forced_step_logits(
            encoder, step, reference["source_ids"][:n], reference["keras_ids"][:n], config
        )
        errors.append(np.abs(logits[rows, steps] - keras_logits).max())
        forward_path = os.path.join(folder, "seq2seq" + suffix)
        if os.path.isfile(forward_path):
            decoder_inputs = np.concatenate(
                [np.full((n, 1), config["start_id"], np.int32), reference["keras_ids"][:n, :-1]],
                axis=1,
            )
            (forward,) = runtime(forward_path)(reference["source_ids"][:n], decoder_inputs)
            errors.append(np.abs(forward[rows, steps] - keras_logits).max())

    files = sorted(f for f in os.listdir(folder) if f.endswith(suffix))
    op_names = tflite_op_names if suffix == ".tflite" else onnx_op_types
    ops = sorted(set().union(*(op_names(os.path.join(folder, f)) for f in files)))
    one = source_ids[:1]
    return {
        # What a device ships to decode: the encoder and the decoder step.
        "size_bytes": sum(
            os.path.getsize(os.path.join(folder, name + suffix))
            for name in ("encoder", "decoder_step")
        ),
        "ops": ops,
        "max_abs_logit_error": float(max(errors)) if errors else None,
        "decoded": decoded,
        "latency_ms_batch1": median_ms(lambda: greedy(encoder, step, one, config))
        if len(one)
        else None,
    }


def stream_artifact(folder, reference, problems):
    """The streaming translator (``tflite_stream/``) fed one source token
    per chunk, through the host loop that `keras_seq.export` ships
    (``_streaming_host.py``, NumPy and LiteRT only)."""
    from _streaming_host import stream_translate

    tokenizer, source_ids = host_source_ids(folder, reference, problems)
    config = tokenizer.config
    steps = {}
    for name in ("encoder_step", "decoder_step"):
        with open(os.path.join(folder, name + ".tflite"), "rb") as f:
            steps[name] = f.read()

    def translate(ids):
        chunks = [ids[j : j + 1] for j in range(len(ids))]
        return stream_translate(steps["encoder_step"], steps["decoder_step"], chunks,
                                config["target_length"], config["start_id"], config["end_id"])

    ids = np.full((len(source_ids), config["target_length"]), config["pad_id"], np.int32)
    early, total, seconds = 0, 0, []
    for i, row in enumerate(source_ids):
        real = row[row != config["pad_id"]]
        t0 = time.perf_counter()
        tokens, emitted = translate(real)
        seconds.append((time.perf_counter() - t0, len(tokens)))
        ids[i, : len(tokens)] = tokens
        early, total = early + (emitted[-2] if len(emitted) > 1 else 0), total + len(tokens)
    files = ("encoder_step.tflite", "decoder_step.tflite")
    return {
        "size_bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in files),
        "ops": sorted(set().union(*(tflite_op_names(os.path.join(folder, f)) for f in files))),
        "max_abs_logit_error": None,
        "decoded": tokenizer.decode(ids),
        # One source, fed token by token, from the interpreters' creation to its last token.
        "latency_ms_batch1": round(1000 * statistics.median(t for t, _ in seconds), 3)
        if seconds else None,
        "latency_ms_per_token": round(1000 * sum(t for t, _ in seconds)
                                      / max(1, sum(n for _, n in seconds)), 3),
        # The share of the output emitted before the last source token arrived.
        "emitted_before_source_end": early / total if total else None,
    }


def load_saved_model(path):
    """The ``serving_default`` signature of a SavedModel and its size on disk,
    tensorflow-text's ops registered first when the graph has any."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    ops = {
        node.op
        for graph in saved_model.meta_graphs
        for node in [*graph.graph_def.node, *(n for fn in graph.graph_def.library.function
                                              for n in fn.node_def)]
    }
    if ops & _TEXT_OPS:
        import tensorflow_text  # noqa: F401  (registers the WordPiece ops, as TF Serving does)
    size = sum(
        os.path.getsize(os.path.join(root, f)) for root, _, names in os.walk(path) for f in names
    )
    return tf.saved_model.load(path).signatures["serving_default"], size


def saved_model_artifact(path, reference, problems):
    import tensorflow as tf

    signature, size = load_saved_model(path)
    sources = [str(s) for s in reference["sources"]]
    decoded = []
    for i in range(0, len(sources), _BATCH):
        outputs = signature(inputs=tf.constant(sources[i : i + _BATCH], tf.string))["outputs"]
        decoded.extend(s.decode("utf-8", errors="replace") for s in outputs.numpy())
    one = tf.constant(sources[:1], tf.string)
    return {
        "size_bytes": size,
        "ops": None,
        "max_abs_logit_error": None,
        "decoded": decoded,
        "latency_ms_batch1": median_ms(lambda: signature(inputs=one)) if sources else None,
    }


# ---------------------------------------------------------------------------
# Classifiers: strings in, labels out (SavedModel); ids in, probabilities out


def classifier_artifact(out_dir, entry, reference, provider=None):
    """Labels and probabilities of the reference texts by one artifact, against Keras'."""
    import tensorflow as tf

    path = os.path.join(out_dir, entry["artifact"])
    texts = [str(t) for t in reference["texts"]]
    problems = []
    if entry["format"] == "savedmodel":
        signature, size = load_saved_model(path)
        ops = None

        def run(batch, ids):
            outputs = signature(inputs=tf.constant(batch, tf.string))
            labels = [s.decode("utf-8", errors="replace") for s in outputs["labels"].numpy()]
            return labels, outputs["probabilities"].numpy()
    else:
        tokenizer = HostTokenizer(path)
        suffix = "." + entry["format"]
        file = os.path.join(path, "classifier" + suffix)
        model = TFLiteModel(file) if suffix == ".tflite" else ONNXModel(file, provider)
        size = os.path.getsize(file)
        ops = sorted((tflite_op_names if suffix == ".tflite" else onnx_op_types)(file))
        labels_of = tokenizer.config["labels"]

        def run(batch, ids):
            host_ids = tokenizer.encode(batch, ids, pad_to_longest=True)
            if not np.array_equal(host_ids, ids):
                problems.append(f"{entry['artifact']}: the host tokenizer's ids differ from "
                                "Keras' token ids")
            (probabilities,) = model(host_ids)
            return [labels_of[i] for i in probabilities.argmax(-1)], probabilities

    labels, probabilities = [], []
    for i in range(0, len(texts), _BATCH):
        batch = texts[i : i + _BATCH]
        ids = reference["token_ids"][i : i + _BATCH]
        # The batch's ids padded to its own longest text, as Keras' are for the whole set.
        ids = ids[:, : max(1, int((ids != 0).sum(axis=1).max()))]
        batch_labels, batch_probabilities = run(batch, ids)
        labels += batch_labels
        probabilities.append(batch_probabilities)
    probabilities = np.concatenate(probabilities)
    expected = [str(s) for s in reference["keras_labels"]]
    one_ids = reference["token_ids"][:1]
    one_ids = one_ids[:, : max(1, int((one_ids != 0).sum()))]
    return {
        **entry,
        "provider": provider,
        "size_bytes": size,
        "ops": ops,
        "max_abs_logit_error": None,
        "max_abs_probability_error": float(
            np.abs(probabilities - reference["keras_probabilities"]).max()),
        "string_match": fraction_equal(labels, expected),
        "exact_match": fraction_equal(labels, [str(s) for s in reference["targets"]]),
        "latency_ms_batch1": median_ms(lambda: run(texts[:1], one_ids)),
        "problems": problems[:1],
        "examples": len(texts),
        "mismatches": [{"source": t, "keras": k, "artifact": a}
                       for t, k, a in zip(texts, expected, labels) if k != a][:5],
    }


# ---------------------------------------------------------------------------
# Language models: one generation step, the device's loop


# A language model's step runs on one thread in both runtimes: a device's
# generation loop at batch 1, and per-token latencies that compare.
LM_THREADS = 1


def lm_generate(step, prompt_ids, length, config, forced=None, state=None):
    """Greedy generation with the step, as `keras_seq.decoding.sample` does it.

    The prompt is fed token by token, then each chosen token (or, with
    ``forced``, Keras' token: the step's choices along Keras' path). A
    Transformer's cache of ``context`` positions restarts at 0 when full, with
    the last ``context // 2`` tokens fed again. Returns the chosen ids
    ``(B, length)`` and the logits they were chosen from ``(B, length, V)``.
    """
    batch, prompt_length = prompt_ids.shape
    total = prompt_length + length
    transformer = config["kind"] == "transformer"
    window = config["context"] if transformer else total
    keep = window // 2
    if state is None:
        state = [np.zeros([batch, *shape[1:]], np.float32) for shape in config["state_shapes"]]
    ids = np.concatenate([prompt_ids, np.zeros((batch, length), np.int32)], axis=1)
    chosen = np.zeros((batch, length), np.int32)
    all_logits = []
    i = t = 0
    filled = prompt_length
    while filled < total:
        logits, *state = step(ids[:, i], *([np.int32(t)] if transformer else []), *state)
        if i + 1 == filled:
            masked = np.array(logits, np.float32)
            masked[:, config["never_ids"]] = -np.inf
            token = np.argmax(masked, axis=-1).astype(np.int32)
            chosen[:, filled - prompt_length] = token
            all_logits.append(logits)
            ids[:, filled] = token if forced is None else forced[:, filled - prompt_length]
            filled += 1
        i, t = i + 1, t + 1
        if t == window:
            i, t = i - keep, 0
    return chosen, np.stack(all_logits, axis=1)


def lm_artifact(out_dir, entry, reference, provider=None):
    with open(os.path.join(out_dir, "export.json"), encoding="utf-8") as f:
        config = json.load(f)
    path = os.path.join(out_dir, entry["artifact"])
    prompt_ids, keras_ids = reference["prompt_ids"], reference["keras_ids"]
    length = keras_ids.shape[1]
    if entry["format"] == "onnx":
        step = ONNXStreamStep(path, provider)
        ops = sorted(onnx_op_types(path))

        def generate(prompts, forced=None):
            return lm_generate(step, prompts, length, config, forced,
                               state=step.initial_state(len(prompts)))
    else:
        step = TFLiteModel(path, num_threads=LM_THREADS)
        ops = sorted(tflite_op_names(path))

        def generate(prompts, forced=None):
            return lm_generate(step, prompts, length, config, forced)
    ids, _ = generate(prompt_ids)
    along, logits = generate(prompt_ids, forced=keras_ids)
    one = prompt_ids[:1]
    ms_per_token = median_ms(lambda: generate(one)) / length
    whole = [bool(np.array_equal(a, k)) for a, k in zip(ids, keras_ids)]
    mismatches = []
    for row in np.flatnonzero(~np.asarray(whole, bool))[:5]:
        first = int(np.flatnonzero(ids[row] != keras_ids[row])[0])
        mismatches.append({"source": str(reference["prompts"][row]),
                           "keras": str(reference["keras_text"][row]),
                           "artifact": f"differs from character {first} on"})
    return {
        **entry,
        "provider": provider,
        "size_bytes": os.path.getsize(path),
        "ops": ops,
        "max_abs_logit_error": float(np.abs(logits - reference["keras_logits"]).max()),
        "string_match": float(np.mean(whole)),
        "exact_match": None,
        "token_agreement": float(np.mean(along == keras_ids)),
        "latency_ms_batch1": round(ms_per_token * length, 3),
        "ms_per_token": round(ms_per_token, 4),
        "keras_ms_per_token": round(float(reference["keras_ms_per_token"]), 4),
        "problems": [],
        "examples": int(len(keras_ids)),
        "mismatches": mismatches,
    }


def main(argv):
    out_dir, results_path = argv
    try:
        import keras_seq  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("verify worker: keras_seq must not be importable here")
    with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    reference = dict(np.load(os.path.join(out_dir, manifest["reference"])))
    # What to check: the manifest's "check" (an export before it: by its task).
    kind = manifest.get("check") or _CHECK_OF_TASK.get(manifest.get("task"), "translation")
    artifact_check = CHECKS[kind]

    with open(results_path, "w", encoding="utf-8") as results:
        for entry in manifest["artifacts"]:
            providers = onnx_providers() if entry["format"] == "onnx" else [None]
            for provider in providers:
                results.write(json.dumps({"running": entry["artifact"], "provider": provider})
                              + "\n")
                results.flush()
                try:
                    record = artifact_check(out_dir, entry, reference, provider)
                except Exception as error:  # a broken artifact must not hide the others
                    on = f" on {provider}" if provider else ""
                    record = {**entry, "provider": provider,
                              "problems": [f"{entry['artifact']}{on}: {error!r}"]}
                results.write(json.dumps(record, ensure_ascii=False) + "\n")
                results.flush()


def translation_artifact(out_dir, entry, reference, provider=None):
    """The translations of the reference sources by one artifact, against Keras'."""
    targets = [str(s) for s in reference["targets"]]
    path = os.path.join(out_dir, entry["artifact"])
    problems = []
    if entry["format"] == "savedmodel":
        row = saved_model_artifact(path, reference, problems)
        beam = entry.get("beam_width", 1) > 1
        expected = reference["keras_beam_outputs" if beam else "keras_outputs"]
    elif entry["format"] == "tflite_stream":
        row = stream_artifact(path, reference, problems)
        expected = reference["keras_outputs"]
    else:
        if entry["format"] == "tflite":
            runtime, suffix = TFLiteModel, ".tflite"
        else:
            runtime, suffix = (lambda p: ONNXModel(p, provider)), ".onnx"
        row = host_artifact(path, runtime, suffix, reference, problems)
        expected = reference["keras_outputs"]
    expected = [str(s) for s in expected]
    decoded = row.pop("decoded")
    row.update(
        string_match=fraction_equal(decoded, expected),
        exact_match=fraction_equal(decoded, targets),
    )
    mismatches = [
        {"source": str(s), "keras": k, "artifact": d}
        for s, k, d in zip(reference["sources"], expected, decoded)
        if k != d
    ]
    return {**entry, **row, "provider": provider, "problems": problems,
            "examples": len(targets), "mismatches": mismatches[:5]}


# ---------------------------------------------------------------------------
# Taggers: strings in, tags out (SavedModel); ids in, tag probabilities out


def host_tagger_ids(folder, token_lists):
    """Word and character ids ``(B, T)``, ``(B, T, C)`` of token lists, from the
    folder's ``vocabularies.json``: lower-cased words, each token's characters
    (a longer token: its first C // 2 and last C - C // 2), 0 = padding."""
    with open(os.path.join(folder, "vocabularies.json"), encoding="utf-8") as f:
        saved = json.load(f)
    words = {w: i for i, w in enumerate(saved["words"]) if i >= 2}
    chars = {c: i for i, c in enumerate(saved["characters"]) if i >= 2}
    width, head = saved["word_length"], saved["word_length"] // 2
    longest = max(1, max((len(t) for t in token_lists), default=0))
    word_ids = np.zeros((len(token_lists), longest), np.int32)
    char_ids = np.zeros((len(token_lists), longest, width), np.int32)
    for row, tokens in enumerate(token_lists):
        for j, token in enumerate(tokens):
            word_ids[row, j] = words.get(token.lower() if saved["lowercase"] else token, 1)
            kept = token if len(token) <= width else token[:head] + token[len(token) - width + head:]
            char_ids[row, j, : len(kept)] = [chars.get(c, 1) for c in kept]
    return word_ids, char_ids


def window_spans(length: int, window: int) -> list[tuple[int, int, int]]:
    """How a host tags a sentence of ``length`` tokens with a file of
    ``window`` words: ``(start, first, end)`` per call, the call reading
    tokens ``start .. start + window - 1`` and giving the tags of tokens
    ``first .. end - 1``.

    Windows overlap by half; each token takes its tags from the window where
    it has the most context on its nearer cut side (a sentence's own start
    and end are not cuts).
    """
    if length <= window:
        return [(0, 0, length)]
    stride = max(1, window // 2)
    starts = list(range(0, length - window, stride)) + [length - window]

    def context(t, start):
        before = t - start if start > 0 else length
        after = start + window - 1 - t if start + window < length else length
        return min(before, after)

    best = [max(starts, key=lambda start: context(t, start))
            for t in range(length)]  # the first of equals: ties go left
    spans = []
    for start in starts:
        chosen = [t for t in range(length) if best[t] == start]
        if chosen:
            spans.append((start, chosen[0], chosen[-1] + 1))
    return spans


def windowed(probabilities_of, tokens: list[str], window: int) -> np.ndarray:
    """The tag probabilities ``(len(tokens), tags)`` of one sentence, by a file
    of ``window`` words (`window_spans`); ``probabilities_of(token_lists)``
    runs it on a batch of one."""
    parts = []
    for start, first, end in window_spans(len(tokens), window):
        p = probabilities_of([tokens[start : start + window]])[0]
        parts.append(p[first - start : end - start])
    return np.concatenate(parts)


def tags_artifact(out_dir, entry, reference, provider=None):
    """Each reference sentence's tags by one artifact, against Keras' (and the gold tags)."""
    import tensorflow as tf

    path = os.path.join(out_dir, entry["artifact"])
    texts = [str(t) for t in reference["texts"]]
    problems = []
    if entry["format"] == "savedmodel":
        signature, size = load_saved_model(path)
        ops = None

        def run(batch):
            outputs = signature(inputs=tf.constant(batch, tf.string))
            tags = [[t.decode("utf-8") for t in row if t] for row in outputs["tags"].numpy()]
            return tags, outputs["probabilities"].numpy()
    else:
        file = os.path.join(path, "tagger.tflite")
        model = TFLiteModel(file)
        size, ops = os.path.getsize(file), sorted(tflite_op_names(file))
        with open(os.path.join(path, "export.json"), encoding="utf-8") as f:
            host = json.load(f)
        tag_names, window = host["tags"], host.get("window") if model.static else None
        order = [0 if "char_ids" in d["name"] else 1 for d in model.inputs]

        def probabilities_of(token_lists):
            word_ids, char_ids = host_tagger_ids(path, token_lists)
            return model(*[(char_ids, word_ids)[i] for i in order])[0]

        def run(batch):
            token_lists = [t.split() for t in batch]
            if window is None:
                probabilities = probabilities_of(token_lists)
            else:  # an integer file of `window` words: longer sentences in windows
                rows = [windowed(probabilities_of, tokens, window) for tokens in token_lists]
                longest = max(len(r) for r in rows)
                probabilities = np.stack([np.pad(r, [(0, longest - len(r)), (0, 0)])
                                          for r in rows])
            tags = [[tag_names[i] for i in p[: len(t)].argmax(-1)]
                    for p, t in zip(probabilities, token_lists)]
            return tags, probabilities

    keras_p = reference["keras_probabilities"]
    tags, error = [], 0.0
    for i in range(0, len(texts), _BATCH):
        batch_tags, p = run(texts[i : i + _BATCH])
        tags += batch_tags
        for j, text in enumerate(texts[i : i + _BATCH]):
            n = len(text.split())
            error = max(error, float(np.abs(p[j, :n] - keras_p[i + j, :n]).max()) if n else 0.0)
    expected = [str(s).split() for s in reference["keras_tags"]]
    gold = [str(s).split() for s in reference["targets"]]
    agree = [a == k for ts, ks in zip(tags, expected) for a, k in zip(ts, ks)]
    correct = [a == g for ts, gs in zip(tags, gold) for a, g in zip(ts, gs)]
    return {
        **entry,
        "provider": provider,
        "size_bytes": size,
        "ops": ops,
        "max_abs_logit_error": None,
        "max_abs_probability_error": error,
        "string_match": fraction_equal([" ".join(t) for t in tags],
                                       [" ".join(k) for k in expected]),
        "token_agreement": float(np.mean(agree)) if agree else None,
        "exact_match": float(np.mean(correct)) if correct else None,
        "latency_ms_batch1": median_ms(lambda: run(texts[:1])),
        "problems": problems,
        "examples": len(texts),
        "mismatches": [{"source": t, "keras": " ".join(k), "artifact": " ".join(a)}
                       for t, k, a in zip(texts, expected, tags) if k != a][:5],
    }


# The check of each kind of export (the manifest's "check").
CHECKS = {"translation": translation_artifact, "generation": lm_artifact,
          "labels": classifier_artifact, "tags": tags_artifact}
# The check of an export written before the manifest named it.
_CHECK_OF_TASK = {"lm": "generation", "classify": "labels"}


if __name__ == "__main__":
    main(sys.argv[1:])
