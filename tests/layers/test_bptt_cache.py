"""The cache of compiled BPTT loops (TensorFlow) is bounded."""

import pytest


@pytest.mark.tensorflow_only
def test_compiled_bptt_loop_cache_is_bounded_and_keeps_the_most_recent(monkeypatch):
    """The cache of XLA-compiled BPTT loops evicts the least recently used
    configuration beyond its bound (a search over many widths must not grow
    it without limit)."""
    from keras_seq import layers
    from keras_seq.layers import _bptt

    monkeypatch.setattr(_bptt, "MAX_CACHED_LOOPS", 2)
    monkeypatch.setattr(_bptt, "_LOOPS", _bptt.collections.OrderedDict())
    cells = {u: layers.GRUCell(u) for u in (2, 3, 4)}
    first = _bptt._bptt_loops(cells[2], True, False)
    _bptt._bptt_loops(cells[3], True, False)
    assert _bptt._bptt_loops(cells[2], True, False) is first  # reused, now the most recent
    _bptt._bptt_loops(cells[4], True, False)  # evicts units=3, the least recently used
    assert len(_bptt._LOOPS) == 2
    assert [key[1] for key in _bptt._LOOPS] == [
        _bptt._config_key(cells[u].get_config()) for u in (2, 4)
    ]
