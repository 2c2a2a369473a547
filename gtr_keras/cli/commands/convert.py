"""`gtr-keras convert`: a sentence-transformers GTR or cross-encoder checkpoint to a model directory, or a model
directory to the sentence-transformers layout."""

from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    output_dir,
    token_budget,
)
from gtr_keras.utils import files
from gtr_keras.utils.locks import locks_output


def add_parser(subparsers, parents):
    """Adds `convert` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "convert",
        help="import a sentence-transformers GTR or cross-encoder checkpoint, or export a model to one",
        description="Reads a sentence-transformers GTR checkpoint (T5 encoder, mean pooling, dense projection) "
        "and writes a gtr-keras model directory (a keras-hub preset); a cross-encoder checkpoint (config.json "
        "naming BertForSequenceClassification or XLMRobertaForSequenceClassification) is written as a reranker's "
        "model directory (docs/reranking.md); with --to sentence-transformers, reads a model directory and writes "
        "the sentence-transformers layout.",
        parents=parents,
    )
    p.add_argument(
        "source",
        help="checkpoint directory or Hugging Face repo id, e.g. "
        "sentence-transformers/gtr-t5-base; with --to sentence-transformers, " + MODEL_HELP,
    )
    p.add_argument(
        "out_dir", type=output_dir, help="directory to write (replaces only an empty one or one of the kind written)"
    )
    p.add_argument(
        "--to",
        choices=["gtr-keras", "sentence-transformers"],
        default="gtr-keras",
        help="what to write: a gtr-keras model directory, or the sentence-transformers layout "
        "(SentenceTransformer(OUT_DIR) loads it)",
    )
    p.add_argument("--query-length", type=token_budget, default=64, help="query token budget, EOS included")
    return p


@locks_output("args.out_dir")
def run(args):
    from gtr_keras.convert.sentence_transformers import SENTENCE_TRANSFORMERS_DIRECTORY
    from gtr_keras.models.model_files.model_directory import MODEL_DIRECTORIES
    from gtr_keras.models.reranker.reranker import Reranker
    from gtr_keras.saving import convert_checkpoint, load_model, save

    to_sentence_transformers = args.to == "sentence-transformers"
    files.check_replaceable(
        args.out_dir, [SENTENCE_TRANSFORMERS_DIRECTORY] if to_sentence_transformers else MODEL_DIRECTORIES
    )
    if to_sentence_transformers:
        embedder = load_model(args.source).model
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
