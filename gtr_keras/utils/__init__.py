"""Plumbing shared by every concern: paths through `tf.io.gfile` with atomic outputs and the records of
checksums they keep (`files`), what such a record holds (`checksum_records`), each operation that changes a
file a countable crash point (`file_operations`), records verified (`checksums`), one writer per output
(`locks`), line, JSONL and TSV files with FILE:LINE errors (`text_files`), JSON records checked field by
field, change descriptions and hashes of strings (`records`), TensorFlow's C++ log lines filtered around
converters (`native_logs`), and post-import hooks (`import_hooks`). Imports nothing else of gtr-keras but
`gtr_keras.errors`."""
