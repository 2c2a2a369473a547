"""Past one machine, measured here: an index pushed into Qdrant's local mode and Milvus Lite, and searched
through each beside gtr-keras' own exact and ScaNN search of the same vectors.

Writes (or reuses) `large_index.py`'s synthetic corpus of unit vectors in `--work` (`--n` x `--dims`), gives each
document metadata (`bucket`, an integer drawn uniformly from 0-99, and `lang`, `en` or `de`, independent of the
vectors) and a short text, and indexes it twice with `index_embeddings`: exact and ScaNN. Then, per engine
(`qdrant:` and `milvus:` targets in `--work`):

- push: `gtr-keras push` of the exact index into a new collection (`engines.push.push`, `--push-batch` records a
  request), as rows/s;
- search: `--num-queries` query vectors through `Index.open(TARGET, collection=...)` (what `gtr-keras search`
  and `serve` run: the engine's own search, then its documents read back), in batches of `--search-batch`, as
  QPS, and recall@10 against exact search (float32 dot products over all rows, NumPy);
- the same with the filter `bucket < 10` (10% of the rows) on the first `--filtered-queries` queries (Qdrant's
  local mode checks a filter's conditions point by point in Python: 14 QPS at 5,000 rows here), recall@10
  against exact filtered search;

and gtr-keras' exact and ScaNN indexes (`Index.search` of the same query vectors and filter) beside them.
Results are printed and appended to the "## Engines" section of `benchmarks/RESULTS.md` (`--no-record`: printed
only) with the command, the CPU model and `lscpu`'s flags.

Usage:
    PYTHONPATH=. flock /work/notes/bench.lock python benchmarks/engines.py --n 100000 --work /tmp/engines-100k
    PYTHONPATH=. python benchmarks/engines.py --n 5000 --work /tmp/engines-5k --no-record  # a check that it runs
"""

import argparse
import datetime
import glob
import json
import os
import shutil
import sys
import time

import numpy as np
from large_index import add_corpus_arguments, write_embedding_files
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

K = 10
SECTION = "## Engines"
FILTER = "bucket < 10"
ENGINES = ("qdrant", "milvus")


def corpus_of(embeddings_dir, seed):
    """The `Corpus` of the synthetic embeddings: their ids in file order, a short text, and metadata `bucket`
    (uniform over 0-99) and `lang`."""
    from gtr_keras.beir.readers import Corpus

    ids = []
    for path in sorted(glob.glob(os.path.join(embeddings_dir, "*.ids.txt"))):
        with open(path, encoding="utf-8") as f:
            ids += f.read().split()
    rng = np.random.default_rng([seed, 60])
    buckets, langs = rng.integers(0, 100, len(ids)), rng.integers(0, 2, len(ids))
    metadata = [{"bucket": int(b), "lang": ("en", "de")[int(lang)]} for b, lang in zip(buckets, langs)]
    return Corpus(ids, [""] * len(ids), [f"synthetic document {i}" for i in ids], metadata)


def exact_top(vectors, queries, allowed=None):
    """The row numbers of each query's exact top K (float32 dot products), among the `allowed` rows."""
    found = []
    for start in range(0, len(queries), 256):
        scores = queries[start : start + 256] @ vectors.T
        if allowed is not None:
            scores[:, ~allowed] = -np.inf
        found.append(np.argsort(-scores, axis=1, kind="stable")[:, :K])
    return np.concatenate(found)


def recall(hits, exact, ids):
    """Mean recall@10 of `hits` (per query, the hit dicts) against `exact` (row numbers of `ids`)."""
    return float(
        np.mean([len({h["id"] for h in row} & {ids[r] for r in top}) / len(top) for row, top in zip(hits, exact)])
    )


def searched(index, queries, batch, filter=None):
    """`(hits of every query, seconds)`: `index.search` of the queries, `batch` a call."""
    start, hits = time.perf_counter(), []
    for first in range(0, len(queries), batch):
        hits += index.search(queries[first : first + batch], k=K, filter=filter)
    return hits, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser)
    parser.set_defaults(n=100_000, files=4)
    parser.add_argument("--work", required=True, help="directory for embedding files, indexes and engines")
    parser.add_argument("--engines", default=",".join(ENGINES), help="of qdrant,milvus")
    parser.add_argument("--push-batch", type=int, default=256, help="records a push request (push's default)")
    parser.add_argument("--search-batch", type=int, default=1000, help="queries a search call")
    parser.add_argument("--filtered-queries", type=int, default=100, help="queries of the filtered search")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    from gtr_keras.engines.push import push
    from gtr_keras.retrieval.index import Index
    from gtr_keras.retrieval.index_building import index_embeddings

    started = datetime.datetime.now(datetime.UTC)
    embeddings_dir = os.path.join(args.work, "embeddings")
    write_embedding_files(args, embeddings_dir)
    corpus = corpus_of(embeddings_dir, args.seed)
    pattern = os.path.join(embeddings_dir, "*.npy")
    vectors = np.concatenate([np.load(path) for path in sorted(glob.glob(pattern))])
    queries = np.load(os.path.join(args.work, "queries.npy"))
    allowed = np.array([m["bucket"] < 10 for m in corpus.metadata])
    filtered = queries[: args.filtered_queries]
    exact = {None: exact_top(vectors, queries), FILTER: exact_top(vectors, filtered, allowed)}
    rows, built = [], {}
    for kind in ("exact", "scann"):
        index_dir = os.path.join(args.work, f"index-{kind}")
        shutil.rmtree(index_dir, ignore_errors=True)
        start = time.perf_counter()
        index_embeddings(pattern, index_dir, kind=kind, corpus=corpus, bm25=False)
        built[kind] = time.perf_counter() - start
        with Index.open(index_dir) as index:
            rows.append(measure(f"gtr-keras {kind}", index, (queries, filtered), exact, corpus.ids, args.search_batch))
        print(json.dumps(rows[-1]), flush=True)
    for engine in args.engines.split(","):
        target = f"qdrant:{args.work}/qdrant" if engine == "qdrant" else f"milvus:{args.work}/milvus.db"
        start = time.perf_counter()
        summary = push(
            os.path.join(args.work, "index-exact"), target, "bench", recreate=True, batch_size=args.push_batch
        )
        push_s = time.perf_counter() - start
        with Index.open(target, collection="bench") as index:
            row = measure(engine, index, (queries, filtered), exact, corpus.ids, args.search_batch)
        rows.append({**row, "push_rows_s": summary.upserted / push_s, "push_s": push_s})
        print(json.dumps(rows[-1]), flush=True)

    table = [
        "| search | push rows/s | QPS | recall@10 | QPS, `bucket < 10` | recall@10, `bucket < 10` |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        pushed = f"{row['push_rows_s']:,.0f} ({row['push_s']:.0f} s)" if "push_rows_s" in row else "-"
        table.append(
            f"| {row['name']} | {pushed} | {row['qps']:,.0f} | {row['recall']:.4f} | {row['filtered_qps']:,.0f} | "
            f"{row['filtered_recall']:.4f} |"
        )
    table = "\n".join(table)
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: {len(vectors):,} x {vectors.shape[1]} synthetic vectors, engines

Command: `{rerun_command(__file__, argv)}`

- Machine: {machine()}; 1-min load average {os.getloadavg()[0]:.2f} after. `lscpu` flags: {lscpu_flags()}
- Data: `large_index.py`'s synthetic corpus ({args.clusters} centres, noise norm {args.noise}), {len(queries)}
  query vectors; metadata `bucket` (uniform 0-99) and `lang`, a text of ~25 bytes a document. gtr-keras
  indexes built from the embedding files in {built["exact"]:.0f} s (exact) and {built["scann"]:.0f} s (ScaNN).
- Push: `engines.push.push` of the exact index into a new collection, {args.push_batch} records a request;
  Qdrant in its local mode (`qdrant:DIR`), Milvus Lite (`milvus:FILE.db`). Search: `Index.search` of the query
  vectors, {args.search_batch} a call (an engine's: its search, then its documents read back); recall@10
  against exact search (NumPy float32 dot products); filtered, the first {len(filtered)} queries, against exact
  search of the allowed rows ({allowed.mean():.1%}).

{table}
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


def measure(name, index, query_sets, exact, ids, batch):
    """QPS and recall@10 of `index`'s search of `query_sets` (the unfiltered set, the filtered set), without and
    with `FILTER`."""
    row = {"name": name}
    for queries, filter, label in ((query_sets[0], None, ""), (query_sets[1], FILTER, "filtered_")):
        hits, seconds = searched(index, queries, batch, filter)
        row[f"{label}qps"], row[f"{label}recall"] = len(queries) / seconds, recall(hits, exact[filter], ids)
    return row


if __name__ == "__main__":
    sys.exit(main())
