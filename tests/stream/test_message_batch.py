"""MessageBatch: a fetch's messages column by column."""

from __future__ import annotations

import pytest

from cuvee.spi.stream import MessageBatch, StreamMessage

MESSAGES = [StreamMessage(3, None, b"a", 10), StreamMessage(5, b"k", b"b", 11), StreamMessage(6, None, b"c", 12)]


def test_columns_and_messages_are_the_same_batch() -> None:
    batch = MessageBatch.of(MESSAGES, 7)
    assert len(batch) == 3 and batch.offsets == [3, 5, 6] and batch.values == [b"a", b"b", b"c"]
    assert batch.keys == [None, b"k", None] and batch.timestamps_ms == [10, 11, 12]
    assert batch.messages == MESSAGES
    assert len(MessageBatch.empty(4)) == 0 and MessageBatch.empty(4).next_offset == 4


@pytest.mark.parametrize(("target", "offsets", "next_offset"), [
    (5, [3], 5),          # cut inside a gap-free run: the next fetch starts at the target
    (4, [3], 4),          # the target falls in an offset gap (Kafka compaction, transactions)
    (3, [], 3),
    (7, [3, 5, 6], 7),    # everything is below: the batch's own next offset stands
    (9, [3, 5, 6], 7),
])
def test_below_keeps_the_messages_under_an_offset(target: int, offsets: list[int], next_offset: int) -> None:
    batch = MessageBatch.of(MESSAGES, 7).below(target)
    assert batch.offsets == offsets and batch.next_offset == next_offset
    assert len(batch.values) == len(batch.keys) == len(batch.timestamps_ms) == len(offsets)


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        MessageBatch([1, 2], [None], [b"x"], [1], 3)
