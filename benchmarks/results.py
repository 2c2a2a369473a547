"""Shared helpers of the benchmark scripts: machine description and RESULTS.md sections."""

import os
import platform
import shlex
import subprocess
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def machine():
    """`N CPUs (nproc), <model name>` of this machine."""
    model = platform.processor() or "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{len(os.sched_getaffinity(0))} CPUs (nproc), {model}"


def lscpu_flags():
    """The `Flags` line of `lscpu`: what a speed figure was measured with."""
    output = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith("Flags")), "?")


def resident_bytes(pid="self"):
    """The resident set size of process `pid` (default: this one) in bytes (Linux: /proc/PID/status)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def rerun_command(script, argv=None):
    """The command line that reruns benchmark `script` (its `__file__`) with `argv` (default: this process's)."""
    args = sys.argv[1:] if argv is None else argv
    return f"PYTHONPATH=. python benchmarks/{os.path.basename(script)} " + shlex.join(args)


def publish(block, path, section, record_it=True):
    """Prints `block` and, unless `record_it` is false, appends it to `section` of `path`."""
    print(block)
    if record_it:
        record(path, section, block)
        print(f"Appended to {path}")


def record(path, section, block):
    """Appends `block` to the end of `section` (a `## ` heading) of the markdown file `path`."""
    lines = ["# Benchmark results"]
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    if section not in lines:
        lines += ["", section]
    start = lines.index(section)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    gap = [""] if lines[end - 1].strip() else []
    lines = lines[:end] + gap + block.strip().splitlines() + [""] + lines[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")


def time_interleaved(functions, repeats, warmup=1):
    """Seconds of `repeats` calls of each function, the functions taking turns (after `warmup` calls each)."""
    for fn in functions.values():
        for _ in range(warmup):
            fn()
    seconds = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    return seconds
