"""Segment pruning: the part of a WHERE that segment metadata can rule out (``predicate``) and the rule that skips
a segment only when its min/max, partitions or bloom filter prove no row passes (``pruner``). Both are pure (no
I/O: the pruner asks a segment's bloom filter through the callback its ``SegmentFacts`` carry); ``facts`` builds
those facts from a committed segment and reads its bloom filter files. The broker plans the filter once per query
text and sends it to the servers, which apply it to their committed segments."""

from cuvee.pruning.predicate import And, Compare, In, Or, Predicate, from_where
from cuvee.pruning.pruner import SegmentFacts, Work, may_match, pruned

__all__ = ["And", "Compare", "In", "Or", "Predicate", "SegmentFacts", "Work", "from_where", "may_match", "pruned"]
