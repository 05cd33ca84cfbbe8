"""Schema evolution: what an update of a table's schema may change (``compatibility``), and how a server serves
the current schema over segments built under an earlier one (``serving``: a column added since answers its
default null value, computed at read time, never written into a segment)."""
