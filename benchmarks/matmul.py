"""The CPU's attainable matmul rates per precision: the ceiling the encode targets are measured against.

Times a large square `tf.matmul` in float32, bfloat16 and int8 (int8 x int8 -> int32, what
Keras's int8 quantised `Dense` layers run), each through TensorFlow's default kernels and
compiled with XLA, the precisions taking turns. It answers which reduced-precision path can
speed up encoding on this CPU: a precision whose matmul is not faster than float32 cannot.
Results go to the "## Matmul" section of `benchmarks/RESULTS.md`.

    PYTHONPATH=. python benchmarks/matmul.py [--size 4096] [--repeats 5]
"""

import argparse
import datetime
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from results import RESULTS, machine, publish, rerun_command, time_interleaved  # noqa: E402

SECTION = "## Matmul"
DTYPES = ("float32", "bfloat16", "int8")


def square_matmul(size, dtype, jit_compile=False):
    """A `size` x `size` `tf.matmul` in `dtype` (int8 accumulates in int32) and its FLOPs.

    Example:
    >>> run, flops = square_matmul(64, "int8")
    >>> flops, run().dtype
    (524288, dtype('float32'))
    """
    values = [tf.random.normal([size, size]) for _ in range(2)]
    if dtype == "int8":
        a, b = (tf.cast(tf.clip_by_value(tf.round(v * 32), -127, 127), tf.int8) for v in values)
        output_type = tf.int32
    else:
        a, b = (tf.cast(v, dtype) for v in values)
        output_type = None
    matmul = tf.function(
        lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y, output_type=output_type), tf.float32)),
        jit_compile=jit_compile,
    )
    return (lambda: matmul(a, b).numpy()), 2 * size**3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="side of the square matmul")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per variant")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    variants = {(dtype, xla): square_matmul(args.size, dtype, xla) for dtype in DTYPES for xla in (False, True)}
    seconds = time_interleaved({key: run for key, (run, _) in variants.items()}, args.repeats)
    rates = {key: variants[key][1] / statistics.median(times) / 1e9 for key, times in seconds.items()}
    command = rerun_command(__file__, argv)
    lines = [
        f"### {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{command}`",
        "",
        f"- Machine: {machine()}; TensorFlow {tf.__version__}. A {args.size}x{args.size} `tf.matmul`, "
        f"medians of {args.repeats} calls, the variants taking turns.",
        "",
        "| precision | kernels | GFLOP/s | vs float32 |",
        "|---|---|---:|---:|",
    ]
    for (dtype, xla), rate in rates.items():
        lines.append(
            f"| {dtype} | {'XLA' if xla else 'TensorFlow'} | {rate:.1f} | {rate / rates[('float32', False)]:.2f}x |"
        )
    publish("\n".join(lines), args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
