"""`Fusion`: one ranking from GTR's and BM25's, by reciprocal-rank fusion or a weighted sum of min-max
normalised scores, and the fusion a model directory records for itself.

Both methods take, per query, each side's retrieved documents with their scores
(`{doc_id: score}`), and give every document retrieved by either side a fused
score; a document one side did not retrieve, or scored NaN or infinite, gets nothing from that side. Each
side's ranks follow `evaluation.rank_documents` (equal scores: the larger id
first, as trec_eval ranks them), and so does the fused ranking.

- `"rrf"`: `w / (rrf_k + rank_gtr) + (1 - w) / (rrf_k + rank_bm25)`, ranks from 1
  (Cormack et al., 2009; `rrf_k=60`).
- `"weighted"`: `w * norm_gtr + (1 - w) * norm_bm25`, where a side's scores are
  min-max normalised over the documents it retrieved for the query: its best
  gets 1, its last 0 (as a document it did not retrieve); a side whose scores
  are all equal gives each of them 1.

`w` is `gtr_weight`, GTR's share. A model directory may record the fusion that
suits it in its `metadata.json` (`"fusion": {"method": ..., "gtr_weight": ...}`:
`model_fusion`); a model that records none gets `DEFAULT_FUSION`.
"""

import json
import math
import os
from typing import Any, Literal, Self

from gtr_keras.beir.evaluation import rank_documents
from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.records import read_json_object

METHODS = ("weighted", "rrf")
RRF_K = 60
METADATA_FILE = "metadata.json"
FUSION_KEY = "fusion"
# For a model whose metadata.json records no fusion: equal shares of the normalised scores (docs/hybrid.md).
DEFAULT_FUSION: dict[str, Any] = {"method": "weighted", "gtr_weight": 0.5}


class Fusion:
    """Fuses a GTR ranking and a BM25 ranking of the same documents into one.

    Args:
        method: `"weighted"` (min-max normalised scores) or `"rrf"` (reciprocal ranks).
        gtr_weight: GTR's share in `[0, 1]`; BM25 gets `1 - gtr_weight`.
        rrf_k: the constant of reciprocal-rank fusion (`"rrf"` only).

    Example:
    >>> fusion = Fusion("weighted", gtr_weight=0.25)
    >>> fusion.fuse({"a": 0.9, "b": 0.5}, {"b": 12.0, "c": 4.0})
    {'b': 0.75, 'a': 0.25, 'c': 0.0}
    """

    def __init__(self, method: Literal["weighted", "rrf"] = "weighted", gtr_weight: float = 0.5, rrf_k: int = RRF_K):
        if method not in METHODS:
            raise UserError(f"fusion method must be one of {METHODS}, got {method!r}")
        if isinstance(gtr_weight, bool) or not isinstance(gtr_weight, (int, float)) or not 0 <= gtr_weight <= 1:
            raise UserError(f"gtr_weight must be a number in [0, 1], got {gtr_weight!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or not rrf_k > 0:
            raise UserError(f"rrf_k must be a positive number, got {rrf_k!r}")
        self.method = method
        self.gtr_weight = float(gtr_weight)
        self.rrf_k = rrf_k

    def get_config(self) -> dict[str, Any]:
        return {"method": self.method, "gtr_weight": self.gtr_weight, "rrf_k": self.rrf_k}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        return cls(**config)

    def _contributions(self, scores):
        scores = {doc_id: score for doc_id, score in scores.items() if math.isfinite(score)}  # NaN: not retrieved
        ranked = rank_documents(scores)
        if self.method == "rrf":
            return {doc_id: 1.0 / (self.rrf_k + rank) for rank, doc_id in enumerate(ranked, start=1)}
        if not ranked:
            return {}
        high, low = scores[ranked[0]], scores[ranked[-1]]
        if high == low:
            return dict.fromkeys(ranked, 1.0)
        return {doc_id: (scores[doc_id] - low) / (high - low) for doc_id in ranked}

    def fuse(self, gtr_scores: dict[str, float], bm25_scores: dict[str, float]) -> dict[str, float]:
        """The fused scores of one query's documents, best first.

        Args:
            gtr_scores: `{doc_id: score}` of GTR's retrieved documents.
            bm25_scores: `{doc_id: score}` of BM25's.

        Returns:
            `{doc_id: fused score}` of every document of either side, in the order of `rank_documents`.
        """
        gtr, bm25 = self._contributions(gtr_scores), self._contributions(bm25_scores)
        weight = self.gtr_weight
        fused = {
            doc_id: weight * gtr.get(doc_id, 0.0) + (1.0 - weight) * bm25.get(doc_id, 0.0) for doc_id in {**gtr, **bm25}
        }
        return {doc_id: fused[doc_id] for doc_id in rank_documents(fused)}

    def fuse_runs(
        self, gtr_run: dict[str, dict[str, float]], bm25_run: dict[str, dict[str, float]], depth: int | None = None
    ) -> dict[str, dict[str, float]]:
        """`fuse` for every query of either run (`{qid: {doc_id: score}}`), each cut at `depth` (None: uncut)."""
        run = {}
        for query_id in {**gtr_run, **bm25_run}:
            fused = self.fuse(gtr_run.get(query_id, {}), bm25_run.get(query_id, {}))
            run[query_id] = dict(list(fused.items())[:depth])
        return run


def model_fusion(
    model: str | os.PathLike[str], method: Literal["weighted", "rrf"] | None = None, gtr_weight: float | None = None
) -> Fusion:
    """The `Fusion` for a model: what its `metadata.json` records under `"fusion"`, else `DEFAULT_FUSION`,
    with `method` and `gtr_weight` (when not None) in place of either. A recorded weight is measured for
    its method: another `method` without a `gtr_weight` gets `DEFAULT_FUSION`'s weight.

    Args:
        model: a model directory, a bundled model's name, or anything `gtr_keras.load` takes (a source
            without `metadata.json`, e.g. `hf://...`, records none).
        method: `"weighted"` or `"rrf"`, overriding the model's.
        gtr_weight: GTR's share, overriding the model's.

    Raises:
        DataError: the model's `"fusion"` record is not an object of a known method and a weight in [0, 1].

    Example:
    >>> model_fusion("gtr_small_distilled_en").get_config()["method"]
    'weighted'
    """
    from gtr_keras.models.model_files.model_source import ARCHITECTURE, DOWNLOAD_PREFIXES, resolve_model_source

    recorded = DEFAULT_FUSION
    source = resolve_model_source(model, read_format=False)
    path = os.path.join(source.path, METADATA_FILE)
    if source.format != ARCHITECTURE and not source.path.startswith(DOWNLOAD_PREFIXES) and files.isfile(path):
        metadata = read_json_object(path, "fix or remove its 'fusion' field")
        if FUSION_KEY in metadata:
            recorded = metadata[FUSION_KEY]
            try:
                if not isinstance(recorded, dict) or {"method", "gtr_weight"} - set(recorded):
                    raise UserError("both fields are needed")
                Fusion(**recorded)
            except (TypeError, UserError) as error:
                raise DataError(
                    f"{path}: field {FUSION_KEY!r} must be an object of 'method' ({' or '.join(METHODS)}) and "
                    f"'gtr_weight' (in [0, 1]), got {json.dumps(recorded)} ({error})"
                ) from None
    config = {**recorded}
    if method is not None and method != config["method"]:
        config = {"method": method, "gtr_weight": DEFAULT_FUSION["gtr_weight"]}  # a weight is its method's
    if gtr_weight is not None:
        config["gtr_weight"] = gtr_weight
    return Fusion(**config)
