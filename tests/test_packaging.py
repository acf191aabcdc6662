"""What a release uploads: the sdist and the wheel build from the tree, pass
``twine check`` (their metadata and the README render on PyPI), and the wheel holds
every Metal source and header the runtimes compile (.github/workflows/release.yml
builds and checks the same)."""

import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).parent.parent


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path):
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = list(tmp_path.glob("*.whl")), list(tmp_path.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)],
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    sources = {f"mpslinalg/metal/{p.name}" for p in (ROOT / "metal").iterdir() if p.suffix in (".metal", ".h")}
    assert sources and sources <= names, sorted(sources - names)
