"""The Spark session ``cuvee pipeline`` runs in: the given master (``local[*]`` by default), or the session a
``spark-submit`` already made; the ``cuvee`` data source registered in it either way."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from cuvee.pipeline.controller_client import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(master: str | None = None, app_name: str = "cuvee-pipeline", **conf: str) -> SparkSession:
    """``conf``: extra Spark settings (tests: ``**{"spark.ui.enabled": "false"}``)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise PipelineError("the pipeline needs pyspark: pip install 'pyspark>=4.0,<5' 'pandas<3'") from None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a laptop's hostname often resolves to nothing useful
    if master is None or master.startswith("local"):
        # local Python workers run this interpreter (the venv that has Cuvee), not whatever python3 is on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = builder.config("spark.sql.python.filterPushdown.enabled", "true")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    from cuvee.spark import register  # here: cuvee.spark imports pyspark's data source API

    register(session)
    return session
