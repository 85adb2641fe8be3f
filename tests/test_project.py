"""The project's own files: packaging metadata, CI and the README's setup commands."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")      # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression():
    """PEP 639: `project.license` a string; the TOML table form is deprecated and refused
    by setuptools after 2027-02-18."""
    project = _pyproject()["project"]
    assert isinstance(project["license"], str), project["license"]
    assert re.fullmatch(r"[A-Za-z0-9.\-+ ()]+", project["license"])
    requires = _pyproject()["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77
               for r in requires), requires        # the first setuptools that reads it


def _ci_test_command() -> list[str]:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    tests = [shlex.split(ln) for ln in lines if "pytest" in ln]
    assert len(tests) == 1, tests
    return tests[0]


def test_ci_log_names_the_slowest_tests():
    assert any(a.startswith("--durations=") and int(a.split("=")[1]) >= 10
               for a in _ci_test_command())


def test_ci_runs_the_readme_install_and_test_commands():
    """CI runs what the README tells a newcomer: the same install, the same tests."""
    readme = (ROOT / "README.md").read_text()
    setup = re.search(r"## Set ?up.*?```bash\n(.*?)```", readme, flags=re.S).group(1)
    commands = [shlex.split(ln.split("#")[0]) for ln in setup.splitlines() if ln.strip()]
    ci = (ROOT / ".ci" / "run").read_text()
    install = next(c for c in commands if c[:2] == ["pip", "install"])
    assert " ".join(shlex.quote(a) for a in install).replace("'", '"') in ci
    test = next(c for c in commands if "pytest" in c)
    assert [a for a in _ci_test_command() if not a.startswith("--durations")] == test


def test_readme_stays_short():
    """A newcomer reads it in one sitting: at most 150 lines (details go to the site it
    links; tests/test_readme.py also bounds its prose lines)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
