"""The documentation site builds without a warning, and no built page has a broken link.

`mkdocs build --strict` fails on a missing page, a broken link or anchor, a snippet that is
not there, a docstring mkdocstrings cannot read, or a generated table whose code raised
(docs/hooks.py). The built HTML is then read back: every relative `href` and `src` points at
a file of the site.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]


def built_links(site: Path):
    """(page, target) of every relative href/src in the built HTML pages."""
    for page in site.rglob("*.html"):
        for target in re.findall(r'(?:href|src)="([^"#?]+)[^"]*"', page.read_text()):
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("mailto:", "data:")):
                continue
            yield page, unquote(parts.path)


def missing_targets(site: Path) -> list[str]:
    out = []
    for page, path in built_links(site):
        target = (site / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            out.append(f"{page.relative_to(site)} -> {path}")
    return sorted(set(out))


def test_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<a href="../b/">b</a><img src="x.png">'
                                               '<a href="https://example.org/">out</a>')
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "index.html").write_text("")
    assert missing_targets(tmp_path) == ["a/index.html -> x.png"]


@pytest.mark.slow
def test_the_site_builds_strictly_with_no_broken_link(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert (site / "environments" / "openb" / "index.html").exists()
    page = (site / "environments" / "cluster" / "index.html").read_text()
    assert "cpu_cores/64" in page and "matched_optimal" in page   # generated tables
    assert missing_targets(site) == []
