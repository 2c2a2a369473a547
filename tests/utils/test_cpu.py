import numpy as np
import pytest

from gtr_keras.cli.main import main
from gtr_keras.utils import cpu

EPYC = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n\nprocessor\t: 1\nflags\t\t: fpu\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse4_2 avx2 fma\n"


def test_the_first_cpus_flags_are_read(tmp_path):
    (tmp_path / "cpuinfo").write_text(EPYC)
    assert cpu.cpu_flags(str(tmp_path / "cpuinfo")) == {"fpu", "avx2", "avx512f", "avx512_bf16", "avx512_vnni"}
    assert cpu.cpu_flags(str(tmp_path / "missing")) is None
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert cpu.cpu_flags(str(tmp_path / "empty")) is None


@pytest.mark.parametrize(
    "cpuinfo, noted",
    [(EPYC, False), (AVX2, True), ("flags : avx2 amx_bf16 amx_tile\n", False), (None, False)],
)
def test_the_note_is_given_only_when_the_flags_lack_bfloat16(cpuinfo, noted, tmp_path):
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text(cpuinfo)
    note = cpu.bfloat16_note(str(path))
    assert (note is not None) == noted
    if noted:
        assert note.startswith("this CPU has no native bfloat16 instructions (neither avx512_bf16 nor amx_bf16 in ")


@pytest.mark.parametrize("cpuinfo, lines", [(AVX2, 1), (EPYC, 0)])
def test_encode_in_bfloat16_says_so_in_one_line_on_a_cpu_without_it(
    cpuinfo, lines, tmp_path, tiny_model_dir, monkeypatch, capsys
):
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    monkeypatch.setattr(cpu, "CPUINFO", str(tmp_path / "cpuinfo"))
    (tmp_path / "texts.txt").write_text("wing lift\n")
    for precision in ("float32", "bfloat16"):
        argv = ["encode", "--model", tiny_model_dir, "--input", str(tmp_path / "texts.txt")]
        assert main([*argv, "--output", str(tmp_path / f"{precision}.npy"), "--precision", precision]) == 0
        notes = [line for line in capsys.readouterr().err.splitlines() if "bfloat16 instructions" in line]
        assert len(notes) == (lines if precision == "bfloat16" else 0)
        assert all(line.startswith("gtr-keras encode: note: this CPU has no native bfloat16") for line in notes)
    assert np.load(tmp_path / "bfloat16.npy").shape == (1, 64)
