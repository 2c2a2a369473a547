"""Plumbing shared by every concern: paths through `tf.io.gfile` with atomic outputs and the records of
checksums they keep (`files`), what such a record holds (`checksum_records`), each operation that changes a
file a countable crash point (`file_operations`), records verified (`checksums`), one writer per output
(`locks`), line, JSONL and TSV files with FILE:LINE errors and the one rule of the texts and ids gtr-keras
takes (`text_files`), JSON records checked field by field, change descriptions and hashes of strings
(`records`), TensorFlow's C++ log lines filtered around converters (`native_logs`), a package's public names
imported on first use (`lazy_exports`), and embeddings cut to their first N coordinates (`dimensions`).
Imports nothing else of gtr-keras but `gtr_keras.errors`.

Internal: no public names.
"""
