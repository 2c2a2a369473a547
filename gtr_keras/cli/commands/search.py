"""`gtr-keras search`: queries answered from an index (GTR, BM25 or both fused, filtered, reranked)."""

import json

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_checks import check_engine_index, check_rerank_flags, check_retriever_flags
from gtr_keras.cli.helpers.flag_types import (
    at_least_one,
    at_least_zero,
    index_or_target,
    input_file,
    search_param,
    text,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_passages,
    add_rerank_arguments,
    add_retriever_arguments,
)


def add_parser(subparsers, parents):
    """Adds `search` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "search",
        help="query an index",
        description="query an index",
        parents=parents,
    )
    p.add_argument("queries", nargs="+", type=text, help="query text(s); bytes that are not UTF-8 become U+FFFD")
    p.add_argument(
        "--index",
        required=True,
        type=index_or_target,
        action="append",
        help="index directory; repeat it to search shards as one index (merged top k; --retriever gtr); or an "
        "engine's target (qdrant:PATH, qdrant+http://HOST:PORT, milvus:PATH.db, ...) with --collection",
    )
    p.add_argument(
        "--collection", help="with an engine's target as --index: the collection `push` wrote (default: none)"
    )
    p.add_argument("--model", help="the model the index was built with (checked; required unless --retriever bm25)")
    add_retriever_arguments(p, "the index's BM25 side")
    p.add_argument(
        "-k", type=at_least_one, default=None, help="results per query (default: 10; with --rerank, --rerank-depth)"
    )
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="EXPR",
        help="search only the documents whose metadata match EXPR: 'FIELD = VALUE', '!=', 'FIELD in (A, B)', "
        "'<', '<=', '>', '>=' NUMBER; repeat it to AND clauses (docs/filters.md) (default: none)",
    )
    p.add_argument(
        "--ids-file",
        type=input_file,
        metavar="FILE",
        help="search only the documents whose ids are listed in FILE (one a line), with --filter or alone "
        "(default: none)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--snippet", type=at_least_zero, default=160, help="characters of text shown per hit")
    p.add_argument(
        "--search-param",
        type=search_param,
        action="append",
        metavar="NAME=VALUE",
        help="override a search setting of the index (the one `tune` recorded, or the build's), e.g. "
        "num_leaves_to_search=40, reorder_factor=50 (ScaNN) or rescore=100 (int8|binary); repeatable (default: none)",
    )
    add_passages(p, "the index's setting, checked")
    add_rerank_arguments(
        p, "with --rerank: the first stage's top N hits are reranked, and the best k of them shown (default: -k)"
    )
    return p


def check(args, parser):
    """The retriever's flags (`checks.check_retriever_flags`, `checks.check_rerank_flags`); several `--index`
    (shards) and `--search-param` go with `--retriever gtr`."""
    check_retriever_flags(args, parser)
    if args.retriever != "gtr" and len(args.index) > 1:
        parser.error(
            f"argument --index: --retriever {args.retriever} searches one index (several are shards of --retriever gtr)"
        )
    check_rerank_flags(args, parser)
    if args.retriever != "gtr" and args.search_param:
        parser.error(f"argument --search-param: sets the dense index's search, not {args.retriever}'s")
    check_engine_index(args, parser)
    if args.collection and (args.retriever != "gtr" or args.rerank or args.search_param):
        flag = "--search-param" if args.search_param else "--rerank" if args.rerank else "--retriever"
        parser.error(f"argument {flag}: not with an engine's collection (it answers GTR searches)")


def _search_filter(args):
    """The `Filter` of `--filter` and `--ids-file` (each clause parsed, the file read), or None."""
    from gtr_keras.filters.expressions import Filter
    from gtr_keras.storage.layout import read_id_file

    if not args.filter and not args.ids_file:
        return None
    return Filter(args.filter, read_id_file(args.ids_file)[0] if args.ids_file else None)


def run(args):
    from gtr_keras.retrieval.index import Index
    from gtr_keras.retrieval.passages import check_setting, passages_setting
    from gtr_keras.retrieval.retriever import search_results

    filter = _search_filter(args)  # a bad expression or ids file before the index and the model load
    reranker = handler_inputs.reranker_source(args)  # a model directory that holds no reranker, before any model loads
    fusion = handler_inputs.fusion(args) if args.retriever == "hybrid" else None  # a bad record before the model loads
    if args.collection:
        index = Index.open(args.index[0], args.model, collection=args.collection)
    else:
        index = Index.open(args.index, args.model)
    check_setting(getattr(index, "passages", None), passages_setting(args.passages), args.index[0])
    if args.search_param:
        index.set_search_settings(dict(args.search_param))
    depth = args.rerank_depth or args.k or 10
    k = args.k or (depth if reranker else 10)
    rerank = reranker and (lambda: handler_inputs.reranker(args, reranker))
    hits = index.search(args.queries, k, filter, args.retriever, fusion, rerank=rerank, rerank_depth=depth)
    if args.json:
        print(json.dumps(search_results(args.queries, hits), ensure_ascii=False, indent=2))
        return
    for query, row in zip(args.queries, hits):
        print(f"query: {query}")
        for rank, hit in enumerate(row, start=1):
            passage = hit.get("passage", {})  # a passages index's hit: the window that scored
            snippet = " ".join(hit.get("text", "")[passage.get("start") : passage.get("end")].split())
            snippet = snippet[: args.snippet] + ("..." if len(snippet) > args.snippet else "")
            print(f"{rank:3d}. [{hit['score']:.4f}] {hit['id']}  {hit.get('title', '')}")
            if snippet:
                print(f"       {snippet}")
