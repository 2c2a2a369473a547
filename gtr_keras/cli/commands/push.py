"""`gtr-keras push`: an index's live documents sent to a search engine's collection, only what changed since the
last push there (docs/past-one-machine.md)."""

from gtr_keras.cli.helpers.flag_types import engine_target, index_directory, seconds


def add_parser(subparsers, parents):
    """Adds `push` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "push",
        help="push an index to Qdrant, Milvus or Vertex AI Vector Search (docs/past-one-machine.md)",
        description="Sends the live documents of --index (id, float32 vector, title, text, metadata) to a "
        "collection of --to, and after an update only what changed since the last push there (upserts and "
        "deletions, recorded in the index); a push stopped anywhere converges when run again. A collection of "
        "another dimension or model is refused unless --recreate. Prints one line: what was sent.",
        parents=parents,
    )
    p.add_argument("--index", required=True, type=index_directory, help="required: the index directory to push")
    p.add_argument(
        "--to",
        required=True,
        type=engine_target,
        metavar="TARGET",
        help="required: qdrant:PATH (embedded), qdrant+http://HOST:PORT (QDRANT_API_KEY), milvus:PATH.db (Milvus "
        "Lite), milvus+http://HOST:PORT (MILVUS_TOKEN) or vertex-ai:DIR (batch-update folders, local or gs://)",
    )
    p.add_argument("--collection", help="the collection's name (default: the index directory's name)")
    p.add_argument("--recreate", action="store_true", help="replace a collection of another dimension or model")
    p.add_argument(
        "--timeout", type=seconds(), default=10.0, help="seconds a request to the engine may wait (an unreachable host)"
    )
    return p


def run(args):
    """`push --index I --to TARGET`: the target's extra, the host and the collection checked before any write."""
    from gtr_keras.engines.push import push

    print(push(args.index, args.to, args.collection, args.recreate, timeout=args.timeout))
