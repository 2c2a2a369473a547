"""Encoding a corpus apart from the index it goes into: `beam_pipeline` (corpus encoding with Apache Beam, on any
Beam runner, and the index assembled from its embedding files)."""
