"""The cost of multi-worker training: `gtr-keras train` as one process against two workers on 127.0.0.1.

Both train the same model on the same data with the same global batch B; the two workers
(`--strategy multi-worker`, each with its own `TF_CONFIG`) embed B/2 examples each, gather the
embeddings of the whole batch for the loss and all-reduce the gradients every step. Each run's
step time is measured inside the training process (the time between the ends of the first and
the last checkpoint intervals over the steps between them, so start-up, tracing and the final save
are left out); the overhead is the two workers' step time minus one process's. On a 2-core machine
the two workers share the cores that one process uses alone, so no speed-up is expected: the
difference is the price of the collectives (and of two runtimes competing for the cores).

Data: synthetic triples (random words; queries of 8-12 words, positives and negatives of 80-120),
model from a preset (random weights, its SentencePiece trained on the data first, outside the
timing). Results are printed and appended to the "## Multi-worker training" section of
`benchmarks/RESULTS.md`.

Usage:
    PYTHONPATH=. python benchmarks/multi_worker.py
    PYTHONPATH=. python benchmarks/multi_worker.py --preset gtr-tiny --steps 20 --no-record   # a minute
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from results import RESULTS, machine, publish, rerun_command  # noqa: E402

from tests.training_inputs import free_ports  # noqa: E402

SECTION = "## Multi-worker training"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Runs `gtr-keras train ARGS` and appends `step seconds` at the end of each checkpoint interval to $STEP_TIMES.
DRIVER = """
import os, sys, time
from gtr_keras.training import callbacks
end_of_interval = callbacks.Checkpoints.on_epoch_end
def on_epoch_end(self, epoch, logs=None):
    end_of_interval(self, epoch, logs)
    with open(os.environ["STEP_TIMES"], "a") as f:
        f.write(f"{self.step} {time.perf_counter()}\\n")
callbacks.Checkpoints.on_epoch_end = on_epoch_end
from gtr_keras.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def write_data(path, count, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(5000)]

    def text(low, high):
        return " ".join(rng.choice(words, rng.integers(low, high + 1)))

    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            f.write(json.dumps({"query": text(8, 12), "positive": text(80, 120), "negatives": [text(80, 120)]}) + "\n")


def run(args, out, workers):
    """Seconds per step of a run with `workers` processes (0: one process, default strategy)."""
    shutil.rmtree(out, ignore_errors=True)
    times = f"{out}.times"
    if os.path.exists(times):
        os.remove(times)
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", "STEP_TIMES": times}
    command = [sys.executable, "-c", DRIVER, "train", *args, "--output-dir", out]
    if not workers:
        processes = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)]
    else:
        addresses = [f"127.0.0.1:{port}" for port in free_ports(workers)]
        processes = [
            subprocess.Popen(
                [*command, "--strategy", "multi-worker"],
                stdout=subprocess.DEVNULL,
                env={
                    **env,
                    "STEP_TIMES": f"{times}.{index}",
                    "TF_CONFIG": json.dumps(
                        {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
                    ),
                },
            )
            for index in range(workers)
        ]
        times = f"{times}.0"  # the chief's clock
    if any(process.wait() for process in processes):
        sys.exit(f"a training process failed: {command}")
    with open(times) as f:
        marks = [tuple(map(float, line.split())) for line in f]
    (first_step, first), (last_step, last) = marks[0], marks[-1]
    return (last - first) / (last_step - first_step)


def parameters(preset):
    from gtr_keras import GTRTextEmbedder

    return GTRTextEmbedder.from_architecture(preset).count_params()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gtr-small")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--interval", type=int, default=10, help="steps per checkpoint interval (timing marks)")
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--document-length", type=int, default=128)
    parser.add_argument("--work", default="/tmp/gtr-keras-multi-worker-bench")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "triples.jsonl")
    write_data(data, 4 * args.batch_size * args.steps)
    train_args = [
        "--init",
        args.preset,
        "--data",
        data,
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--checkpoint-every",
        str(args.interval),
        "--query-length",
        str(args.query_length),
        "--document-length",
        str(args.document_length),
        "--seed",
        "0",
    ]
    one = run(train_args, os.path.join(args.work, "one"), 0)
    two = run(train_args, os.path.join(args.work, "two"), 2)
    count = parameters(args.preset)
    rows = [
        ("1 process (default strategy)", 1, args.batch_size, one),
        ("2 workers on 127.0.0.1", 2, args.batch_size // 2, two),
    ]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### {now}: {args.preset}, global batch {args.batch_size}",
        "",
        f"Machine: {machine()}. Rerun: `{rerun_command(__file__)}`. {args.preset}: {count:,} parameters "
        f"(each step all-reduces {count * 4 / 2**20:.1f} MiB of float32 gradients between the workers); "
        f"queries {args.query_length} / documents {args.document_length} tokens, 1 hard negative; "
        f"step time over steps {args.interval}-{args.steps} (after the first checkpoint interval).",
        "",
        "| run | processes | examples per process per step | s/step | steps/s | pairs/s |",
        "|---|---:|---:|---:|---:|---:|",
        *[
            f"| {name} | {n} | {per} | {seconds:.3f} | {1 / seconds:.2f} | {args.batch_size / seconds:.1f} |"
            for name, n, per, seconds in rows
        ],
        "",
        f"Overhead of two workers: {two - one:+.3f} s per step ({two / one:.2f}x one process's step time).",
    ]
    publish("\n".join(lines), RESULTS, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
