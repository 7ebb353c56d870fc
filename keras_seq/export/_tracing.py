"""The functions the TFLite and ONNX converters trace, with their input signatures."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from keras_seq._validation import ArgumentTypeError, ArgumentValueError, check_positive_int
from keras_seq.export._checks import check_seq2seq


def with_models(function, *models):
    """``function``, naming the Keras models it calls (`models_of`)."""
    function.keras_models = models
    return function


def models_of(model) -> list:
    """The Keras models a converter traces: ``model`` itself, or those a
    callable of this package names (`with_models`); none for another callable.
    An export's lowering looks for Keras' own recurrent layers and
    ``Bidirectional`` pairs in them (`keras_seq.export._lowering`)."""
    import keras

    if isinstance(model, keras.Model):
        return [model]
    return list(getattr(model, "keras_models", ()))


def default_signature(model, batch_size: int | None = None) -> list[tf.TensorSpec]:
    """The model's inputs (in `model.inputs` order) with a dynamic batch and time axis.

    The time axis is axis 1 of a sequence: of every input of rank 3 or more,
    and of integer (token id) inputs of rank 2. A floating input of rank 2
    is a vector per example (a recurrent state of a `streaming_model`): its
    width stays.
    """
    specs = []
    for t in model.inputs:
        # Feature sizes are fixed by the weights; time stays dynamic.
        shape = [batch_size] + list(t.shape[1:])
        dtype = tf.as_dtype(t.dtype)
        if len(shape) >= 3 or (len(shape) == 2 and not dtype.is_floating):
            shape[1] = None
        specs.append(tf.TensorSpec(shape, tf.as_dtype(t.dtype), name=t.name.split(":")[0]))
    return specs


def traceable(model, input_signature: Sequence[tf.TensorSpec] | None, batch_size=None):
    """The function to trace and its input specs, for a model or a callable.

    A `keras.Model` takes its inputs positionally in `model.inputs` order,
    also with an explicit `input_signature` (one spec per input); they are
    packed into the structure it was built with (a dict for the seq2seq
    builders, a list for a multi-input model such as a `streaming_model`).
    """
    import keras

    if not isinstance(model, keras.Model):
        if input_signature is None:
            raise ArgumentTypeError(
                None, "`input_signature` is needed to convert a callable that is not a "
                f"keras.Model; received {type(model).__name__}."
            )
        return (lambda *args: model(*args)), list(input_signature)
    specs = default_signature(model, batch_size) if input_signature is None else list(input_signature)
    if len(specs) != len(model.inputs):
        raise ArgumentValueError(
            None, f"`input_signature` must have one spec per input of model {model.name!r} "
            f"({len(model.inputs)}: {[t.name for t in model.inputs]}); received {len(specs)}."
        )
    # An unnamed spec takes the name of the model's input it feeds.
    specs = [
        spec if spec.name else tf.TensorSpec(spec.shape, spec.dtype, name=t.name.split(":")[0])
        for spec, t in zip(specs, model.inputs)
    ]

    try:
        # `model.input` has the structure the model was built with;
        # `model.inputs` is its flattened order.
        structure = model.input
    except AttributeError:  # a `keras.Sequential` never called has only `inputs`
        structure = model.inputs[0] if len(model.inputs) == 1 else list(model.inputs)

    def call(*args):
        return model(tf.nest.pack_sequence_as(structure, list(args)), training=False)

    return call, specs


def signature_specs(specs: Sequence[tf.TensorSpec]) -> tuple[list[tf.TensorSpec], list[str]]:
    """``specs`` renamed for a SignatureDef, and the names in input order.

    A spec keeps its name (a Keras input's name, ``"{layer}_state_{i}"`` of a
    streaming model); unnamed or repeated names become ``input_{i}``.
    """
    names = [spec.name or f"input_{i}" for i, spec in enumerate(specs)]
    if len(set(names)) < len(names):
        names = [f"input_{i}" for i in range(len(specs))]
    renamed = [tf.TensorSpec(spec.shape, spec.dtype, name=name) for spec, name in zip(specs, names)]
    return renamed, names


def flat_outputs(call):
    """``call`` returning its outputs as a flat tuple (signature keys
    ``output_0`` … ``output_n`` in that order)."""

    def flat_call(*args):
        return tuple(tf.nest.flatten(call(*args)))

    return flat_call


def seq2seq_signature() -> list[tf.TensorSpec]:
    return [
        tf.TensorSpec([None, None], tf.int32, name="encoder_inputs"),
        tf.TensorSpec([None, None], tf.int32, name="decoder_inputs"),
    ]


def seq2seq_forward(model):
    """The teacher-forced forward pass with positional (encoder, decoder) inputs."""

    def forward(encoder_inputs, decoder_inputs):
        return model(
            {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, training=False
        )

    return with_models(forward, model)


def decoder_step_functions(where: str, model, target_length: int):
    """``(encode, encode_signature, step, step_signature)`` of a translation model.

    The constants and the state of `keras_seq.decoding.decoder_steps` are
    flattened into positional tensors (see `convert_decoder_steps_to_tflite`).
    """
    from keras_seq import decoding

    check_seq2seq(where, model)
    target_length = check_positive_int(where, "target_length", target_length)
    steps = decoding.decoder_steps(model)
    source_spec = tf.TensorSpec([None, None], tf.int32, name="encoder_inputs")

    def encode(encoder_inputs):
        constants, state = steps.start(encoder_inputs, target_length)
        return (*tf.nest.flatten(constants), *tf.nest.flatten(state))

    # A symbolic trace of `start` gives the structures, shapes and dtypes of
    # the constants and the state, which become the step's inputs.
    constants_structure, state_structure = (
        tf.function(lambda ids: steps.start(ids, target_length), autograph=False)
        .get_concrete_function(source_spec)
        .structured_outputs
    )
    flat_constants = tf.nest.flatten(constants_structure)
    num_constants = len(flat_constants)
    step_signature = [
        tf.TensorSpec([None], tf.int32, name="tokens"),
        tf.TensorSpec([], tf.int32, name="t"),
        *(
            tf.TensorSpec(c.shape, c.dtype, name=f"constant_{i}")
            for i, c in enumerate(flat_constants)
        ),
        *(
            tf.TensorSpec(s.shape, s.dtype, name=f"state_{i}")
            for i, s in enumerate(tf.nest.flatten(state_structure))
        ),
    ]

    def step(tokens, t, *flat):
        constants = tf.nest.pack_sequence_as(constants_structure, list(flat[:num_constants]))
        state = tf.nest.pack_sequence_as(state_structure, list(flat[num_constants:]))
        logits, state = steps.step(tokens, t, constants, state)
        return (tf.cast(logits, tf.float32), *tf.nest.flatten(state))

    return with_models(encode, model), [source_spec], with_models(step, model), step_signature


def language_model_step_function(where: str, model, context: int):
    """``(step, step_signature, initial_state)`` of a language model (`keras_seq.tasks.CausalLM`).

    ``step(token, [t,] *state) -> (logits, *new_state)``: one token ``(B,)``
    int32, the cache position ``t`` (a scalar int32, only for a cache that
    holds positions, the Transformer's), and the flattened cache of
    `CausalLM.call_with_cache` (each recurrent layer's states, or one
    key/value cache of ``context`` positions per Transformer block).
    ``initial_state(batch_size)`` gives the first state as arrays.
    """
    from keras_seq.decoding.steps import language_model_steps

    context = check_positive_int(where, "context", context)
    task = language_model_steps(model).task  # refuses other models
    positional = task.positional_cache
    prompt_spec = tf.TensorSpec([None, None], tf.int32)
    start = tf.function(lambda ids: task.build_cache(ids, context), autograph=False)
    state_structure = start.get_concrete_function(prompt_spec).structured_outputs
    flat_state = tf.nest.flatten(state_structure)
    signature = [
        tf.TensorSpec([None], tf.int32, name="token"),
        *([tf.TensorSpec([], tf.int32, name="t")] if positional else []),
        *(tf.TensorSpec(s.shape, s.dtype, name=f"state_{i}") for i, s in enumerate(flat_state)),
    ]

    def step(token, *flat):
        t, flat = (flat[0], flat[1:]) if positional else (tf.constant(0), flat)
        state = tf.nest.pack_sequence_as(state_structure, list(flat))
        logits, _, state = task.call_with_cache(token, state, t)
        return (tf.cast(logits, tf.float32), *tf.nest.flatten(state))

    def initial_state(batch_size):
        state = start(tf.zeros([batch_size, 1], tf.int32))
        return [s.numpy() for s in tf.nest.flatten(state)]

    return with_models(step, task), signature, initial_state
