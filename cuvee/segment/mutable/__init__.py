"""The consuming (mutable) segment; the contract is in ``cuvee.segment.mutable.segment``."""

from cuvee.segment.mutable.segment import MutableSegment, is_dictionary_encoded

__all__ = ["MutableSegment", "is_dictionary_encoded"]
