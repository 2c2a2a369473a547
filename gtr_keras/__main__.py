"""`python -m gtr_keras ARGS` runs the `gtr-keras` command (`gtr_keras.cli.main`)."""

import sys

from gtr_keras.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
