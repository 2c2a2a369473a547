"""Size and speed of the string-in encoder exports: `gtr-keras export` (SavedModel), `--format litert`
(LiteRT with TF Text's custom ops) and Keras' `GTRTextEmbedder.export` (tf_saved_model).

Exports one model in the three formats, then embeds the same texts with each (batches of --batch, the
document signature, in turns; medians of --repeats) and compares every embedding with the SavedModel's.
Results go to the "## Export formats" section of benchmarks/RESULTS.md.

    PYTHONPATH=. python benchmarks/export_formats.py --data ../shared/data [--model gtr_small_distilled_en]
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import gtr_keras
from gtr_keras.beir import load_corpus
from gtr_keras.exports.litert import export_litert, load_litert
from gtr_keras.exports.savedmodel.export import export_encoder
from gtr_keras.exports.savedmodel.loader import load_export

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import machine, publish, rerun_command, time_interleaved  # noqa: E402

SECTION = "## Export formats"


def size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="folder of BEIR collections (../shared/data)")
    parser.add_argument("--model", default="gtr_small_distilled_en")
    parser.add_argument("--texts", type=int, default=256, help="SciFact abstracts embedded per run")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts = load_corpus(os.path.join(args.data, "scifact")).joined()[: args.texts]
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    encoder = gtr_keras.load(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        saved_model_dir = export_encoder(encoder, os.path.join(scratch, "savedmodel"))
        seconds = {"SavedModel": time.perf_counter() - started}
        started = time.perf_counter()
        litert_file = export_litert(encoder, os.path.join(scratch, "litert"))
        seconds["LiteRT"] = time.perf_counter() - started
        started = time.perf_counter()
        encoder.model.export(os.path.join(scratch, "keras"), verbose=False)
        seconds["Keras export"] = time.perf_counter() - started
        sizes = {
            "SavedModel": size(saved_model_dir),
            "LiteRT": size(litert_file),
            "Keras export": size(os.path.join(scratch, "keras")),
        }
        loaded = {
            "SavedModel": load_export(saved_model_dir),
            "Keras export": tf.saved_model.load(os.path.join(scratch, "keras")),
        }
        saved_model = loaded["SavedModel"].signatures["encode_documents"]
        interpreter = load_litert(litert_file)
        litert = interpreter.get_signature_runner("encode_documents")
        keras_export = loaded["Keras export"].signatures["encode_documents"]  # (the loaded objects kept: needed)
        runs = {
            "SavedModel": lambda batch: saved_model(texts=tf.constant(batch))["embeddings"].numpy(),
            "LiteRT": lambda batch: litert(texts=np.array(batch, dtype=object))["embeddings"],
            "Keras export": lambda batch: keras_export(texts=tf.constant(batch))["embeddings"].numpy(),
        }
        reference = np.concatenate([runs["SavedModel"](batch) for batch in batches])
        differences = {
            name: float(np.abs(np.concatenate([run(b) for b in batches]) - reference).max())
            for name, run in runs.items()
        }
        timed = time_interleaved(
            {name: lambda run=run: [run(b) for b in batches] for name, run in runs.items()}, args.repeats
        )
    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}: `{rerun_command(__file__)}`",
        f"(model {args.model}, document budget {encoder.document_length} tokens, {len(texts)} SciFact abstracts in "
        f"batches of {args.batch}, the formats in turns, medians of {args.repeats})",
        "",
        "| format | size MB | export s | documents/s | max abs difference to the SavedModel |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in runs:
        rate = len(texts) / float(np.median(timed[name]))
        lines.append(
            f"| {name} | {sizes[name] / 1e6:.1f} | {seconds[name]:.1f} | {rate:.1f} | {differences[name]:.1e} |"
        )
    publish("\n".join(lines), os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), SECTION)


if __name__ == "__main__":
    main()
