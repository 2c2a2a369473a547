"""`gtr-keras tune`: an index's search settings measured against exact search, the fastest that meets a recall
recorded."""

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_types import (
    at_least_one,
    fraction,
    index_directory,
    input_any,
    is_npy,
    output_path,
)
from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `tune` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "tune",
        help="measure an index's search settings against exact float32 search; record the fastest that meets a recall",
        description="Measures recall@k and queries a second of each search setting (ScaNN: leaves searched, reordering "
        "pool and float32 rescoring pool; int8|binary exact: candidates rescored; none searching at least as "
        "much as one 1.5x slower than a setting meeting --target-recall) against an exact search of "
        "the index's float32 vectors, on half the queries, bisects the fastest that meets --target-recall "
        "between the grid's steps, prints them, records the fastest setting that also meets it on the other "
        "half, held out (INDEX/index/tuned.json: search, export, servers and SearchIndex.load use it), and "
        "draws the recall-QPS curve as a PNG. Exit 2 when no setting meets it held out.",
        parents=parents,
    )
    p.add_argument("--index", required=True, type=index_directory, help="a local index directory")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--queries",
        type=input_any,
        metavar="PATH",
        help="real queries, held out: float32 [n, D] vectors (.npy, e.g. of `gtr-keras encode`), or a BEIR "
        "queries file or directory (queries.jsonl[.gz]) encoded with --model (default: --sample)",
    )
    group.add_argument(
        "--sample",
        type=at_least_one,
        default=1000,
        help="index rows sampled as queries, each left out of its own answer: document rows, nearer their "
        "neighbours than real queries (default: 1000)",
    )
    p.add_argument(
        "--model",
        help="required with a --queries file of text: the model the index was built with (checked), which encodes "
        "them (default: none)",
    )
    p.add_argument("--target-recall", type=fraction, default=0.95, help="recall@k to meet (default: 0.95)")
    p.add_argument("-k", type=at_least_one, default=10, help="results per query whose recall counts")
    p.add_argument(
        "--plot",
        type=output_path("file", ".png"),
        help="the recall-QPS plot to write (default: INDEX/index/tune-recall-qps.png)",
    )
    p.add_argument(
        "--build",
        action="store_true",
        help="also measure ScaNN builds of half and twice the leaves and AH blocks of 2 and 4 dimensions (trained "
        "on the index's float32 vectors, or its int8 copy without them); the build of the fastest setting replaces "
        "the index",
    )
    return p


def check(args, parser):
    """`tune --model` encodes a `--queries` file of text, which needs it; `.npy` vectors are encoded already."""
    text = args.queries is not None and not is_npy(args.queries)
    if text and not args.model:
        parser.error("argument --model: required with a --queries file of text (or give encoded .npy vectors)")
    if args.model and not text:
        parser.error("argument --model: encodes a --queries file of text; .npy vectors and --sample need none")


@locks_output("args.index")  # an update of the index waits, and a second tune
def run(args):
    from gtr_keras.tuning.tuner import tune as tune_index

    record = tune_index(
        args.index, _tune_queries(args), args.sample, args.target_recall, args.k, args.plot, build=args.build
    )
    setting = ", ".join(f"{name}={value}" for name, value in {**record.get("build", {}), **record["setting"]}.items())
    truth = "exact float32 search" if record["truth"] == "float32" else "exact search of its int8 copy (see the note)"
    print(
        f"chose {setting}: recall@{args.k} {record['recall']} on {record['held_out_queries']} held-out queries "
        f"({record['tuning_recall']} on the {record['tuning_queries']} it was tuned on) against {truth}, at "
        f"{record['qps']} queries/s (target {args.target_recall}; {record['queries']}); recorded in {args.index}"
    )
    print(f"wrote {record['plot']}")


def _tune_queries(args):
    """`tune --queries`' float32 vectors: a `.npy` file's (checked: finite, of the index's dims), or a queries
    file's texts encoded with `--model` (checked against the index's, after `tuner.check_request`: nothing
    encoded for a tune refused anyway); None without `--queries`. A bad `.npy` is named `--queries PATH: `."""
    import numpy as np

    from gtr_keras.tuning.tuner import check_queries, check_request

    if not args.queries:
        return None
    if is_npy(args.queries):
        from gtr_keras.storage.layout import read_description
        from gtr_keras.utils.records import unreadable_reason

        try:
            with files.open(args.queries) as f:
                vectors = np.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"--queries {args.queries}: unreadable ({unreadable_reason(e, args.queries)})") from e
        try:
            return check_queries(vectors, read_description(args.index)[2]["dims"])
        except UserError as e:
            raise UserError(f"--queries {args.queries}: {e}") from e
    from gtr_keras.beir.readers import load_queries
    from gtr_keras.retrieval.retriever import Retriever

    texts = list(load_queries(args.queries).values())  # a bad file before the model loads
    check_request(args.index, args.target_recall, args.k, args.build, len(texts), sampled=False)
    encoder = handler_inputs.encoder(args)
    return Retriever.encoder_for(args.index, encoder).encode_queries(texts, 64)
