"""The record codec: record batches (magic 1 rows, magic 2 columns), varints and message ids."""
