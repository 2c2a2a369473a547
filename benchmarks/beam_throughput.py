"""Documents/s of in-process encoding vs the Beam DirectRunner pipeline on one corpus.

Only shows the overhead of the Beam path on this machine; worker throughput on a
cluster must be measured there (see docs/large-corpora.md, "Throughput arithmetic").

    gtr-keras convert tests/fixtures/tiny-gtr-st /tmp/tiny
    python benchmarks/beam_throughput.py /tmp/tiny ../shared/data/scifact /tmp/scifact-beam
"""

import argparse
import shutil
import time

from gtr_keras import load
from gtr_keras.beir import load_corpus
from gtr_keras.retrieval.encoding.beam_pipeline import encode_corpus_with_beam, index_from_embedding_files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("corpus")
    parser.add_argument("scratch_dir")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    corpus = load_corpus(args.corpus)
    start = time.perf_counter()
    load(args.model).encode_documents(corpus.joined(), batch_size=args.batch_size, progress=False)
    in_process = time.perf_counter() - start
    shutil.rmtree(args.scratch_dir, ignore_errors=True)
    start = time.perf_counter()
    encode_corpus_with_beam(args.model, args.corpus, args.scratch_dir, batch_size=args.batch_size)
    beam = time.perf_counter() - start
    start = time.perf_counter()
    _, embeddings = index_from_embedding_files(args.scratch_dir)
    assemble = time.perf_counter() - start
    n = len(corpus)
    print(
        f"{n} docs: in-process {in_process:.1f}s ({n / in_process:.0f} docs/s), "
        f"DirectRunner {beam:.1f}s ({n / beam:.0f} docs/s), index_from_embedding_files {assemble:.2f}s, "
        f"{embeddings.shape}"
    )


if __name__ == "__main__":
    main()
