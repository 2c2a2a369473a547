"""The speed-memory frontier: gtr-keras' ScaNN (the settings `gtr-keras tune` measures: its candidates reordered
on int8, then rescored with float32 or not), faiss-cpu (HNSW, and IVF-PQ with float refinement) and hnswlib on
the same vectors, in one run on one machine, and the setting `tune` picks at each target beside the best.

The vectors are `large_index.py`'s synthetic corpus (`add_corpus_arguments`, embedding files written once into
`--work` and reused) or, with `--real DATA`, GTR embeddings of real text: every document of the BEIR
collections under DATA and every distinct description of `debian-descriptions/pairs.jsonl.gz`, encoded with
`--model` (default: the bundled model) and cached in `--work`; the queries are `--num-queries` Debian
summaries and BEIR queries, sampled (seed `--seed`). Each library builds its index (timed); its memory is
the size of its serialized index (what a search process loads; for gtr-keras the ScaNN files
`SearchIndex.load` reads, and beside them the float32 file it reads a few rows a query from, mapping none of
it: `benchmarks/scann_memory.py` measures the search's peak RSS). Then every search setting of every
library is timed on all the queries in one batched call with both cores, the libraries taking turns for
`--rounds` rounds (the fastest round counts), and scored by recall@10 against exact float32 search. With
`--screen Q`, each setting is first run once on Q queries, and only those near their library's frontier there
are timed in turns (at 1M x 768 the screen on 200 queries kept 175 of ScaNN's 781 settings). The table
gives the best QPS at recall@10 >= 0.90, >= 0.95 and >= 0.99; the plot every library's recall-QPS frontier
(ann-benchmarks' axes).

`tune`'s pick: before the timing, `gtr_keras.tuning.tune` runs on the ScaNN index at each target with
`--tune-queries` other queries (half to choose on, half held out; never the measured ones: for the synthetic
corpus, drawn around its centres with seed `--seed` + 1; for `--real`, a disjoint sample of the same texts).
Each pick is timed in the same turns as the grid, and the second table gives its recall@10 and QPS on the
measured queries beside the best grid setting that meets the target (ScaNN's and any library's), as ratios.
With `--tune-build TARGET`, `tune --build` runs first at TARGET on the same queries (builds of half and twice
the leaves, AH blocks of 2 and 4 dimensions): the build holding the fastest setting is the ScaNN index measured.

Usage (pip install 'gtr-keras[ann-benchmarks]'):
    PYTHONPATH=. python benchmarks/frontier.py --n 100000 --work /tmp/frontier-100k --plot docs/images/frontier-100k.png
    PYTHONPATH=. python benchmarks/frontier.py --real ../shared/data --work /tmp/frontier-real
    PYTHONPATH=. python benchmarks/frontier.py --n 1000000 --screen 200 \
        --libraries scann,faiss-hnsw,faiss-ivfpq,hnswlib --work /tmp/frontier-1m --plot docs/images/frontier-1m.png
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
from large_index import add_corpus_arguments, corpus_centres, write_embedding_files
from results import RESULTS, lscpu_flags, machine, publish, rerun_command, time_interleaved
from search import synthetic

SECTION = "## Speed-memory frontier"
K = 10
TARGETS = (0.90, 0.95, 0.99)
SCREEN_MARGIN = 1.5
THREADS = len(os.sched_getaffinity(0))
# The peers' grids: as fine as tune's for ScaNN at each recall, so none is behind for want of a setting.
HNSW_EFS = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
IVF_NPROBES = (1, 2, 4, 8, 16, 32, 64, 128)
IVF_K_FACTORS = (2, 4, 8, 16, 32, 64, 128)


def gtr_keras_scann(vectors, work, m, ef_construction, prebuilt=None, tune_queries=None, tune_build=None):
    """gtr-keras' ScaNN index of `vectors` (or `prebuilt`) and every setting of `tune`'s grid; with
    `tune_queries`, also the setting `tune` records at each of `TARGETS` (`{"tuned_for": target, **setting}`),
    or, where it refuses, `{"tuned_for": target, "refused": message}` with no search. With `tune_build` (a
    target), `tune(build=True)` at that target on `tune_queries` first, which may replace the index with a build
    of other leaves or AH blocks; the last value returned says what it did (or "" without it)."""
    from gtr_keras.errors import UserError
    from gtr_keras.storage.layout import EMBEDDINGS_NPY, read_description
    from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index
    from gtr_keras.tuning.tuner import settings_grid, tune

    directory, build = os.path.join(work, "scann"), None
    if prebuilt:  # an index of these vectors that `gtr-keras index --embeddings` built (timed there)
        directory = read_description(prebuilt)[0]
    else:
        start = time.perf_counter()
        rows = ArrayRows([f"p{i}" for i in range(len(vectors))], vectors)
        write_search_index(rows, directory, "scann", {})
        build = time.perf_counter() - start
    built_by_tune = ""
    if tune_build is not None:
        start = time.perf_counter()
        try:
            record = tune(
                directory,
                tune_queries,
                target_recall=tune_build,
                k=K,
                build=True,
                plot=os.path.join(work, "tune-build.png"),
            )
            chose = described_setting(record["build"])
        except UserError as refusal:
            chose = f"refused: {refusal}"
        built_by_tune = f"; then `tune --build` at {tune_build} ({time.perf_counter() - start:.0f} s): {chose}"
        print(built_by_tune.removeprefix("; then "), flush=True)
    scann_dir = os.path.join(directory, "scann")
    size = sum(os.path.getsize(os.path.join(scann_dir, f)) for f in os.listdir(scann_dir))
    floats = os.path.join(directory, EMBEDDINGS_NPY)
    mapped = os.path.getsize(floats) if os.path.exists(floats) else 0
    picks = []
    for target in TARGETS if tune_queries is not None else ():
        start = time.perf_counter()
        try:
            plot = os.path.join(work, f"tune-{target}.png")
            record = tune(directory, tune_queries, target_recall=target, k=K, plot=plot)
            picks.append({"tuned_for": target, **record["setting"]})
        except UserError as refusal:
            picks.append({"tuned_for": target, "refused": str(refusal)})
        print(f"tune at {target}: {picks[-1]} ({time.perf_counter() - start:.0f} s)", flush=True)
    index = SearchIndex.load(directory)

    def searcher(setting):
        def search(queries):
            index.set_search_params({name: value for name, value in setting.items() if name != "tuned_for"})
            return index.search(queries, K)[0]

        return search

    settings = settings_grid(index, K) + [pick for pick in picks if "refused" not in pick]
    return build, (size, mapped), [(setting, searcher(setting)) for setting in settings], picks, built_by_tune


def faiss_size(index, work):
    """The bytes of `index` written to a file (a file, not `serialize_index`: no second copy in memory)."""
    import faiss

    path = os.path.join(work, "faiss.index")
    faiss.write_index(index, path)
    size = os.path.getsize(path)
    os.remove(path)
    return size


def faiss_hnsw(vectors, work, m, ef_construction):
    import faiss

    faiss.omp_set_num_threads(THREADS)
    index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    start = time.perf_counter()
    index.add(vectors)
    build = time.perf_counter() - start

    def searcher(ef):
        def search(queries):
            index.hnsw.efSearch = ef
            return index.search(queries, K)[1]

        return search

    return build, faiss_size(index, work), [({"efSearch": ef}, searcher(ef)) for ef in HNSW_EFS]


def faiss_ivfpq(vectors, work, m, ef_construction):
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

    def searcher(nprobe, k_factor):
        def search(queries):
            ivf.nprobe, index.k_factor = nprobe, k_factor
            return index.search(queries, K)[1]

        return search

    settings = [
        ({"nprobe": nprobe, "k_factor": k_factor}, searcher(nprobe, k_factor))
        for nprobe in IVF_NPROBES
        for k_factor in IVF_K_FACTORS
    ]
    return build, faiss_size(index, work), settings


def hnswlib_hnsw(vectors, work, m, ef_construction):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=vectors.shape[1])
    index.init_index(max_elements=len(vectors), ef_construction=ef_construction, M=m)
    start = time.perf_counter()
    index.add_items(vectors, num_threads=THREADS)
    build = time.perf_counter() - start
    path = os.path.join(work, "hnswlib.bin")
    index.save_index(path)
    size = os.path.getsize(path)
    os.remove(path)

    def searcher(ef):
        def search(queries):
            index.set_ef(ef)
            return index.knn_query(queries, k=K, num_threads=THREADS)[0]

        return search

    return build, size, [({"ef": ef}, searcher(ef)) for ef in HNSW_EFS]


LIBRARIES = {
    "scann": ("gtr-keras ScaNN (tune's grid: int8 reordering, float32 rescoring or none)", gtr_keras_scann),
    "faiss-hnsw": ("faiss HNSWFlat (M={m}, efConstruction={ef})", faiss_hnsw),
    "faiss-ivfpq": ("faiss IVF-PQ (4 sqrt(N) lists, D/8 bytes) + RefineFlat", faiss_ivfpq),
    "hnswlib": ("hnswlib (M={m}, ef_construction={ef})", hnswlib_hnsw),
}


def measure_in_turns(searchers, queries, truth, rounds):
    """`{library: [(recall, QPS, setting)]}`: every setting of every library timed once a round on all the
    queries, the libraries taking turns (`results.time_interleaved`), the fastest round counting; recall from the
    last round's answers (each search is deterministic)."""
    from gtr_keras.tuning.recall import recall_at_k

    found = {}

    def kept(key, search):
        return lambda: found.__setitem__(key, search(queries))

    functions = {
        (key, n): kept((key, n), search)
        for key, settings in searchers.items()
        for n, (_, search) in enumerate(settings)
    }
    seconds = time_interleaved(functions, rounds, warmup=0)
    return {
        key: [
            (recall_at_k(found[key, n], truth), len(truth) / min(seconds[key, n]), setting)
            for n, (setting, _) in enumerate(settings)
        ]
        for key, settings in searchers.items()
    }


def screened(searchers, queries, truth, count):
    """`searchers` less the settings that cannot be on their library's frontier: each setting is run once on the
    first `count` queries, and goes when another of its library has at least its recall@10 there and more than
    SCREEN_MARGIN times its QPS (a margin wide enough that the full timing, on every query, is unlikely to
    reverse it). `tune`'s picks are always kept."""
    from gtr_keras.tuning.recall import recall_at_k

    kept = {}
    for key, settings in searchers.items():
        began, points = time.perf_counter(), []
        for _, search in settings:
            start = time.perf_counter()
            found = search(queries[:count])
            points.append((recall_at_k(found, truth[:count]), count / (time.perf_counter() - start)))
        kept[key] = [
            pair
            for pair, (recall, qps) in zip(settings, points)
            if is_pick(pair[0]) or not any(other >= recall and faster > SCREEN_MARGIN * qps for other, faster in points)
        ]
        print(
            f"{key}: {len(kept[key])} of {len(settings)} settings kept by the screen "
            f"({time.perf_counter() - began:.0f} s)",
            flush=True,
        )
    return kept


def described_size(size):
    """A library's index size (bytes, or gtr-keras ScaNN's `(in memory, float32 file mapped)`), in MiB."""
    size, mapped = size if isinstance(size, tuple) else (size, 0)
    return f"{size / 2**20:,.0f} MiB" + (f" (+ {mapped / 2**20:,.0f} MiB float32 on disk)" if mapped else "")


def is_pick(setting):
    return "tuned_for" in setting


def best_qps(points, target):
    meeting = [(qps, setting) for r, qps, setting in points if r >= target]
    return max(meeting, key=lambda m: m[0]) if meeting else (None, None)


def described_setting(setting):
    return ", ".join(f"{name}={value}" for name, value in setting.items() if name != "tuned_for")


def tune_table(picks, picked, points, names):
    """Markdown rows: each target's `tune` pick (`picked`: its recall@10 and QPS on the measured queries) beside
    the fastest grid setting (`points`) of ScaNN and of any library meeting the target there."""
    lines = [
        "| target | tune's pick | its recall@10 | its QPS | ScaNN's best grid setting | pick / ScaNN's best | "
        "best of any library | pick / best of any |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pick in picks:
        target = pick["tuned_for"]
        scann_qps, scann_setting = best_qps(points["scann"], target)
        others = [(best_qps(found, target)[0] or 0, key) for key, found in points.items()]
        best, best_key = max(others)
        scann_best = f"{scann_qps:,.0f} ({described_setting(scann_setting)})" if scann_qps else "not reached"
        any_best = f"{best:,.0f} ({names[best_key]})" if best else "not reached"
        if "refused" in pick:
            lines.append(f"| {target:.2f} | refused: {pick['refused']} | | | {scann_best} | | {any_best} | |")
            continue
        recall, qps = next((r, q) for r, q, setting in picked if setting == pick)
        ratio = f"{qps / scann_qps:.2f}" if scann_qps else ""
        ratio_any = f"{qps / best:.2f}" if best else ""
        lines.append(
            f"| {target:.2f} | {described_setting(pick)} | {recall:.4f} | {qps:,.0f} | {scann_best} | {ratio} | "
            f"{any_best} | {ratio_any} |"
        )
    return lines


def real_vectors(data_dir, work, model, num_queries, tune_queries, seed):
    """`(documents, queries, tuning queries, description)`: GTR embeddings of every BEIR document under `data_dir`
    and every distinct Debian description, of `num_queries` sampled Debian summaries and BEIR queries, and of
    `tune_queries` others; encoded once."""
    from gtr_keras.beir import load_corpus, load_queries
    from gtr_keras.beir.readers import CORPUS_FILES

    settings = {
        "data": os.path.abspath(data_dir),
        "model": model,
        "num_queries": num_queries,
        "tune_queries": tune_queries,
        "seed": seed,
    }
    record = os.path.join(work, "real.json")
    cache = os.path.join(work, "real.npz")
    if not (os.path.exists(record) and _read_json(record) == settings and os.path.exists(cache)):
        import gtr_keras

        documents, queries = [], []
        for name in sorted(os.listdir(data_dir)):
            path = os.path.join(data_dir, name)
            if any(os.path.exists(os.path.join(path, f)) for f in CORPUS_FILES):
                documents += load_corpus(path).joined()
                queries += list(load_queries(path).values())
        with gzip.open(os.path.join(data_dir, "debian-descriptions", "pairs.jsonl.gz"), "rt") as f:
            pairs = [json.loads(line) for line in f]
        documents += sorted({pair["positive"] for pair in pairs})
        queries += [pair["query"] for pair in pairs]
        picked = np.random.default_rng(seed).choice(len(queries), num_queries + tune_queries, replace=False)
        encoder = gtr_keras.load(model)
        start = time.perf_counter()
        document_vectors = encoder.encode_documents(documents, 64, True)
        query_vectors = encoder.encode_queries([queries[i] for i in sorted(picked[:num_queries])], 64)
        tuning_vectors = encoder.encode_queries([queries[i] for i in sorted(picked[num_queries:])], 64)
        print(f"encoded {len(documents):,} documents in {time.perf_counter() - start:.0f} s", flush=True)
        os.makedirs(work, exist_ok=True)
        np.savez(cache, documents=document_vectors, queries=query_vectors, tuning=tuning_vectors)
        with open(record, "w") as f:
            json.dump(settings, f)
    cached = np.load(cache)
    vectors, queries, tuning = cached["documents"], cached["queries"], cached["tuning"]
    described = (
        f"{len(vectors):,} x {vectors.shape[1]} GTR embeddings ({os.path.basename(model)}) of every document of "
        f"{data_dir}'s BEIR collections and every distinct Debian description, {len(queries)} sampled queries"
    )
    return vectors, queries, tuning, described


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def synthetic_vectors(args):
    embeddings_dir = os.path.join(args.work, "embeddings")
    write_embedding_files(args, embeddings_dir)
    vectors = np.concatenate(
        [
            np.load(os.path.join(embeddings_dir, name))
            for name in sorted(os.listdir(embeddings_dir))
            if name.endswith(".npy")
        ]
    )
    queries = np.load(os.path.join(args.work, "queries.npy"))
    _, centres = corpus_centres(args)
    tuning = synthetic(args.tune_queries, centres, args.noise, np.random.default_rng(args.seed + 1))
    described = (
        f"{len(vectors):,} x {vectors.shape[1]} synthetic vectors ({args.clusters} clusters, noise {args.noise}), "
        f"{len(queries)} queries"
    )
    return vectors, queries, tuning, described


def main(argv=None):
    from gtr_keras.models import BUNDLED_MODEL_DIR

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument(
        "--real", metavar="DATA", help="GTR embeddings of the collections under DATA, not synthetic (--n etc. unused)"
    )
    parser.add_argument("--model", default=BUNDLED_MODEL_DIR, help="the model that encodes --real's texts")
    parser.add_argument("--work", required=True, help="directory for the vectors and indexes (kept for reruns)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated names of LIBRARIES")
    parser.add_argument("--hnsw-m", type=int, default=32, help="HNSW's M (faiss and hnswlib)")
    parser.add_argument("--ef-construction", type=int, default=100, help="HNSW's efConstruction (faiss and hnswlib)")
    parser.add_argument("--scann-index", help="search this ScaNN index of the same vectors instead of building one")
    parser.add_argument("--rounds", type=int, default=2, help="timed turns of every setting of every library")
    parser.add_argument(
        "--screen",
        type=int,
        default=0,
        metavar="Q",
        help="first run each setting once on Q queries and time in turns only those near their library's frontier "
        "there (`screened`; for large grids at large sizes, as ScaNN's at 1M); 0: time every setting",
    )
    parser.add_argument(
        "--tune-build",
        type=float,
        metavar="TARGET",
        help="before the picks, `tune --build` at recall@10 TARGET on the --tune-queries, which may replace the "
        "ScaNN index (in --work, or --scann-index) with a build of other leaves or AH blocks",
    )
    parser.add_argument(
        "--tune-queries",
        type=int,
        default=1000,
        help="other queries `tune` chooses its setting at each target on (half held out); 0: no tune picks",
    )
    parser.add_argument("--plot", help="the recall-QPS PNG to write (default: WORK/frontier.png)")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    keys = args.libraries.split(",")
    unknown = sorted(set(keys) - set(LIBRARIES))
    if unknown:
        parser.error(f"--libraries: unknown {', '.join(unknown)} (known: {', '.join(LIBRARIES)})")
    if not 0 <= args.screen <= args.num_queries:
        parser.error(f"argument --screen: between 0 and --num-queries ({args.num_queries}), not {args.screen}")
    if args.tune_build is not None and not args.tune_queries:
        parser.error("argument --tune-build: needs --tune-queries above 0 (the queries it tunes on)")
    from gtr_keras.storage.exact_search import exact_top_k
    from gtr_keras.tuning import plot_recall_qps

    if args.real:
        vectors, queries, tuning, described = real_vectors(
            args.real, args.work, args.model, args.num_queries, args.tune_queries, args.seed
        )
    else:
        vectors, queries, tuning, described = synthetic_vectors(args)
    truth = exact_top_k(vectors, queries, K, np.arange(len(vectors)))[0]
    names, builds, searchers, picks, built_by_tune = {}, {}, {}, [], ""
    for key in keys:
        name, run = LIBRARIES[key]
        names[key] = name.format(m=args.hnsw_m, ef=args.ef_construction)
        extra = {
            "prebuilt": args.scann_index,
            "tune_queries": tuning if args.tune_queries else None,
            "tune_build": args.tune_build,
        }
        build, size, searchers[key], *tuned = run(
            vectors, args.work, args.hnsw_m, args.ef_construction, **(extra if key == "scann" else {})
        )
        if tuned:
            picks, built_by_tune = tuned
        builds[key] = build, size
        print(f"{names[key]}: built in {build or 0:.1f} s, {described_size(size)}", flush=True)
    if args.screen:
        searchers = screened(searchers, queries, truth, args.screen)
    points = measure_in_turns(searchers, queries, truth, args.rounds)
    picked = [point for point in points.get("scann", []) if is_pick(point[2])]
    points = {key: [point for point in found if not is_pick(point[2])] for key, found in points.items()}
    rows = []
    for key in keys:
        cells = []
        for target in TARGETS:
            qps, setting = best_qps(points[key], target)
            cells.append(f"{qps:,.0f} ({described_setting(setting)})" if qps else "not reached")
        build, size = builds[key]
        size = described_size(size)
        top = max(points[key], key=lambda p: p[0])[0]
        built = f"{build:.1f} s ({len(vectors) / build:,.0f} rows/s)" if build else "prebuilt (`--scann-index`)"
        built += built_by_tune if key == "scann" else ""
        rows.append(f"| {names[key]} | {built} | {size} | {' | '.join(cells)} | {top:.4f} |")
    plot = args.plot or os.path.join(args.work, "frontier.png")
    screen = (
        f", of the settings the screen kept ({', '.join(f'{key} {len(searchers[key])}' for key in keys)}: each "
        f"setting run once on {args.screen} queries, dropped when another of its library had at least its recall "
        f"there and over {SCREEN_MARGIN}x its QPS)"
        if args.screen
        else ""
    )
    curves = {names[key]: [(r, q) for r, q, _ in points[key]] for key in keys}
    plot_recall_qps(curves, plot, f"{len(vectors):,} x {vectors.shape[1]}, {THREADS} threads", target=0.99)
    block = "\n".join(
        [
            f"### {described}",
            "",
            f"Command: `{rerun_command(__file__, argv)}`. Machine: {machine()}; load average before the run "
            f"{LOAD_BEFORE}; lscpu flags: {lscpu_flags()}. Python {sys.version.split()[0]}. {args.rounds} timed "
            f"rounds, the libraries taking turns{screen}. Plot: `{plot}`.",
            "",
            "| library | build | index size | "
            + " | ".join(f"QPS at recall@10 >= {target:.2f}" for target in TARGETS)
            + " | best recall@10 |",
            "|---|---|---|---|---|---|---|",
            *rows,
            *(
                [
                    "",
                    f"`tune`'s pick at each target ({args.tune_queries} other queries: half to choose on, half held "
                    "out), timed in the same turns, on the measured queries:",
                    "",
                    *tune_table(picks, picked, points, names),
                ]
                if picks
                else []
            ),
        ]
    )
    publish(block, args.results, SECTION, not args.no_record)


LOAD_BEFORE = ", ".join(f"{load:.1f}" for load in os.getloadavg())

if __name__ == "__main__":
    main()
