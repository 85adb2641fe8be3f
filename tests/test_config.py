"""Configuration by environment and the package layout a user meets: each environment's
section of a run, one name per concept, old names and old module paths still working."""

from __future__ import annotations

import importlib
import json
import sys
import warnings

import pytest

from vte.config import RenamedWarning
from vte.train.config import ImitateConfig, PPOConfig


def test_a_runs_config_json_holds_only_the_fields_that_apply_to_it():
    synthetic = PPOConfig().to_dict()
    assert synthetic["env"] == {"name": "synthetic", "num_nodes": 64, "queue_len": 8,
                                "episode_len": 128, "weights": [1.0, 1.0, 1.0],
                                "sample_weights": True}
    openb = ImitateConfig(env="openb").to_dict()
    assert set(openb["env"]) == {"name", "pods", "nodes", "subset", "workloads", "tune",
                                 "power_weight", "frag_shaping", "encoding"}
    assert "plan" not in openb and not any(k.startswith("plan_") and k != "plan_costs"
                                           for k in openb)
    planning = ImitateConfig(env="openb", teacher="plan_fgd").to_dict()
    assert planning["plan"]["futures"] == 8 and "pods" in planning["env"]
    assert ImitateConfig.from_dict(planning).to_dict() == planning


def test_flags_and_make_share_one_name_and_old_flags_load_with_a_note():
    new = ImitateConfig.from_args(["--env", "openb", "--pods", "gpuspec10", "--subset", "32"])
    assert (new.env_config.pods, new.env_config.subset) == ("gpuspec10", 32)
    with pytest.warns(RenamedWarning, match="--trace is --pods"):
        with pytest.warns(RenamedWarning, match="--num-nodes is --subset"):
            old = ImitateConfig.from_args(["--env", "openb", "--trace", "gpuspec10",
                                           "--num-nodes", "32"])
    assert old == new
    # the section's names are vte.make's keywords
    import vte
    _, params = vte.make("OpenB-v0", pods="gpuspec10", subset=4, workloads=2)
    assert params.num_workloads == 2 and params.num_nodes == 4


def test_another_environments_flag_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"--queue-len=4 is invalid: allowed no value with "
                                         r"--env openb \(a flag of --env synthetic"):
        ImitateConfig.from_args(["--env", "openb", "--queue-len", "4"])
    with pytest.raises(ValueError, match=r"--pods='default' is invalid: allowed no value with "
                                         r"--env synthetic"):
        PPOConfig.from_args(["--pods", "default"])


def test_flat_keywords_build_the_same_configuration_as_the_flags():
    assert PPOConfig.of(num_envs=64, num_nodes=8) == PPOConfig.from_args(
        ["--num-envs", "64", "--num-nodes", "8"])
    assert ImitateConfig.of(env="openb", teacher="plan_fgd", plan_futures=4).plan.futures == 4
    with pytest.raises(ValueError, match="'pods' is not a field of PPOConfig with --env "
                                         "synthetic"):
        PPOConfig.of(pods="default")


def test_an_old_config_json_with_every_environments_keys_loads(tmp_path):
    """The layout before sections: every environment's flags in "env", flat plan_* keys."""
    old = {**PPOConfig().to_dict(), "all_actions": False, "env": {
        "name": "openb", "num_nodes": 32, "queue_len": 8, "episode_len": 128,
        "weights": [1, 1, 1], "sample_weights": True, "trace": "gpuspec10", "nodes": "gpu",
        "workloads": 4, "tune": 1.3, "power_weight": [0, 0], "frag_shaping": 0.0}}
    with pytest.warns(RenamedWarning):
        config = PPOConfig.from_dict(old)
    assert (config.env, config.env_config.pods, config.env_config.subset) == (
        "openb", "gpuspec10", 32)
    assert config.env_config.encoding == "onehot"         # saved before the field


@pytest.mark.parametrize("old, new", [("vte.scoring", "vte.cluster.scoring"),
                                      ("vte.synthetic", "vte.cluster.registration"),
                                      ("vte.openb.experiment", "vte.openb.lab.experiment"),
                                      ("vte.serve.convert", "vte.cluster.decice.convert")])
def test_old_module_paths_import_the_moved_module_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_import_vte_imports_no_environment_and_no_jax():
    import subprocess
    code = ("import sys, vte; print(json.dumps(sorted(m for m in sys.modules "
            "if m.startswith(('jax', 'vte.cluster', 'vte.openb')))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert json.loads(out) == []


def test_the_wheel_ships_every_package_of_vte_and_no_top_level_train():
    import os
    import setuptools
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = setuptools.find_packages(root, include=["vte*"])
    assert {"vte.cluster", "vte.cluster.decice", "vte.openb.lab", "vte.train"} <= set(found)
    assert not any(p == "train" or p.startswith("train.") for p in found)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from train import ppo                    # from a clone: the library's module
    assert ppo.__name__ == "vte.train.ppo"


def test_the_command_line_says_each_old_flag_in_one_note_line(capsys, tmp_path):
    from tests.test_train import refused
    from vte.train import ppo
    err = refused(ppo.main, ["--env", "openb", "--trace", "nope", "--num-nodes", "8"],
                  capsys, tmp_path)
    lines = err.splitlines()
    assert "note: --trace is --pods with --env openb (renamed)" in lines
    assert "note: --num-nodes is --subset with --env openb (renamed)" in lines
    assert "--pods='nope' is invalid" in err          # the new name in the error


def test_an_old_module_path_still_runs_as_a_command():
    import subprocess
    done = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m",
                           "vte.openb.bound", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "usage: python -m vte.openb.lab.bound" in done.stdout
    assert "vte.openb.bound moved to vte.openb.lab.bound" in done.stderr


def test_a_bad_value_under_an_old_flag_is_blamed_on_that_flag(capsys, tmp_path):
    from tests.test_train import refused
    from vte.train import ppo
    err = refused(ppo.main, ["--env", "openb", "--num-nodes", "99999"], capsys, tmp_path)
    assert "--subset=99999 is invalid" in err and "was not given" not in err


def test_flat_keywords_take_old_names_too_with_a_note():
    with pytest.warns(RenamedWarning, match="num_nodes= is subset="):
        config = PPOConfig.of(env="openb", num_nodes=16, gamma=0.99, all_actions=False)
    assert config.env_config.subset == 16
    with pytest.raises(ValueError) as err:
        PPOConfig.of(plan_futures=4)
    assert "plan_" not in str(err.value).split("allowed", 1)[1]   # PPO has no planner


def test_importing_an_old_path_leaves_the_new_module_its_own_spec():
    sys.modules.pop("vte.twin", None)
    with pytest.warns(DeprecationWarning):
        importlib.import_module("vte.twin")
    new = importlib.import_module("vte.cluster.twin")
    assert new.__spec__.name == "vte.cluster.twin"
    assert importlib.reload(new) is new


def test_every_console_command_starts_jax_distributed_before_the_trainer():
    """`vte-ppo` and `vte-imitate` go through `multihost.launch`, which reads the
    --coordinator flags before importing the trainer (importing it starts JAX)."""
    import os
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert set(scripts) == {"vte-ppo", "vte-imitate"}
    for target in scripts.values():
        module, _, name = target.partition(":")
        assert module == "vte.train.multihost" and callable(
            getattr(importlib.import_module(module), name))
