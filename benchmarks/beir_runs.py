"""Shared helpers of the retrieval-quality benchmarks (`long_documents.py`, `dimensions.py`): BEIR datasets read
whole or as a small subset (`--quick`), and runs of exact search scored by the project's evaluator."""

import datetime
import os

import numpy as np
from results import RESULTS, lscpu_flags, machine, publish, rerun_command

from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.evaluation import evaluate_run
from gtr_keras.beir.readers import Corpus

DATASETS = ("scifact", "nfcorpus", "cranfield")
DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
QUICK_DOCS, QUICK_QUERIES = 200, 20


def add_dataset_arguments(parser):
    """Adds the flags the retrieval-quality benchmarks share: the datasets (`--data`, `--datasets`), `--batch-size`,
    a subset (`--max-docs`, `--max-queries`, `--quick`) and where the table goes (`--results`, `--no-record`)."""
    parser.add_argument("--data", default=DATA_DIR, help="the folder of the BEIR datasets")
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument("--batch-size", type=int, default=32, help="texts a forward pass")
    parser.add_argument("--max-docs", type=int, help="a subset: the judged documents first, then others")
    parser.add_argument("--max-queries", type=int, help="a subset: the first judged queries")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_DOCS} documents, {QUICK_QUERIES} queries, not recorded"
    )
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")


def parse_arguments(parser, argv):
    """The parsed flags, `--quick`'s subset filled in where `--max-docs` and `--max-queries` are not given."""
    args = parser.parse_args(argv)
    if args.quick:
        args.max_docs, args.max_queries = args.max_docs or QUICK_DOCS, args.max_queries or QUICK_QUERIES
    return args


def started():
    """`(now, 1-min load average)` as a benchmark starts."""
    return datetime.datetime.now(datetime.UTC), os.getloadavg()[0]


def report(script, argv, args, title, start, facts, table):
    """Prints the table (lines: header, rule, rows) under its heading, command and machine, and appends it to
    `--results` unless `--no-record` or `--quick`."""
    when, load_before = start
    subset = " A subset: not the datasets' numbers." if args.max_docs or args.max_queries else ""
    block = "\n".join(
        [
            f"### {when:%Y-%m-%d %H:%M} UTC: {title}",
            "",
            f"Command: `{rerun_command(script, argv)}`. Machine: {machine()}, 1-min load average "
            f"{load_before:.2f} before and {os.getloadavg()[0]:.2f} after; lscpu flags: {lscpu_flags()}. "
            f"{facts}{subset}",
            "",
            *table,
        ]
    )
    publish(block, args.results, args.section, not (args.no_record or args.quick))


def load_subset(path, max_docs=None, max_queries=None):
    """`(corpus, queries, qrels)` of the BEIR dataset at `path`, its test split; with `max_queries`, the first
    that many judged queries; with `max_docs`, the documents judged for them first, then the corpus's first
    others up to `max_docs` (a subset's numbers are not the dataset's: they check that a run works)."""
    corpus, queries, qrels, _ = load_dataset(path)
    if max_queries is not None:
        queries = dict(list(queries.items())[:max_queries])
        qrels = {qid: qrels[qid] for qid in queries}
    if max_docs is not None and max_docs < len(corpus):
        judged = {doc_id for qid in queries for doc_id in qrels[qid]}
        first = [i for i, doc_id in enumerate(corpus.ids) if doc_id in judged][:max_docs]
        rest = [i for i in range(len(corpus)) if corpus.ids[i] not in judged][: max_docs - len(first)]
        keep = sorted(first + rest)
        metadata = None if corpus.metadata is None else [corpus.metadata[i] for i in keep]
        corpus = Corpus(
            [corpus.ids[i] for i in keep], [corpus.titles[i] for i in keep], [corpus.texts[i] for i in keep], metadata
        )
    return corpus, queries, qrels


def scores_of(query_vectors, row_vectors, row_starts=None):
    """Document scores `[queries, documents]` of exact search; with `row_starts` (the first row of each document,
    its rows contiguous), a document's score is its best row's (MaxP)."""
    scores = query_vectors @ row_vectors.T
    return scores if row_starts is None else np.maximum.reduceat(scores, row_starts, axis=1)


def run_of(scores, query_ids, doc_ids, depth=100):
    """A run (`{qid: {doc_id: score}}`) of the `depth` best documents of each query of `scores`."""
    depth = min(depth, scores.shape[1])
    top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    return {qid: {doc_ids[d]: float(scores[q, d]) for d in top[q]} for q, qid in enumerate(query_ids)}


def metrics_of(qrels, run):
    """NDCG@10 and Recall@100 of a run (pytrec-eval, through `gtr_keras.beir.evaluation.evaluate_run`)."""
    values = evaluate_run(qrels, run)
    return values["ndcg@10"], values["recall@100"]
