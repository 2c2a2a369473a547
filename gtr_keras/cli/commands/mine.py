"""`gtr-keras mine`: hard negatives from the model's own retrieval, for `train`."""

import json
import sys

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    at_least_one,
    at_least_zero,
    input_dir,
    output_file,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_encoder_arguments,
    add_progress,
)
from gtr_keras.utils.files import atomic_file
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `mine` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "mine",
        help="hard negatives from the model's own retrieval (for `train`)",
        description="hard negatives from the model's own retrieval (for `train`)",
        parents=parents,
    )
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--dataset", required=True, type=input_dir, help="BEIR directory")
    p.add_argument("--split", default="train", help="qrels split")
    p.add_argument("--depth", type=at_least_one, default=100, help="documents retrieved per query")
    p.add_argument("--skip-top", type=at_least_zero, default=0, help="non-positive documents skipped at the top")
    p.add_argument("--per-query", type=at_least_one, default=10, help="negatives kept per query")
    add_batch_size(p)
    add_progress(p)
    p.add_argument(
        "--out", required=True, type=output_file, help='negatives JSONL ({"query_id", "negative_ids"} a line)'
    )
    add_encoder_arguments(p)
    return p


@locks_output("args.out")
def run(args):
    from gtr_keras.beir.dataset import load_dataset
    from gtr_keras.retrieval.runs import mine_negatives

    corpus, queries, qrels, report = load_dataset(args.dataset, args.split)
    if not report.ok:
        print(f"warning: {report}", file=sys.stderr)
    mined = mine_negatives(
        handler_inputs.encoder(args),
        corpus,
        queries,
        qrels,
        args.depth,
        args.skip_top,
        args.per_query,
        args.batch_size,
        progress=args.progress,
    )
    with atomic_file(args.out) as f:
        for qid, negative_ids in mined.items():
            f.write((json.dumps({"query_id": qid, "negative_ids": negative_ids}) + "\n").encode("utf-8"))
    print(f"wrote {args.out}: {sum(map(len, mined.values()))} negatives for {len(mined)} queries")
