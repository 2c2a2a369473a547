"""Live indexes: updates in place vs full builds, churn and compaction, and two shards vs one index.

On the synthetic corpus of `benchmarks/large_index.py` (unit vectors around
`--clusters` centres, in `gtr-keras encode`'s format), in one process:

1. the full build of a ScaNN index (`index_embeddings`, as `gtr-keras index
   --embeddings` runs it): wall time and bytes on disk; its recall@10 against
   exact search, batched QPS and one-query latency;
2. one update (`update_index`, as `gtr-keras update INDEX --embeddings NEW
   --delete IDS` runs it) that replaces `--changes` documents, adds as many
   and deletes as many: wall time, bytes of the files it wrote (and the
   process's `wchar` over the update), recall@10 against exact search over
   the updated set, next to a fresh build over that set;
3. churn: `--churn` of the documents replaced in three updates without
   compaction, recall@10 and QPS before and after `compact=True`;
4. two shards of half the corpus each (ScaNN, then exact), searched together
   by `SearchIndex.load([A, B])`, next to the one index of step 1 (and an
   exact index over the whole corpus: identical top 10 expected).

Usage:
    PYTHONPATH=. python benchmarks/index_updates.py --n 100000 --files 2 --changes 1000 --work /tmp/updates-100k
    PYTHONPATH=. python benchmarks/index_updates.py --n 1000000 --files 10 --work /tmp/updates-1m
"""

import argparse
import datetime
import gc
import glob
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
from large_index import K, add_corpus_arguments, exact_top_ids, write_embedding_file, write_embedding_files
from results import RESULTS, machine, publish, rerun_command
from search import _normalise, synthetic

SECTION = "## Index updates"
GIB = 2**30


class Rows:
    """A `write_search_index` source: the embedding files' rows less `removed` (their row numbers), then `extra` pairs
    `(ids, vectors)`, a chunk at a time."""

    def __init__(self, embeddings, removed, extra):
        self.embeddings, self.extra = embeddings, extra
        self.keep = np.ones(embeddings.num_rows, bool)
        self.keep[list(removed)] = False
        self.ids = [i for i, kept in zip(embeddings.ids, self.keep) if kept] + [i for ids, _ in extra for i in ids]
        self.dims, self.num_rows = embeddings.dims, len(self.ids)

    def chunks(self):
        first = 0
        for chunk in self.embeddings.chunks():
            yield chunk[self.keep[first : first + len(chunk)]]
            first += len(chunk)
        for _, vectors in self.extra:
            for start in range(0, len(vectors), 65_536):
                yield vectors[start : start + 65_536]


def recall(found, exact):
    return float(np.mean([len(set(a) & set(e)) / K for a, e in zip(found, exact)]))


def measure(index, queries, exact, single=200):
    """Recall@10, batched QPS and one-query latency (ms) of a loaded index."""
    index.search_ids(queries[:1], K)
    start = time.perf_counter()
    found, _ = index.search_ids(queries, K)
    qps = len(queries) / (time.perf_counter() - start)
    latencies = []
    for row in range(single):
        start = time.perf_counter()
        index.search_ids(queries[row : row + 1], K)
        latencies.append(1000 * (time.perf_counter() - start))
    return {
        "recall": recall(found, exact),
        "qps": qps,
        "p50_ms": float(np.median(latencies)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "found": found,
    }


def sizes(directory):
    return {
        os.path.join(root, name): os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    }


def wchar():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar"))


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser)
    parser.add_argument("--changes", type=int, default=10_000, help="documents replaced, added and deleted")
    parser.add_argument("--churn", type=float, default=0.3, help="fraction replaced before compaction")
    parser.add_argument("--work", required=True)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)

    from gtr_keras.retrieval.index_building import index_embeddings
    from gtr_keras.retrieval.index_updates import update_index
    from gtr_keras.storage.embedding_files import EmbeddingFiles
    from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index
    from gtr_keras.storage.segment_writer import update_search_index

    started, load_before = datetime.datetime.now(datetime.UTC), os.getloadavg()
    embeddings_dir, work = os.path.join(args.work, "embeddings"), args.work
    write_embedding_files(args, embeddings_dir)
    queries = np.load(os.path.join(work, "queries.npy"))
    corpus = EmbeddingFiles.open(os.path.join(embeddings_dir, "*.npy"))
    centres = _normalise(np.random.default_rng(args.seed).standard_normal((args.clusters, args.dims), dtype=np.float32))
    rng = np.random.default_rng([args.seed, 1])
    c = args.changes
    picked = rng.choice(args.n, 2 * c, replace=False)
    replaced_rows, deleted_rows = picked[:c], picked[c:]
    new_ids = [f"p{row}" for row in replaced_rows] + [f"q{i}" for i in range(c)]
    new_vectors = synthetic(2 * c, centres, args.noise, rng)
    new_glob = os.path.join(work, "new", "part-00000.npy")
    write_embedding_file(new_glob, new_ids, new_vectors)
    delete_file = pathlib.Path(work, "delete.txt")  # a file of ids (a str is one id)
    with open(delete_file, "w") as f:
        f.writelines(f"p{row}\n" for row in deleted_rows)
    out = {"n": args.n, "dims": args.dims, "changes": c}

    # 1. the full build, and the one index searched
    index_dir = os.path.join(work, "index")
    shutil.rmtree(index_dir, ignore_errors=True)
    (_, kind), out["build_s"] = timed(index_embeddings, os.path.join(embeddings_dir, "*.npy"), index_dir, kind="scann")
    out["index_bytes"] = sum(sizes(index_dir).values())
    exact_original = exact_top_ids(corpus, queries)
    whole = measure(SearchIndex.load(index_dir), queries, exact_original)
    out["one_index"] = {key: value for key, value in whole.items() if key != "found"}
    print(json.dumps(out), flush=True)
    gc.collect()

    # 2. one update: c replaced, c added, c deleted
    before, written = sizes(index_dir), wchar()
    manifest, out["update_s"] = timed(update_index, index_dir, embeddings=new_glob, delete=delete_file, compact=False)
    out["update_wchar"] = wchar() - written
    after = sizes(index_dir)
    out["update_bytes"] = sum(size for path, size in after.items() if before.get(path) != size)
    final = Rows(corpus, np.concatenate([replaced_rows, deleted_rows]), [(new_ids, new_vectors)])
    exact_final = exact_top_ids(final, queries)
    out["updated"] = {
        k: v for k, v in measure(SearchIndex.load(index_dir), queries, exact_final).items() if k != "found"
    }
    fresh_dir = os.path.join(work, "fresh")
    shutil.rmtree(fresh_dir, ignore_errors=True)
    _, out["fresh_build_s"] = timed(write_search_index, final, fresh_dir, kind="scann")
    out["fresh"] = {k: v for k, v in measure(SearchIndex.load(fresh_dir), queries, exact_final).items() if k != "found"}
    shutil.rmtree(fresh_dir)
    print(json.dumps(out), flush=True)
    gc.collect()

    # 3. churn: a fraction of the live originals replaced in three updates, then compaction
    live_rows = np.setdiff1d(np.arange(args.n), picked)
    churned = rng.choice(live_rows, int(args.churn * args.n), replace=False)
    churn_vectors, churn_times = [], []
    for part in np.array_split(churned, 3):
        vectors = synthetic(len(part), centres, args.noise, rng)
        churn_vectors.append(([f"p{row}" for row in part], vectors))
        source = ArrayRows(*churn_vectors[-1])
        _, seconds = timed(update_search_index, os.path.join(index_dir, "index"), source, compact=False)
        churn_times.append(seconds)
    out["churn_update_s"] = churn_times
    churn_final = Rows(
        corpus, np.concatenate([replaced_rows, deleted_rows, churned]), [(new_ids, new_vectors), *churn_vectors]
    )
    exact_churn = exact_top_ids(churn_final, queries)
    del churn_vectors, churn_final
    gc.collect()
    churn_index = SearchIndex.load(index_dir)
    out["segments_before_compaction"] = len(churn_index.parts)
    out["churn_before"] = {k: v for k, v in measure(churn_index, queries, exact_churn).items() if k != "found"}
    del churn_index
    _, out["compact_s"] = timed(update_index, index_dir, compact=True)
    out["churn_after"] = {
        k: v for k, v in measure(SearchIndex.load(index_dir), queries, exact_churn).items() if k != "found"
    }
    print(json.dumps(out), flush=True)

    # 4. two shards of half the corpus, ScaNN then exact, vs one index over all
    paths = sorted(glob.glob(os.path.join(embeddings_dir, "*.npy")))
    halves = [paths[: len(paths) // 2], paths[len(paths) // 2 :]]
    for kind in ("scann", "exact"):
        dirs = []
        for number, half in enumerate(halves):
            directory = os.path.join(work, f"shard-{kind}-{number}")
            shutil.rmtree(directory, ignore_errors=True)
            write_search_index(EmbeddingFiles(half), directory, kind=kind)
            dirs.append(directory)
        both = measure(SearchIndex.load(dirs), queries, exact_original)
        out[f"shards_{kind}"] = {k: v for k, v in both.items() if k != "found"}
        if kind == "exact":
            whole_dir = os.path.join(work, "exact-index")
            shutil.rmtree(whole_dir, ignore_errors=True)
            write_search_index(corpus, whole_dir, kind="exact")
            one = measure(SearchIndex.load(whole_dir), queries, exact_original)
            out["one_exact"] = {k: v for k, v in one.items() if k != "found"}
            out["exact_shards_identical"] = one["found"] == both["found"]
            shutil.rmtree(whole_dir)
        for directory in dirs:
            shutil.rmtree(directory)
        gc.collect()
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out), flush=True)
    publish(report(args, out, started, load_before), args.results, SECTION, not args.no_record)


def report(args, out, started, load_before):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    shown = " ".join(
        flag for flag in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if flag in flags
    )

    def row(name, m):
        return f"| {name} | {m['recall']:.4f} | {m['qps']:,.0f} | {m['p50_ms']:.1f} / {m['p99_ms']:.1f} ms |"

    c = out["changes"]
    lines = [
        f"### {started:%Y-%m-%d %H:%M} UTC: updates of a {out['n']:,} x {out['dims']} ScaNN index (commit {commit})",
        "",
        f"Command: `{rerun_command(__file__, sys.argv[1:])}`",
        "",
        f"- Machine: {machine()} ({shown}; no AMX), shared with other jobs: 1-min load average "
        f"{load_before[0]:.2f} before and {os.getloadavg()[0]:.2f} after; peak RSS of the whole run "
        f"{out['peak_rss'] / GIB:.2f} GiB.",
        f"- Data: `large_index.py`'s synthetic embedding files ({args.files} files, {args.clusters} centres, noise "
        f"{args.noise}), {args.num_queries} queries; ScaNN with `scann_params(N)`.",
        f"- Full build (`index_embeddings`): {out['build_s']:.1f} s, {out['index_bytes'] / GIB:.3f} GiB on disk.",
        f"- One update (`update_index`: {c:,} replaced, {c:,} added, {c:,} deleted, `compact=False`): "
        f"**{out['update_s']:.2f} s = {100 * out['update_s'] / out['build_s']:.2f}% of the build**; files written "
        f"**{out['update_bytes'] / 2**20:.1f} MiB = {100 * out['update_bytes'] / out['index_bytes']:.2f}% of the "
        f"index** (the process's wchar: {out['update_wchar'] / 2**20:.1f} MiB, reading the embedding files' checks "
        "included); "
        f"a fresh build over the updated set: {out['fresh_build_s']:.1f} s.",
        f"- Churn: {args.churn:.0%} of the documents replaced in 3 updates of "
        f"{', '.join(f'{s:.1f}' for s in out['churn_update_s'])} s ({out['segments_before_compaction']} segments); "
        f"compaction (`compact=True`, ScaNN arrays joined, no retraining): {out['compact_s']:.1f} s.",
        f"- Exact shards: top 10 identical to one exact index over the corpus: {out['exact_shards_identical']}.",
        "",
        "| index | recall@10 | QPS batched | latency p50 / p99 |",
        "|---|---:|---:|---:|",
        row("one index, full build", out["one_index"]),
        row(f"updated in place (+{c:,}, ~{c:,}, -{c:,})", out["updated"]),
        row("fresh build of the updated set", out["fresh"]),
        row(f"{args.churn:.0%} churn, before compaction", out["churn_before"]),
        row(f"{args.churn:.0%} churn, after compaction", out["churn_after"]),
        row("two ScaNN shards of N/2, searched together", out["shards_scann"]),
        row("two exact shards of N/2, searched together", out["shards_exact"]),
        row("one exact index", out["one_exact"]),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
