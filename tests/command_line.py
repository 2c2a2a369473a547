"""Helpers of the command-line tests: what the command printed, and an input it accepts as a model."""


def empty_model_dir(tmp_path):
    """An (empty) model directory beside the test's other files, never containing them."""
    (tmp_path / "model").mkdir(exist_ok=True)
    return str(tmp_path / "model")


def one_line_error(capsys):
    """The one line the command wrote to stderr (fails the test if it wrote another number of lines)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]
