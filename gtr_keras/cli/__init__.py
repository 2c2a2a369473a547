"""The `gtr-keras` command line: `main` (the entry, its checks and error path), `parser` with `arguments`,
`train_arguments` and `checks` (no TensorFlow: `--help` and bad arguments answer at once), and the handlers
they run, `commands` (one function a sub-command) and `demo` (the main job)."""
