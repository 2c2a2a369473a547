"""The types of what an `Index` takes and answers: `Hit` (a search hit), `Document` (`Index.get`),
`IndexUpdate` (what `Index.update`, `add`, `delete` and `compact` changed), and the arguments' aliases."""

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NotRequired, Self, TypedDict

from gtr_keras.filters.expressions import Filter
from gtr_keras.models.text_encoder import TextEncoder, TextPairScorer

MetadataValue = str | int | float | bool | list[str]
# An index directory, or several (shards of one index).
IndexPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
# A model as `Index` takes it: a model directory or name, a loaded encoder, a `GTRTextEmbedder` (a callable
# Keras model) or a function of no arguments that loads one.
ModelLike = str | os.PathLike[str] | TextEncoder | Callable[[], Any]
# A reranker as `Index.search` takes it: its model directory or checkpoint, a loaded one (`gtr_keras.load`, a
# `Reranker` model) or a function of no arguments that loads one.
RerankerLike = str | os.PathLike[str] | TextPairScorer | Callable[[], Any]
# A filter: a clause, a list of clauses (ANDed) or a `Filter`.
FilterLike = str | Sequence[str] | Filter
# Document ids: one (a string, or an integer as a corpus's `_id` may be) or an iterable of them.
IdsLike = str | int | Iterable[str | int]


class Hit(TypedDict):
    """One hit of `Index.search`, what `gtr-keras search --json` prints: the document's `id`, its `score`
    (GTR's dot product, BM25's, the fused score or the reranker's), and its `title` and `text` where the
    index stores its document (absent otherwise); in a passages index, the `passage` that scored: its
    characters `{"start", "end"}` in `text` (docs/long-documents.md).

    Example:
    >>> hit: Hit = {"id": "d1", "score": 0.81, "title": "", "text": "lift on a wing"}
    """

    id: str
    score: float
    title: NotRequired[str]
    text: NotRequired[str]
    passage: NotRequired[dict[str, int]]


class Document(TypedDict):
    """A document of an index (`Index.get`): its `id`, `title`, `text` and `metadata` (the fields filters
    search, docs/filters.md), as its corpus gave them; `""` and `{}` where the index stores none (an index
    built from embeddings without their documents).

    Example:
    >>> document: Document = {"id": "d1", "title": "", "text": "lift on a wing", "metadata": {"year": 2019}}
    """

    id: str
    title: str
    text: str
    metadata: dict[str, MetadataValue]


@dataclasses.dataclass(frozen=True)
class IndexUpdate:
    """What one update of an index directory changed (`Index.update`, `add`, `delete`, `compact`;
    `index_updates.update_index`), and the generation it left.

    Attributes:
        added: the ids of the documents added (not in the index before), in the order given.
        replaced: the ids of the documents replaced (in the index before), in the order given.
        deleted: the ids deleted, in the order given (with `missing_ok`, those that were in the index).
        generation: the index's generation after the update (and its compaction, when one followed).
        documents: the documents the index holds after it.
        segments: its segments after it.

    A rerun of the update last committed (one killed after its commit) changes nothing: its `added`,
    `replaced` and `deleted` are empty.

    Example:
    >>> change = index.update(add="new.jsonl", delete=["d7"])
    >>> change.added, change.replaced, change.deleted
    (('n1', 'n2'), ('d1',), ('d7',))
    """

    added: tuple[str, ...]
    replaced: tuple[str, ...]
    deleted: tuple[str, ...]
    generation: int
    documents: int
    segments: int

    @classmethod
    def of(
        cls,
        manifest: dict[str, Any],
        added: Iterable[str] = (),
        replaced: Iterable[str] = (),
        deleted: Iterable[str] = (),
    ) -> Self:
        """The `IndexUpdate` that left the search index `manifest` (`segments`, `generation`)."""
        live = sum(segment["num_rows"] - segment["num_deleted"] for segment in manifest["segments"])
        return cls(
            tuple(added), tuple(replaced), tuple(deleted), manifest["generation"], live, len(manifest["segments"])
        )
