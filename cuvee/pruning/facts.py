"""A committed segment's ``SegmentFacts``: its metadata's column stats and partitions, and its bloom filters read
on first use (a probe maps the column's filter file once; a segment without the column's filter says "maybe")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuvee.pruning.pruner import SegmentFacts
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.partitioning import PARTITIONS_KEY, SegmentPartitions


def facts_of(segment: ImmutableSegment) -> SegmentFacts:
    metadata = segment.metadata

    def bloom(column: str, hashes: np.ndarray) -> bool:
        try:
            return segment.bloom_might_contain_any(column, hashes)
        except (SegmentError, OSError, pa.ArrowException):
            return True  # no filter, an unreadable file: maybe

    return SegmentFacts(metadata.total_docs, metadata.columns,
                        SegmentPartitions.from_json(metadata.custom.get(PARTITIONS_KEY)), bloom)
