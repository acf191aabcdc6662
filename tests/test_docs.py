"""The documentation site: it builds in strict mode (a warning fails), and its API
reference covers every public function."""

import doctest
import io
import pathlib
import re
import subprocess
import sys

import torch

import mpslinalg
from conftest import require

ROOT = pathlib.Path(__file__).parent.parent


def test_api_reference_documents_every_public_function():
    documented = set(re.findall(r"^::: mpslinalg\.(\w+)$", (ROOT / "docs" / "api.md").read_text(), re.M))
    assert documented == set(mpslinalg.__all__)


# Words of the project's own process, which a user's page has no use for; and its diary
# (what was aimed at, tried, replaced or guessed), which belongs to git and the CHANGELOG:
# a page states what holds now.
INTERNAL = re.compile(
    r"\bsessions?\b|\bissue \d+|the issue's|\bdevice tool\b|closing note|\bnotes/"
    r"|\baimed at\b|\bstalled\b|\bin testing\b|\bfell from\b|\brose from\b|\bis a guess\b|\bwhich this replaced\b"
    r"|\bthis workplace\b|\bthe machine the project has\b|\bwhile developing\b|\bcannot reach GitHub\b",
    re.I,
)


def test_internal_words_catch_the_diary():
    """The phrasings found on user pages before (issue 37's list) are caught."""
    for phrase in ("not the 20x aimed at", "stalled at 0.6", "in testing", "fell from 14 to 0.1",
                   "is a guess until measured", "which this replaced", "this workplace cannot reach GitHub",
                   "the machine the project has", "on an H200 while developing"):
        assert INTERNAL.search(phrase), phrase


def test_user_pages_have_no_internal_words():
    for page in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        found = INTERNAL.findall(page.read_text())
        assert not found, f"{page.name}: {found}"


def test_kernel_table_is_generated():
    """docs/support.md's table is what ``python -m mpslinalg kernels`` prints."""
    from mpslinalg.__main__ import kernel_table

    page = (ROOT / "docs" / "support.md").read_text()
    generated = page.split("<!-- generated: python -m mpslinalg kernels -->\n")[1].split("<!-- end generated -->")[0]
    assert generated.strip() == kernel_table().strip()


def test_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "site" / "api" / "index.html").read_text()
    assert all(f'id="mpslinalg.{name}"' in page for name in mpslinalg.__all__)
    for name in ("performance", "support", "migration", "troubleshooting", "notebooks/geometry", "notebooks/pseudoinverse"):
        assert (tmp_path / "site" / name / "index.html").exists(), name
    assert (tmp_path / "site" / "performance" / "svd.svg").exists()  # the plots come with the page
    notebook = (tmp_path / "site" / "notebooks" / "pseudoinverse" / "index.html").read_text()
    assert re.search(r'<script src="https://[^"]*mathjax[^"]*">', notebook), "the notebooks' math renders"


def test_every_public_function_has_a_running_example():
    """Each public name's docstring has an example, and it runs as written on the
    kernels (OpenCL here)."""
    require("opencl")
    for name in mpslinalg.__all__:
        tests = doctest.DocTestFinder(recurse=False).find(getattr(mpslinalg, name), name, globs={"torch": torch, "LA": mpslinalg})
        assert sum(len(t.examples) for t in tests), f"{name} has no example"
        report = io.StringIO()
        with mpslinalg.use_backend("opencl"):
            failed = sum(doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE).run(t, out=report.write).failed for t in tests)
        assert not failed, report.getvalue()
