"""Circuit model: immutable operation records, validation, builders and interop."""
