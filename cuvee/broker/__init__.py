"""Broker role: routing from the external view, SQL rewrite, scatter-gather, merge, Pinot's query API."""
