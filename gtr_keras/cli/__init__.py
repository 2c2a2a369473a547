"""The `gtr-keras` command line: `main` (the entry, its checks and error path), `parser` (the parser of every
command), `commands/` (one module a command: its flags, its checks and its handler) and `helpers/` (what
several commands share: flag types, shared flags and checks, handler inputs, the demo's steps, the console)."""
