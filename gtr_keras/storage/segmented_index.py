"""`SegmentedIndex`: several search indexes searched as one, the segments of an updated index or shards.

Each part answers its own top `k` among its rows that are not deleted, and
the answers are merged by score. Exact parts score every live row and order
equal scores by id, descending, in each part as in the merge, so the merged
top `k` is exactly that of one exact index over the union. A ScaNN part with
deleted rows is asked for more results than `k` (in proportion to its deleted
fraction, and a few more), and a query row left short is asked again for twice
as many, up to `k` plus all its deleted rows, so deletions cost search speed,
never results; compaction
(`segment_writer.compact_search_index`) gives the speed back.
"""

import functools
import math

import numpy as np

from gtr_keras.errors import DataError, UserError
from gtr_keras.storage import exact_search
from gtr_keras.storage.layout import NO_FLOAT32, Ids, check_embeddings
from gtr_keras.utils.records import check_positive_int

# A ScaNN part with deleted rows is asked for k / (live fraction) + this many results, then twice as many
# for the queries still short of k live ones, and so on.
_MARGIN = 3


class SegmentedIndex:
    """Top-k dot-product search over several `SearchIndex` parts with deleted rows, as one index.

    `SearchIndex.load` gives one for an updated index directory (its segments)
    or for several directories (shards). Row `i` of the whole is the `i`-th
    live row, the parts in order.

    Args:
        parts: `(index, deleted)` pairs in row order: a `SearchIndex` and the
            bool mask of its deleted rows (None: none). Every part has one D.
        names: one name per part, for messages (default: `part 0`, ...).

    It answers `SearchIndex`'s interface (`ids`, `dims`, `kind`, `params`,
    `parts`, `search`, `search_ids`, `tie_ranks`, `live_embeddings`).

    Attributes:
        parts, names, dims.
        ids: the live ids, in row order (`Ids`).
        kind: the parts' kind (`"exact"` or `"scann"`), `"mixed"` when they differ.
        params: the ScaNN parameters of the first ScaNN part, or None.
        embeddings: None (`live_embeddings` gives an exact index's vectors).

    Example:
    >>> a = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"))
    >>> b = SearchIndex(["d2"], np.array([[0.6, 0.8]], dtype="float32"))
    >>> SegmentedIndex([(a, None), (b, None)]).search_ids(np.array([[0.0, 1.0]], dtype="float32"), k=2)[0]
    [['d1', 'd2']]
    """

    def __init__(self, parts, names=None):
        self.parts = [(index, deleted) for index, deleted in parts]
        self.names = list(names or (f"part {i}" for i in range(len(self.parts))))
        if not self.parts:
            raise UserError("A SegmentedIndex needs at least one part.")
        self.dims = self.parts[0][0].dims
        for (index, _), name in zip(self.parts, self.names):
            if index.dims != self.dims:
                raise DataError(f"{name}: {index.dims} dims, but {self.names[0]} has {self.dims}")
        kinds = {index.kind for index, _ in self.parts}
        self.kind = kinds.pop() if len(kinds) == 1 else "mixed"
        self.params = next((index.params for index, _ in self.parts if index.kind == "scann"), None)
        self.embeddings = None
        self.ids = Ids(np.concatenate([self._live_ids(index, deleted) for index, deleted in self.parts]))
        if not len(self.ids):
            raise UserError("A SegmentedIndex needs at least one live row.")
        self._offsets = np.cumsum([0] + [len(self._live_ids(index, deleted)) for index, deleted in self.parts])
        if len(np.unique(self.ids.array)) != len(self.ids):
            self._name_duplicate()

    @staticmethod
    def _live_ids(index, deleted):
        return index.ids.array if deleted is None else index.ids.array[~deleted]

    def _name_duplicate(self):
        seen = {}
        for (index, deleted), name in zip(self.parts, self.names):
            for id_ in self._live_ids(index, deleted):
                if id_ in seen:
                    raise DataError(
                        f"{name}: id {id_.decode('utf-8')!r} is also in {seen[id_]}; an id may be in one shard only"
                    )
                seen[id_] = name

    @functools.cached_property
    def tie_ranks(self):
        """Each live row's place when the ids are sorted in descending order (`exact_search.tie_ranks`)."""
        return exact_search.tie_ranks(self.ids.array)

    @functools.cached_property
    def _positions(self):
        """For each part with deletions, the row of the whole of each of its rows (-1 for a deleted one)."""
        positions = []
        for (_, deleted), offset in zip(self.parts, self._offsets):
            if deleted is None:
                positions.append(None)
                continue
            position = np.cumsum(~deleted) - 1 + offset
            position[deleted] = -1
            positions.append(position)
        return positions

    def search(self, query_embeddings, k):
        """Finds the `k` best-scoring live rows for each query, as `SearchIndex.search` does.

        Returns:
            `(indices, scores)`: int64 `[n, min(k, N)]` rows into `ids` and
            their float32 dot products, best first.
        """
        queries = check_embeddings(query_embeddings, "query_embeddings")
        if queries.shape[1] != self.dims:
            raise UserError(f"query_embeddings have {queries.shape[1]} dims, the index has {self.dims}.")
        k = min(check_positive_int(k, "k"), len(self.ids))
        if len(self.parts) == 1 and self.parts[0][1] is None:
            return self.parts[0][0].search(queries, k)
        rows, scores = [], []
        for (index, deleted), positions, offset in zip(self.parts, self._positions, self._offsets):
            live = len(index.ids) - (0 if deleted is None else int(deleted.sum()))
            if not min(k, live):
                continue
            part_rows, part_scores = self._search_part(index, deleted, queries, min(k, live))
            rows.append(part_rows + offset if positions is None else positions[part_rows])
            scores.append(part_scores)
        rows, scores = np.concatenate(rows, axis=1), np.concatenate(scores, axis=1)
        order = np.lexsort((self.tie_ranks[rows], -scores), axis=-1)[:, :k]
        return np.take_along_axis(rows, order, axis=1), np.take_along_axis(scores, order, axis=1)

    @staticmethod
    def _search_part(index, deleted, queries, k):
        """The top `k` live rows of one part: `(rows of the part, scores)`, each `[n, k]`."""
        if index.kind == "exact":
            return index.vectors.top_k(queries, k, index.tie_ranks, deleted)
        if deleted is None:
            return index.search(queries, k)
        n, num_deleted = len(index.ids), int(deleted.sum())
        rows = np.empty((len(queries), k), np.int64)
        scores = np.empty((len(queries), k), np.float32)
        pending = np.arange(len(queries))
        fetch = math.ceil(k * n / (n - num_deleted)) + _MARGIN
        while len(pending):
            fetch = min(fetch, n, k + num_deleted)  # k + every deleted row: k live rows among them
            found_rows, found_scores = index.search(queries[pending], fetch)
            keep = ~deleted[found_rows]
            first = np.argsort(~keep, axis=1, kind="stable")[:, :k]
            full = keep.sum(axis=1) >= k
            rows[pending[full]] = np.take_along_axis(found_rows, first, axis=1)[full]
            scores[pending[full]] = np.take_along_axis(found_scores, first, axis=1)[full]
            pending = pending[~full]
            fetch *= 2
        return rows, scores

    def search_ids(self, query_embeddings, k):
        """Like `search`, but returns ids: `(list of lists of str, scores)`."""
        indices, scores = self.search(query_embeddings, k)
        return [[self.ids[i] for i in row] for row in indices], scores

    def set_search_params(self, setting):
        """Sets search-time parameters of every part (`SearchIndex.set_search_params`)."""
        for index, _ in self.parts:
            index.set_search_params(setting)

    def live_embeddings(self):
        """The float32 `[N, D]` vectors of the live rows of an index whose parts all keep them, in row order."""
        if any(index.embeddings is None for index, _ in self.parts):
            raise UserError(NO_FLOAT32)
        return np.concatenate(
            [index.embeddings if deleted is None else index.embeddings[~deleted] for index, deleted in self.parts]
        )
