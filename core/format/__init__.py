"""The record format: RecordBatch v2, its records, codecs, control records and text renderings."""
