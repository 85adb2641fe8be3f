"""The benchmark scripts run end to end on tiny shapes and write what they promise."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import throughput  # noqa: E402


def test_throughput_smoke(tmp_path):
    out = tmp_path / "tp.json"
    result = throughput.main(["--num-envs", "2", "--num-nodes", "8", "--steps", "2",
                              "--repeats", "1", "--numpy-steps", "5", "--ppo-envs", "8",
                              "--ppo-nodes", "8", "--ppo-updates", "1", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["machine"]["jax"] and len(saved["env"]) == 1
    assert all(r["decisions_per_s"] > 0 for r in saved["env"])
    assert all(0 < r["reset_batch_s"] < 60 for r in saved["env"])
    assert [(r["num_envs"], r["policy"]) for r in saved["policy"]] == [(2, "network")]
    assert saved["policy"][0]["decisions_per_s"] > 0
    assert saved["ppo"][0]["env_steps_per_s"] > 0 and saved["ppo"][0]["num_envs"] == 8
    assert saved["numpy_reference"][0]["speedup"] > 0
    assert (tmp_path / "tp.png").stat().st_size > 0
    assert result["memory"][0]["state_bytes_per_env"] > 0


def test_throughput_rejects_bad_flags(capsys):
    import pytest
    with pytest.raises(SystemExit):
        throughput.main(["--steps", "0"])
    assert "--steps must be >= 1, got 0" in capsys.readouterr().err


def test_scaling_alternates_rounds_and_runs_one_device_plain(tmp_path):
    import scaling
    out = tmp_path / "sc.json"
    scaling.main(["--devices", "1", "2", "--num-envs", "16", "--num-nodes", "8",
                  "--steps", "2", "--repeats", "1", "--rounds", "2", "--measure", "env",
                  "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["train"] == [] and [r["devices"] for r in saved["env"]] == [1, 2]
    one, two = saved["env"]
    if saved["backend"] == "cpu":   # 1 device in a plain process, 2 forced host devices
        assert one["forced_cpu_devices"] is None and two["forced_cpu_devices"] == 2
    for row in saved["env"]:
        assert row["rounds"] == 2 and len(row["round_decisions_per_s"]) == 2
        assert len(row["repeat_s"]) == 2 and row["decisions_per_s"] > 0


def test_scaling_rejects_bad_flags(capsys):
    import pytest
    import scaling
    with pytest.raises(SystemExit):
        scaling.main(["--rounds", "0"])
    assert "--rounds 0 is invalid: allowed an integer >= 1" in capsys.readouterr().err


def test_profile_attributes_step_time_to_vte_functions(tmp_path):
    import step_profile
    result = step_profile.main(["--num-envs", "4", "--num-nodes", "8", "--steps", "2",
                                "--repeats", "1", "--top", "3", "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["by_function"] == result["by_function"]
    functions = {g["function"] for g in saved["by_function"]}
    # The step's scoring and queue update show up under their own names.
    assert "vte/scoring.py:score" in functions and "vte/env.py:_transition" in functions
    assert abs(sum(g["share"] for g in saved["by_function"]) - 1.0) < 1e-6
    assert saved["ops_per_step"] > 10 and saved["decisions_per_s"] > 0
    assert all(op["ms_per_step"] >= 0 for op in saved["top_ops"])
    assert "HloModule" in (tmp_path / "step.hlo.txt").read_text()[:200]
    assert list(tmp_path.glob("trace/**/*.trace.json.gz"))


def test_profile_rejects_bad_flags(capsys):
    import pytest
    import step_profile
    with pytest.raises(SystemExit):
        step_profile.main(["--steps", "3"])
    assert "--steps must be a multiple of 2" in capsys.readouterr().err
