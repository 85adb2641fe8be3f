"""The README is a guide a newcomer can follow: short, and every Python block runs alone.

A newcomer pastes one block into a fresh interpreter, so each block runs by itself in a
fresh process, in an empty directory, and must print what it computed. Only sizes shrink
(every substitution must still find its text, so the README cannot drift from this test).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150
MAX_PROSE = 200

# (text in the README, the same at test size)
SMALLER = [
    ("keys = jax.random.split(key, 4096)", "keys = jax.random.split(key, 16)"),
    ('vte.make("Cluster-v0", num_nodes=64)', 'vte.make("Cluster-v0", num_nodes=8)'),
]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_substitution_finds_its_text():
    text = README.read_text()
    for old, _ in SMALLER:
        assert old in text, f"the README no longer holds {old!r}: update SMALLER"


def test_the_readme_is_short_and_its_prose_lines_are_not_long():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines: allowed {MAX_LINES}"
    in_code, long = False, []
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and not line.startswith("|") and len(line) > MAX_PROSE:
            long.append(f"line {i}: {len(line)} characters")
    assert not long, f"prose lines over {MAX_PROSE} characters: {long}"


def slug(heading: str) -> str:
    """The anchor MkDocs gives a heading: Python-Markdown's toc slugify, which it uses."""
    from markdown.extensions.toc import slugify
    return slugify(re.sub(r"[`*]", "", heading), "-")


def test_every_relative_link_of_the_readme_exists_with_its_anchor():
    text = README.read_text()
    missing = []
    for target, anchor in re.findall(r"\]\(([^)#\s]+)(?:#([^)]*))?\)", text):
        if "://" in target:
            continue
        path = ROOT / target
        if not path.exists():
            missing.append(target)
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
            if anchor not in {slug(h) for h in headings}:
                missing.append(f"{target}#{anchor}")
    assert not missing, f"README links to files or anchors that do not exist: {missing}"


def test_slug_is_mkdocs_own():
    assert slug("Bring your own agent") == "bring-your-own-agent"
    assert slug("The RL loop against a minimal kernel (2026-12-03)") == (
        "the-rl-loop-against-a-minimal-kernel-2026-12-03")


BLOCKS = python_blocks(README.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"block{i + 1}")
def test_each_python_block_runs_alone_in_a_fresh_process(index, tmp_path):
    block = BLOCKS[index]
    for old, new in SMALLER:
        block = block.replace(old, new)
    run = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, f"README python block {index + 1} failed:\n{block}\n{run.stderr[-3000:]}"
    assert run.stdout.strip(), f"README python block {index + 1} printed nothing"
