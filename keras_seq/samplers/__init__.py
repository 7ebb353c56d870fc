"""Samplers: how a generator chooses its next token, in KerasHub's shape.

A sampler is an object over a model's cached step (any
`keras_seq.decoding.DecoderSteps`: a task's own, `keras_seq.decoding.decoder_steps`
and `keras_seq.decoding.language_model_steps`): called with the steps, the
inputs and a length, it runs the decoding loop (one `tf.while_loop`) and
chooses each token its way:

- `GreedySampler`: the most probable token;
- `BeamSampler(num_beams, length_penalty=0.0)`: beam search;
- `RandomSampler(temperature=1.0, seed=None)`: a draw from the whole distribution;
- `TopKSampler(k, temperature=1.0, seed=None)`: a draw among the k most probable;
- `TopPSampler(p, temperature=1.0, seed=None)`: nucleus sampling.

`get` turns a name (``"greedy"``, ``"beam"``, ``"random"``, ``"top_k"``,
``"top_p"``) into a sampler with its defaults, as the tasks' ``generate``
accepts them. Decoding runs on the TensorFlow backend.
"""

from keras_seq._validation import check_choice, invalid_type
from keras_seq.samplers.beam_sampler import BeamSampler
from keras_seq.samplers.greedy_sampler import GreedySampler
from keras_seq.samplers.random_sampler import RandomSampler
from keras_seq.samplers.sampler import Sampler
from keras_seq.samplers.top_k_sampler import TopKSampler
from keras_seq.samplers.top_p_sampler import TopPSampler

__all__ = ["BeamSampler", "GreedySampler", "RandomSampler", "Sampler", "TopKSampler",
           "TopPSampler", "get"]

# The defaults of a sampler given by name (KerasHub's).
_BY_NAME = {
    "greedy": GreedySampler,
    "beam": lambda: BeamSampler(num_beams=5),
    "random": RandomSampler,
    "top_k": lambda: TopKSampler(k=5),
    "top_p": lambda: TopPSampler(p=0.1),
}


def get(identifier) -> Sampler:
    """A sampler: ``identifier`` itself, or one of the names with its defaults
    (``"beam"``: 5 beams; ``"top_k"``: k = 5; ``"top_p"``: p = 0.1, as KerasHub's).

    Examples:
        >>> type(get("greedy")).__name__, get("beam").num_beams
        ('GreedySampler', 5)
    """
    if isinstance(identifier, Sampler):
        return identifier
    if not isinstance(identifier, str):
        raise invalid_type("keras_seq.samplers.get", "sampler",
                           f"a Sampler or one of {', '.join(map(repr, _BY_NAME))}", identifier)
    return _BY_NAME[check_choice("keras_seq.samplers.get", "sampler", identifier,
                                 tuple(_BY_NAME))]()
