"""Builds tiny GTR checkpoints in sentence-transformers layout, with reference outputs.

Needs the `[reference]` extra (torch, transformers, sentence-transformers). Run it
to regenerate the committed fixture in `tests/fixtures/tiny-gtr-st/`:

    python tests/reference_checkpoint.py

The parity tests import it to build fresh checkpoints live when torch is present.
"""

import gzip
import json
import os
import sys

import numpy as np

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
ST_DIR = os.path.join(FIXTURE_DIR, "tiny-gtr-st")
REFERENCE_FILE = os.path.join(FIXTURE_DIR, "tiny-gtr-reference.npz")
TEXTS_FILE = os.path.join(FIXTURE_DIR, "tiny-gtr-texts.json")
CRANFIELD = os.path.join(os.path.dirname(FIXTURE_DIR), "..", "gtr_keras", "assets", "cranfield", "corpus.jsonl.gz")

TINY_T5 = dict(vocab_size=1100, d_model=64, d_kv=8, num_heads=4, d_ff=128, num_layers=3, feed_forward_proj="relu")
BASE_T5 = dict(  # the shape of t5-base's encoder, as in sentence-transformers/gtr-t5-base
    vocab_size=32128, d_model=768, d_kv=64, num_heads=12, d_ff=3072, num_layers=12, feed_forward_proj="relu"
)


PUBLISHED_POOLING = dict(  # as in sentence-transformers/gtr-t5-base
    pooling_mode_cls_token=False,
    pooling_mode_mean_tokens=True,
    pooling_mode_max_tokens=False,
    pooling_mode_mean_sqrt_len_tokens=False,
)


def cranfield_texts():
    with gzip.open(CRANFIELD, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    return [(d["title"] + " " + d["text"]).strip() for d in docs]


def fixture_texts():
    """24 texts: short, long (> 512 pieces), unicode, whitespace, empty."""
    corpus = cranfield_texts()
    return [
        "",
        "what is the lift of a wing in a slipstream?",
        "  boundary layer transition at supersonic speeds  ",
        "Ünïcödé — naïve café 北京 😀 ﬁ ① ＡＢＣ",
        "tabs\tand\nnewlines\r\nmixed",
        "heat transfer",
        "x",
        "a\u3000b\u00a0c\u2003d",
        "shock wave " * 300,
        " ".join(corpus[:40]),
        corpus[0],
        corpus[1],
        corpus[17],
        corpus[100],
        corpus[399],
        corpus[1000],
        "How do viscous effects change the pressure distribution on a cone at Mach 5?",
        "1234 5678 0.25 1e-6 (x+y)^2",
        "UPPER CASE QUERY ABOUT FLUTTER",
        "émoji 🚀 rocket nozzle 🔥",
        "word " * 510,
        "word " * 511,
        "word " * 600,
        " ".join(corpus[200:230]),
    ]


def train_spiece(path, vocabulary_size=1000):
    from gtr_keras.models.gtr.gtr_tokenizer import train_sentencepiece

    return train_sentencepiece(cranfield_texts(), path, vocabulary_size)


def build_checkpoint(
    out_dir, seed=0, feed_forward_proj="relu", spiece_path=None, max_seq_length=512, t5_config=TINY_T5
):
    """Writes a random GTR (tiny unless `t5_config` says otherwise) in sentence-transformers layout."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    torch.manual_seed(seed)
    hf_dir = os.path.join(out_dir, "_hf")
    os.makedirs(hf_dir, exist_ok=True)
    spiece = os.path.join(hf_dir, "spiece.model")
    if spiece_path:
        with open(spiece_path, "rb") as src, open(spiece, "wb") as dst:
            dst.write(src.read())
    else:
        train_spiece(spiece)
    config = T5Config(**{**t5_config, "feed_forward_proj": feed_forward_proj}, dropout_rate=0.0)
    model = T5EncoderModel(config)
    with torch.no_grad():
        # A wide position bias makes any bucket disagreement show in the embeddings.
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0.0, 2.0)
    model.save_pretrained(hf_dir)
    T5Tokenizer.from_pretrained(hf_dir).save_pretrained(hf_dir)
    transformer = models.Transformer(hf_dir, max_seq_length=max_seq_length)
    pooling = models.Pooling(config.d_model, pooling_mode="mean")
    dense = models.Dense(config.d_model, config.d_model, bias=False, activation_function=torch.nn.Identity())
    st = SentenceTransformer(modules=[transformer, pooling, dense, models.Normalize()], device="cpu")
    st.save(out_dir, safe_serialization=True)
    os.replace(spiece, os.path.join(out_dir, "spiece.model"))
    # Rewritten in the layout of the published GTR checkpoints (sentence-transformers 2.x).
    with open(os.path.join(out_dir, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": max_seq_length, "do_lower_case": False}, f)
    with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump(dict(word_embedding_dimension=config.d_model, **PUBLISHED_POOLING), f)
    for name in os.listdir(hf_dir):
        os.remove(os.path.join(hf_dir, name))
    os.rmdir(hf_dir)
    return out_dir


def reference_embeddings(st_dir, texts):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(st_dir, device="cpu")
    return st.encode(texts, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)


def reference_token_ids(st_dir, texts, max_length):
    from transformers import T5Tokenizer

    tokenizer = T5Tokenizer.from_pretrained(st_dir)
    return [tokenizer(t.strip(), truncation=True, max_length=max_length)["input_ids"] for t in texts]


def reference_buckets(offsets):
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(
        torch.tensor(offsets), bidirectional=True, num_buckets=32, max_distance=128
    ).numpy()


def main():
    texts = fixture_texts()
    if os.path.exists(ST_DIR):
        import shutil

        shutil.rmtree(ST_DIR)
    build_checkpoint(ST_DIR, seed=1234)
    offsets = np.arange(-600, 601)
    token_ids = {
        f"token_ids_{n}": np.array(
            [row + [0] * (n - len(row)) for row in reference_token_ids(ST_DIR, texts, n)], np.int32
        )
        for n in (64, 512)
    }
    np.savez_compressed(
        REFERENCE_FILE,
        embeddings=reference_embeddings(ST_DIR, texts),
        offsets=offsets,
        buckets=reference_buckets(offsets),
        **token_ids,
    )
    with open(TEXTS_FILE, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False, indent=0)
    print(f"wrote {ST_DIR}, {REFERENCE_FILE}, {TEXTS_FILE}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(FIXTURE_DIR), ".."))
    main()
