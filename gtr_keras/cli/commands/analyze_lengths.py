"""`gtr-keras analyze-lengths`: median words of a run's top documents against the relevant ones (GTR paper 6.4)."""

import json

from gtr_keras.cli.helpers.flag_types import (
    at_least_one,
    input_dir,
    input_file,
)


def add_parser(subparsers, parents):
    """Adds `analyze-lengths` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "analyze-lengths",
        help="median words of top-10 vs relevant documents (GTR paper 6.4)",
        description="median words of top-10 vs relevant documents (GTR paper 6.4)",
        parents=parents,
    )
    p.add_argument("--run", required=True, type=input_file, help="TREC run file")
    p.add_argument("--dataset", required=True, type=input_dir, help="BEIR directory")
    p.add_argument("--split", default="test", help="qrels split")
    p.add_argument("-k", type=at_least_one, default=10, help="top documents per query")
    return p


def run(args):
    from gtr_keras.beir.evaluation import median_length_analysis, read_trec_run
    from gtr_keras.beir.readers import (
        evaluated_queries,
        load_corpus,
        load_qrels,
        qrels_file,
    )

    qrels = load_qrels(args.dataset, args.split)
    evaluated_queries(qrels, qrels_file(args.dataset, args.split))
    result = median_length_analysis(read_trec_run(args.run), qrels, load_corpus(args.dataset), k=args.k)
    print(json.dumps({"run": args.run, "dataset": args.dataset, **result}, indent=2))
