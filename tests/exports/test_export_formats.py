"""`FORMATS`: one entry per export format, read alike by `gtr-keras export` and the Python API."""

import pytest

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.exports import export_formats
from gtr_keras.exports.export_formats import FORMATS, format_of_directory, missing_package_hint


@pytest.fixture
def without(monkeypatch):
    """Makes `find_spec` answer None for the given modules, as if they were not installed."""

    def hide(*modules):
        found = export_formats.importlib.util.find_spec
        monkeypatch.setattr(
            export_formats.importlib.util, "find_spec", lambda name: None if name in modules else found(name)
        )

    return hide


def test_every_format_names_what_it_needs_takes_and_writes():
    assert list(FORMATS) == ["savedmodel", "litert", "onnx", "openvino"]
    for export_format in FORMATS.values():
        assert set(export_format.options) <= set(export_format.flags)
        assert export_format.marks and ":" in export_format.writer and ":" in export_format.encoder
    assert (FORMATS["onnx"].extra, FORMATS["openvino"].extra, FORMATS["litert"].extra) == ("onnx", "openvino", None)


def test_a_missing_package_is_one_hint_from_the_command_and_from_python(without, tiny_encoder, tmp_path, capsys):
    from gtr_keras.exports.onnx_export import export_onnx

    without("tf2onnx")
    hint = "onnx needs tf2onnx: pip install 'gtr-keras[onnx]'"
    assert missing_package_hint(FORMATS["onnx"], "write") == hint
    with pytest.raises(UserError) as error:
        export_onnx(tiny_encoder, str(tmp_path / "onnx"))
    assert str(error.value) == hint
    with pytest.raises(SystemExit):
        main(["export", "--model", "m", "--out", str(tmp_path / "o"), "--format", "onnx"])
    assert f"gtr-keras export: error: argument --format: {hint} (see" in capsys.readouterr().err


def test_an_export_directory_is_recognised_by_its_files(tmp_path):
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "export.json").write_text("{}")
    assert format_of_directory(tmp_path / "onnx") is None  # no model file
    (tmp_path / "onnx" / "encoder.onnx").write_bytes(b"")
    assert format_of_directory(tmp_path / "onnx").name == "onnx"
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    assert format_of_directory(tmp_path / "sm").name == "savedmodel"
    assert format_of_directory(tmp_path) is None


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--format", "litert", "--quantize", "int8"], "argument --quantize: applies to --format onnx, not litert"),
        (["--format", "onnx", "--version", "2"], "argument --version: TF Serving's version directories"),
        (["--format", "openvino", "--precision", "bfloat16"], "argument --precision: --format openvino exports"),
    ],
)
def test_a_flag_of_another_format_is_refused_first(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--model", "m", "--out", str(tmp_path / "o"), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
