"""The batch half on Spark: ingest jobs that build segments inside Spark tasks and push them under one lineage replace, and the ``cuvee`` data source."""
