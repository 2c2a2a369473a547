"""Where a serving replica's memory goes: the RSS of the model's forward pass over many batch shapes.

`gtr-keras serve`'s RSS grew 12.6-21.9% over 10,000 mixed requests (the "Serve" section). A server's forward
passes take whatever shape its batches have (rows and padded length); this script runs `--batches` forward
passes of the model (`gtr_keras.load(--model).embed_tokens`, as the server's encoding does) over random token
ids, each variant in a process of its own, and reads the process's RSS (`/proc/self/status`) as it goes:

- `random`: rows 1-64 and length 1-128 drawn uniformly, as a server's batches vary;
- `bucketed`: the same draws, rows rounded up to a power of two and lengths to a multiple of 16 (what
  `Encoder.padded_shape` does under XLA);
- `one shape`: 32 x 64 every time (the middle of the random draws);
- `random`, TensorFlow's oneDNN kernels off (`TF_ENABLE_ONEDNN_OPTS=0`).

The table gives RSS after the first pass, at a quarter, half and all of the passes, and the time a pass.

Usage:
    PYTHONPATH=. python benchmarks/forward_memory.py --batches 2000
"""

import argparse
import json
import os
import subprocess
import sys
import time

from results import RESULTS, lscpu_flags, machine, publish, rerun_command, resident_bytes

SECTION = "## Serve"
VARIANTS = {
    "random": ("random", {}),
    "bucketed": ("bucketed", {}),
    "one shape": ("fixed", {}),
    "random, oneDNN off": ("random", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
}


def forward_passes(shapes, batches, model, seed):
    """Runs `batches` forward passes of `model` in this process; prints `{"rss": [...], "seconds": s}` as JSON,
    the RSS after the first pass and after each quarter."""
    import numpy as np

    import gtr_keras

    encoder = gtr_keras.load(model)
    rng = np.random.default_rng(seed)
    rss, start = [], None
    for number in range(batches + 1):
        rows, length = int(rng.integers(1, 65)), int(rng.integers(1, 129))
        if shapes == "bucketed":
            rows, length = 1 << (rows - 1).bit_length(), -(-length // 16) * 16
        elif shapes == "fixed":
            rows, length = 32, 64
        ids = rng.integers(5, 1000, (rows, length)).astype(np.int32)
        encoder.embed_tokens(ids, np.ones_like(ids))
        if number == 0:
            start = time.perf_counter()
        if number % (batches // 4) == 0:
            rss.append(resident_bytes() / 2**20)
    print(json.dumps({"rss": rss, "seconds": time.perf_counter() - start}))


def main(argv=None):
    from gtr_keras.models import BUNDLED_MODEL_DIR

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000, help="forward passes a variant (a multiple of 4)")
    parser.add_argument("--model", default=BUNDLED_MODEL_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=("random", "bucketed", "fixed"), help=argparse.SUPPRESS)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    if args.batches < 4 or args.batches % 4:
        parser.error("argument --batches: a positive multiple of 4")
    if args.child:
        return forward_passes(args.child, args.batches, args.model, args.seed)
    rows = []
    for name, (shapes, env) in VARIANTS.items():
        command = [sys.executable, __file__, "--child", shapes, "--batches", str(args.batches), "--model", args.model]
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, check=False)
        if result.returncode:
            sys.exit(f"{name}: the forward passes failed:\n{result.stderr[-3000:]}")
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        rss = measured["rss"]
        growth = f"+{rss[-1] - rss[0]:,.0f} MiB ({100 * (rss[-1] / rss[0] - 1):+.1f}%)"
        cells = " | ".join(f"{value:,.0f}" for value in rss)
        rows.append(f"| {name} | {cells} | {growth} | {1000 * measured['seconds'] / args.batches:.1f} |")
        print(rows[-1], flush=True)
    quarters = " | ".join(f"after {args.batches * q // 4:,}" for q in range(1, 5))
    block = "\n".join(
        [
            f"### Forward-pass memory over {args.batches:,} batch shapes ({os.path.basename(args.model)})",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}; lscpu flags: {lscpu_flags()}. "
            f"Python {sys.version.split()[0]}. Each variant in a process of its own, one after another; RSS in "
            "MiB.",
            "",
            f"| shapes | RSS after the first pass | {quarters} | growth | ms a pass |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
