"""Builds the tiny cross-encoder (reranker) checkpoints of the tests, with sentence-transformers' reference scores.

Needs PyTorch, `transformers`, `sentence-transformers` and `sentencepiece`, which gtr-keras never imports: run it
in a separate environment, once, to regenerate the committed fixtures:

    python -m venv /work/venv-ref && /work/venv-ref/bin/pip install torch==2.13.0 transformers \
        sentence-transformers sentencepiece protobuf
    /work/venv-ref/bin/python tests/reference_cross_encoders.py

It writes, for each family (`tests/fixtures/tiny-bert-cross-encoder/`, `tests/fixtures/tiny-xlmr-cross-encoder/`),
what the Hugging Face Hub serves for `cross-encoder/ms-marco-MiniLM-L6-v2` and `BAAI/bge-reranker-base`:
`config.json` (`BertForSequenceClassification`, `XLMRobertaForSequenceClassification`, one label, no activation
named: CrossEncoder's default, a sigmoid), `model.safetensors`, and the tokenizer's files (`vocab.txt` for the
WordPiece one, a SentencePiece unigram model `sentencepiece.bpe.model` trained on a few Cranfield sentences for
XLM-R, each with `tokenizer.json` and `tokenizer_config.json`), randomly initialised with a wide initializer so that
the scores spread over (0, 1). `tests/fixtures/tiny-cross-encoder-reference.json` holds the pairs (truncation of
either side, accents, upper case, unknown and control characters, long words and documents, empty texts), the
token ids Hugging Face's tokenizer gives each pair, the raw logits and `CrossEncoder(DIR).predict(pairs)`, and
single texts of other Unicode cases with their token ids. A checkpoint directory that exists is kept (delete
it to build it again): the reference is computed from the committed files.
"""

import collections
import gzip
import io
import json
import os
import re

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
BERT_DIR = os.path.join(FIXTURE_DIR, "tiny-bert-cross-encoder")
XLMR_DIR = os.path.join(FIXTURE_DIR, "tiny-xlmr-cross-encoder")
REFERENCE_FILE = os.path.join(FIXTURE_DIR, "tiny-cross-encoder-reference.json")
CRANFIELD = os.path.join(FIXTURE_DIR, "..", "..", "gtr_keras", "assets", "cranfield", "corpus.jsonl.gz")
BERT_LENGTH = 40  # the tokenizer's model_max_length: the pair budget, special tokens included
XLMR_LENGTH = 48
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, initializer_range=0.4)


def cranfield_texts(count=200):
    with gzip.open(CRANFIELD, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:count]
    return [(d["title"] + " " + d["text"]).strip() for d in docs]


def pairs():
    """`(query, document)` pairs that exercise what a reranker's tokenizer and truncation must get right."""
    corpus = cranfield_texts(12)
    return [
        ("what is the lift of a wing?", "the lift of a wing in a slipstream is measured"),
        ("boundary layer", corpus[0]),
        ("BOUNDARY LAYER Transition", corpus[1]),
        ("Café naïve résumé über", "the café's naïve résumé: Über façade, ÀÉÎÕÜ"),
        ("unknown 😀 北京 ﬁ ① ＡＢＣ", "symbols ✓ † ‰ \ufffd and control\x07chars\x00 here"),
        ("tabs\tand\nnewlines", "a\u3000b\u00a0c\u2003d   e"),
        (corpus[2], "short document"),
        (corpus[3], corpus[4]),
        ("x", ""),
        ("", "an empty query"),
        ("heat", "heat " * 200),
        ("a" * 120 + " word", "supercalifragilistic" * 7 + " long words"),
        ("``quoted'' text", "it's  double   spaced ``and'' quoted"),
        ("Mach number 2.5 at 30,000 ft", "pressure p = 0.5 * rho * v^2 (N/m²) [ref. 12]"),
        ("shock waves", " ".join(corpus[5:9])),
        ("  leading and trailing spaces  ", "  spaces  "),
    ]


def texts():
    """Single texts whose tokens are compared alone: the Unicode cases the pairs leave out."""
    return [
        "ΣΟΦΟΣ σοφός ΌΣΟΣ",  # Greek: final sigma, accents
        "İstanbul ıi Straße ǅ ﬀ",  # Turkish dotted I, sharp s, titlecase digraph, ligature
        "e\u0301 a\u0308 n\u0303",  # combining marks after their letters
        "zero\u200bwidth\u200djoiner\u2060word",  # format characters (Cf)
        "مرحبا بالعالم שלום",  # Arabic and Hebrew
        "日本語のテキスト 한국어",  # Japanese kana and kanji, Korean
        "line\u2028separator\u2029paragraph\u0085next",
        "tab\there\x0bvertical\x0cform",
        "emoji 👩\u200d🔬 flags 🇫🇷 keycap 1\ufe0f\u20e3",
        "!!! ??? ... --- ``` ((( )))",
        "ＦＵＬＬＷＩＤＴＨ ｆｕｌｌ １２３",
        "x" * 101 + " " + "é" * 60,
    ]


def bert_vocabulary(texts, size=400):
    """A WordPiece vocabulary: BERT's special tokens, characters (plain and `##`), the most frequent words."""
    words = collections.Counter(w for t in texts for w in re.findall(r"[a-z]+", t.lower()))
    characters = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()[]-+*/=^%&$#@_<>"))
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters)]
    for word, _ in words.most_common():
        if len(vocabulary) >= size:
            break
        if word not in vocabulary:
            vocabulary.append(word)
    return vocabulary + [suffix for suffix in ("##ing", "##ed", "##er", "##ion") if suffix not in vocabulary]


def build_bert(directory):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(bert_vocabulary(cranfield_texts())) + "\n")
    tokenizer = BertTokenizerFast(os.path.join(directory, "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = BERT_LENGTH
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=64, num_labels=1, **TINY)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def build_xlmr(directory):
    import sentencepiece
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizer

    os.makedirs(directory, exist_ok=True)
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(cranfield_texts() + ["Café naïve résumé über façade ÀÉÎÕÜ"]),
        model_writer=proto,
        vocab_size=300,
        model_type="unigram",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        character_coverage=1.0,
        minloglevel=2,
    )
    spm_path = os.path.join(directory, "sentencepiece.bpe.model")
    with open(spm_path, "wb") as f:
        f.write(proto.getvalue())
    tokenizer = XLMRobertaTokenizer.from_pretrained(directory)  # converted from the SentencePiece model
    tokenizer.model_max_length = XLMR_LENGTH
    torch.manual_seed(1)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=XLMR_LENGTH + 2,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        layer_norm_eps=1e-5,  # as in XLM-RoBERTa's and bge-reranker's configs (keras-hub's RoBERTa layers have it)
        num_labels=1,
        **TINY,
    )
    model = XLMRobertaForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def reference(directory):
    import torch
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(directory, device="cpu")
    examples = pairs()
    tokenizer = model.tokenizer
    encoded = tokenizer([q for q, _ in examples], [d for _, d in examples], truncation=True, max_length=None)
    singles = tokenizer(texts(), truncation=False)["input_ids"]
    with torch.no_grad():
        logits = model.predict(examples, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    scores = model.predict(examples, convert_to_numpy=True)
    return {
        "max_length": model.max_length,
        "activation": type(model.activation_fn).__name__,
        "token_ids": [list(map(int, ids)) for ids in encoded["input_ids"]],
        "text_token_ids": [list(map(int, ids[1:-1])) for ids in singles],
        "logits": [float(x) for x in logits.reshape(-1)],
        "scores": [float(x) for x in scores.reshape(-1)],
    }


def main():
    """Builds the checkpoints when they are missing (delete them to rebuild), then their reference record."""
    import sentence_transformers
    import transformers

    if not os.path.exists(os.path.join(BERT_DIR, "model.safetensors")):
        build_bert(BERT_DIR)
    if not os.path.exists(os.path.join(XLMR_DIR, "model.safetensors")):
        build_xlmr(XLMR_DIR)
    record = {
        "made_with": {
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
        "pairs": [list(pair) for pair in pairs()],
        "texts": texts(),
        "bert": reference(BERT_DIR),
        "xlmr": reference(XLMR_DIR),
    }
    with open(REFERENCE_FILE, "w", encoding="utf-8") as f:
        json.dump(record, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for family in ("bert", "xlmr"):
        print(family, record[family]["max_length"], record[family]["activation"], record[family]["scores"][:4])


if __name__ == "__main__":
    main()
