"""The multi-stage engine: queries a scatter-gather cannot answer (joins, subqueries, CTEs, set operations,
windows). ``plan`` splits a query into leaves the servers answer through the single-stage path and the rest,
which ``engine`` runs at the broker under a memory bound; ``cuvee.broker.handler`` wires the two together."""
