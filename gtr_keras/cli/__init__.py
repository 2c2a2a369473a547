"""The command handlers behind `gtr-keras` (`commands`, one function a sub-command; `demo`, the main
job). The parser is the top-level module `gtr_keras_cli`, which imports no TensorFlow and calls these."""
