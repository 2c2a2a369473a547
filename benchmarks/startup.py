"""Start-up time of the `gtr-keras` commands: seconds to first output in fresh processes, and what they import.

For each tree given with `--repo` (a checkout of an earlier commit, and this one), with that tree first on
PYTHONPATH, each in a fresh Python process: `gtr-keras --help`, a cold `gtr-keras search` of a small exact
index, `gtr-keras encode` of one text with the bundled model (`gtr_small_distilled_en`), `gtr-keras evaluate
--retriever bm25` (no model) of a 50-document collection, and `hub.load` of the bundled model's encoder export
with one query. The trees take turns, run after run (the median of `-n` runs each); one more run of each under
`python -X importtime` gives the packages whose imports took longest. The index and the export are written by
each tree's own `gtr-keras` first (not timed). Prints a table and appends it, with the command, to the
"## Start-up" section of `benchmarks/RESULTS.md`.

    git worktree add --detach /tmp/before df241a9
    PYTHONPATH=. python benchmarks/startup.py --repo /tmp/before --repo . -n 3
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from results import RESULTS, machine, record, rerun_command

SECTION = "## Start-up"
MODEL = "gtr_small_distilled_en"
HUB_QUERY = (
    "import sys\nimport tensorflow as tf\nimport tensorflow_hub as hub\nimport tensorflow_text  # noqa: F401\n"
    "encoder = hub.load(sys.argv[1])\nprint(encoder(tf.constant(['what is a dual encoder?'])).shape)\n"
)


def entry(repo):
    """`[python, -m, MODULE]` of the tree's command line: `gtr_keras` once it has `__main__.py`, else the
    top-level parser module of the releases before it."""
    # A tree from before issue #34 (the "before" of the start-up table) has its parser at the top level.
    module = "gtr_keras" if os.path.exists(os.path.join(repo, "gtr_keras", "__main__.py")) else "gtr_keras_cli"
    return [sys.executable, "-m", module]


def environment(repo):
    return {**os.environ, "PYTHONPATH": os.path.abspath(repo)}


def prepare(repo, work):
    """Writes the inputs the timed commands read: a BEIR collection of 50 documents and its exact index, an
    encoder export, and a text to encode."""
    os.makedirs(f"{work}/beir/qrels")
    with open(f"{work}/beir/corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(50):
            f.write(json.dumps({"_id": str(i), "title": f"doc {i}", "text": f"document {i} on wings and lift"}) + "\n")
    with open(f"{work}/beir/queries.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"_id": "q1", "text": "document 7 on lift"}) + "\n")
    with open(f"{work}/beir/qrels/test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\nq1\t7\t1\n")
    with open(f"{work}/one.txt", "w", encoding="utf-8") as f:
        f.write("what is a dual encoder?\n")
    for argv in (
        ["index", "--model", MODEL, "--corpus", f"{work}/beir", "--out", f"{work}/index", "--exact"],
        ["export", "--model", MODEL, "--out", f"{work}/export"],
    ):
        subprocess.run(entry(repo) + argv, cwd=repo, env=environment(repo), check=True, capture_output=True)


def commands(repo, work):
    """`{name: argv}` of the timed commands."""
    cli = entry(repo)
    return {
        "gtr-keras --help": cli + ["--help"],
        "gtr-keras search (cold, exact index)": cli
        + ["search", "wing lift", "--index", f"{work}/index", "--model", MODEL, "-k", "3"],
        "gtr-keras encode (one text)": cli
        + ["encode", "--model", MODEL, "--input", f"{work}/one.txt", "--output", f"{work}/one.npy"],
        "gtr-keras evaluate --retriever bm25": cli + ["evaluate", "--dataset", f"{work}/beir", "--retriever", "bm25"],
        "hub.load + one query": [sys.executable, "-c", HUB_QUERY, f"{work}/export/encoder/1"],
    }


def first_output_seconds(argv, repo, python_options=()):
    """Seconds from the start of a fresh process of `argv` to its first line on stdout, and its stderr."""
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        process = subprocess.Popen(
            [argv[0], *python_options, *argv[1:]],
            cwd=repo,
            env=environment(repo),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        process.stdout.readline()
        seconds = time.perf_counter() - start
        process.stdout.read()
        status = process.wait()
        stderr.seek(0)
        errors = stderr.read().decode("utf-8", "replace")
    if status:
        raise RuntimeError(f"{argv} ended with status {status}: {errors[-2000:]}")
    return seconds, errors


def top_imports(importtime, count=5):
    """`[(package, seconds)]` of the packages with the most import time (their modules' own times summed),
    and the total, from `python -X importtime`'s stderr."""
    seconds = {}
    for line in importtime.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*([\w.]+)", line)
        if match:
            package = match[2].split(".")[0]
            seconds[package] = seconds.get(package, 0.0) + int(match[1]) / 1e6
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    return ranked[:count], sum(seconds.values())


def cpu_flags():
    """The AVX-512 and AMX flags of this CPU (from `lscpu`), or "none"."""
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    found = sorted(set(re.findall(r"\b(avx512\w*|amx\w*)\b", flags)))
    return ", ".join(found) or "none"


def label(repo):
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    return f"{commit}{' + changes' if dirty else ''}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", required=True, help="tree to measure; repeat to compare")
    parser.add_argument("-n", "--runs", type=int, default=3, help="timed runs of each command per tree")
    parser.add_argument("--no-record", action="store_true", help=f"print only, do not append to {RESULTS}")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as root:
        works = {repo: os.path.join(root, str(number)) for number, repo in enumerate(args.repo)}
        for repo, work in works.items():
            prepare(repo, work)
        imports = {}
        for repo, work in works.items():  # also the warm-up run of each command
            for name, argv in commands(repo, work).items():
                imports[repo, name] = top_imports(first_output_seconds(argv, repo, ["-X", "importtime"])[1])
        seconds = {key: [] for key in imports}
        for _ in range(args.runs):
            for repo, work in works.items():
                for name, argv in commands(repo, work).items():
                    seconds[repo, name].append(first_output_seconds(argv, repo)[0])
    rows = ["| command | tree | median s | runs s | import s | top imports (s) |", "|---|---|---:|---|---:|---|"]
    for name in commands(args.repo[0], "WORK"):
        for repo in args.repo:
            (top, total), runs = imports[repo, name], seconds[repo, name]
            rows.append(
                f"| {name} | {label(repo)} | {statistics.median(runs):.2f} | "
                f"{', '.join(f'{s:.2f}' for s in runs)} | {total:.2f} | "
                f"{', '.join(f'{package} {s:.2f}' for package, s in top)} |"
            )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = "\n".join(
        [
            f"### {now}: seconds to first output, fresh processes",
            "",
            f"Command: `{rerun_command(__file__)}`",
            "",
            f"- Machine: {machine()}; AVX-512/AMX flags: {cpu_flags()}; 1-min load average {load_before:.2f} before "
            f"and {os.getloadavg()[0]:.2f} after the run. The CPUs are shared with other sessions, so the timings "
            "are noisy: compare trees by their medians, runs taking turns.",
            f"- Each tree's runs alternate with the other's; median of {args.runs}. `import s`: the total of "
            "`python -X importtime` in one more run; top imports: the packages whose modules took longest to import "
            f"(their own times). Model: the bundled `{MODEL}`; index: 50 documents, exact search.",
            "",
            *rows,
        ]
    )
    print(block)
    if not args.no_record:
        record(RESULTS, SECTION, block)
        print(f"Appended to {RESULTS}")


if __name__ == "__main__":
    main()
