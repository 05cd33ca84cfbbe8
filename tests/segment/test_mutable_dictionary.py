"""The string dictionary of a consuming segment: its values held once (the chunks a reader concatenated are folded
into that concatenation by the writer), and ``bytes_used`` counting what is really held — the Python keys of its
lookup dict included, which the consuming-memory budget depends on."""

from __future__ import annotations

import sys

import pyarrow as pa

from cuvee.segment.mutable.dictionary import ObjectDictionary


def test_ids_follow_first_appearance_and_values_read_back_in_id_order() -> None:
    d = ObjectDictionary(pa.string())
    assert d.encode(pa.array(["b", "a", "b"])).tolist() == [0, 1, 0]
    assert d.encode(pa.array(["c", "a"])).tolist() == [2, 1]
    assert d.values_array().to_pylist() == ["b", "a", "c"]
    assert d.id_of("c") == 2 and d.id_of("zz") is None


def test_bytes_used_counts_the_python_keys_and_an_unfolded_concatenation() -> None:
    d = ObjectDictionary(pa.string())
    words = [f"value-{i:06d}" for i in range(1000)]
    d.encode(pa.array(words[:500]))
    d.encode(pa.array(words[500:]))
    keys = sum(sys.getsizeof(w) for w in words)
    chunks = pa.array(words[:500]).nbytes + pa.array(words[500:]).nbytes
    assert d.bytes_used() >= chunks + keys  # the keys weigh more than the Arrow values here
    before = d.bytes_used()
    merged = d.values_array()  # a reader's concatenation: a second copy until the writer folds it
    assert d.bytes_used() >= before + merged.nbytes - 64
    d.encode(pa.array(["one more"]))  # the writer folds: the two chunks are gone, the concatenation stays
    assert d.bytes_used() < before + merged.nbytes // 2
    assert merged.to_pylist() == words  # the reader's array is untouched
    assert d.values_array().to_pylist() == [*words, "one more"]


def test_after_folding_the_original_chunks_are_no_longer_held_by_anything() -> None:
    import gc
    import weakref

    d = ObjectDictionary(pa.string())
    d.encode(pa.array(["a", "b"]))
    d.encode(pa.array(["c"]))
    first_chunks = [weakref.ref(chunk) for chunk in d._chunks]
    d.values_array()  # a reader concatenates
    d.encode(pa.array(["d"]))  # the writer folds
    gc.collect()
    assert all(ref() is None for ref in first_chunks)  # only their concatenation holds the values now
    assert d.values_array().to_pylist() == ["a", "b", "c", "d"]


def test_a_reader_holding_an_older_concatenation_keeps_valid_values_while_the_writer_appends() -> None:
    d = ObjectDictionary(pa.string())
    seen = []
    for start in range(0, 100, 10):
        d.encode(pa.array([str(i) for i in range(start, start + 10)]))
        seen.append(d.values_array())
    for n, values in enumerate(seen, start=1):
        assert values.to_pylist() == [str(i) for i in range(10 * n)]
