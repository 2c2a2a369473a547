"""A reranker's exports: a strings-in SavedModel for TF Serving and `hub.load`, and ONNX for ONNX Runtime.

`export_reranker_savedmodel` writes `EXPORT_DIR/reranker/<version>/` (TF Serving's layout; a new version beside
the ones served, as the encoder's export does), whose signatures take raw strings, the tokenizer (TF Text's ops)
in the graph:

- `serving_default` and `score`: `queries` and `documents` tf.string `[None]`, pair by pair, ->
  `{"scores": float32 [None]}`;
- `rerank`: one `query` tf.string `[]` and its `documents` `[None]` -> `{"scores": float32 [None]}`;
- `obj(queries, documents)` for `hub.load`, the scores.

The scores are the model directory's (`Reranker.scores`: the checkpoint's activation), each pair cut at the
reranker's budget with `longest_first`. Loading needs `import tensorflow_text` (`load_export` does it).

`export_reranker_onnx` writes `EXPORT_DIR/reranker.onnx` (int32 `token_ids`, `segment_ids`, `padding_mask`
`[batch, length]` in, float32 `scores` `[batch]` out), `tokenizer.json` and `export.json`. TF Text's tokenizer
ops have no ONNX equivalent, so, as the GTR encoder's ONNX export keeps `spiece.model` for the `sentencepiece`
library, the tokenizer runs on the host: `tokenizer.json` is Hugging Face's fast tokenizer of the same
vocabulary and rules (BERT's normaliser, pre-tokeniser and WordPiece; XLM-RoBERTa's SentencePiece unigram with
fairseq's ids), its pair template and `longest_first` truncation at the budget, read with the `tokenizers`
package (`exports.runtime_encoder.RuntimeScorer`).
"""

import json
import os

import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.exports.export_formats import FORMATS, check_installed
from gtr_keras.exports.onnx_export import OPSET
from gtr_keras.exports.runtime_encoder import CONFIG_FILE
from gtr_keras.exports.savedmodel.warmup import write_warmup
from gtr_keras.exports.versions import check_export_outputs, next_version, write_together
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.native_logs import filtered_native_logs

RERANKER_NAME = "reranker"
RERANKER_RECORD = os.path.join("assets.extra", "reranker.json")  # marks a reranker's SavedModel
ONNX_FILE = "reranker.onnx"
TOKENIZER_FILE = "tokenizer.json"
INPUTS = ("token_ids", "segment_ids", "padding_mask")
PAIRS = (tf.TensorSpec([None], tf.string, name="queries"), tf.TensorSpec([None], tf.string, name="documents"))
ONE_QUERY = (tf.TensorSpec([], tf.string, name="query"), tf.TensorSpec([None], tf.string, name="documents"))
ONNX_DIRECTORY = files.DirectoryKind(
    "a reranker's ONNX export", (ONNX_FILE, CONFIG_FILE), (ONNX_FILE, TOKENIZER_FILE, CONFIG_FILE)
)


def _reranker(model):
    """The float32 `Reranker` of a reranker or its `PairScorer`."""
    reranker = getattr(model, "model", model)
    if reranker.compute_dtype != "float32":
        raise UserError(
            f"the reranker computes in {reranker.compute_dtype}: its exports are float32 (load it in float32)"
        )
    return reranker


def _record(reranker):
    preprocessor = reranker.preprocessor
    return {
        "kind": RERANKER_NAME,
        "backbone": type(reranker.backbone).__name__,
        "activation": reranker.activation,
        "sequence_length": preprocessor.sequence_length,
        "pad_id": int(preprocessor.pad_id),
    }


def check_reranker_savedmodel_outputs(export_dir, version=None, **options):
    """The version `export_reranker_savedmodel` writes, its directory checked first (`DataError` naming a file
    of anything else there)."""
    version = version or next_version(export_dir, [RERANKER_NAME])
    check_export_outputs(export_dir, version, [RERANKER_NAME])
    return version


@locks_output("export_dir")
def export_reranker_savedmodel(reranker, export_dir, version=None):
    """Writes the reranker's strings-in SavedModel to `export_dir/reranker/<version>/` (module docstring).

    Args:
        reranker: a float32 `Reranker`, or its `PairScorer` (`gtr_keras.load(RERANKER_DIR)`).
        export_dir: the export root.
        version: the TF Serving version directory (None: the next after those there).

    Returns:
        `[the version directory written]`.

    Example:
    >>> export_reranker_savedmodel(gtr_keras.load("models/minilm-reranker"), "exports/minilm")
    ['exports/minilm/reranker/1']
    """
    reranker = _reranker(reranker)
    version = check_reranker_savedmodel_outputs(export_dir, version)

    def write(staging):
        root = tf.__internal__.tracking.AutoTrackable()
        root.variables = [v.value for v in reranker.variables]
        root.trainable_variables = [v.value for v in reranker.trainable_variables]
        preprocessor = reranker.preprocessor

        def score(queries, documents):
            inputs = preprocessor.pad(preprocessor.pair_token_ids(queries, documents))
            return reranker.scores(reranker(inputs, training=False))

        root.__call__ = tf.function(score, input_signature=PAIRS)
        root.score = tf.function(
            lambda queries, documents: {"scores": score(queries, documents)}, input_signature=PAIRS
        )
        root.rerank = tf.function(
            lambda query, documents: {"scores": score(tf.fill(tf.shape(documents), query), documents)},
            input_signature=ONE_QUERY,
        )
        signatures = {"serving_default": root.score, "score": root.score, "rerank": root.rerank}
        tf.saved_model.save(root, str(staging), signatures=signatures)
        write_warmup(staging, signatures, "gtr_reranker")
        (staging / RERANKER_RECORD).write_text(json.dumps(_record(reranker), indent=2) + "\n", encoding="utf-8")

    return list(write_together(export_dir, version, {RERANKER_NAME: write}).values())


def hugging_face_tokenizer(reranker):
    """A `tokenizers.Tokenizer` that tokenises, packs and cuts pairs as the reranker's preprocessor does."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    preprocessor = reranker.preprocessor
    tokenizer = preprocessor.tokenizer
    if preprocessor.xlm_roberta:
        from sentencepiece import sentencepiece_model_pb2

        proto = sentencepiece_model_pb2.ModelProto.FromString(tokenizer.proto)
        vocabulary = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
        vocabulary += [(piece.piece, piece.score) for piece in proto.pieces[3:]] + [("<mask>", 0.0)]
        result = Tokenizer(models.Unigram(vocabulary, unk_id=tokenizer.unk_token_id, byte_fallback=False))
        result.normalizer = normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)
        result.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
        )
        pair, specials = "<s> $A </s> </s> $B </s>", [("<s>", 0), ("</s>", 2)]
    else:
        vocabulary = {piece: number for number, piece in enumerate(tokenizer.get_vocabulary())}
        result = Tokenizer(models.WordPiece(vocabulary, unk_token=tokenizer.oov_token, max_input_chars_per_word=100))
        result.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=tokenizer.split_on_cjk,
            strip_accents=tokenizer.hf_strip_accents,
            lowercase=tokenizer.lowercase,
        )
        result.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        pair = "[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1"
        specials = [("[CLS]", tokenizer.cls_token_id), ("[SEP]", tokenizer.sep_token_id)]
    result.post_processor = processors.TemplateProcessing(
        single=pair.split(" $B")[0], pair=pair, special_tokens=specials
    )
    result.enable_truncation(preprocessor.sequence_length, strategy="longest_first")
    return result


def check_reranker_onnx_output(export_dir, **options):
    """Refuses (`UserError`) an `export_dir` that is not empty nor a reranker's ONNX export, before any work."""
    files.check_replaceable(export_dir, [ONNX_DIRECTORY])


@locks_output("export_dir")
def export_reranker_onnx(reranker, export_dir):
    """Writes the reranker's ONNX export directory: `reranker.onnx`, `tokenizer.json` and `export.json`.

    Args:
        reranker: a float32 `Reranker`, or its `PairScorer`.
        export_dir: the directory to write (replaced when it is such an export, or empty).

    Returns:
        `[the path of reranker.onnx]`.

    Example:
    >>> export_reranker_onnx(gtr_keras.load("models/minilm-reranker"), "exports/minilm-onnx")
    ['exports/minilm-onnx/reranker.onnx']
    """
    check_installed(FORMATS["onnx"], "write", reranker=True)  # `tokenizers` writes the host's tokenizer.json
    reranker = _reranker(reranker)
    check_reranker_onnx_output(export_dir)
    import tf2onnx

    def forward(token_ids, segment_ids, padding_mask):
        inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
        return {"scores": reranker.scores(reranker(inputs, training=False))}

    signature = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUTS]
    function = tf.function(forward, input_signature=signature)
    with atomic_directory(export_dir, [ONNX_DIRECTORY]) as staging:
        with filtered_native_logs():
            tf2onnx.convert.from_function(
                function, input_signature=signature, opset=OPSET, output_path=str(staging / ONNX_FILE)
            )
        hugging_face_tokenizer(reranker).save(str(staging / TOKENIZER_FILE))
        record = {
            "format": "onnx",
            **_record(reranker),
            "model_file": ONNX_FILE,
            "tokenizer": TOKENIZER_FILE,
            "inputs": {name: "int32 [batch, length]" for name in INPUTS},
            "output": "scores: float32 [batch]",
            "opset": OPSET,
        }
        (staging / CONFIG_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return [os.path.join(export_dir, ONNX_FILE)]
