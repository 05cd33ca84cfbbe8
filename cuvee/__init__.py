"""Cuvee: a real-time OLAP store re-implementing Apache Pinot's low-level real-time ingestion."""

__version__ = "0.1.0"
