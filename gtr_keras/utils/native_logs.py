"""TensorFlow's C++ log lines kept off the terminal while a converter runs.

The graph optimiser that tf2onnx and the LiteRT converter call (Grappler) logs
through absl straight to file descriptor 2, whatever `TF_CPP_MIN_LOG_LEVEL`
says ("I0000 00:00:... devices.cc:67] Number of eligible GPUs ..."). Around
such a call, `filtered_native_logs` sends descriptor 2 to a temporary file,
then writes back to `sys.stderr` every line but absl's info and warning lines.
"""

import contextlib
import os
import re
import sys
import tempfile

_NATIVE_LINE = re.compile(
    r"^(?:[IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\] |WARNING: All log messages before absl::InitializeLog\(\))"
)


@contextlib.contextmanager
def filtered_native_logs():
    """Drops the absl info and warning lines written to descriptor 2 in the block; keeps the rest.

    Example:
    >>> with filtered_native_logs():
    ...     tf2onnx.convert.from_function(forward, input_signature=signature, output_path=path)  # doctest: +SKIP
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _NATIVE_LINE.match(line))
            if kept:
                sys.stderr.write(kept)
