"""The Pinot compatibility suite: query sets written for Apache Pinot by others (``sets/``, with their origins),
run on seeded generated rows against a live Cuvee cluster and judged against an independent engine.

- ``queries``: the two sets as ``CompatQuery`` (ClickBench's 43 on ``hits``; Pinot's own 200 on ``mytable``, each
  with the authors' H2 translation when they gave one).
- ``data``: seeded rows for both schemas, with the values and cardinalities the queries filter on.
- ``judge``: the oracle (DuckDB over the same rows; the H2 translations run there too) and the comparison rules
  (Pinot's default LIMIT 10, ties under ORDER BY … LIMIT, float tolerance).
- ``run``: loads the rows into a cluster as offline segments and judges every query.
- ``shapes``: the rows served as users run them: offline, realtime through the stream (consuming segments holding
  at least a tenth of the rows) or hybrid split at the time boundary.

``tests/compat`` runs it in CI; ``bench/compat.py`` runs it at size and prints each query's time against DuckDB's.
"""
