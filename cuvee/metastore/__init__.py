"""metastore."""
