"""The memory envelope of a ScaNN index built from embedding files: build peak RSS, index size on disk against
the float32 vectors, and the peak RSS of a search process, each measured as the VmHWM of a fresh process.

On `large_index.py`'s synthetic embedding files (written once into `--work/embeddings`, reused):

1. the build: `gtr-keras index --embeddings 'WORK/embeddings/*.npy' --out WORK/index` under `/usr/bin/time -v`
   (its "Maximum resident set size", the VmHWM of the process), its wall time, and its RSS sampled every 50 ms
   from outside with the output line (ScaNN's log, the command's) last printed before the peak: where it lies;
2. the index's bytes on disk, and that over the float32 vectors' (`n * dims * 4`);
3. a fresh search process: `SearchIndex.load(WORK/index)` (VmRSS and VmHWM after it), one query searched
   (VmHWM), then `search_ids` of every `--num-queries` query in one call at k = 10 (VmHWM, VmRSS after, QPS):
   its last VmHWM is the peak of the process, whatever the batch (`--num-queries`);
4. recall@10 of that call against exact top-10 computed from the embedding files
   (`large_index.exact_from_embedding_files`).

The index is searched with its build's setting (or the one `gtr-keras tune` recorded in it).

Usage:
    PYTHONPATH=. python benchmarks/scann_memory.py --n 1000000 --files 10 --work /tmp/scann-memory-1m
    PYTHONPATH=. python benchmarks/scann_memory.py --n 50000 --files 10 --work /tmp/scann-memory-50k --no-record
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
from large_index import K, add_corpus_arguments, exact_from_embedding_files, recall, write_embedding_files
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Large corpora"
_SAMPLE_SECONDS = 0.05


def _status(pid="self"):
    """VmRSS and VmHWM of process `pid` in bytes (Linux: /proc/PID/status)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    return {name: int(value.split()[0]) * 1024 for name, value in fields.items()}


def build(embeddings_dir, index_dir):
    """Runs `gtr-keras index --embeddings` under `/usr/bin/time -v`, its RSS sampled from outside: peak RSS
    (VmHWM), seconds, the seconds at which the sampled RSS peaked and the output line last printed before it."""
    command = ["gtr-keras", "index", "--embeddings", os.path.join(embeddings_dir, "*.npy"), "--out", index_dir]
    start = time.perf_counter()
    process = subprocess.Popen(
        ["/usr/bin/time", "-v", *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, highest = [], {"rss": 0, "at": 0.0, "after": ""}

    def read_output():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    while process.poll() is None:
        for child in _children(process.pid):
            try:
                rss = _status(child)["VmRSS"]
            except (OSError, KeyError):
                continue
            if rss > highest["rss"]:
                highest = {"rss": rss, "at": time.perf_counter() - start, "after": lines[-1] if lines else ""}
        time.sleep(_SAMPLE_SECONDS)
    reader.join()
    seconds = time.perf_counter() - start
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed:\n" + "\n".join(lines[-30:]))
    peak = next(int(line.split(":")[1]) * 1024 for line in lines if "Maximum resident set size" in line)
    return {"build_peak": peak, "build_s": seconds, "sampled_peak": highest}


def _children(pid):
    """The processes whose parent is `pid` (`/usr/bin/time`'s command)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def search_child(index_dir, queries_path, found_path):
    """The measured search process: the VmRSS and VmHWM after each stage, as one JSON line."""
    from gtr_keras.storage.search_index import SearchIndex

    queries = np.load(queries_path)
    stages = {"start": _status()}
    index = SearchIndex.load(index_dir)
    stages["load"] = _status()
    index.search_ids(queries[:1], K)
    stages["one query"] = _status()
    start = time.perf_counter()
    ids, _ = index.search_ids(queries, K)
    seconds = time.perf_counter() - start
    stages[f"{len(queries)} queries"] = _status()
    np.save(found_path, np.array(ids, dtype=object), allow_pickle=True)
    print(json.dumps({"stages": stages, "qps": len(queries) / seconds, "params": index.params}))


def search(index_dir, queries_path, found_path):
    """Runs `search_child` in a fresh process: its JSON line."""
    path = [os.path.dirname(os.path.abspath(__file__)), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}  # with the caller's: `PYTHONPATH=.` runs this tree
    command = [sys.executable, __file__, "--search-child", index_dir, queries_path, found_path]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode:
        sys.exit(f"the search process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def disk_bytes(directory):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser)
    parser.add_argument("--work", required=True, help="directory for embedding files, the index and exact answers")
    parser.add_argument("--reuse", action="store_true", help="search the index a previous run built in --work")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    embeddings_dir, index_dir = os.path.join(args.work, "embeddings"), os.path.join(args.work, "index")
    queries_path = os.path.join(args.work, "queries.npy")
    write_embedding_files(args, embeddings_dir)
    built = None
    if not (args.reuse and os.path.isdir(index_dir)):
        built = build(embeddings_dir, index_dir)
        print(json.dumps(built), flush=True)
    float32 = args.n * args.dims * 4
    on_disk = disk_bytes(index_dir)
    found_path = os.path.join(args.work, "found.npy")
    searched = search(index_dir, queries_path, found_path)
    print(json.dumps(searched), flush=True)
    exact_path = os.path.join(args.work, f"exact-{args.n}-{args.num_queries}.npy")
    if not os.path.exists(exact_path):
        exact_from_embedding_files(embeddings_dir, np.load(queries_path), exact_path)
    quality = recall(found_path, exact_path)
    mb = 2**20
    stages = searched["stages"]
    rows = [
        f"| {name} | {stage['VmRSS'] / mb:,.0f} MiB | {stage['VmHWM'] / mb:,.0f} MiB |"
        for name, stage in stages.items()
    ]
    build_line = "reused (not built by this run)"
    if built:
        where = built["sampled_peak"]
        build_line = (
            f"{built['build_peak'] / mb:,.0f} MiB peak RSS (VmHWM), {built['build_s'] / 60:.1f} min; the RSS sampled "
            f"every {_SAMPLE_SECONDS * 1000:.0f} ms peaked at {where['rss'] / mb:,.0f} MiB, {where['at']:.0f} s in, "
            f"after the line `{where['after'].replace('|', '/')}`"
        )
    block = "\n".join(
        [
            f"### Memory envelope of ScaNN at {args.n:,} x {args.dims} from {args.files} embedding files",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}; lscpu flags: {lscpu_flags()}",
            "",
            f"- Build (`gtr-keras index --embeddings`): {build_line}.",
            f"- Disk: {on_disk / mb:,.0f} MiB, {on_disk / float32:.2f}x the float32 vectors ({float32 / mb:,.0f} MiB).",
            f"- Search setting: `{json.dumps(searched['params'])}`; {args.num_queries} queries in one `search_ids` "
            f"call: {searched['qps']:,.0f} QPS, recall@10 {quality:.4f} against exact search.",
            "",
            "| search process, after | VmRSS | VmHWM |",
            "|---|---:|---:|",
            *rows,
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--search-child"]:
        search_child(*sys.argv[2:5])
    else:
        main()
