"""`LiveIndex`: an `Index` of an index directory's newest generation, swapped in whole after an update.

A thread looks at the index's commit points every `poll_interval` seconds: the
modification times of `retriever.json` (a rebuild), `index/segments.json` (an
update's commit, `segments`) and its generation number, the BM25 side's
settings (its rebuild after the commit) and `index/tuned.json` (a setting
`gtr-keras tune` recorded). When one changed, it opens the index again
(`gtr_keras.Index`, the model checked and the BM25 side loaded with it) while
requests go on with the loaded generation, and swaps the new one in by one
assignment once it loaded whole. A request takes the generation's `Index` once
and keeps it to its end, searching through `Index.search`, so it answers from
one generation; a failed load (an update between its dense commit and its BM25
side's rebuild, a rebuild's rename) keeps the loaded generation and is tried
again at the next look, and so is a load during which a commit point moved
(its parts might be of two generations, or of another than the number read).

For an engine's collection (`collection`, `index_dir` then its target: `qdrant:PATH`, ...) the one generation
is an `EngineIndex`, loaded once: its writes are the engine's, which answers each search from its own state.

Several servers (replicas) over one index directory each watch it so, and each
answers from the new generation within a poll interval and one load of the
commit. A server may start listening before the first generation is loaded
(`wait=False`): `current` is None until then.

A loaded generation stays whole however many updates follow: its vectors,
ScaNN searchers, documents and BM25 index are in memory, or memory-mapped
(exact vectors) from files that updates never rewrite and whose removal
leaves the mapping readable (docs/live-indexes.md, "What a reader sees"). The
last request holding an old generation frees it.
"""

import collections
import logging
import os
import threading
import time

from gtr_keras.errors import DataError, UserError
from gtr_keras.lexical.bm25 import SETTINGS_JSON
from gtr_keras.lexical.bm25_side import has_bm25_side
from gtr_keras.retrieval.index import Index
from gtr_keras.server.deadlines import LONGEST_WAIT
from gtr_keras.storage.layout import BM25_SUBDIR, INDEX_SUBDIR, MANIFEST_JSON, RETRIEVER_JSON, TUNED_JSON
from gtr_keras.storage.segments import manifest_generation, read_manifest
from gtr_keras.utils import files

logger = logging.getLogger(__name__)

LOADS = 10  # tries of the first load, each undone by a commit during it, before the index is refused

Generation = collections.namedtuple("Generation", "index bm25_problem number loaded_at search_settings")
Generation.__doc__ = """One loaded generation: its `Index` (its model checked, its BM25 side loaded), why it has no
BM25 side (or None), the manifest's generation number (0 for an index never updated), when it was loaded
(`time.time()`) and the dense index's search-time settings in effect (`Index.search_settings`: `tuned.json`'s,
else the index's own; `{}` for exact float32)."""


class LiveIndex:
    """Holds an `Index` of an index directory's newest generation, loading updates as they commit.

    Args:
        index_dir: an index directory (`gtr-keras index`), local or on any file system TensorFlow knows.
        encoder: the model the index was built with (checked as the index's model at each load).
        query_encoder: the model as searches encode their queries with it (`batcher.query_encoder`, so that
            they share the encoder's batches): the `Index`'s model; default `encoder`.
        fusion: the `Fusion` of hybrid searches without options of their own.
        poll_interval: seconds between looks at the index's commit points; None: never reloads.
        collection: with an engine target as `index_dir`, the collection searched (`Index.open`'s).
        wait: load the first generation before returning (its errors raised here); False: the watch's
            thread loads it, `current` being None until then, and its error, if any, in `error` (the watch
            then ends).

    Example:
    >>> live = LiveIndex("indexes/scifact", gtr_keras.load("gtr_small_distilled_en"), poll_interval=2.0)
    >>> live.current.index.search(["vitamin D and fractures"], k=5, retriever="bm25")[0][0]["id"]
    >>> live.close()
    """

    def __init__(
        self, index_dir, encoder, query_encoder=None, fusion=None, poll_interval=2.0, wait=True, collection=None
    ):
        if poll_interval is not None and not 0 < poll_interval <= LONGEST_WAIT:
            raise UserError(f"poll_interval must be seconds from 0 to {LONGEST_WAIT:g}, or None, got {poll_interval!r}")
        if not wait and poll_interval is None:
            raise UserError("a LiveIndex that loads its first generation in the background needs a poll_interval")
        self.index_dir = os.fspath(index_dir)
        self.collection = collection
        self.encoder = encoder
        self.query_encoder = query_encoder or encoder
        self.fusion = fusion
        self.poll_interval = poll_interval
        self.reloads = 0
        self.failures = 0  # loads of a new generation that failed
        self.error = None  # why the first generation could not be loaded (`wait=False`)
        self.current = None
        self._watched = (
            os.path.join(self.index_dir, RETRIEVER_JSON),
            os.path.join(self.index_dir, INDEX_SUBDIR, MANIFEST_JSON),
            os.path.join(self.index_dir, BM25_SUBDIR, SETTINGS_JSON),
            os.path.join(self.index_dir, INDEX_SUBDIR, TUNED_JSON),
        )
        self._missing_bm25_seen = False
        self._stop = threading.Event()
        self._thread = None
        if wait:
            self._first_load()
        if poll_interval is not None:
            self._thread = threading.Thread(target=self._watch, name="gtr-keras-live-index", daemon=True)
            self._thread.start()

    def _first_load(self):
        for _ in range(LOADS):
            stamp = self._commit_points()
            loaded = self._load()
            if self._whole(loaded, stamp):
                self._stamp, self.current = stamp, loaded  # replaced as a whole: a request reads it once
                return
        raise UserError(f"{self.index_dir}: changed during each of {LOADS} loads; serve it when its updates pause")

    def _commit_points(self):
        """The watched files' modification times and the manifest's generation (None where unreadable)."""
        if self.collection is not None:
            return (), 0  # an engine's collection: no files of its own to watch
        times = tuple(files.modified_ns(path) for path in self._watched)
        return times, manifest_generation(os.path.join(self.index_dir, INDEX_SUBDIR))

    def _whole(self, loaded, stamp):
        """True when `loaded` is of one generation, the one it names: no commit point moved since `stamp`
        was taken before the load."""
        return loaded.number == stamp[1] and self._commit_points() == stamp

    def _load(self):
        """The `Generation` of the index as it is now: its `Index`, the model checked and both sides loaded."""
        if self.collection is not None:
            index = Index.open(self.index_dir, self.query_encoder, collection=self.collection)
            index.encoder  # noqa: B018  (the model checked now, not in a search)
            return Generation(index, f"{self.index_dir} is searched through its engine: GTR only", 0, time.time(), {})
        manifest = read_manifest(os.path.join(self.index_dir, INDEX_SUBDIR))  # before: a commit meanwhile reloads
        index = Index.open(self.index_dir, self.query_encoder)
        index.encoder  # noqa: B018  (the model checked now, not in a search)
        try:
            index.bm25  # noqa: B018  (loaded with the dense side: a search never loads a later generation's)
            problem = None
        except DataError as error:
            if has_bm25_side(self.index_dir):
                raise  # a malformed side, not a missing one
            problem = str(error)
        number = manifest["generation"] if manifest else 0
        return Generation(index, problem, number, time.time(), index.search_settings)

    def check_now(self):
        """Loads the index again if a commit point changed since the last load; True when it swapped."""
        stamp = self._commit_points()
        if stamp == self._stamp:
            return False
        try:
            loaded = self._load()
        except (UserError, OSError) as error:
            self.failures += 1
            logger.warning("gtr-keras serve: note: serving generation %d for now: %s", self.current.number, error)
            return False
        if not self._whole(loaded, stamp):
            return False  # a commit during the load: loaded again at the next look
        if loaded.bm25_problem and not self.current.bm25_problem and not self._missing_bm25_seen:
            self._missing_bm25_seen = True  # perhaps the moment of the side's replacement: look again first
            return False
        self._missing_bm25_seen = False
        self.current, self._stamp = loaded, stamp
        self.reloads += 1
        return True

    def _watch(self):
        if self.current is None:
            try:
                self._first_load()
            except Exception as error:  # a bad index: the server says it and stops (`serve`)
                self.error = error
                return
        while not self._stop.wait(self.poll_interval):
            try:
                self.check_now()
            except Exception as error:  # a bug must not end the watch: the loaded generation keeps serving
                self.failures += 1
                logger.warning("gtr-keras serve: warning: reloading %s: %r", self.index_dir, error)

    def close(self, timeout=10.0):
        """Ends the watch, waiting up to `timeout` s for a load in progress (0: no wait; the thread, a daemon,
        ends after it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
