"""Per-call latency of the exported searcher SavedModels vs the Python search path.

Builds a ScaNN index and an exact index over a corpus (default: the bundled Cranfield), exports
both searchers, loads each SavedModel once (load time includes rebuilding the ScaNN searcher from
its assets) and times calls at batch 1 and 32 against `Retriever.search` (Python: encode + search)
on the same queries. Results go to the "## Export" section of `benchmarks/RESULTS.md`.

    python benchmarks/export_latency.py [--model DIR] [--corpus BEIR_DIR] [--repeats 20]
"""

import argparse
import datetime
import os
import shlex
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from results import RESULTS, machine, record, time_interleaved  # noqa: E402

from gtr_keras import load  # noqa: E402
from gtr_keras.beir import BUNDLED_COLLECTION_DIR, load_corpus, load_queries  # noqa: E402
from gtr_keras.exports.savedmodel.export import export_searcher  # noqa: E402
from gtr_keras.exports.savedmodel.loader import load_export  # noqa: E402
from gtr_keras.models import BUNDLED_MODEL_DIR  # noqa: E402
from gtr_keras.retrieval.index_building import build_index  # noqa: E402
from gtr_keras.retrieval.retriever import Retriever  # noqa: E402

SECTION = "## Export"


def median_ms(fn, repeats):
    """Median milliseconds per call after one warm-up call (which traces and initialises)."""
    return 1000 * statistics.median(time_interleaved({"call": fn}, repeats)["call"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=BUNDLED_MODEL_DIR)
    parser.add_argument("--corpus", default=BUNDLED_COLLECTION_DIR)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    encoder = load(args.model)
    corpus = load_corpus(args.corpus)
    queries = list(load_queries(args.corpus).values())[:32]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, searcher in (("scann", "scann"), ("exact", "brute-force")):
            index_dir = os.path.join(tmp, kind)
            build_index(encoder, corpus, index_dir, kind=kind, progress=False)
            start = time.perf_counter()
            path = export_searcher(encoder, index_dir, os.path.join(tmp, f"export-{kind}"), searcher=searcher)
            export_s = time.perf_counter() - start
            start = time.perf_counter()
            serving = load_export(path).signatures["serving_default"]
            load_s = time.perf_counter() - start
            retriever = Retriever.load(index_dir, encoder)
            for batch in (1, 32):
                texts = queries[:batch]
                saved = median_ms(lambda: serving(queries=tf.constant(texts)), args.repeats)
                python = median_ms(lambda: retriever.search(texts, 10), args.repeats)
                rows.append(f"| {searcher} | {batch} | {saved:.1f} | {python:.1f} | {load_s:.2f} | {export_s:.1f} |")
    table = "\n".join(
        [
            "| searcher | batch | SavedModel ms/call | Python search ms/call | SavedModel load s | export s |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    print(table)
    if not args.no_record:
        command = "python benchmarks/" + " ".join(
            shlex.quote(a) for a in [os.path.basename(sys.argv[0]), *sys.argv[1:]]
        )
        record(
            RESULTS,
            SECTION,
            f"""### {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC

Command: `{command}`; model `{args.model}`, corpus `{args.corpus}` ({len(corpus)} documents), medians of
{args.repeats} calls after one warm-up, k=10. Machine: {machine()}, shared with other jobs
(load average {os.getloadavg()[0]:.1f} at the end). The ScaNN searcher is rebuilt from the SavedModel's
assets during the load (column "load s"), not in the calls.

{table}
""",
        )


if __name__ == "__main__":
    main()
