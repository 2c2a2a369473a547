"""ScaNN's searcher as a SavedModel resource: its serialized assets kept in the SavedModel, the searcher rebuilt
from them once when the SavedModel is loaded.
"""

import copy
import os
import shutil
import uuid

import numpy as np
import tensorflow as tf

from gtr_keras.storage.layout import (
    SCANN_ARRAY_FILES,
    SCANN_CODES,
    SCANN_DATAPOINT_TO_TOKEN,
    SCANN_TENSOR_FILES,
)
from gtr_keras.storage.scann_codes import BLOCK_ROWS, CodeRows


class ScannResource(tf.saved_model.experimental.TrackableResource):
    """A ScaNN searcher rebuilt from its serialized assets once per SavedModel load.

    The searcher's protos and arrays travel as SavedModel assets (its AH codes
    unpacked, a block at a time, as ScaNN's ops read them: `scann_codes`); the
    resource reads them when it is created (once, at load), so a search call
    never rebuilds the index.

    Args:
        scann_dir: a ScaNN searcher serialized by `scann_ops_pybind` (`SearchIndex.save`).
        raw_dir: a scratch directory for raw copies of its `.npy` arrays, which
            the graph reads with `tf.io.decode_raw`, and of its other files.
        prefix: the start of its assets' names, unique among the searchers of one SavedModel (whose
            assets are named by their files' names).
    """

    def __init__(self, scann_dir, raw_dir, prefix=""):
        from scann.scann_ops.py import scann_ops

        self._tensors_to_scann = scann_ops.tensors_to_scann
        # ScaNN's resource op would otherwise share one searcher among every SavedModel and every part of one.
        self._shared_name = f"gtr-keras-scann-{uuid.uuid4().hex}"
        self._files = {}
        for name in SCANN_TENSOR_FILES:
            shutil.copyfile(os.path.join(scann_dir, name), os.path.join(raw_dir, prefix + name))
            self._files[name] = tf.saved_model.Asset(os.path.join(raw_dir, prefix + name))
        self._specs = {}
        for name in SCANN_ARRAY_FILES:
            rows = CodeRows(scann_dir) if name == SCANN_CODES else np.load(os.path.join(scann_dir, name), mmap_mode="r")
            raw_path = os.path.join(raw_dir, prefix + name.replace(".npy", ".raw"))
            with open(raw_path, "wb") as f:
                for start in range(0, len(rows), BLOCK_ROWS):
                    f.write(np.ascontiguousarray(rows[start : start + BLOCK_ROWS]))
            self._files[name] = tf.saved_model.Asset(raw_path)
            self._specs[name] = (rows.dtype.name, list(rows.shape))
        super().__init__()

    def _build(self, path_of):
        def read(name):
            return tf.io.read_file(path_of(self._files[name]))

        def array(name):
            dtype, shape = self._specs[name]
            return tf.reshape(tf.io.decode_raw(read(name), tf.as_dtype(dtype)), shape)

        none = tf.constant(0.0)  # no float32 dataset (reordering is on int8) and no norms (dot product)
        return self._tensors_to_scann(
            none,
            tf.reshape(read("scann_config.pb"), [1]),
            tf.reshape(read("serialized_partitioner.pb"), [1]),
            array(SCANN_DATAPOINT_TO_TOKEN),
            tf.reshape(read("ah_codebook.pb"), [1]),
            array(SCANN_CODES),
            array("int8_dataset.npy"),
            array("int8_multipliers.npy"),
            none,
            shared_name=self._shared_name,
        )

    def _create_resource(self):
        return self._build(lambda asset: asset.asset_path)

    def _named_assets(self):
        return {f"asset_{name.split('.')[0]}": asset for name, asset in self._files.items()}

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        return {**super()._trackable_children(save_type, **kwargs), **self._named_assets()}

    def _deserialization_dependencies(self, children):
        return self._named_assets()

    def _export_to_saved_model_graph(self, object_map, tensor_map, **unused_kwargs):
        # The graph for TF Serving's loader reads the assets through their
        # exported path variables (mapped first: see _deserialization_dependencies).
        exported = copy.copy(self)
        with tf.device(self._resource_device):
            handle = self._build(lambda asset: tensor_map[asset.asset_path])
        exported._resource_handle = handle
        object_map[self] = exported
        tensor_map[self.resource_handle] = handle
        return [self.resource_handle]
