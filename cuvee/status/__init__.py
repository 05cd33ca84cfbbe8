"""A table's status for operators: per partition its segments, replicas, offsets and lag, and one health word
(``cuvee status``, ``GET /tables/{t}/status``; docs/status.md)."""
