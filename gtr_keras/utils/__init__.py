"""Plumbing shared by every concern: paths through `tf.io.gfile` with atomic outputs (`files`), one
writer per output (`locks`), line, JSONL and TSV files with FILE:LINE errors (`text_files`), and JSON
records, change descriptions and hashes of strings (`records`). Imports nothing else of gtr-keras but
`gtr_keras.errors`."""
