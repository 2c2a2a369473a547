"""The speed-memory frontier: gtr-keras' ScaNN (the settings `gtr-keras tune` measures), faiss-cpu (HNSW, and
IVF-PQ with float refinement) and hnswlib on the same vectors, in one run on one machine.

The vectors are `large_index.py`'s synthetic corpus (`add_corpus_arguments`, shards written once into
`--work` and reused) or, with `--embeddings`/`--query-embeddings`, real ones. Each library builds its index
(timed), its memory is the size of its serialized index (what a search process loads; for gtr-keras the
ScaNN files `SearchIndex.load` reads), and each of its search settings is timed on every query in one
batched call with both cores (the best of two runs) and scored by recall@10 against exact float32 search.
The table gives the best QPS at recall@10 >= 0.90 and >= 0.95; the plot every library's recall-QPS
frontier (ann-benchmarks' axes).

Usage (pip install 'gtr-keras[ann-benchmarks]'):
    PYTHONPATH=. python benchmarks/frontier.py --n 100000 --work /tmp/frontier-100k --plot docs/images/frontier-100k.png
"""

import argparse
import os
import sys
import time

import numpy as np
from large_index import add_corpus_arguments, write_shards
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

SECTION = "## Speed-memory frontier"
K = 10
THREADS = len(os.sched_getaffinity(0))


def timed(search, repeats=2):
    """`(result, seconds)`: the result of `search()` and the fastest of `repeats` runs."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = search()
        best = min(best, time.perf_counter() - start)
    return result, best


def recall(found, truth):
    return float(np.mean([len(np.intersect1d(f, t)) / K for f, t in zip(found, truth)]))


def gtr_keras_scann(vectors, queries, truth, work, m, ef_construction, prebuilt=None):
    from gtr_keras.index import SearchIndex, write_search_index
    from gtr_keras.index.layout import read_description
    from gtr_keras.index.search_index import ArrayRows
    from gtr_keras.tuning.tuner import settings_grid

    directory, build = os.path.join(work, "scann"), None
    if prebuilt:  # an index of these vectors that `gtr-keras index --embeddings` built (timed there)
        directory = read_description(prebuilt)[0]
    else:
        start = time.perf_counter()
        write_search_index(ArrayRows([f"p{i}" for i in range(len(vectors))], vectors), directory, "scann")
        build = time.perf_counter() - start
    size = sum(
        os.path.getsize(os.path.join(directory, "scann", f)) for f in os.listdir(os.path.join(directory, "scann"))
    )
    index = SearchIndex.load(directory)
    points = []
    for setting in settings_grid(index, K):
        index.set_search_params(setting)
        found, seconds = timed(lambda: index.search(queries, K)[0])
        points.append((recall(found, truth), len(queries) / seconds, setting))
    return build, size, points


def faiss_hnsw(vectors, queries, truth, work, m, ef_construction):
    import faiss

    faiss.omp_set_num_threads(THREADS)
    index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    start = time.perf_counter()
    index.add(vectors)
    build = time.perf_counter() - start
    points = []
    for ef in (16, 32, 64, 128, 256, 512):
        index.hnsw.efSearch = ef
        (_, found), seconds = timed(lambda: index.search(queries, K))
        points.append((recall(found, truth), len(queries) / seconds, {"efSearch": ef}))
    return build, len(faiss.serialize_index(index)), points


def faiss_ivfpq(vectors, queries, truth, work, m, ef_construction):
    import faiss

    faiss.omp_set_num_threads(THREADS)
    n, dims = vectors.shape
    nlist = int(4 * np.sqrt(n))
    quantizer = faiss.IndexFlatIP(dims)
    ivf = faiss.IndexIVFPQ(quantizer, dims, nlist, dims // 8, 8, faiss.METRIC_INNER_PRODUCT)
    index = faiss.IndexRefineFlat(ivf)
    start = time.perf_counter()
    sample = vectors[np.random.default_rng(0).choice(n, min(n, max(50 * nlist, 50_000)), replace=False)]
    index.train(sample)
    index.add(vectors)
    build = time.perf_counter() - start
    points = []
    for nprobe in (4, 8, 16, 32, 64, 128):
        for k_factor in (4, 16, 64):
            ivf.nprobe = nprobe
            index.k_factor = k_factor
            (_, found), seconds = timed(lambda: index.search(queries, K))
            points.append((recall(found, truth), len(queries) / seconds, {"nprobe": nprobe, "k_factor": k_factor}))
    return build, len(faiss.serialize_index(index)), points


def hnswlib_hnsw(vectors, queries, truth, work, m, ef_construction):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=vectors.shape[1])
    index.init_index(max_elements=len(vectors), ef_construction=ef_construction, M=m)
    start = time.perf_counter()
    index.add_items(vectors, num_threads=THREADS)
    build = time.perf_counter() - start
    path = os.path.join(work, "hnswlib.bin")
    index.save_index(path)
    points = []
    for ef in (16, 32, 64, 128, 256, 512):
        index.set_ef(ef)
        (found, _), seconds = timed(lambda: index.knn_query(queries, k=K, num_threads=THREADS))
        points.append((recall(found, truth), len(queries) / seconds, {"ef": ef}))
    return build, os.path.getsize(path), points


LIBRARIES = {
    "scann": ("gtr-keras ScaNN (tune's grid)", gtr_keras_scann),
    "faiss-hnsw": ("faiss HNSWFlat (M={m}, efConstruction={ef})", faiss_hnsw),
    "faiss-ivfpq": ("faiss IVF-PQ (4 sqrt(N) lists, D/8 bytes) + RefineFlat", faiss_ivfpq),
    "hnswlib": ("hnswlib (M={m}, ef_construction={ef})", hnswlib_hnsw),
}


def best_qps(points, target):
    meeting = [(qps, setting) for r, qps, setting in points if r >= target]
    return max(meeting, key=lambda m: m[0]) if meeting else (None, None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--work", required=True, help="directory for the shards and indexes (kept for reruns)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated names of LIBRARIES")
    parser.add_argument("--hnsw-m", type=int, default=32, help="HNSW's M (faiss and hnswlib)")
    parser.add_argument("--ef-construction", type=int, default=100, help="HNSW's efConstruction (faiss and hnswlib)")
    parser.add_argument("--scann-index", help="search this ScaNN index of the same vectors instead of building one")
    parser.add_argument("--plot", help="the recall-QPS PNG to write (default: WORK/frontier.png)")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    from gtr_keras.index.exact_search import exact_top_k
    from gtr_keras.tuning.recall_curve import plot_recall_qps

    shard_dir = os.path.join(args.work, "shards")
    write_shards(args, shard_dir)
    vectors = np.concatenate(
        [np.load(os.path.join(shard_dir, name)) for name in sorted(os.listdir(shard_dir)) if name.endswith(".npy")]
    )
    queries = np.load(os.path.join(args.work, "queries.npy"))
    truth = exact_top_k(vectors, queries, K, np.arange(len(vectors)))[0]
    curves, rows = {}, []
    for key in args.libraries.split(","):  # one library at a time: each index is freed before the next
        name, run = LIBRARIES[key]
        name = name.format(m=args.hnsw_m, ef=args.ef_construction)
        extra = {"prebuilt": args.scann_index} if key == "scann" else {}
        build, size, points = run(vectors, queries, truth, args.work, args.hnsw_m, args.ef_construction, **extra)
        curves[name] = [(r, q) for r, q, _ in points]
        cells = []
        for target in (0.90, 0.95):
            qps, setting = best_qps(points, target)
            cells.append(f"{qps:,.0f} ({', '.join(f'{k}={v}' for k, v in setting.items())})" if qps else "not reached")
        top = max(points, key=lambda p: p[0])[0]
        built = f"{build:.1f} s ({len(vectors) / build:,.0f} rows/s)" if build else "prebuilt (`--scann-index`)"
        rows.append(f"| {name} | {built} | {size / 2**20:,.0f} MiB | {cells[0]} | {cells[1]} | {top:.4f} |")
        print(rows[-1], flush=True)
    plot = args.plot or os.path.join(args.work, "frontier.png")
    plot_recall_qps(curves, plot, f"{len(vectors):,} x {vectors.shape[1]} synthetic, {THREADS} threads", target=0.95)
    flags = lscpu_flags()
    block = "\n".join(
        [
            f"### {len(vectors):,} x {vectors.shape[1]} synthetic vectors ({args.clusters} clusters, noise "
            f"{args.noise}), {len(queries)} queries",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}, shared with other jobs; "
            f"lscpu flags: {flags}. Python {sys.version.split()[0]}. Plot: `{plot}`.",
            "",
            "| library | build | index size | QPS at recall@10 >= 0.90 | QPS at recall@10 >= 0.95 | best recall@10 |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
