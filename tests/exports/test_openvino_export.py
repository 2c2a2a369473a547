import os

import numpy as np
import pytest
from runtime_inputs import token_batches

from gtr_keras.cli.main import main

pytest.importorskip("openvino", reason="openvino is not installed (pip install 'gtr-keras[openvino]')")

from gtr_keras.exports.openvino_export import OPENVINO_FILES, export_openvino  # noqa: E402
from gtr_keras.exports.runtime_encoder import RuntimeEncoder  # noqa: E402


@pytest.fixture(scope="module")
def openvino_export(tmp_path_factory, tiny_encoder):
    return os.path.dirname(export_openvino(tiny_encoder, str(tmp_path_factory.mktemp("openvino") / "export")))


def test_openvino_matches_the_model_at_dynamic_batch_sizes_and_lengths(openvino_export, tiny_encoder):
    runtime = RuntimeEncoder(openvino_export)
    for ids, mask in token_batches(1100):
        np.testing.assert_allclose(runtime.embed_tokens(ids, mask), tiny_encoder.embed_tokens(ids, mask), atol=1e-5)


def test_the_weights_are_stored_in_float32(openvino_export, tiny_encoder):
    float32_bytes = 4 * tiny_encoder.model.count_params()  # float16 would be half of it
    assert os.path.getsize(os.path.join(openvino_export, OPENVINO_FILES[1])) > 0.95 * float32_bytes


@pytest.mark.large
def test_cli_openvino_export_writes_the_ir(tiny_model_dir, tmp_path):
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path / "ov"), "--format", "openvino"]) == 0
    assert sorted(os.listdir(tmp_path / "ov")) == [
        "checksums.json",
        "encoder.bin",
        "encoder.xml",
        "export.json",
        "spiece.model",
    ]
    assert RuntimeEncoder(tmp_path / "ov").encode_queries(["wing lift"]).shape == (1, 64)
