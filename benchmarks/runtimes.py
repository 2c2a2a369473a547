"""GTR on each CPU runtime, side by side: documents/s and closeness to gtr-keras' TensorFlow float32.

One randomly initialised GTR-Base-shaped model (`presets.PRESETS["gtr-base"]`, the bundled model's
SentencePiece vocabulary) is written as a gtr-keras model directory, exported by gtr-keras to ONNX (float32
and dynamic int8) and OpenVINO, and written in sentence-transformers layout by gtr-keras' own
`save(..., format="sentence-transformers")`, so every runtime holds the same weights. Measured on the same
SciFact abstracts at a 512-token budget, in one run whose rounds alternate the runtimes (the median of the
rounds is reported):

- gtr-keras: TensorFlow float32 and bfloat16 (`gtr_keras.load`), LiteRT (`export --format litert` in TFLite's
  interpreter, one thread a core, unsorted batches), ONNX Runtime float32 and int8 and OpenVINO float32 and
  bfloat16 (`RuntimeEncoder` on `gtr-keras export --format onnx|openvino`);
- sentence-transformers with `backend="torch"`, `"onnx"` and `"openvino"`, run by `--peer-python` (an
  environment with the `benchmarks` extra: torch, sentence-transformers, optimum-onnx, optimum-intel) in
  a process of its own that takes its turn in each round; a backend that fails is recorded with its error.

Each row gives the minimum cosine of its embeddings to TensorFlow float32's. The int8 export's NDCG@10 on
the full SciFact is measured with the bundled trained model (`gtr_small_distilled_en`; a random model has no
meaningful NDCG), beside its float32 ONNX export's. The run also counts the texts of the
five collections on which onnxruntime-extensions' and openvino-tokenizers' SentencePiece ops give other ids
than the `sentencepiece` library (why the ONNX and OpenVINO exports take token ids).

Usage (from the repository root):

    PYTHONPATH=. python benchmarks/runtimes.py --data ../shared/data --peer-python /path/to/venv/bin/python
    PYTHONPATH=. python benchmarks/runtimes.py --data ../shared/data --smoke --no-record   # GTR-Small, minutes
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import RESULTS, machine, publish, rerun_command  # noqa: E402

SECTION = "## Runtimes"
TF_FLOAT32 = "gtr-keras TensorFlow fp32"
PEER_BACKENDS = ("torch", "onnx", "openvino")
OUR_PACKAGES = ("tensorflow", "tensorflow-text", "onnxruntime", "tf2onnx", "openvino")
PEER_PACKAGES = ("torch", "sentence-transformers", "transformers", "optimum-onnx", "optimum-intel", "openvino")


def versions(packages):
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return ", ".join(f"{package} {number}" for package, number in found.items())


FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
COLLECTIONS = ("cranfield", "cisi", "scifact", "nfcorpus", "msmarco-dl19-subset")
BUNDLED = "gtr_small_distilled_en"
MARK = "RESULT "  # the peer's lines of results (its libraries print lines of their own)


def read_result(peer):
    for line in peer.stdout:
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"{peer.args[2:4]} ended without a result (exit status {peer.wait()})")


def build_models(work, smoke):
    """The random GTR-Base-shaped (GTR-Small with `smoke`) model directory, its exports and its
    sentence-transformers copy, under `work` (reused when there)."""
    import keras

    from gtr_keras import GTRTextEmbedder, load, save
    from gtr_keras.exports.litert import export_litert, litert_path
    from gtr_keras.exports.onnx_export import export_onnx
    from gtr_keras.exports.openvino_export import export_openvino
    from gtr_keras.models import BUNDLED_MODEL_DIR
    from gtr_keras.models.gtr.presets import preset_config

    paths = {name: os.path.join(work, name) for name in ("model", "st", "onnx", "onnx-int8", "openvino", "litert")}
    seconds = {}
    if not os.path.exists(os.path.join(paths["model"], "config.json")):
        keras.utils.set_random_seed(0)
        with open(os.path.join(BUNDLED_MODEL_DIR, "assets", "tokenizer", "vocabulary.spm"), "rb") as f:
            vocabulary = f.read()
        architecture = preset_config("gtr-small" if smoke else "gtr-base", vocabulary_size=32128)
        embedder = GTRTextEmbedder.from_parts(architecture, vocabulary, 512, 64, architecture["hidden_dim"])
        save(embedder, paths["model"])
        save(embedder, paths["st"], format="sentence-transformers")
    encoder = load(paths["model"])
    for name, write in (
        ("onnx", lambda: export_onnx(encoder, paths["onnx"])),
        ("onnx-int8", lambda: export_onnx(encoder, paths["onnx-int8"], "int8")),
        ("openvino", lambda: export_openvino(encoder, paths["openvino"])),
        ("litert", lambda: export_litert(encoder, paths["litert"])),
    ):
        if not os.path.exists(
            litert_path(paths[name]) if name == "litert" else os.path.join(paths[name], "export.json")
        ):
            start = time.perf_counter()
            write()
            seconds[name] = time.perf_counter() - start
    return paths, seconds


def gtr_keras_runtimes(paths):
    """`{row name: encode function}` of gtr-keras' own paths."""
    from gtr_keras import load
    from gtr_keras.exports import RuntimeEncoder
    from gtr_keras.exports.litert import litert_path, load_litert

    float32, bfloat16 = load(paths["model"]), load(paths["model"], dtype="bfloat16")
    litert = load_litert(litert_path(paths["litert"]), num_threads=os.cpu_count())
    litert_documents = litert.get_signature_runner("encode_documents")

    def litert_encode(texts, batch_size):
        batches = [np.array(texts[i : i + batch_size], dtype=object) for i in range(0, len(texts), batch_size)]
        return np.concatenate([litert_documents(texts=batch)["embeddings"] for batch in batches])

    runtimes = {
        TF_FLOAT32: float32.encode_documents,
        "gtr-keras TensorFlow bf16": bfloat16.encode_documents,
        "gtr-keras LiteRT fp32": litert_encode,
        "gtr-keras ONNX Runtime fp32": RuntimeEncoder(paths["onnx"]).encode_documents,
        "gtr-keras ONNX Runtime int8": RuntimeEncoder(paths["onnx-int8"]).encode_documents,
        "gtr-keras OpenVINO fp32": RuntimeEncoder(paths["openvino"]).encode_documents,
        "gtr-keras OpenVINO bf16 (hint)": RuntimeEncoder(
            paths["openvino"], openvino_config={"INFERENCE_PRECISION_HINT": "bf16"}
        ).encode_documents,
    }
    return runtimes


def run_peer(st_dir, texts_file, out_dir, batch_size):
    """The sentence-transformers side (`--peer`): loads each backend, then, for each `round` line on stdin,
    encodes the texts once with each and prints `{backend: seconds}`; embeddings go to `out_dir`."""
    from sentence_transformers import SentenceTransformer

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    models, errors = {}, {}
    for backend in PEER_BACKENDS:
        try:
            model = SentenceTransformer(st_dir, device="cpu", backend=backend)
            model.max_seq_length = 512
            np.save(os.path.join(out_dir, f"{backend}.npy"), model.encode(texts, batch_size=batch_size))
            models[backend] = model
        except Exception as error:  # a backend that fails is a result: the table records its error
            errors[backend] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
    print(MARK + json.dumps({"errors": errors, "versions": versions(PEER_PACKAGES)}), flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        seconds = {}
        for backend, model in models.items():
            start = time.perf_counter()
            model.encode(texts, batch_size=batch_size)
            seconds[backend] = time.perf_counter() - start
        print(MARK + json.dumps(seconds), flush=True)


def min_cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def measure(paths, texts, rounds, batch_size, peer_python, work):
    """`({row: [seconds per round]}, {row: embeddings}, {row: error})`, the runtimes alternating."""
    texts_file = os.path.join(work, "texts.json")
    with open(texts_file, "w", encoding="utf-8") as f:
        json.dump(texts, f)
    peer = subprocess.Popen(
        [
            peer_python,
            os.path.abspath(__file__),
            "--peer",
            paths["st"],
            texts_file,
            work,
            "--batch-size",
            str(batch_size),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    runtimes = gtr_keras_runtimes(paths)
    embeddings = {name: encode(texts, batch_size=batch_size) for name, encode in runtimes.items()}  # warm-up
    ready = read_result(peer)
    errors = {f"sentence-transformers {k}": v for k, v in ready["errors"].items()}
    for backend in PEER_BACKENDS:
        if f"sentence-transformers {backend}" not in errors:
            embeddings[f"sentence-transformers {backend}"] = np.load(os.path.join(work, f"{backend}.npy"))
    seconds = {name: [] for name in embeddings}
    for number in range(rounds):
        print(f"round {number + 1} of {rounds}", file=sys.stderr, flush=True)
        for name, encode in runtimes.items():
            start = time.perf_counter()
            encode(texts, batch_size=batch_size)
            seconds[name].append(time.perf_counter() - start)
        peer.stdin.write("round\n")
        peer.stdin.flush()
        for backend, spent in read_result(peer).items():
            seconds[f"sentence-transformers {backend}"].append(spent)
    peer.stdin.close()
    peer.wait(timeout=120)
    return seconds, embeddings, errors, ready["versions"]


def int8_ndcg(data, work):
    """NDCG@10 on SciFact's test queries of the bundled model's ONNX exports, float32 (within 1e-5 of
    TensorFlow's, tests/exports/test_onnx_export.py) and int8."""
    from gtr_keras import load
    from gtr_keras.beir import evaluate_run, load_corpus, load_qrels, load_queries
    from gtr_keras.beir.evaluation import results_from_scores
    from gtr_keras.exports import RuntimeEncoder
    from gtr_keras.exports.onnx_export import export_onnx
    from gtr_keras.models import BUNDLED_MODEL_DIR

    corpus = load_corpus(os.path.join(data, "scifact"))
    queries = load_queries(os.path.join(data, "scifact"))
    qrels = load_qrels(os.path.join(data, "scifact"), "test")
    query_ids = [q for q in qrels if q in queries]
    encoder = load(BUNDLED_MODEL_DIR)
    encoders = {}
    for name, quantize in (("ONNX Runtime fp32", None), ("ONNX Runtime int8", "int8")):
        target = os.path.join(work, f"bundled-onnx-{quantize or 'float32'}")
        if not os.path.exists(os.path.join(target, "export.json")):
            export_onnx(encoder, target, quantize)
        encoders[name] = RuntimeEncoder(target)
    ndcg, documents = {}, {}
    for name, runtime in encoders.items():
        documents[name] = runtime.encode_documents(corpus.joined())
        scores = runtime.encode_queries([queries[q] for q in query_ids]) @ documents[name].T
        top = np.argsort(-scores, axis=1)[:, :100]
        run = results_from_scores(query_ids, corpus.ids, top, np.take_along_axis(scores, top, axis=1))
        ndcg[name] = evaluate_run(qrels, run)["ndcg@10"]
    cosines = {name: min_cosine(documents[name], documents["ONNX Runtime fp32"]) for name in documents}
    return ndcg, cosines, len(corpus), len(query_ids), encoder.document_length


def tokenizer_differences(data):
    """`{"op vocabulary": texts with ids other than the sentencepiece library's}` over the five collections,
    and the number of texts, printed (`--tokenizer-counts`: a process without TensorFlow, whose TF Text
    SentencePiece library and onnxruntime-extensions' do not share a process: it crashed)."""
    import onnxruntime
    import openvino
    import sentencepiece as spm
    from onnx import TensorProto, helper
    from onnxruntime_extensions import get_library_path
    from openvino_tokenizers import _get_factory

    from gtr_keras.beir import load_corpus, load_queries

    texts = []
    for name in COLLECTIONS:
        texts += load_corpus(os.path.join(data, name)).joined() + list(load_queries(os.path.join(data, name)).values())
    texts = [t.strip() for t in texts]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    vocabularies = {
        "bundled": os.path.join(repo, "gtr_keras", "assets", BUNDLED, "assets", "tokenizer", "vocabulary.spm"),
        "fixture": os.path.join(repo, "tests", "fixtures", "tiny-gtr-st", "spiece.model"),
    }
    counts = {}
    for vocabulary, path in vocabularies.items():
        with open(path, "rb") as f:
            proto = f.read()
        expected = spm.SentencePieceProcessor(model_proto=proto).encode(texts)
        flags = [helper.make_tensor(n, t, [], [v]) for n, t, v in (("nbest", TensorProto.INT64, 0),)]
        flags += [helper.make_tensor("alpha", TensorProto.FLOAT, [], [0.0])]
        flags += [helper.make_tensor(n, TensorProto.BOOL, [], [False]) for n in ("bos", "eos", "reverse")]
        node = helper.make_node(
            "SentencepieceTokenizer",
            ["text", "nbest", "alpha", "bos", "eos", "reverse"],
            ["ids", "rows"],
            domain="ai.onnx.contrib",
            model=proto,
        )
        graph = helper.make_graph(
            [node],
            "sentencepiece",
            [helper.make_tensor_value_info("text", TensorProto.STRING, [None])],
            [
                helper.make_tensor_value_info("ids", TensorProto.INT32, [None]),
                helper.make_tensor_value_info("rows", TensorProto.INT64, [None]),
            ],
            initializer=flags,
        )
        options = onnxruntime.SessionOptions()
        options.register_custom_ops_library(get_library_path())
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
        session = onnxruntime.InferenceSession(
            helper.make_model(graph, opset_imports=opsets).SerializeToString(), options
        )
        strings = openvino.op.Parameter(openvino.Type.string, openvino.PartialShape(["?"]))
        unpacked = _get_factory().create("StringTensorUnpack", strings.outputs()).outputs()
        model = openvino.op.Constant(np.frombuffer(proto, np.uint8))
        attributes = {"add_bos": False, "add_eos": False, "reverse": False, "alpha": 0.0, "nbest_size": 0}
        tokenize = _get_factory().create("SentencepieceTokenizer", [model.output(0), *unpacked], attributes)
        compiled = openvino.Core().compile_model(openvino.Model(tokenize.outputs()[:2], [strings]), "CPU")
        onnx_rows, openvino_rows = [], []
        for start in range(0, len(texts), 256):
            chunk = np.array(texts[start : start + 256], dtype=object)
            ids, rows = session.run(None, {"text": chunk})
            onnx_rows += [ids[rows[i] : rows[i + 1]].tolist() for i in range(len(chunk))]
            result = compiled([chunk.astype(str)])
            indices, values = result[0], result[1]
            found = [[] for _ in chunk]
            for (row, _), value in zip(indices, values):
                found[row].append(int(value))
            openvino_rows += found
        counts[f"onnxruntime-extensions {vocabulary}"] = sum(a != b for a, b in zip(onnx_rows, expected))
        counts[f"openvino-tokenizers {vocabulary}"] = sum(a != b for a, b in zip(openvino_rows, expected))
    print(MARK + json.dumps({"counts": counts, "texts": len(texts)}), flush=True)


def report(args, seconds, embeddings, errors, peer_versions, export_seconds, ndcg, tokenizers, texts, started):
    from gtr_keras.utils.cpu import cpu_flags

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    flags = cpu_flags() or set()
    present = ", ".join(f for f in FLAGS if f in flags) or "none"
    absent = ", ".join(f for f in FLAGS if f not in flags) or "none"
    reference = embeddings[TF_FLOAT32]
    base = statistics.median(seconds[TF_FLOAT32])
    lines = [
        f"### {datetime.date.today().isoformat()}, commit {commit}: {'GTR-Small (smoke)' if args.smoke else 'GTR-Base'}"
        f" shape, {len(texts)} SciFact abstracts at 512 tokens, batch {args.batch_size}, {args.rounds} rounds",
        "",
        f"- Command: `{rerun_command(__file__)}`",
        f"- Machine: {machine()}; CPU flags present: {present}; absent: {absent}. The machine was shared with "
        "other jobs (other sessions' tests and benchmarks on the same 2 cores): absolute rates are low and noisy, "
        "the rounds alternate the runtimes so that each sees the same load on average.",
        f"- Mean tokens per abstract (EOS included): {np.mean([len(t) for t in tokenizers['lengths']]):.0f}; "
        f"export times (s): {', '.join(f'{k} {v:.0f}' for k, v in export_seconds.items()) or 'reused'}; "
        f"run took {(time.perf_counter() - started) / 60:.1f} min.",
        f"- Versions: {versions(OUR_PACKAGES)}; sentence-transformers' side ({args.peer_python}): {peer_versions}.",
        "",
        "| runtime | docs/s (median) | per round | vs TF fp32 | min cosine to TF fp32 |",
        "|---|---|---|---|---|",
    ]
    for name in seconds:
        rates = [len(texts) / s for s in seconds[name]]
        median = statistics.median(seconds[name])
        lines.append(
            f"| {name} | {len(texts) / median:.2f} | {' / '.join(f'{r:.2f}' for r in rates)} | "
            f"{base / median:.2f}x | {min_cosine(embeddings[name], reference):.6f} |"
        )
    for name, error in errors.items():
        lines.append(f"| {name} | failed: `{error}` | | | |")
    if ndcg:
        scores, cosines, docs, queries, length = ndcg
        lines += [
            "",
            f"NDCG@10 on SciFact (test, {queries} queries, {docs} documents) of the bundled `{BUNDLED}` at its "
            f"{length}-token budget (the random GTR-Base has no meaningful NDCG):",
            "",
            "| runtime | NDCG@10 | vs fp32 | min cosine to fp32 |",
            "|---|---|---|---|",
        ]
        for name, value in scores.items():
            lines.append(f"| {name} | {value:.4f} | {value - scores['ONNX Runtime fp32']:+.4f} | {cosines[name]:.6f} |")
    if tokenizers.get("counts"):
        lines += [
            "",
            f"SentencePiece ops vs the `sentencepiece` library on the {tokenizers['texts']:,} texts of the five "
            "collections (texts with other ids):",
            "",
            "| op | bundled vocabulary | fixture vocabulary |",
            "|---|---|---|",
        ]
        for op in ("onnxruntime-extensions", "openvino-tokenizers"):
            counts = tokenizers["counts"]
            lines.append(f"| {op} | {counts[f'{op} bundled']} | {counts[f'{op} fixture']} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--work", default="/tmp/gtr-runtimes")
    parser.add_argument("--peer-python", default=sys.executable, help="a Python with the `benchmarks` extra")
    parser.add_argument("--smoke", action="store_true", help="the GTR-Small shape, 4 abstracts, one round")
    parser.add_argument("--no-ndcg", action="store_true", help="skip the int8 NDCG on the full SciFact")
    parser.add_argument("--no-tokenizers", action="store_true", help="skip the SentencePiece ops' differences")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--tokenizer-counts", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer", nargs=3, metavar=("ST_DIR", "TEXTS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        run_peer(*args.peer, args.batch_size)
        return
    if args.tokenizer_counts:
        tokenizer_differences(args.data)
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    from gtr_keras.beir import load_corpus

    if args.smoke:
        args.docs, args.rounds = 4, 1
    work = os.path.join(args.work, "tiny" if args.smoke else "base")
    os.makedirs(work, exist_ok=True)
    paths, export_seconds = build_models(work, args.smoke)
    texts = load_corpus(os.path.join(args.data, "scifact")).joined()[: args.docs]
    seconds, embeddings, errors, peer_versions = measure(
        paths, texts, args.rounds, args.batch_size, args.peer_python, work
    )
    from gtr_keras import load

    tokenizers = {"lengths": load(paths["model"]).tokenize(texts)}
    if not args.no_tokenizers:
        counter = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--tokenizer-counts", "--data", args.data],
            stdout=subprocess.PIPE,
            text=True,
        )
        tokenizers.update(read_result(counter))
        counter.wait()
    ndcg = None if args.no_ndcg or args.smoke else int8_ndcg(args.data, args.work)
    block = report(args, seconds, embeddings, errors, peer_versions, export_seconds, ndcg, tokenizers, texts, started)
    publish(block, RESULTS, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
