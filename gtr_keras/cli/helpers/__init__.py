"""What several `gtr-keras` commands share. No TensorFlow, so that `--help` and bad arguments answer at once:
`flag_types` (the flags' types: bounded numbers, paths checked as they are parsed), `shared_flags` (flags several
commands take), `train_flags` (the flags of `train` and `distill`) and `flag_checks` (checks of flags several
commands share). Imported by the handlers when they run: `handler_inputs` (what several handlers load from their
flags), `train_runs` (what `train` and `distill` share), `demo_steps` (the steps of `gtr-keras demo`) and
`console` (the library's log lines shown as the command's)."""
