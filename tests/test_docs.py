"""The documentation site: it builds in strict mode (a warning fails), and its API
reference covers every public function."""

import pathlib
import re
import subprocess
import sys

import mpslinalg

ROOT = pathlib.Path(__file__).parent.parent


def test_api_reference_documents_every_public_function():
    documented = set(re.findall(r"^::: mpslinalg\.(\w+)$", (ROOT / "docs" / "api.md").read_text(), re.M))
    assert documented == set(mpslinalg.__all__)


def test_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "site" / "api" / "index.html").read_text()
    assert all(f'id="mpslinalg.{name}"' in page for name in mpslinalg.__all__)
