"""Plumbing shared by every concern: paths through `tf.io.gfile` with atomic outputs (`files`), and JSON
records, change descriptions and hashes of strings (`records`). Imports nothing else of gtr-keras but
`gtr_keras.errors`."""
