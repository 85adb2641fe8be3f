"""The zoo (`vte.zoo`): schedulers shipped in the package, loaded by name from any folder,
each with a card its command writes, every file of it inside the wheel."""

from __future__ import annotations

import glob
import importlib
import os
import tomllib

import pytest

import vte
from vte import checkpoint as ckpt
from vte import zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = ["cluster-imitate", "openb-agnostic", "openb-evidence"]


def test_the_zoo_lists_its_schedulers_each_a_run_directory_with_one_checkpoint():
    assert zoo.names() == SHIPPED
    for name in SHIPPED:
        assert zoo.path(name) == zoo.path(zoo.PREFIX + name) == os.path.join(zoo.ROOT, name)
        assert len(ckpt.checkpoint_steps(zoo.path(name))) == 1
        assert zoo.card(name).startswith(f"## {name}: ")   # a section of docs/zoo.md
        assert importlib.import_module("vte.zoo.card")(name) == zoo.card(name)  # the module too
        assert vte.zoo.card(name) == zoo.card(name)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_scheduler_loads_by_name_bare_and_prefixed_from_any_folder(name, tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    (step,) = ckpt.checkpoint_steps(zoo.path(name))
    for spec in (name, f"zoo:{name}", f"zoo:{name}@{step}", f"{name}@{step}"):
        assert ckpt.is_run_path(spec)
        assert ckpt.split_step(spec)[0] == zoo.path(name)
        assert ckpt.load_config(spec)["hidden"] > 0
    assert callable(vte.load_policy(f"zoo:{name}"))        # checksum verified, weights restored
    with pytest.raises(ValueError, match=rf"has no checkpoint {step + 1} "):
        ckpt.split_step(f"zoo:{name}@{step + 1}")


def test_the_openb_network_loads_without_the_folders_its_config_records():
    """Its config.json names the run it was trained from (`init_from`, `teacher`), which
    is no longer shipped: loading reads neither."""
    config = ckpt.load_config("openb-evidence")
    assert config["init_from"] == "train/results/openb_distilled_bank3"
    assert not os.path.exists(os.path.join(ROOT, config["init_from"]))
    from vte.openb.registration import learned_policy
    assert callable(learned_policy("zoo:openb-evidence", 7))
    card = importlib.import_module("vte.zoo.card")   # the refusal its card quotes
    with pytest.raises(ValueError) as err:
        learned_policy("zoo:openb-evidence", 6)
    assert str(err.value) == "'zoo:openb-evidence': " + card.REFUSAL.format(
        models=7).replace("has K", "has 6")


def test_an_unknown_name_is_named_with_the_zoos_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for call in (lambda: vte.load_policy("zoo:nope"), lambda: zoo.path("nope"),
                 lambda: ckpt.is_run_path("zoo:nope@3"), lambda: zoo.card("zoo:nope")):
        with pytest.raises(ValueError, match="'zoo:nope(@3)?' is not a scheduler of the zoo: "
                                             "allowed cluster-imitate, openb-agnostic, openb-evidence"
                                             "|'nope' is not"):
            call()
    assert not ckpt.is_run_path("nope")             # a bare unknown name is not a run
    from vte.openb.__main__ import _policies
    with pytest.raises(ValueError, match="--policies: 'zoo:nope' is not a scheduler"):
        _policies("fgd,zoo:nope")
    assert _policies("fgd,zoo:openb-evidence,plan:zoo:openb-evidence") == [
        "fgd", "zoo:openb-evidence", "plan:zoo:openb-evidence"]
    from vte.openb.policies import POLICIES       # 'all' in a list: the published six
    assert _policies("all,zoo:openb-agnostic") == list(POLICIES) + ["zoo:openb-agnostic"]
    with pytest.raises(ValueError, match="names a policy twice"):
        _policies("all,fgd")


def test_a_folder_of_the_same_name_wins_over_the_zoo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "openb-evidence").mkdir()
    assert zoo.resolve("openb-evidence") == "openb-evidence"
    assert zoo.resolve("zoo:openb-evidence") == zoo.path("openb-evidence")
    with pytest.raises(FileNotFoundError, match="not a training run directory"):
        ckpt.load_config("openb-evidence")


def test_a_run_starts_from_a_zoo_scheduler(tmp_path):
    """`--init-from zoo:NAME` (the trainer's own checks: hidden size, environment)."""
    from vte.train import run
    from vte.train.config import ImitateConfig
    config, out, *_ = run.parse(["--init-from", "zoo:cluster-imitate", "--compilation-cache",
                                 "off", "--out", str(tmp_path / "warm")], ImitateConfig, "")
    assert config.init_from == "zoo:cluster-imitate" and out == str(tmp_path / "warm")
    assert "params" in run._initial_params(config)
    with pytest.raises(SystemExit):                  # 64 hidden units, the OpenB network
        run.parse(["--init-from", "zoo:openb-evidence", "--compilation-cache", "off",
                   "--out", str(tmp_path / "x")], ImitateConfig, "")


def test_render_resolves_a_zoo_name():
    from vte.cluster.viewer import resolve_policy
    policy, config = resolve_policy("zoo:cluster-imitate")
    assert callable(policy) and config["env"].get("name", "synthetic") == "synthetic"
    with pytest.raises(ValueError, match="trained on OpenB-v0"):
        resolve_policy("openb-evidence")


@pytest.mark.parametrize("name", SHIPPED)
def test_each_card_is_what_its_command_writes(name):
    """`python -m vte.zoo.card NAME` rebuilds the card from the result files; the
    committed card is that text (regenerate it after a figure changes)."""
    card = importlib.import_module("vte.zoo.card")   # `from vte.zoo import card`: the function
    assert card.build(name) == zoo.card(name), (
        f"vte/zoo/{name}/CARD.md is stale: run python -m vte.zoo.card {name}")
    text = zoo.card(name)
    assert "<" not in text.replace("<base>", "")      # plain Markdown: no HTML
    assert "](" not in text                           # no links that break in docs/zoo.md


def test_every_file_of_the_zoo_ships_in_the_wheel():
    """Each file under vte/zoo/ is a module of the package or matched by a
    [tool.setuptools.package-data] glob of pyproject.toml (as setuptools reads them)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["vte"]
    package = os.path.join(ROOT, "vte")
    matched = {os.path.normpath(p) for pattern in patterns
               for p in glob.glob(os.path.join(package, pattern), recursive=True)
               if os.path.isfile(p)}
    files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(package, "zoo"))
             for f in fs if "__pycache__" not in d]
    assert len(files) > 10
    missing = [os.path.relpath(f, ROOT) for f in files
               if not f.endswith(".py") and os.path.normpath(f) not in matched]
    assert missing == []
    assert all(os.path.dirname(f) == os.path.join(package, "zoo")
               for f in files if f.endswith(".py"))       # modules of vte.zoo only


def test_no_shipped_file_names_an_absolute_path_and_every_checkpoint_verifies():
    """The zoo ships in the wheel: no file of it may name the machine it was trained on
    (orbax writes the save's folder into commit_success.txt), and rewriting one must keep
    its checksum true."""
    import re
    from vte import checkpoint
    for name in vte.zoo.names():
        folder = vte.zoo.path(name)
        for root, _, files in os.walk(folder):
            for f in files:
                data = open(os.path.join(root, f), "rb").read()
                assert not re.search(rb"(^|[\s'\"])/(home|root|work|tmp|opt|Users)/", data), (
                    os.path.join(root, f))
        for step in checkpoint.checkpoint_steps(folder):
            assert checkpoint.verify_checkpoint(folder, step) is None, (name, step)


def test_zoo_names_never_shadow_a_policy_name():
    """A bare zoo name resolves only where nothing else has it: no heuristic, OpenB policy,
    'optimal' or 'all' may share a zoo name."""
    from vte.cluster import heuristics
    from vte.openb.policies import POLICIES
    taken = set(heuristics.ALL) | set(POLICIES) | {"optimal", "all"}
    assert not taken & set(zoo.names())
