"""Cuvee for PySpark users: ``import cuvee.spark; cuvee.spark.register(spark)`` makes ``format("cuvee")``
readable and writable in that session (docs/pipeline.md)."""

from __future__ import annotations

from typing import Any

from cuvee.pipeline.controller_client import PipelineError


def register(spark: Any) -> None:
    """Register the ``cuvee`` data source in ``spark`` (a SparkSession); idempotent."""
    try:
        from cuvee.pipeline.datasource import CuveeDataSource
    except ImportError as exc:
        raise PipelineError(f"the cuvee data source needs pyspark>=4.0 with its Python data source API ({exc}); "
                            "pip install 'pyspark>=4.0,<5' 'pandas<3'") from None
    spark.dataSource.register(CuveeDataSource)
