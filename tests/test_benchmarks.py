"""The benchmark scripts run end to end on tiny shapes and write what they promise."""

import json
import os

import jax
import numpy as np

import pytest

from benchmarks import throughput

pytestmark = pytest.mark.slow   # end-to-end runs: `pytest -m slow`, and in CI


def test_throughput_smoke(tmp_path, capsys):
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
    # Compilation is timed on its own, apart from the first run and the timed repeats.
    for row in saved["env"] + saved["policy"] + saved["ppo"]:
        assert row["compile_s"] > 0 and row["first_run_s"] > 0 and len(row["repeat_s"]) == 1
        assert row["warmup_s_incl_compile"] == row["compile_s"] + row["first_run_s"]
    assert saved["numpy_reference"][0]["speedup"] > 0
    assert (tmp_path / "tp.png").stat().st_size > 0
    assert result["memory"][0]["state_bytes_per_env"] > 0
    # 4096 x 64 was not measured; the speed-up was, at the one size swept.
    shape, speedup = saved["targets"]
    assert shape["measured"] is None and not shape["met"]
    assert speedup["measured"] == saved["numpy_reference"][0]["speedup"]
    assert speedup["at_num_nodes"] == 8
    table, printed = capsys.readouterr().out.split("# targets")
    assert "compile s" in table and "1st run s" in table
    assert "4096 environments x 64 nodes" in printed and "not measured in this run" in printed
    assert f"measured {speedup['measured']:,.1f}x (at 8 nodes)" in printed


def test_throughput_keeps_rows_of_a_sweep_cut_short(tmp_path, monkeypatch):
    out = tmp_path / "cut.json"

    def broken_ppo(*args):
        raise KeyboardInterrupt   # as if the run were stopped during the PPO figures

    monkeypatch.setattr(throughput, "measure_ppo", broken_ppo)
    try:
        throughput.main(["--num-envs", "2", "--num-nodes", "8", "--steps", "2", "--repeats",
                         "1", "--no-policy", "--ppo-envs", "8", "--out", str(out)])
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the PPO section did not run")
    saved = json.loads(out.read_text())
    assert [(r["num_nodes"], r["num_envs"]) for r in saved["env"]] == [(8, 2)]
    assert saved["ppo"] == [] and saved["targets"][0]["measured"] is None
    assert (tmp_path / "cut.png").stat().st_size > 0


def test_throughput_policy_sweep_alone(tmp_path):
    out = tmp_path / "pol.json"
    result = throughput.main(["--num-envs", "2", "--num-nodes", "8", "--steps", "2",
                              "--repeats", "1", "--no-env", "--ppo-envs", "--numpy-steps",
                              "0", "--max-policy-nodes", "16", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["env"] == [] and saved["ppo"] == [] and saved["numpy_reference"] == []
    assert [(r["num_nodes"], r["num_envs"]) for r in saved["policy"]] == [(8, 2)]
    assert saved["policy"] == result["policy"] and (tmp_path / "pol.png").stat().st_size > 0


def test_targets_read_the_right_row_and_the_least_speedup():
    rows = [{"num_envs": 4096, "num_nodes": 16, "decisions_per_s": 2e6},
            {"num_envs": 4096, "num_nodes": 64, "decisions_per_s": 9e5}]
    numpy_rows = [{"num_nodes": 16, "speedup": 150.0}, {"num_nodes": 64, "speedup": 99.0},
                  {"num_nodes": 256, "speedup": None}]
    shape, speedup = throughput.targets(rows, numpy_rows)
    assert shape["measured"] == 9e5 and not shape["met"]
    assert speedup["measured"] == 99.0 and speedup["at_num_nodes"] == 64 and not speedup["met"]
    rows[1]["decisions_per_s"] = 1e6
    assert throughput.targets(rows, numpy_rows[:1])[0]["met"]
    assert throughput.targets(rows, numpy_rows[:1])[1]["met"]
    assert "(16, 64, 256 nodes)" not in speedup["target"] and "(16, 64 nodes)" in speedup["target"]
    unmeasured = throughput.targets([], [])
    assert [t["measured"] for t in unmeasured] == [None, None]
    assert not any(t["met"] for t in unmeasured) and "nodes)" not in unmeasured[1]["target"]


def test_throughput_rejects_bad_flags(capsys):
    import pytest
    with pytest.raises(SystemExit):
        throughput.main(["--steps", "0"])
    assert "--steps must be >= 1, got 0" in capsys.readouterr().err


def test_scaling_runs_one_device_plain_and_two_forced(tmp_path):
    from benchmarks import scaling
    out = tmp_path / "sc.json"
    scaling.main(["--devices", "1", "2", "--num-envs", "16", "--num-nodes", "8",
                  "--steps", "2", "--repeats", "1", "--rounds", "1", "--measure", "env",
                  "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["train"] == [] and [r["devices"] for r in saved["env"]] == [1, 2]
    one, two = saved["env"]
    if saved["backend"] == "cpu":   # 1 device in a plain process, 2 forced host devices
        assert one["forced_cpu_devices"] is None and two["forced_cpu_devices"] == 2
    for row in saved["env"]:
        assert row["rounds"] == 1 and len(row["round_decisions_per_s"]) == 1
        assert len(row["repeat_s"]) == 1 and row["decisions_per_s"] > 0
        assert row["compile_s"] > 0


def test_scaling_alternates_rounds_and_takes_the_median_of_every_repeat(tmp_path, monkeypatch):
    """Rounds alternate the device counts (1, 2, 1, 2), each in its own child process with
    its device count forced, and each count's row is the median over every round's repeats.
    The children are replaced by a record of their calls (the real ones: the test above)."""
    from benchmarks import scaling
    calls = []

    def child(script, args, env):
        d = args[1]
        calls.append((d, "xla_force_host_platform_device_count=2" in env.get("XLA_FLAGS", "")))
        t = [0.5, 1.0, 2.0, 4.0][len(calls) - 1]      # rollout seconds of this round's repeat
        return {"devices": d, "num_envs": 16, "steps": 2, "repeat_s": [t],
                "decisions_per_s": 32 / t, "compile_s": 1.0}

    monkeypatch.setattr(scaling, "_child", child)
    saved = scaling.main(["--devices", "1", "2", "--num-envs", "16", "--num-nodes", "8",
                          "--steps", "2", "--repeats", "1", "--rounds", "2", "--measure", "env",
                          "--out", str(tmp_path / "sc.json")])
    forced = jax.default_backend() == "cpu"
    assert calls == [(1, False), (2, forced), (1, False), (2, forced)]
    one, two = saved["env"]
    assert one["repeat_s"] == [0.5, 2.0] and two["repeat_s"] == [1.0, 4.0]
    assert one["round_decisions_per_s"] == [64.0, 16.0] and one["rounds"] == 2
    assert one["decisions_per_s"] == 32 / 1.25 and two["decisions_per_s"] == 32 / 2.5


def test_scaling_rejects_bad_flags(capsys):
    import pytest
    from benchmarks import scaling
    with pytest.raises(SystemExit):
        scaling.main(["--rounds", "0"])
    assert "--rounds 0 is invalid: allowed an integer >= 1" in capsys.readouterr().err


def test_profile_attributes_step_time_to_vte_functions(tmp_path):
    from benchmarks import step_profile
    result = step_profile.main(["--num-envs", "4", "--num-nodes", "8", "--steps", "2",
                                "--repeats", "1", "--top", "3", "--out", str(tmp_path / "p.json"),
                                "--artifacts-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["by_function"] == result["by_function"]
    functions = {g["function"] for g in saved["by_function"]}
    # The step's scoring and its decision/time advance show up under their own names.
    assert "vte/cluster/scoring.py:score" in functions and "vte/cluster/env.py:_transition" in functions
    assert saved["op_ms_per_step"] > 0
    assert saved["ops_per_step"] > 10 and saved["decisions_per_s"] > 0
    assert all(op["ms_per_step"] >= 0 for op in saved["top_ops"])
    assert "HloModule" in (tmp_path / "step.hlo.txt").read_text()[:200]
    assert list(tmp_path.glob("trace/**/*.trace.json.gz"))


# A compiled module's text in miniature: a fusion of three instructions, two of them from
# jax code called by vte/cluster/scoring.py:measure, one from vte/cluster/scoring.py:score; a copy from
# the training loop. Frame 3 (jax) is called from frame 4 (measure), itself from frame 1.
_HLO = """HloModule jit_f, is_scheduled=true

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %a = f32[4]{0} add(%param_0, %param_0), metadata={op_name="add" stack_frame_id=3}
  %b = f32[4]{0} multiply(%a, %a), metadata={op_name="mul" stack_frame_id=3}
  ROOT %c = f32[4]{0} negate(%b), metadata={op_name="neg" stack_frame_id=2}
}

ENTRY %main (p: f32[4]) -> (f32[4], f32[4]) {
  %p = f32[4]{0} parameter(0)
  %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_computation, metadata={op_name="neg" stack_frame_id=2}
  %copy = f32[4]{0} copy(%fusion), metadata={op_name="copy" stack_frame_id=1}
  ROOT %tuple = (f32[4]{0}, f32[4]{0}) tuple(%fusion, %copy)
}

FileNames
1 "/src/train/loop.py"
2 "/src/vte/cluster/scoring.py"
3 "/src/jax/_src/numpy/ufuncs.py"

FunctionNames
1 "body"
2 "score"
3 "add"
4 "measure"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}
2 {file_name_id=2 function_name_id=2 line=20 end_line=20 column=1 end_column=2}
3 {file_name_id=3 function_name_id=3 line=30 end_line=30 column=1 end_column=2}
4 {file_name_id=2 function_name_id=4 line=40 end_line=40 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=5}
4 {file_location_id=4 parent_frame_id=2}
"""


def test_profile_reads_call_stacks_and_attributes_fusions_by_majority():
    from benchmarks import step_profile
    hlo = step_profile.Hlo(_HLO)
    assert hlo.module == "jit_f"
    # jax code is attributed to the vte function that called it (frame 3 -> 4 -> 1).
    assert hlo.instructions["a"].source == "vte/cluster/scoring.py:measure"
    # The fusion's own frame is score's, but two of its three instructions are measure's.
    assert hlo.instructions["fusion"].source == "vte/cluster/scoring.py:score"
    assert hlo.source("fusion") == "vte/cluster/scoring.py:measure"
    assert hlo.source("copy") == step_profile.OTHER
    assert hlo.out_bytes("tuple") == 32


def test_profile_reads_the_train_package_and_marks_gradient_operations():
    from benchmarks import step_profile
    # The training loop's frame counts once `train` is one of the packages.
    assert step_profile.Hlo(_HLO, ("vte", "train")).source("copy") == "train/loop.py:body"
    # An operation of a gradient (a transpose in its op_name) is its function's backward.
    hlo = step_profile.Hlo(_HLO.replace('op_name="mul"', 'op_name="jit(f)/transpose(jvp(g))/mul"'))
    assert hlo.instructions["b"].source == "vte/cluster/scoring.py:measure" + step_profile.BACKWARD
    assert hlo.instructions["a"].source == "vte/cluster/scoring.py:measure"


def test_profile_of_a_ppo_update_names_its_phases(tmp_path):
    from benchmarks import step_profile
    result = step_profile.main(["--program", "ppo", "--num-envs", "32", "--num-nodes", "8",
                                "--repeats", "1", "--top", "3", "--out", str(tmp_path / "u.json"),
                                "--artifacts-dir", str(tmp_path),
                                "--trainer-flags", "--num-steps 2 --num-minibatches 2"])
    assert json.loads((tmp_path / "u.json").read_text())["by_function"] == result["by_function"]
    assert result["unit"] == "update" and result["wall_ms_per_update"] > 0
    assert (result["num_steps"], result["num_minibatches"], result["env"]) == (2, 2, "synthetic")
    assert result["decisions_per_s"] == pytest.approx(32 * result["num_steps"]
                                                      / (result["wall_ms_per_update"] / 1000))
    functions = {g["function"] for g in result["by_function"]}
    # Collection (the trainer's loop, the environment), the network and its gradient.
    assert any(f.startswith("train/") for f in functions)
    assert any(f.startswith("vte/cluster/scoring.py") for f in functions)
    assert any(f.startswith("vte/cluster/network.py") and f.endswith(step_profile.BACKWARD)
               for f in functions)
    assert sum(g["share"] for g in result["by_function"]) == pytest.approx(1.0)
    assert "HloModule" in (tmp_path / "ppo_update.hlo.txt").read_text()[:200]


def test_profile_takes_trainer_flags_only_for_an_update(capsys):
    from benchmarks import step_profile
    with pytest.raises(SystemExit):
        step_profile.main(["--trainer-flags", "--env openb"])
    assert "--trainer-flags applies to --program ppo or imitate" in capsys.readouterr().err


def test_profile_self_times_subtract_nested_operations_of_the_same_program():
    from benchmarks import step_profile
    hlo = step_profile.Hlo(_HLO)
    ev = [dict(ph="X", pid=1, tid=1, ts=0.0, dur=10.0, name="fusion",
               args={"hlo_module": "jit_f"}),
          dict(ph="X", pid=1, tid=1, ts=2.0, dur=3.0, name="copy", args={"hlo_module": "jit_f"}),
          dict(ph="X", pid=1, tid=2, ts=0.0, dur=4.0, name="copy", args={"hlo_module": "jit_f"}),
          # another program's operation of the same name, and a host event
          dict(ph="X", pid=1, tid=2, ts=5.0, dur=9.0, name="fusion",
               args={"hlo_module": "jit_other"}),
          dict(ph="X", pid=1, tid=3, ts=0.0, dur=50.0, name="$python_call")]
    events = step_profile.module_events(ev, hlo)
    assert len(events) == 3
    assert step_profile.self_times(events) == {"fusion": 7.0, "copy": 7.0}


def test_profile_rejects_bad_flags(capsys):
    import pytest
    from benchmarks import step_profile
    with pytest.raises(SystemExit):
        step_profile.main(["--steps", "3"])
    assert "--steps must be a multiple of 2" in capsys.readouterr().err


def _fake_run(path, algorithm, seeds, eval_match=None):
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"algorithm": algorithm, "seeds": seeds, "hidden": 16}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for u in range(1, 6):
            for s in range(seeds):
                f.write(json.dumps({"update": u, "seed": s, "time": 30.0 * u,
                                    "greedy_match": 0.8 + 0.02 * u + 0.001 * s}) + "\n")
        f.write('{"update": 6, "seed": 0, "ti')   # cut short by an interrupt: dropped
    if eval_match is not None:
        with open(os.path.join(path, "eval.json"), "w") as f:
            json.dump({"policy": {"match_rate": eval_match[0]},
                       **{f"policy_seed{s}": {"match_rate": m}
                          for s, m in enumerate(eval_match) if s}}, f)


def test_curves_plots_and_summarizes_every_seed(tmp_path, capsys):
    from benchmarks import curves
    _fake_run(tmp_path / "imitate", "imitate", 2, eval_match=[0.95, 0.96])
    _fake_run(tmp_path / "ppo", "ppo", 1)
    out = tmp_path / "fig.png"
    rows = curves.main([str(tmp_path / "imitate"), str(tmp_path / "ppo"), "--out", str(out)])
    assert [(r["algorithm"], r["seed"]) for r in rows] == [("imitate", 0), ("imitate", 1),
                                                           ("ppo", 0)]
    assert rows[0]["minutes"] == pytest.approx(2.5) and rows[0]["updates"] == 5
    assert rows[1]["greedy_match"] == pytest.approx(0.901)
    assert [r["held_out_match"] for r in rows] == [0.95, 0.96, None]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert curves.smooth([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]
    with pytest.raises(SystemExit):
        curves.main([str(tmp_path), "--out", str(tmp_path / "x.png")])
    assert "is not a training run directory: no config.json" in capsys.readouterr().err


def test_adapters_benchmark_reports_the_three_rates(tmp_path, capsys):
    from benchmarks import adapters
    out = adapters.main(["--num-envs", "4", "--num-nodes", "4", "--steps", "8",
                         "--json", str(tmp_path / "a.json")])
    for key in ("gymnasium_make_vec", "vte_step_per_call", "vte_step_scanned"):
        assert out[key] > 0
    assert json.load(open(tmp_path / "a.json")) == out
    assert "x the adapter" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        adapters.main(["--steps", "0"])


def test_kernel_compares_the_rl_loop_with_a_minimal_kernel_in_one_process(tmp_path, capsys):
    from benchmarks import kernel
    out = tmp_path / "k.json"
    # The throughput smoke test's shapes: its random-valid rollout is the same program.
    result = kernel.main(["--num-envs", "2", "--num-nodes", "8", "--steps", "2",
                          "--rounds", "2", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert set(saved["decisions_per_s"]) == {"kernel", "environment", "observed", "rl_loop",
                                             "rl_loop_jax"}
    assert set(saved["loop_us_per_decision"]) == {"step", "observation", "policy",
                                                  "policy, JAX's sampler"}
    for name, rate in saved["decisions_per_s"].items():
        assert rate > 0 and len(saved["round_s"][name]) == 2 and saved["compile_s"][name] > 0
    rate = saved["decisions_per_s"]
    assert saved["loop_over_kernel"] == pytest.approx(rate["rl_loop"] / rate["kernel"])
    assert saved["loop_jax_sampler_over_kernel"] == pytest.approx(rate["rl_loop_jax"]
                                                                  / rate["kernel"])
    assert saved["environment_over_kernel"] == result["environment_over_kernel"]
    printed = capsys.readouterr().out
    assert f"RL loop / kernel     {saved['loop_over_kernel']:.3f}" in printed
    with pytest.raises(SystemExit):
        kernel.main(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


def test_the_kernel_decision_is_best_fit_and_defers_when_nothing_fits():
    import jax.numpy as jnp
    from benchmarks import kernel
    capacity = jnp.array([[4.0, 4, 4, 4], [2, 2, 2, 2], [4, 4, 4, 4]])
    free = jnp.array([[3.0, 3, 3, 3], [1, 1, 1, 1], [0.5, 4, 4, 4]])
    request = jnp.array([1.0, 1, 1, 1])
    after, nxt, node = kernel.kernel_decision(capacity, free, request, jnp.uint32(7))
    # Node 1 fits exactly (score 0), node 0 fits with room, node 2 lacks the first resource.
    assert int(node) == 1
    np.testing.assert_allclose(after, jnp.minimum(
        free - jnp.array([[0.0] * 4, [1] * 4, [0] * 4]) + kernel.RELEASE * capacity, capacity))
    assert nxt.shape == (4,) and bool(jnp.all((nxt >= 0) & (nxt < 0.25)))
    _, _, node = kernel.kernel_decision(capacity, free, 5 * request, jnp.uint32(7))
    assert int(node) == 3     # nothing fits: defer


def test_failed_pods_breaks_the_replays_failures_down_by_kind(tmp_path, capsys):
    from benchmarks import failed_pods
    from tests.test_openb import small_trace
    from vte.openb.__main__ import main as openb_main
    nodes, pods = small_trace(tmp_path, pods=200)       # 200 pods on 12 nodes: some fail
    common = ["--nodes", nodes.path, "--pods", pods.path, "--seeds", "2", "--first-seed", "5"]
    out = tmp_path / "failed.json"
    result = failed_pods.main(common + ["--policies", "fgd,random", "--json", str(out)])
    grid = openb_main(common + ["--policies", "fgd,random", "--no-progress", "--cache", "none"])
    for name, row in result["policies"].items():
        # The same replays as python -m vte.openb: the same failed pods per seed.
        assert row["all"]["failed"] == pytest.approx(grid["policies"][name]["failed_pods"]["mean"])
        assert row["all"]["failed"] > 0
        # CPU-only, shared and whole-GPU pods are every pod; a model's pods are among them.
        for field in ("failed", "submitted"):
            assert sum(row[k][field] for k in ("cpu_only", "shared", "whole")) == row["all"][field]
            assert row["gpu_model"][field] <= row["all"][field] - row["cpu_only"][field]
        assert len(row["first_failure_at"]) == 2
        # The pods asking for a model list: the trace's T4 pods, every one counted once.
        assert list(row["by_model"]) == ["T4"]
        for field in ("failed", "submitted"):
            assert row["by_model"]["T4"][field] == row["gpu_model"][field]
        assert row["by_model"]["T4"]["submitted"] > 0
        assert all(x is None or 0 <= x <= 130 for x in row["first_failure_at"])
    assert json.loads(out.read_text()) == result
    assert result["gpus_by_model"] == {
        m: int(nodes.num_gpus[nodes.model == i].sum()) for i, m in enumerate(nodes.models)}
    printed = capsys.readouterr().out
    assert "failed pods per seed" in printed and "asking for T4: " in printed
    # FGD placing FGD's own CPU-only pods changes nothing; under Random's other pods it
    # places them as FGD would, and every row keeps its GRAR at the end per seed.
    mixed = failed_pods.main(common + ["--policies", "fgd,random", "--cpu-pods-by", "fgd"])
    rows = mixed["policies"]
    assert list(rows) == ["fgd", "random", "fgd+cpu_pods_by:fgd", "random+cpu_pods_by:fgd"]
    assert rows["fgd+cpu_pods_by:fgd"] == rows["fgd"]
    assert rows["random"] == result["policies"]["random"]
    assert rows["random+cpu_pods_by:fgd"] != rows["random"]
    np.testing.assert_allclose(rows["fgd"]["alloc_at_end"],
                               grid["policies"]["fgd"]["alloc_at_end"]["per_seed"])
    for bad, message in ((["--seeds", "0"], "--seeds=0 is invalid"),
                         (["--policies", "tetris"], "unknown policy 'tetris'"),
                         (["--policies", ","], "--policies=',' is invalid"),
                         (["--cpu-pods-by", "tetris"], "--cpu-pods-by: unknown policy 'tetris'"),
                         (["--json", str(tmp_path)], "is a directory"),
                         (["--pods", "no_such_trace"], "no_such_trace")):
        with pytest.raises(SystemExit):
            failed_pods.main(common + bad)
        assert message in capsys.readouterr().err, bad


def test_cpu_rules_keep_fgds_best_nodes_and_break_its_ties_by_hand(tmp_path):
    """`--cpu-pods-by fgd_then_*`: FGD's score first, the rule only among its best nodes."""
    import jax.numpy as jnp
    from benchmarks import failed_pods
    from tests.test_openb_power import NODE_HEADER, ROWS, pod, with_node
    from vte import openb
    from vte.openb import cluster
    from vte.openb.cluster import Typical
    from vte.openb.policies import fgd
    path = tmp_path / "nodes.csv"
    path.write_text(NODE_HEADER + "".join(",".join(map(str, r)) + "\n" for r in ROWS))
    nodes = openb.load_nodes(str(path))        # free GPU milli 2000, 4000, 1000, 0 (n3: none)
    # One typical shape: half a GPU and 4 cores, so a node left with under 4 cores strands
    # its GPUs and FGD scores a CPU-only pod that does so below its 50.
    typical = Typical(cpu_milli=jnp.array([4000], jnp.int32), gpu_milli=jnp.array([500], jnp.int32),
                      num_gpus=jnp.array([1], jnp.int32), model_mask=jnp.array([0], jnp.int32),
                      prob=jnp.array([1.0], jnp.float32))
    spec = cluster.make_spec(nodes, typical)
    state = cluster.empty_state(spec, np.arange(4, dtype=np.int32))
    state = with_node(state, 0, [2000, 2000], cpu_free=4500)   # 1 core left after: strands
    state = with_node(state, 2, [1000], cpu_free=6000)          # 5 cores left: FGD's 50
    p = pod(cpu=1000, num_gpus=0)
    feasible = cluster.feasible(state, p, spec)
    key = jax.random.PRNGKey(0)

    def node_of(rule, state=state, feasible=feasible):
        return int(cluster.select(rule(key, state, p, feasible, spec)[0], feasible, state.rank))
    fgd_scores = np.asarray(fgd(key, state, p, feasible, spec)[0]).tolist()
    assert fgd_scores[0] < 50 and fgd_scores[1:] == [50, 50, 50]
    # The least CPU left would be n0 (3.5 cores), but FGD scores it lower; of FGD's best,
    # n2 leaves 5 cores, n3 7, n1 63: n2.
    assert node_of(failed_pods.fgd_then_cpu_fit) == 2
    # The least free GPU among FGD's best: n3, which has none.
    assert node_of(failed_pods.fgd_then_gpu_full) == 3
    # With n3 out of CPU: n2 (1000 milli free) before n1 (4000).
    full = state.replace(cpu_free=state.cpu_free.at[3].set(500))
    assert node_of(failed_pods.fgd_then_gpu_full, full, cluster.feasible(full, p, spec)) == 2
    # Both are pure: jitted and vmapped over two states, the same nodes.
    both = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), state, full)
    for rule in failed_pods.CPU_RULES.values():
        scores = jax.jit(jax.vmap(lambda s: rule(key, s, p, cluster.feasible(s, p, spec), spec)[0]))(both)
        np.testing.assert_array_equal(scores[0], rule(key, state, p, feasible, spec)[0])


def test_compile_attributes_every_operation_of_the_step_to_a_phase():
    """benchmarks/compile.py: the phase of a frame chain, and a real step's program whose
    every operation lands in a phase (no unattributed ones) of the step's known parts."""
    from benchmarks import compile as comp
    loc = ('loc("jit(step)/add"(callsite("lookup"("/x/vte/cluster/fusion.py":10:1 to :2) at '
           'callsite("score_request"("/x/vte/cluster/scoring.py":5:1 to :2) at "f"("/x/vte/cluster/env.py":1:1 to :2))))')
    assert comp.phase_of(loc) == "scoring"                   # the helper defers to its caller
    assert comp.phase_of(loc.replace("score_request", "reset_state")) == (
        "auto-reset (a fresh scenario)")
    assert comp.phase_of('loc("jit(step)")').startswith("other")
    prog = comp.step_program(4)
    phases = prog["per_phase"]
    assert {"observation", "scoring", "dynamics", "twin", "auto-reset (a fresh scenario)"} <= set(phases)
    assert not any(p.startswith("other") for p in phases), phases
    assert sum(phases.values()) >= prog["operations"] > 1000
