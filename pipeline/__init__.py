"""pipeline/: the PySpark data source for bulk reads and bulk loads."""
