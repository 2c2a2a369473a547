"""Inputs that the training, distillation and recipe tests share: a tiny SentencePiece model, words
and triples made of them, a small keras-hub BERT text embedder, a Python subprocess runner and free
local ports."""

import json
import os
import socket
import subprocess
import sys

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIECE = os.path.join(ROOT, "tests", "fixtures", "tiny-gtr-st", "spiece.model")
WORDS = "cat dog bird fish tree river mountain city music paper light sound water fire stone cloud".split()
TEXTS = ["cat and dog", "the river under a mountain " * 5, "", "FIRE stone", "music"]


def free_ports(count):
    """`count` distinct ports of 127.0.0.1 that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_python(script, *args, **kwargs):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=env, **kwargs)


def write_triples(path, count=48):
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for i in range(count):
            a, b, c = rng.choice(WORDS, 3, replace=False)
            negatives = [f"{rng.choice(WORDS)} by the {rng.choice(WORDS)} {i} {m}" for m in range(1 + i % 3)]
            record = {
                "query": f"what about {a} {b} {c} {i}",
                "positive": f"the {a} and {b} with {c} {i}",
                "negatives": negatives,
            }
            f.write(json.dumps(record) + "\n")
    return str(path)


def final_weights(run_dir):
    arrays = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = item[()]

    for weights_file in ("model.weights.h5", "task.weights.h5"):
        with h5py.File(os.path.join(run_dir, "model", weights_file)) as f:
            f.visititems(lambda name, item: collect(f"{weights_file}/{name}", item))
    return arrays


def write_bert_text_embedder(path):
    """A tiny keras-hub `BertTextEmbedder` preset (the shape of a sentence-transformers BERT checkpoint that
    keras-hub loads); returns its embeddings of `TEXTS` by keras-hub's own `predict`."""
    import keras_hub

    tokenizer = keras_hub.models.BertTokenizer(vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    preprocessor = keras_hub.models.BertTextEmbedderPreprocessor(tokenizer, sequence_length=32)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(WORDS) + 5,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=32,
    )
    embedder = keras_hub.models.BertTextEmbedder(backbone, preprocessor)
    expected = embedder.predict(TEXTS, verbose=0)
    embedder.save_to_preset(str(path))
    return expected
