"""The `gtr-keras` command line: `main` (the entry, its checks and error path), `parser` with `arguments` (flag
types), `shared_flags`, `train_arguments` and `checks` (no TensorFlow: `--help` and bad arguments answer at
once), `commands/` (one module a command: its flags, its checks and its handler), `handler_inputs` and
`train_runs` (what several handlers share), `demo` (the main job) and `console` (the library's log lines shown
as the command's)."""
