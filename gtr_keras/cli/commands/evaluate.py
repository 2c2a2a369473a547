"""`gtr-keras evaluate`: a retriever scored on a BEIR collection (NDCG@10, MRR@10, R@100, R@1000, MAP)."""

import json
import os
import sys

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_checks import check_rerank_flags, check_retriever_flags
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    input_dir,
    output_file,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_encoder_arguments,
    add_rerank_arguments,
    add_retriever_arguments,
)
from gtr_keras.utils.files import atomic_outputs
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `evaluate` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "evaluate",
        help="BEIR-style evaluation (NDCG@10, MRR@10, R@100, R@1000, MAP)",
        description="Retrieves for every judged query of the split and scores the run with pytrec_eval. As in BEIR, "
        "judged documents missing from the corpus count as misses.",
        parents=parents,
    )
    p.add_argument(
        "--dataset",
        required=True,
        type=input_dir,
        help="BEIR directory (corpus.jsonl[.gz], queries.jsonl, qrels/SPLIT.tsv)",
    )
    p.add_argument("--model", help=f"{MODEL_HELP} (required with --retriever gtr or hybrid; default: none)")
    p.add_argument("--split", default="test", help="qrels split")
    add_retriever_arguments(p, "the bm25s baseline")
    add_batch_size(p)
    p.add_argument("--run-out", type=output_file, help="also write the run as a TREC run file (default: none)")
    p.add_argument("--output-json", type=output_file, help="also write the metrics as JSON (default: none)")
    p.add_argument(
        "--keep-identical-ids",
        action="store_true",
        help="keep documents whose id equals the query id (BEIR drops them)",
    )
    add_encoder_arguments(p)
    add_rerank_arguments(
        p, "with --rerank: documents of each query's first-stage run reranked (the rest follow below; default: 100)"
    )
    return p


def check(args, parser):
    """The retriever's flags (`checks.check_retriever_flags`, `checks.check_rerank_flags`)."""
    check_retriever_flags(args, parser)
    check_rerank_flags(args, parser)


@locks_output("args.run_out")
@locks_output("args.output_json")
def run(args):
    from gtr_keras.beir.dataset import load_dataset
    from gtr_keras.beir.evaluation import (
        evaluate_run,
        format_table,
        write_trec_run,
    )
    from gtr_keras.beir.readers import evaluated_queries, qrels_file
    from gtr_keras.retrieval.evaluator import retrieval_run

    reranker = handler_inputs.reranker_source(args)
    corpus, queries, qrels, report = load_dataset(args.dataset, args.split)
    if not report.ok:
        print(f"warning: {report}", file=sys.stderr)
    evaluated = evaluated_queries(qrels, qrels_file(args.dataset, args.split))
    if len(evaluated) < len(qrels):
        print(
            f"warning: {len(qrels) - len(evaluated)} of {len(qrels)} judged queries have no document of grade 1 "
            "or more and are left out of the means, as in BEIR",
            file=sys.stderr,
        )
    settings, encoder, fusion = {}, None, None
    if args.retriever in ("gtr", "hybrid"):
        fusion = (
            handler_inputs.fusion(args) if args.retriever == "hybrid" else None
        )  # a bad record before the model loads
        encoder = handler_inputs.encoder(args)
        settings = {
            "precision": args.precision,
            "query_length": encoder.query_length,
            "document_length": encoder.document_length,
        }
        if fusion is not None:
            settings["fusion"] = fusion.get_config()
    run = retrieval_run(encoder, corpus, queries, args.retriever, fusion, args.batch_size, not args.keep_identical_ids)
    metrics = evaluate_run(qrels, run)
    name = os.path.basename(os.path.normpath(args.dataset))
    rows = [(f"{name} {args.split} {args.retriever}", metrics)]
    if reranker:
        from gtr_keras.retrieval.reranking import rerank_run

        depth = args.rerank_depth or 100
        run = rerank_run(handler_inputs.reranker(args, reranker), queries, run, corpus, depth, args.batch_size)
        settings["rerank"] = {"model": os.fspath(args.rerank), "depth": depth, "first_stage_metrics": metrics}
        metrics = evaluate_run(qrels, run)
        rows.append((f"{name} {args.split} {args.retriever} + rerank@{depth}", metrics))
    print(format_table(rows))
    outputs = {path: kind for path, kind in ((args.run_out, "run"), (args.output_json, "json")) if path}
    with atomic_outputs(*outputs) as staged:
        for path, staged_path in zip(outputs, staged):
            if outputs[path] == "run":
                write_trec_run(staged_path, run, tag=f"gtr-keras-{args.retriever}")
            else:
                result = {
                    "dataset": name,
                    "split": args.split,
                    "retriever": args.retriever,
                    **settings,
                    "metrics": metrics,
                    "num_queries": len(evaluated),
                    "num_judged_queries": len(qrels),
                }
                staged_path.write_text(json.dumps(result, indent=2), encoding="utf-8")
