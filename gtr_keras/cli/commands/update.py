"""`gtr-keras update`: documents of an index added, replaced or deleted in place (docs/live-indexes.md)."""

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_checks import check_update_sources
from gtr_keras.cli.helpers.flag_types import (
    index_directory,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_dimensions,
    add_passages,
    add_progress,
    add_update_arguments,
)
from gtr_keras.utils import files
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `update` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "update",
        help="add, replace or delete documents of an index in place (docs/live-indexes.md)",
        description="Documents of --corpus (encoded with --model, the index's) or of --embeddings whose id is in "
        "the index replace it, the others are added; --delete deletes ids; --compact rewrites the index as one segment "
        "(also done past the thresholds of docs/live-indexes.md). Every input is checked before the model "
        "loads; the update is committed whole or not at all, and readers keep the version they loaded.",
        parents=parents,
    )
    p.add_argument("index", metavar="INDEX", type=index_directory, help="required: the index directory to update")
    add_update_arguments(p)
    add_batch_size(p, "documents")
    add_progress(p)
    add_dimensions(p, "--corpus's vectors (default: the index's; others are refused)")
    add_passages(p, "the index's setting, checked (a passages index cuts --corpus into its windows without it)")
    return p


def check(args, parser):
    """`update`'s sources (`checks.check_update_sources`); `--dimensions` cuts what `--corpus` encodes."""
    check_update_sources(args, parser)
    if args.dimensions is not None and args.embeddings is not None:
        parser.error("argument --dimensions: an update takes embeddings encoded with the index's dimensions")


@locks_output("args.index")  # before the corpus and the model load: a second run is refused at once
def run(args):
    """`update INDEX`: the embedding files opened here, the corpus read and the rest of the checks (the index's model,
    the ids to delete, the metadata types) in `update_index`, all before the model loads."""
    from gtr_keras.retrieval.index import Index
    from gtr_keras.retrieval.index_updates import update_index
    from gtr_keras.storage.layout import read_model_record

    encoder = (lambda: handler_inputs.encoder(args)) if args.model else None
    delete = files.FilePath(args.delete) if args.delete else None
    common = {"missing_ok": args.missing_ok, "batch_size": args.batch_size, "progress": args.progress}
    recorded = read_model_record(args.index)  # once: `update_index` takes it
    if args.passages is not None or recorded.get("passages"):  # docs/long-documents.md
        with Index.open(args.index, encoder) as index:
            flags = {"embeddings": args.embeddings, "compact": args.compact, "passages": args.passages}
            change = index.update(args.corpus, delete, **flags, **common)
        print(f"updated {args.index}: {change.documents} documents, generation {change.generation}")
        return
    embedding_files = None
    if args.embeddings:
        from gtr_keras.storage.embedding_files import EmbeddingFiles

        embedding_files = EmbeddingFiles.open(args.embeddings)
    change = update_index(
        args.index,
        embeddings=embedding_files,
        corpus=args.corpus,
        documents=args.bm25_corpus,
        encoder=encoder,
        model_dir=args.model,
        delete=delete,
        compact=True if args.compact else "auto",
        recorded=recorded,
        **common,
    )
    print(
        f"updated {args.index}: {change.documents} documents in {change.segments} segments, "
        f"generation {change.generation}"
    )
