"""Every result file the repository keeps is named somewhere a reader will find it.

A file under `benchmarks/results/` or `train/results/` is named when its path, or a folder
above it (not the results folder itself), appears in README.md, a page under `docs/`, a
Markdown file of the package (`vte/**/*.md`, the model cards among them), or a script that
writes or reads it (tests, benchmarks, trainers, examples, `vte/zoo/`). A path may be
written with shell patterns: `openb_power_evidence_*.json`, `seed{0,1,2,3}_eval.json`.
Plain text search: no JAX, well under a second.
"""
import fnmatch
import glob
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_DIRS = ("benchmarks/results", "train/results")
NAMING = (
    "README.md",
    "docs/**/*.md",
    "vte/**/*.md",
    "tests/**/*.py",
    "benchmarks/**/*.py",
    "train/**/*.py",
    "train/**/*.sh",
    "examples/**/*.py",
    "vte/zoo/**/*.py",
)
# a path that starts with a results folder and goes one name further, up to a character
# that cannot be part of it in prose, Markdown, code or a shell line
MENTION = re.compile(r"(?:benchmarks|train)/results/[^\s`'\"()<>\[\]|;:]+")


def result_files():
    """The result files as the repository holds them (git's index; a walk without git)."""
    try:
        out = subprocess.run(["git", "ls-files", "--", *RESULT_DIRS], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        files = [line for line in out.splitlines() if line]
        if files:
            return sorted(f for f in files if os.path.exists(os.path.join(ROOT, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for top in RESULT_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                files.append(os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/"))
    return sorted(files)


def expand_braces(text):
    """`a{b,c}d` -> [abd, acd], nested and repeated braces included."""
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    out = []
    for part in m.group(1).split(","):
        out.extend(expand_braces(text[:m.start()] + part + text[m.end():]))
    return out


def mentions(text):
    """The result paths a text names, patterns expanded, trailing punctuation dropped."""
    found = set()
    for raw in MENTION.findall(text):
        for path in expand_braces(raw):
            path = path.rstrip(".,")
            if path.rstrip("/") not in RESULT_DIRS:
                found.add(path)
    return found


def naming_texts():
    paths = set()
    for pattern in NAMING:
        paths.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    texts = {}
    for path in sorted(paths):
        if os.sep + ".venv" + os.sep in path or os.path.samefile(path, __file__):
            continue            # this file's own examples name nothing
        with open(path, encoding="utf-8", errors="replace") as f:
            texts[os.path.relpath(path, ROOT)] = f.read()
    return texts


def is_named(path, names):
    parents = [path]
    while "/" in parents[-1]:
        parents.append(parents[-1].rsplit("/", 1)[0])
    for name in names:
        name = name.rstrip("/")
        if any(p == name or fnmatch.fnmatchcase(p, name) for p in parents):
            return True
    return False


def test_brace_and_folder_mentions_are_understood():
    text = ("see `benchmarks/results/openb_all/` and train/results/imitate_seed{0,1}_eval.json, "
            "[x](../benchmarks/results/kernel.json). Raw files: benchmarks/results/.")
    names = mentions(text)
    assert names == {"benchmarks/results/openb_all/", "train/results/imitate_seed0_eval.json",
                     "train/results/imitate_seed1_eval.json", "benchmarks/results/kernel.json"}
    assert is_named("benchmarks/results/openb_all/default.json", names)
    assert is_named("train/results/imitate_seed1_eval.json", names)
    assert not is_named("train/results/imitate_seed2_eval.json", names)
    assert is_named("benchmarks/results/openb_power_evidence_top_cpu100.json",
                    mentions("benchmarks/results/openb_power_evidence_*.json"))


def test_every_result_file_is_named():
    names = set()
    for text in naming_texts().values():
        names |= mentions(text)
    unnamed = [f for f in result_files() if not is_named(f, names)]
    assert not unnamed, (
        f"{len(unnamed)} result file(s) that no document or script names (name each, or a "
        "folder above it, in README.md, docs/, vte/**/*.md or the script that writes it; or "
        "delete it):\n  " + "\n  ".join(unnamed))
