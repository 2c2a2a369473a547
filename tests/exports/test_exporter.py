"""`gtr_keras.export`: what `gtr-keras export` writes, the output and the options checked before the model
loads."""

import numpy as np
import pytest

import gtr_keras
from gtr_keras.errors import DataError, UserError


@pytest.mark.large
def test_a_model_and_its_index_export_as_the_command_line_exports_them(tmp_path, tiny_model_dir, tiny_encoder):
    index = gtr_keras.Index.build(
        tmp_path / "idx", gtr_keras.Corpus(["a", "b"], ["", ""], ["wing lift", "heat flow"]), tiny_model_dir
    )
    written = gtr_keras.export(tiny_model_dir, str(tmp_path / "exports"), index=index, searcher="brute-force")
    assert written == [str(tmp_path / "exports/encoder/1"), str(tmp_path / "exports/searcher/1")]
    encoder = gtr_keras.load(written[0])
    np.testing.assert_allclose(encoder.encode_queries(["lift"]), tiny_encoder.encode_queries(["lift"]), atol=1e-5)
    again = gtr_keras.export(tiny_encoder, str(tmp_path / "exports"))  # a loaded model; the next version
    assert again == [str(tmp_path / "exports/encoder/2")]


def test_options_and_outputs_are_checked_before_the_model_loads(tmp_path, monkeypatch):
    from gtr_keras import saving

    monkeypatch.setattr(saving, "load_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    with pytest.raises(UserError, match="format must be one of savedmodel, litert, onnx, openvino, got 'tflite'"):
        gtr_keras.export("gtr_small_distilled_en", str(tmp_path / "out"), "tflite")
    with pytest.raises(UserError, match="index: format 'litert' takes no index"):
        gtr_keras.export("gtr_small_distilled_en", str(tmp_path / "out"), "litert", index=str(tmp_path))
    with pytest.raises(UserError, match="quantize: format 'savedmodel' takes no quantize"):
        gtr_keras.export("gtr_small_distilled_en", str(tmp_path / "out"), quantize="int8")
    mine = tmp_path / "mine" / "encoder" / "1"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not replaced, it holds notes.txt"):
        gtr_keras.export("gtr_small_distilled_en", str(tmp_path / "mine"), version=1)


@pytest.mark.large
@pytest.mark.slow
@pytest.mark.parametrize("export_format", ["savedmodel", "onnx"])
def test_an_export_with_dimensions_bakes_the_truncation_into_its_graph(tmp_path, tiny_encoder, export_format):
    from gtr_keras.utils.dimensions import truncate

    written = gtr_keras.export(tiny_encoder, tmp_path / "out", export_format, dimensions=16)
    export = gtr_keras.load(written[0] if export_format == "savedmodel" else tmp_path / "out")
    texts = ["lift on a wing", "the boundary layer of a supersonic nozzle"]
    assert export.embedding_dim == 16
    for encode in ("encode_queries", "encode_documents"):
        expected = truncate(getattr(tiny_encoder, encode)(texts), 16)
        np.testing.assert_allclose(getattr(export, encode)(texts), expected, atol=1e-5)
    with pytest.raises(UserError, match="dimensions: must be an integer from 1 to 64, got 65"):
        gtr_keras.export(tiny_encoder, tmp_path / "bad", export_format, dimensions=65)
