"""The `RunInference` model handlers of the Beam pipelines: `GTRModelHandler` embeds document texts with a
gtr-keras model loaded once per worker; `GTRWindowHandler` cuts documents into the token windows of a passages
setting (`retrieval.passages.window_corpus`, with the worker's model and its tokenizer) and embeds each window.

Example:
>>> handler = KeyedModelHandler(GTRModelHandler("models/gtr-base"))  # doctest: +SKIP
>>> pairs | RunInference(handler)  # (key, text) -> (key, PredictionResult)  # doctest: +SKIP
"""

import contextlib
import os

from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from gtr_keras import saving
from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import CheckpointError
from gtr_keras.models.model_files.fingerprint import fingerprint
from gtr_keras.retrieval.passages import row_id, split_row_id, window_corpus
from gtr_keras.utils import files


@contextlib.contextmanager
def _local_model_dir(model_dir):
    """`model_dir` itself when local; else a temporary local copy of its files (a preset's, weight shards
    included), removed when the block ends (the model is in memory by then)."""
    if FileSystems.get_scheme(model_dir) is None:
        yield model_dir
        return
    with files.temporary_directory("gtr-keras-model-") as local:
        patterns = [FileSystems.join(model_dir, "*"), FileSystems.join(model_dir, "assets", "*", "*")]
        for match in FileSystems.match(patterns):
            for metadata in match.metadata_list:
                relative = metadata.path[len(model_dir) :].lstrip("/")
                os.makedirs(os.path.join(local, os.path.dirname(relative)), exist_ok=True)
                with FileSystems.open(metadata.path) as src, open(os.path.join(local, relative), "wb") as dst:
                    while chunk := src.read(1 << 24):
                        dst.write(chunk)
        yield local


class GTRModelHandler(ModelHandler):
    """A `RunInference` model handler that embeds document texts with a gtr-keras model.

    Each `RunInference` batch is a group of `group_size` documents; the
    `Encoder` sorts a group by token length and runs forward passes of
    `batch_size`, so a larger group wastes less compute on padding.

    Args:
        model_dir: a gtr-keras model directory, local or on a Beam filesystem
            (`gs://...`: copied to local disk on each worker).
        batch_size: documents per forward pass.
        group_size: documents per `RunInference` batch; default `16 * batch_size`.
        large_model: load one model per machine, shared by all SDK worker
            processes, instead of one per process.
        model_sha256: the model's fingerprint (`fingerprint.fingerprint`) as
            the pipeline's driver read it: a worker that loads another model
            from `model_dir` (replaced while the pipeline runs) fails instead
            of embedding with it.
        load_model_args: keyword arguments of `saving.load_model` (`dtype`,
            `document_length`, ...), the same on every worker.

    Example:
    >>> handler = KeyedModelHandler(GTRModelHandler("models/gtr-base"))  # doctest: +SKIP
    >>> pairs | RunInference(handler)  # (id, text) -> (id, PredictionResult)  # doctest: +SKIP
    """

    def __init__(
        self, model_dir, batch_size=32, group_size=None, large_model=False, model_sha256=None, load_model_args=None
    ):
        group_size = group_size or 16 * batch_size
        super().__init__(min_batch_size=group_size, max_batch_size=group_size, large_model=large_model)
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.model_sha256 = model_sha256
        self.load_model_args = dict(load_model_args or {})

    def load_model(self):
        with _local_model_dir(self.model_dir) as local:
            encoder = saving.load_model(local, **self.load_model_args)
        if self.model_sha256 is not None:
            found = fingerprint(encoder)
            if found != self.model_sha256:
                raise CheckpointError(
                    f"{self.model_dir}: the model changed while the pipeline ran (fingerprint {found}, "
                    f"{self.model_sha256} when it started); rerun once the model directory stays the same"
                )
        return encoder

    def run_inference(self, batch, model, inference_args=None):
        embeddings = model.encode_documents(list(batch), self.batch_size, progress=False)
        return [PredictionResult(text, embedding) for text, embedding in zip(batch, embeddings)]

    def get_num_bytes(self, batch):
        return sum(len(text.encode("utf-8")) for text in batch)

    def get_metrics_namespace(self):
        return "gtr_keras"


class GTRWindowHandler(GTRModelHandler):
    """A `RunInference` model handler that cuts documents into the windows of a passages setting, as the
    in-process build does (`window_corpus`, with the worker's model: its tokenizer and document budget), and
    embeds each window's `"title window"`.

    Its elements are the keys of `beam_pipeline.read_documents`, `(id, file_number, line_no, title, text,
    metadata)`; the inference of each is its window rows `[(row id, window text, embedding), ...]` in window
    order, the row ids those of `passages.row_id`.

    Args:
        model_dir: as for `GTRModelHandler`.
        passages: the `{"tokens", "stride"}` setting (`passages.passages_setting`, checked against the model's
            budget by the launching process).
        **options: `GTRModelHandler`'s `batch_size`, `group_size`, `large_model`, `model_sha256`.

    Example:
    >>> handler = GTRWindowHandler("models/gtr-base", {"tokens": 64, "stride": 32})  # doctest: +SKIP
    >>> keys | RunInference(handler)  # key -> PredictionResult(key, window rows)  # doctest: +SKIP
    """

    def __init__(self, model_dir, passages, **options):
        super().__init__(model_dir, **options)
        self.passages = passages

    def run_inference(self, batch, model, inference_args=None):
        positions = [str(i) for i in range(len(batch))]  # row ids name the batch position of their document
        rows, _ = window_corpus(
            Corpus(positions, [key[3] for key in batch], [key[4] for key in batch]), model, self.passages
        )
        embeddings = model.encode_documents(rows.joined(), self.batch_size, progress=False)
        windows = [[] for _ in batch]
        for row, text, embedding in zip(rows.ids, rows.texts, embeddings):
            position, start, end = split_row_id(row)
            windows[int(position)].append((row_id(batch[int(position)][0], start, end), text, embedding))
        return [PredictionResult(key, key_windows) for key, key_windows in zip(batch, windows)]

    def get_num_bytes(self, batch):
        return super().get_num_bytes([f"{key[3]} {key[4]}" for key in batch])
