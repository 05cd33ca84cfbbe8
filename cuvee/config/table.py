"""Table configs in Pinot's JSON shape (REALTIME and OFFLINE tables).

Work in progress: the config helper fills in TableConfig, stream configs and validation. IndexingConfig is the
part segments depend on and its fields are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexingConfig:
    """``tableIndexConfig``: which columns get which index, and how segments are laid out."""

    inverted_index_columns: tuple[str, ...] = ()
    no_dictionary_columns: tuple[str, ...] = ()
    sorted_column: str | None = None
    range_index_columns: tuple[str, ...] = ()
    bloom_filter_columns: tuple[str, ...] = ()
