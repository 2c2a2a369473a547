"""Corpus-scale search: `gtr-keras index --embeddings` and `SearchIndex.load` on millions of vectors.

Writes synthetic embedding files in `gtr-keras encode`'s format (unit
vectors around `--clusters` random centres, generated file by file so the
generator stays small), then measures, each in its own process under
`/usr/bin/time -v`:

1. the build: `gtr-keras index --embeddings 'WORK/embeddings/*.npy' --out WORK/index`
   (peak RSS, wall time, index size on disk);
2. a search process: `gtr_keras.storage.search_index.SearchIndex.load(WORK/index)` and
   `.search_ids(queries, 10)` on `--num-queries` queries in one call (batched
   QPS), then the first `--single-queries` one call each (latency), peak RSS;
3. exact search for the recall@10 reference: with `--exact-index`, an exact
   index built and searched the same way (its batched QPS is the baseline);
   otherwise exact top-10 computed from the embedding files, a chunk at a time.

Results are printed and appended to the "## Large corpora" section of
`benchmarks/RESULTS.md`. Embedding files and indexes stay in `--work` for reruns
(delete it to start over; embedding files are rewritten when the generator's
settings differ).

Usage:
    PYTHONPATH=. python benchmarks/large_index.py --n 1000000 --exact-index --work /tmp/large-1m
    PYTHONPATH=. python benchmarks/large_index.py --n 8841823 --files 90 --work /tmp/large-msmarco
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
from results import RESULTS, machine, publish, rerun_command
from search import _normalise, synthetic

K = 10
SECTION = "## Large corpora"


def add_corpus_arguments(parser):
    """The settings of the synthetic corpus that `write_embedding_files` reads from its `args`."""
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=10, help="embedding files the corpus is written in")
    parser.add_argument("--dims", type=int, default=768)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=1.0, help="noise norm around a centre")
    parser.add_argument("--num-queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)


def write_embedding_file(path, ids, vectors):
    """Writes one embedding file as `gtr-keras encode` does: `path` (`.npy`) and its `.ids.txt`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, vectors)
    with open(path.removesuffix(".npy") + ".ids.txt", "w") as f:
        f.writelines(f"{i}\n" for i in ids)


def corpus_centres(args):
    """`(rng, centres)`: the generator of the synthetic corpus (`args.seed`) and the centres it drew first."""
    rng = np.random.default_rng(args.seed)
    return rng, _normalise(rng.standard_normal((args.clusters, args.dims), dtype=np.float32))


def write_embedding_files(args, embeddings_dir):
    """Writes `args.files` embedding files of synthetic unit vectors (and the queries), unless already there."""
    settings = {key: getattr(args, key) for key in ("n", "files", "dims", "clusters", "noise", "seed", "num_queries")}
    record = os.path.join(embeddings_dir, "generator.json")
    if os.path.exists(record) and json.load(open(record)) == settings:
        return
    shutil.rmtree(embeddings_dir, ignore_errors=True)
    os.makedirs(embeddings_dir)
    rng, centres = corpus_centres(args)
    np.save(os.path.join(embeddings_dir, "..", "queries.npy"), synthetic(args.num_queries, centres, args.noise, rng))
    bounds = np.linspace(0, args.n, args.files + 1).astype(int)
    for number, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        file_rng = np.random.default_rng([args.seed, number])
        path = os.path.join(embeddings_dir, f"part-{number:05d}.npy")
        write_embedding_file(
            path, (f"p{row}" for row in range(start, stop)), synthetic(stop - start, centres, args.noise, file_rng)
        )
        print(f"wrote {path} ({stop - start} rows)", flush=True)
    with open(record, "w") as f:
        json.dump(settings, f)


def timed_process(command, env=None):
    """Runs `command` under `/usr/bin/time -v`: (stdout, peak RSS in bytes, wall seconds)."""
    result = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, env=env)
    if result.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr).group(1))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", result.stderr).group(1)
    seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(clock.split(":"))))
    return result.stdout, peak_kib * 1024, seconds


def build(embeddings_dir, index_dir, exact):
    command = ["gtr-keras", "index", "--embeddings", os.path.join(embeddings_dir, "*.npy"), "--out", index_dir]
    _, peak, seconds = timed_process(command + (["--exact"] if exact else []))
    size = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(index_dir) for name in names)
    return {"build_peak_rss": peak, "build_s": seconds, "disk_bytes": size}


def search_child(index_dir, queries_path, out_path, single, steady_path=None):
    """The measured search process: load, one batched call, then `single` calls of one query, then, with
    `steady_path`, its queries searched in batches of as many, the file pages mapped (`RssFile`) after each."""
    from gtr_keras.storage.search_index import SearchIndex

    queries = np.load(queries_path)
    start = time.perf_counter()
    index = SearchIndex.load(index_dir)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    ids, _ = index.search_ids(queries, K)
    batched_s = time.perf_counter() - start
    latencies = []
    for row in range(min(single, len(queries))):
        start = time.perf_counter()
        index.search_ids(queries[row : row + 1], K)
        latencies.append(time.perf_counter() - start)
    mapped = []
    if steady_path:  # read a batch at a time, not mapped: the file pages counted are the index's
        header = np.load(steady_path, mmap_mode="r")
        (num_steady, dims), offset = header.shape, header.offset
        del header
        for start in range(0, num_steady, len(queries)):
            rows = min(len(queries), num_steady - start)
            batch = np.fromfile(steady_path, np.float32, rows * dims, offset=offset + start * dims * 4)
            index.search_ids(batch.reshape(rows, dims), K)
            mapped.append(_rss_file_bytes())
    np.save(out_path, np.array(ids, dtype=object), allow_pickle=True)
    print(
        json.dumps(
            {
                "mapped_file_bytes": mapped,
                "load_s": load_s,
                "batched_qps": len(queries) / batched_s,
                "latency_ms_p50": 1000 * float(np.median(latencies)) if latencies else None,
                "latency_ms_p99": 1000 * float(np.percentile(latencies, 99)) if latencies else None,
                "kind": index.kind,
                "params": index.params,
            }
        )
    )


def _rss_file_bytes():
    """This process's resident pages of mapped files (`/proc/self/status`' `RssFile`), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


def search(index_dir, queries_path, out_path, single, steady_path=None):
    """Runs `search_child` in a process of its own under `/usr/bin/time -v`: its JSON line, peak RSS and time."""
    command = [sys.executable, __file__, "--search-child", index_dir, queries_path, out_path, str(single)]
    command += [steady_path] if steady_path else []
    path = [os.path.dirname(os.path.abspath(__file__)), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}  # with the caller's: `PYTHONPATH=.` runs this tree
    stdout, peak, seconds = timed_process(command, env)
    return {**json.loads(stdout.strip().splitlines()[-1]), "search_peak_rss": peak, "search_process_s": seconds}


def exact_top_ids(source, queries):
    """Exact top-K ids per query over a source's chunks (`ids` and `chunks()`, as an `EmbeddingFiles`)."""
    best_scores = np.full((len(queries), K), -np.inf, np.float32)
    best_rows = np.zeros((len(queries), K), np.int64)
    first = 0
    for chunk in source.chunks():
        scores = queries @ chunk.T
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        merged_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        merged_rows = np.concatenate([best_rows, top + first], axis=1)
        order = np.argsort(-merged_scores, axis=1, kind="stable")[:, :K]
        best_scores = np.take_along_axis(merged_scores, order, 1)
        best_rows = np.take_along_axis(merged_rows, order, 1)
        first += len(chunk)
    return np.array(source.ids, dtype=object)[best_rows]


def exact_from_embedding_files(embeddings_dir, queries, out_path):
    """Exact top-10 ids per query, scoring the embedding files a chunk at a time (the recall reference)."""
    from gtr_keras.storage.embedding_files import EmbeddingFiles

    embeddings = EmbeddingFiles(
        sorted(os.path.join(embeddings_dir, n) for n in os.listdir(embeddings_dir) if n.endswith(".npy"))
    )
    np.save(out_path, exact_top_ids(embeddings, queries), allow_pickle=True)


def recall(found_path, exact_path):
    found, exact = np.load(found_path, allow_pickle=True), np.load(exact_path, allow_pickle=True)
    return float(np.mean([len(set(a) & set(e)) / K for a, e in zip(found, exact)]))


def table(row):
    gib = 2**30
    lines = [
        "| N | D | files | build peak RSS | build | index on disk | search peak RSS | load | QPS batched | "
        "latency p50 / p99 | recall@10 | exact QPS batched |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {row['n']:,} | {row['dims']} | {row['files']} | {row['build_peak_rss'] / gib:.2f} GiB | "
        f"{row['build_s'] / 60:.1f} min | {row['disk_bytes'] / gib:.2f} GiB | {row['search_peak_rss'] / gib:.2f} GiB | "
        f"{row['load_s']:.1f} s | {row['batched_qps']:,.0f} | {row['latency_ms_p50']:.1f} / "
        f"{row['latency_ms_p99']:.1f} ms | {row['recall']:.4f} | "
        + (f"{row['exact_qps']:,.1f} |" if row.get("exact_qps") else "not run |"),
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser)
    parser.add_argument("--single-queries", type=int, default=200, help="queries timed one call each")
    parser.add_argument("--exact-index", action="store_true", help="also build and search an exact index")
    parser.add_argument("--work", required=True, help="directory for embedding files and indexes (kept for reruns)")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    embeddings_dir, index_dir = os.path.join(args.work, "embeddings"), os.path.join(args.work, "index")
    queries_path = os.path.join(args.work, "queries.npy")
    write_embedding_files(args, embeddings_dir)
    row = {"n": args.n, "dims": args.dims, "files": args.files}
    row.update(build(embeddings_dir, index_dir, exact=False))
    print(json.dumps(row), flush=True)
    row.update(search(index_dir, queries_path, os.path.join(args.work, "found.npy"), args.single_queries))
    print(json.dumps(row), flush=True)
    exact_path = os.path.join(args.work, "exact.npy")
    if args.exact_index:
        exact_dir = os.path.join(args.work, "exact-index")
        exact_build = build(embeddings_dir, exact_dir, exact=True)
        exact = search(exact_dir, queries_path, exact_path, 0)
        row.update(
            exact_qps=exact["batched_qps"],
            exact_search_peak_rss=exact["search_peak_rss"],
            exact_disk_bytes=exact_build["disk_bytes"],
        )
        shutil.rmtree(exact_dir)
    else:
        exact_from_embedding_files(embeddings_dir, np.load(queries_path), exact_path)
    row["recall"] = recall(os.path.join(args.work, "found.npy"), exact_path)
    print(table(row), flush=True)

    load_after = os.getloadavg()
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: {args.n:,} x {args.dims} synthetic vectors

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}, 1-min load average {load_before[0]:.2f} before and {load_after[0]:.2f} after.
- Data: {args.files} embedding files in `gtr-keras encode`'s format, unit vectors around {args.clusters} random centres,
  noise norm {args.noise}; {args.num_queries} queries drawn the same way (not from the corpus).
- Build: `gtr-keras index --embeddings 'embeddings/*.npy' --out index` under `/usr/bin/time -v` (peak RSS = its
  "Maximum resident set size"). Search: a fresh process that runs `SearchIndex.load(index)`,
  one `search_ids(queries, 10)` call with all queries (QPS batched), then {args.single_queries} calls of one
  query (latency). Recall@10 against exact search
  ({"an exact index searched the same way" if args.exact_index else "top-10 computed from the embedding files"}).
- ScaNN parameters: `{json.dumps(row["params"])}`
- Exact index (float32, memory-mapped): {
        f"{row['exact_disk_bytes'] / 2**30:.2f} GiB on disk, search peak RSS "
        f"{row['exact_search_peak_rss'] / 2**30:.2f} GiB"
        if args.exact_index
        else "not built"
    }.

{table(row)}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--search-child"]:
        search_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:7])
    else:
        main()
