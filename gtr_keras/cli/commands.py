"""The handlers of the `gtr-keras` sub-commands, one function each (`gtr_keras.cli.main` parses and
dispatches).

Each is a thin shell over the library: the work happens in the module
responsible for it. Arguments arrive checked (paths, ranges, choices); errors
found later are `gtr_keras.errors.UserError`s, which end the command with exit
status 2 and one line.
"""

import argparse
import contextlib
import json
import os
import sys

import numpy as np

from gtr_keras.cli.arguments import PROG, is_npy
from gtr_keras.cli.checks import loopback
from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.cpu import bfloat16_note
from gtr_keras.utils.files import atomic_file, atomic_outputs
from gtr_keras.utils.locks import locks_output


def _encoder(args):
    """The `--model` encoder, with the `add_encoder_arguments` settings where the sub-command has them."""
    from gtr_keras.saving import load

    # float32 loads the model as saved; bfloat16 keeps the weights in bfloat16 too (the arithmetic of
    # "mixed_bfloat16" without casting every weight on every call).
    dtype = "bfloat16" if getattr(args, "precision", "float32") == "bfloat16" else None
    note = dtype and bfloat16_note()
    if note:
        print(f"{PROG} {args.command}: note: {note}", file=sys.stderr)
    return load(
        args.model,
        dtype=dtype,
        query_length=getattr(args, "query_length", None),
        document_length=getattr(args, "document_length", None),
    )


@locks_output("args.out_dir")
def convert(args):
    from gtr_keras.convert.sentence_transformers import SENTENCE_TRANSFORMERS_DIRECTORY
    from gtr_keras.models.model_files.model_directory import MODEL_DIRECTORIES
    from gtr_keras.models.reranker.reranker import Reranker
    from gtr_keras.saving import convert_checkpoint, load, save

    to_sentence_transformers = args.to == "sentence-transformers"
    files.check_replaceable(
        args.out_dir, [SENTENCE_TRANSFORMERS_DIRECTORY] if to_sentence_transformers else MODEL_DIRECTORIES
    )
    if to_sentence_transformers:
        embedder = load(args.source).model
        save(embedder, args.out_dir, format="sentence-transformers")
        print(
            f"wrote {args.out_dir} (sentence-transformers; queries there are truncated at "
            f"{embedder.document_length} tokens, not {embedder.query_length})"
        )
        return
    embedder = convert_checkpoint(args.source, query_length=args.query_length)
    save(embedder, args.out_dir)
    if isinstance(embedder, Reranker):
        backbone = embedder.backbone
        print(
            f"wrote {args.out_dir}: a reranker, {type(backbone).__name__} of {backbone.num_layers} layers, "
            f"d_model {backbone.hidden_dim}, {embedder.count_params():,} parameters, pair length "
            f"{embedder.preprocessor.sequence_length}, scores through a {embedder.activation}"
        )
        return
    print(
        f"wrote {args.out_dir}: {embedder.backbone.num_layers} layers, d_model {embedder.backbone.hidden_dim}, "
        f"D {embedder.embedding_dim}, {embedder.count_params():,} parameters, "
        f"query length {embedder.query_length}, document length {embedder.document_length}"
    )


@locks_output("args.output")
def encode(args):
    from gtr_keras.beir.text_inputs import read_texts
    from gtr_keras.index.embedding_files import ids_path_for, model_path_for
    from gtr_keras.retrieval.index_building import index_metadata

    ids_path, record_path = ids_path_for(args.output), model_path_for(args.output)
    for path in (ids_path, record_path):
        if files.isdir(path):
            raise DataError(f"{path}: is a directory, expected a file name (written beside --output)")
        files.remove_staging(path)  # the lock of --output covers the files beside it
    ids, texts = read_texts(args.input)
    kind = args.kind or ("query" if os.path.basename(args.input).startswith("queries.") else "document")
    if any("\n" in i or "\r" in i for i in ids):
        raise DataError(f"{args.input}: ids must not contain line breaks (needed for {ids_path})")
    encoder = _encoder(args)
    embeddings = encoder.encode(texts, kind=kind, batch_size=args.batch_size, progress=args.progress)
    record = {"model": index_metadata(encoder, args.model), "kind": kind, "num_rows": len(ids)}
    with atomic_outputs(args.output, ids_path, record_path) as (npy_path, staged_ids_path, staged_record_path):
        with open(npy_path, "wb") as f:
            np.save(f, embeddings)
        staged_ids_path.write_bytes("".join(f"{i}\n" for i in ids).encode("utf-8"))
        staged_record_path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    print(f"wrote {args.output} {embeddings.shape} ({kind} encoding, {args.precision}), {ids_path} and {record_path}")


def index(args):
    if args.update:  # `index --out INDEX --update ...`, the name of earlier releases for `update INDEX ...`
        args.index = args.out
        return update(args)
    return _build_index(args)


@locks_output("args.out")  # before the corpus and the model load: a second run is refused at once
def _build_index(args):
    from gtr_keras.lexical.bm25_side import has_bm25_side
    from gtr_keras.retrieval.index import GLOB_CHARACTERS, Index

    if (
        args.corpus
        and not args.runner
        and any(c in args.corpus for c in GLOB_CHARACTERS)
        and not files.exists(args.corpus)
    ):
        raise DataError(f"{args.corpus}: a glob of corpus files needs --runner (e.g. --runner DirectRunner)")
    index = Index.build(
        args.out,
        args.corpus,
        args.model,
        embeddings=args.embeddings,
        documents=args.bm25_corpus,
        exact=args.exact,
        vectors=args.vectors,
        rescore=args.rescore,
        bm25=args.bm25,
        batch_size=args.batch_size,
        shard_size=args.shard_size,
        progress=args.progress,
        runner=args.runner,
        beam_options=args.beam_option or (),
        large_model=args.large_model,
        shard_rows=args.shard_rows,
    )
    bm25 = "and a BM25 side" if has_bm25_side(args.out) else "no BM25 side"
    vectors = f" over {args.vectors} vectors" if args.vectors != "float32" else ""
    print(f"wrote {args.out}: {len(index)} documents, {index.kind} search{vectors}, {bm25}")


@locks_output("args.index")  # before the corpus and the model load: a second run is refused at once
def update(args):
    """`update INDEX`: the shards opened here, the corpus read and the rest of the checks (the index's model,
    the ids to delete, the metadata types) in `update_index`, all before the model loads."""
    from gtr_keras.retrieval.index_updates import update_index

    shards = None
    if args.embeddings:
        from gtr_keras.index.embedding_files import EmbeddingFiles

        shards = EmbeddingFiles.open(args.embeddings)
    manifest = update_index(
        args.index,
        embeddings=shards,
        corpus=args.corpus,
        documents=args.bm25_corpus,
        encoder=(lambda: _encoder(args)) if args.model else None,
        model_dir=args.model,
        delete=args.delete,
        missing_ok=args.missing_ok,
        compact=True if args.compact else "auto",
        batch_size=args.batch_size,
        progress=args.progress,
    )
    live = sum(s["num_rows"] - s["num_deleted"] for s in manifest["segments"])
    segments, generation = len(manifest["segments"]), manifest["generation"]
    print(f"updated {args.index}: {live} documents in {segments} segments, generation {generation}")


def _fusion(args):
    """The `Fusion` of `--fusion` and `--gtr-weight` over the `--model`'s own (`fusion.model_fusion`)."""
    from gtr_keras.lexical.fusion import model_fusion

    return model_fusion(args.model, args.fusion, args.gtr_weight)


def _search_filter(args):
    """The `Filter` of `--filter` and `--ids-file` (each clause parsed, the file read), or None."""
    from gtr_keras.filters.expressions import Filter
    from gtr_keras.retrieval.index_updates import read_id_file

    if not args.filter and not args.ids_file:
        return None
    return Filter(args.filter, read_id_file(args.ids_file)[0] if args.ids_file else None)


def _reranker_source(args):
    """The `--rerank` reranker's resolved source (None without one), checked to hold a reranker before any
    model loads (`args.rerank`: a namespace of that alone also serves `export --reranker`)."""
    if not args.rerank:
        return None
    from gtr_keras.models.model_files.model_source import (
        CROSS_ENCODER,
        HF_PREFIX,
        RERANKER_FORMATS,
        resolve_model_source,
    )

    source = resolve_model_source(args.rerank, CROSS_ENCODER if args.rerank.startswith(HF_PREFIX) else None)
    if source.format not in RERANKER_FORMATS:
        raise UserError(
            f"--rerank: {args.rerank} is not a reranker (a {source.format} model directory); give a cross-encoder "
            "checkpoint or the model directory `gtr-keras convert` wrote from one"
        )
    return source


def _reranker(args, source):
    """The `--rerank` reranker's scorer, in the command's `--precision`."""
    from gtr_keras.saving import load

    return load(source, dtype="bfloat16" if getattr(args, "precision", "float32") == "bfloat16" else None)


def search(args):
    from gtr_keras.retrieval.index import Index
    from gtr_keras.retrieval.retriever import search_results

    filter = _search_filter(args)  # a bad expression or ids file before the index and the model load
    reranker = _reranker_source(args)  # a model directory that holds no reranker, before any model loads
    fusion = _fusion(args) if args.retriever == "hybrid" else None  # a bad record before the model loads
    index = Index.open(args.index, args.model)
    if args.search_param:
        index.set_search_params(dict(args.search_param))
    depth = args.rerank_depth or args.k or 10
    k = args.k or (depth if reranker else 10)
    rerank = reranker and (lambda: _reranker(args, reranker))
    hits = index.search(args.queries, k, filter, args.retriever, fusion, rerank=rerank, rerank_depth=depth)
    if args.json:
        print(json.dumps(search_results(args.queries, hits), ensure_ascii=False, indent=2))
        return
    for query, row in zip(args.queries, hits):
        print(f"query: {query}")
        for rank, hit in enumerate(row, start=1):
            snippet = " ".join(hit.get("text", "").split())
            snippet = snippet[: args.snippet] + ("..." if len(snippet) > args.snippet else "")
            print(f"{rank:3d}. [{hit['score']:.4f}] {hit['id']}  {hit.get('title', '')}")
            if snippet:
                print(f"       {snippet}")


@locks_output("args.run_out")
@locks_output("args.output_json")
def evaluate(args):
    from gtr_keras.beir.evaluation import (
        evaluate_run,
        format_table,
        write_trec_run,
    )
    from gtr_keras.beir.readers import evaluated_queries, qrels_file
    from gtr_keras.retrieval.evaluator import retrieval_run
    from gtr_keras.retrieval.runs import load_dataset

    reranker = _reranker_source(args)
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
        fusion = _fusion(args) if args.retriever == "hybrid" else None  # a bad record before the model loads
        encoder = _encoder(args)
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
        run = rerank_run(_reranker(args, reranker), queries, run, corpus, depth, args.batch_size)
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


def analyze_lengths(args):
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


@locks_output("args.out")
def mine(args):
    from gtr_keras.retrieval.runs import load_dataset, mine_negatives

    corpus, queries, qrels, report = load_dataset(args.dataset, args.split)
    if not report.ok:
        print(f"warning: {report}", file=sys.stderr)
    mined = mine_negatives(
        _encoder(args),
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


def _any_encoder(args):
    """The `--model` encoder of a model directory (`_encoder`) or of any export `gtr_keras.load` takes."""
    from gtr_keras.exports.export_formats import format_of_directory
    from gtr_keras.loading import load

    if format_of_directory(args.model) is None:
        return _encoder(args)
    dtype = "bfloat16" if args.precision == "bfloat16" else None  # refused for an export, in one line
    return load(args.model, dtype=dtype, query_length=args.query_length, document_length=args.document_length)


def serve_socket(args):
    """`serve`'s listening sockets (`--port`'s, `args.socket`, and `--metrics-port`'s, `args.metrics_socket`)
    and its keys (`args.keys`), before the model is resolved or TensorFlow imported: a port in use or a
    malformed keys file is exit 2 at once. The command holds the sockets until it ends."""
    from gtr_keras.server.gateway.keys import ApiKeys
    from gtr_keras.server.serve import listening_socket

    keyed = args.api_keys or args.api_keys_file
    args.keys = ApiKeys(args.api_keys or (), args.api_keys_file) if keyed else None
    if not keyed and not loopback(args.host):  # --allow-unauthenticated: said once, at start
        print(
            f"{PROG} serve: warning: serving {args.host} without a key (--allow-unauthenticated): anyone who "
            "reaches the port can use it",
            file=sys.stderr,
            flush=True,
        )
    held = contextlib.ExitStack()
    args.socket = held.enter_context(listening_socket(args.host, args.port))
    args.metrics_socket = None
    if args.metrics_port is not None:
        try:
            args.metrics_socket = held.enter_context(listening_socket(args.host, args.metrics_port))
        except UserError as error:
            held.close()
            raise UserError(str(error).replace("--port", "--metrics-port")) from None
    return held


# What a command does before its model is resolved (`main`): its cheap refusals, and what it holds till the end.
BEFORE_THE_MODEL = {"serve": serve_socket}


def serve(args):
    from gtr_keras.lexical.fusion import model_fusion
    from gtr_keras.models.gtr.encoder import Encoder
    from gtr_keras.server.gateway.request_log import AccessLog
    from gtr_keras.server.serve import serve as serve_http

    fusion = model_fusion(args.model) if args.index else None  # a bad record before the model loads
    reranker = _serve_reranker_source(args)  # a model directory that holds no reranker, before any model loads
    limits = {name: getattr(args, name) for name in ("max_inputs", "max_body_bytes", "max_queries", "max_k")}
    limits["body_timeout"] = args.body_timeout
    encoder = _any_encoder(args)
    if args.index and not isinstance(encoder, Encoder):
        raise UserError(
            f"--index: {args.model} is an export, which an index cannot check as the model it was built "
            "with; serve the index with the model directory (exports serve /v1/embeddings)"
        )
    if args.max_batch_tokens is not None and args.max_batch_tokens < encoder.document_length:
        raise UserError(
            f"--max-batch-tokens: {args.max_batch_tokens} is less than the model's document budget "
            f"({encoder.document_length} tokens): a text of that length would fit no batch"
        )
    scorer = reranker and _reranker(args, reranker)
    if scorer and args.max_batch_tokens is not None and args.max_batch_tokens < scorer.sequence_length:
        raise UserError(
            f"--max-batch-tokens: {args.max_batch_tokens} is less than the reranker's pair budget "
            f"({scorer.sequence_length} tokens): a pair of that length would fit no batch"
        )
    logged = args.access_log or args.log_format == "json"
    serve_http(
        encoder,
        args.served_model_name or os.path.basename(str(args.model).rstrip("/")),
        args.socket,
        index_dir=args.index,
        model_source=args.model,
        fusion=fusion,
        batch_size=args.batch_size,
        max_wait=args.max_wait_ms / 1000,
        max_queue=args.max_queue,
        timeout=args.request_timeout,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
        limits=limits,
        access_log=AccessLog(args.log_format) if logged else None,
        header_timeout=args.header_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        keys=args.keys,
        tracing=_tracing(args.otlp_endpoint),
        metrics_sock=args.metrics_socket,
        max_batch_tokens=args.max_batch_tokens,
        reranker=scorer,
        reranker_name=scorer and os.path.basename(args.reranker.rstrip("/")),
    )


def _serve_reranker_source(args):
    """`serve --reranker`'s resolved source (`_reranker_source`), or None."""
    try:
        return _reranker_source(argparse.Namespace(rerank=args.reranker))
    except UserError as error:
        raise UserError(str(error).replace("--rerank:", "--reranker:", 1)) from None


def _tracing(endpoint):
    """The `Tracing` exporting to `--otlp-endpoint`, or None."""
    if endpoint is None:
        return None
    from gtr_keras.server.gateway.tracing import Tracing, otlp_provider

    return Tracing(otlp_provider(endpoint))


def demo(args):
    from gtr_keras.cli.demo import DEMO_DATASET, DEMO_MODEL, run_demo

    run_demo(args.out, args.model or DEMO_MODEL, args.dataset or DEMO_DATASET)


@locks_output("args.index")  # an update of the index waits, and a second tune
def tune(args):
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
    from gtr_keras.tuning.tuner import check_queries, check_request

    if not args.queries:
        return None
    if is_npy(args.queries):
        from gtr_keras.index.layout import read_description
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
    encoder = _encoder(args)
    Retriever.check_model(args.index, encoder)
    return encoder.encode_queries(texts, 64)


@locks_output("args.out")  # before the model loads
def export(args):
    from gtr_keras.exports.export_formats import EXPORT_CONFIG_FILE, FORMATS
    from gtr_keras.exports.exporter import export as export_model

    if args.reranker:
        reranker = _reranker_source(argparse.Namespace(rerank=args.reranker))  # one line for a model of no reranker
        written = export_model(reranker, args.out, args.format, version=args.version)
    else:
        searcher = {"searcher": args.searcher, "k": args.k} if "k" in FORMATS[args.format].options else {}
        written = export_model(
            lambda: _encoder(args),
            args.out,
            args.format,
            index=args.index or None,
            version=args.version,
            search_params=dict(args.search_param or []),
            quantize=args.quantize,
            allow_large_float32=args.allow_large_float32,
            **searcher,
        )
    for path in written:
        print(f"wrote {path}")
    if EXPORT_CONFIG_FILE in FORMATS[args.format].marks and not args.reranker:
        quantized = f", {args.quantize}" if args.quantize else ""
        spiece = os.path.join(args.out, "spiece.model")
        print(f"({args.format}{quantized}; token ids and mask in) with {spiece} and {EXPORT_CONFIG_FILE}")


def config_from_args(args, config_class=None):
    """The config of parsed `train` (or `distill`) arguments: `--config` with the flags on top.

    `args.setting_keys` names the settings that the parser has flags for (`train_arguments.add_train_arguments`).
    """
    from gtr_keras.training.config import TrainConfig, load_config

    overrides = {key: getattr(args, key) for key in args.setting_keys if getattr(args, key, None) is not None}
    return load_config(args.config, overrides, config_class or TrainConfig)


def _check_run_outputs(config):
    """Refuses, before the run starts, an output directory whose `model` or `best_model` would replace a
    directory of something else."""
    from gtr_keras.models.model_files.model_directory import MODEL_DIRECTORIES
    from gtr_keras.training.callbacks import BEST_MODEL, BEST_MODEL_DIRECTORY

    files.check_replaceable(os.path.join(config.output_dir, "model"), MODEL_DIRECTORIES)
    files.check_replaceable(os.path.join(config.output_dir, BEST_MODEL), [BEST_MODEL_DIRECTORY])


def train(args):
    if args.reranker:
        from gtr_keras.training.reranker_training import RerankerTrainConfig, train_reranker

        args.init = args.reranker
        config = config_from_args(args, RerankerTrainConfig)
        _check_run_outputs(config)
        train_reranker(config)
        _say_where(config, "reranker trained")
        return
    from gtr_keras.training.loop import train as run_training

    config = config_from_args(args)
    _check_run_outputs(config)
    run_training(config)
    _say_where(config, "trained")


def distill(args):
    from gtr_keras.distillation.distillation_config import DistillConfig
    from gtr_keras.distillation.distillation_loop import distill as run_distillation
    from gtr_keras.distillation.teachers import check_teacher_source
    from gtr_keras.models.gtr.presets import PRESETS
    from gtr_keras.models.model_files.model_source import resolve_model_source

    config = config_from_args(args, DistillConfig)
    _check_run_outputs(config)
    check_teacher_source(config.teacher)
    if config.init not in PRESETS:
        resolve_model_source(config.init, read_format=False)
    run_distillation(config)
    _say_where(config, "distilled")


def _say_where(config, what):
    from gtr_keras.training.distributed import Cluster

    path = os.path.join(config.output_dir, "model")
    if config.strategy == "multi-worker" and not Cluster.from_environment().is_chief:
        print(f"{what} with the chief, which wrote the model to {path}")
    else:
        print(f"{what} model written to {path}")


def saved_model_cli(argv):
    """TensorFlow's saved_model_cli on `argv`, with the TF Text and ScaNN ops registered; returns its status.

    `--help` (absl would exit 1 and show no sub-command) prints the tool's help and its flags.
    """
    import scann  # noqa: F401
    import tensorflow_text  # noqa: F401
    from absl import flags
    from tensorflow.python.tools import saved_model_cli as tf_saved_model_cli

    prog = "gtr-keras saved-model-cli"
    if "-h" in argv or "--help" in argv:
        parser = tf_saved_model_cli.create_parser()
        parser.prog = prog
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        command = commands.get(argv[0]) if argv else None
        if command:
            command.prog = f"{prog} {argv[0]}"
        (command or parser).print_help()
        print(f"\nflags:\n{flags.FLAGS.module_help(tf_saved_model_cli.__name__)}")
        return 0
    sys.argv = [prog, *argv]
    try:
        tf_saved_model_cli.main()
    except SystemExit as exit_:
        return exit_.code or 0
    return 0


def check(args):
    """`check PATH [--all]`: a directory verified (`integrity.directory_checker`); exit 2 at a problem."""
    from gtr_keras.integrity.directory_checker import check_directory

    report = check_directory(args.path)
    if report.ok:
        print(report.summary())
        return
    if args.all:
        for problem in report.problems[:-1]:
            print(f"{PROG} check: error: {problem}", file=sys.stderr)
    raise DataError(report.problems[-1] if args.all else report.problems[0])
