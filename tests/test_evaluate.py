"""Evaluation harness: the optimum is optimal, no heuristic acts invalidly, runs are
reproducible per key, bad input is refused before any work, the command writes its files."""

import json
import math
import subprocess
import sys

import jax
import pytest

import vte
from vte.cluster import heuristics as H
from vte.cluster.evaluate import METRICS, table
from vte.cluster.evaluate_cli import main
from tests.conftest import SMALL

EPISODES = 3
SEED = 7
# Every heuristic (as callables) plus the optimum, in the order the command uses (which
# names them by strings: it resolves to the same policies and reuses the compilation).
ALL_POLICIES = {"optimal": "optimal", **H.ALL}
# The command line that sets SMALL's shape fields.
SMALL_ARGS = [f"--set={name}={getattr(SMALL, name)}" for name in
              ("num_nodes", "queue_len", "num_sites", "slots_per_node", "episode_len")]


@pytest.fixture(scope="module")
def results():
    return vte.evaluate(ALL_POLICIES, SMALL, jax.random.PRNGKey(SEED), EPISODES)


def test_every_policy_reports_every_metric(results):
    assert list(results) == list(ALL_POLICIES)
    for name, metrics in results.items():
        assert set(METRICS) <= set(metrics), name
        assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values()), name
        assert 0.0 <= metrics["match_rate"] <= 1.0 and metrics["mean_regret"] >= 0.0
        assert metrics["decisions"] > 0


def test_the_optimum_scores_as_the_optimum(results):
    opt = results["optimal"]
    assert opt["match_rate"] == 1.0
    assert opt["mean_regret"] == 0.0
    assert opt["cost_ratio"] == pytest.approx(1.0, abs=1e-6)
    assert opt["invalid_rate"] == 0.0


def test_no_heuristic_takes_an_invalid_action(results):
    for name in H.ALL:
        assert results[name]["invalid_rate"] == 0.0, name
        assert results[name]["cost_ratio"] >= 1.0 - 1e-6, name


def test_same_key_same_table_other_key_other_table(results):
    again = vte.evaluate(ALL_POLICIES, SMALL, jax.random.PRNGKey(SEED), EPISODES)
    assert again == results
    other = vte.evaluate(ALL_POLICIES, SMALL, jax.random.PRNGKey(SEED + 1), EPISODES)
    assert other != results


@pytest.mark.parametrize("policies,num_episodes,match", [
    ({"x": "kube"}, 1, "'kube' is unknown"),
    ({"x": 3}, 1, "x.*3.*is invalid"),
    ({}, 1, "policies"),
    (["optimal"], 1, "policies"),
    ({"optimal": "optimal"}, 0, "num_episodes=0"),
    ({"optimal": "optimal"}, 2.0, "num_episodes=2.0"),
    ({"optimal": "optimal"}, True, "num_episodes=True"),
])
def test_bad_input_is_refused(policies, num_episodes, match):
    with pytest.raises(ValueError, match=match):
        vte.evaluate(policies, SMALL, jax.random.PRNGKey(0), num_episodes)
    with pytest.raises(ValueError, match="params"):
        vte.evaluate({"optimal": "optimal"}, {"num_nodes": 8}, jax.random.PRNGKey(0), 1)


def test_cost_ratio_stays_finite_when_the_optimum_costs_nothing():
    """With every weight and penalty at 0 the optimal actions cost 0: the ratio is then
    1 + mean_regret (an always-invalid policy pays the worst valid regret, here the defer
    penalty where a node is feasible, plus invalid_penalty per decision)."""
    params = SMALL.replace(weights=(0.0, 0.0, 0.0), pref_penalty=0.0, episode_len=4)
    out = vte.evaluate({"bad": lambda k, o, p: jax.numpy.int32(-1), "optimal": "optimal"},
                       params, jax.random.PRNGKey(1), 2)
    bad = out["bad"]
    assert bad["invalid_rate"] == 1.0
    assert 1.0 <= bad["mean_regret"] <= 1.0 + params.defer_penalty
    assert bad["cost_ratio"] == pytest.approx(1.0 + bad["mean_regret"])
    assert out["optimal"]["cost_ratio"] == 1.0 and out["optimal"]["mean_regret"] == 0.0


def test_policy_actions_are_checked_as_step_checks_them():
    """A float action raises; an integer out of range in its own dtype is invalid (here
    2**32 - 1 as uint32, which a cast to int32 would have made -1 anyway, and 9 > N)."""
    params = SMALL.replace(episode_len=3)
    with pytest.raises(TypeError, match="got dtype float32"):
        vte.evaluate({"f": lambda k, o, p: jax.numpy.float32(0)}, params, jax.random.PRNGKey(0), 1)
    out = vte.evaluate({"u": lambda k, o, p: jax.numpy.uint32(2**32 - 1),
                        "big": lambda k, o, p: jax.numpy.uint8(SMALL.num_nodes + 1)},
                       params, jax.random.PRNGKey(0), 2)
    assert out["u"]["invalid_rate"] == 1.0 and out["big"]["invalid_rate"] == 1.0


def test_table_has_a_row_per_policy(results):
    lines = table(results).splitlines()
    assert len(lines) == 2 + len(results)
    assert all(line.startswith(f"| {name} |") for line, name in zip(lines[2:], results))


def test_command_prints_writes_json_and_draws(tmp_path, capsys, results):
    out_json, out_png = tmp_path / "eval.json", tmp_path / "eval.png"
    main([*SMALL_ARGS, f"--episodes={EPISODES}", f"--seed={SEED}", f"--json={out_json}",
          f"--png={out_png}"])
    printed = capsys.readouterr().out
    assert all(f"| {name} |" in printed for name in ALL_POLICIES)
    saved = json.loads(out_json.read_text())
    assert saved["results"] == results and saved["num_episodes"] == EPISODES
    assert saved["params"]["num_nodes"] == SMALL.num_nodes
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,match", [
    (["--policies=optimal,kube"], "--policies"),
    (["--set=num_nodes"], "--set"),
    (["--set=no_such_field=1"], "--set"),
    (["--set=num_nodes=abc"], "--set"),
    (["--set=arrival_rate=None"], "--set 'arrival_rate=None' is invalid: VALUE must be a number"),
    (["--set=weights=(1, None, 1)"], "--set 'weights=\\(1, None, 1\\)' is invalid"),
    (["--set=arrival_rate='2'"], "VALUE must be a number"),
    (["--seed=-1"], "--seed -1 is invalid: allowed an integer in \\[0, 2\\*\\*32\\)"),
    ([f"--seed={2**40}"], "--seed 1099511627776 is invalid"),
    (["--episodes=0"], "--episodes 0 is invalid"),
    (["--json="], "--json '': give a file path"),
    (["--json=/no/such/dir/e.json"], "the directory '/no/such/dir' does not exist"),
    (["--png=."], "--png '.' is a directory"),
])
def test_command_refuses_bad_arguments(args, match, tmp_path, monkeypatch):
    """Every refusal comes before the evaluation runs (the output paths too)."""
    cli = sys.modules[main.__module__]
    monkeypatch.setattr(cli, "evaluate", lambda *a, **k: pytest.fail("evaluated before refusing"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=match):
        main(args)
    assert not (tmp_path / "evaluation.json").exists()


def test_runs_as_a_module_without_warnings():
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "vte.evaluate",
                           "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--episodes" in done.stdout


def test_network_weights_are_an_argument_of_one_compiled_program():
    """A network policy's weights enter the evaluation's program as an argument: other
    weights of the same shapes (another seed, a later checkpoint) run the program compiled
    for the first, and score what the same network with those weights as constants scores."""
    from vte.cluster.evaluate import _run
    from vte.cluster.network import SchedulerNet, make_policy

    params = SMALL.replace(episode_len=3)
    net = SchedulerNet(hidden=8)
    obs, _ = vte.reset(jax.random.PRNGKey(0), params)
    # w1 never defers where a node is feasible, w2 always defers: a huge defer bias
    init = jax.jit(net.init)(jax.random.PRNGKey(1), obs)
    w1, w2 = (jax.tree_util.tree_map(lambda x: x, init) for _ in range(2))
    w1["params"]["defer_logit"]["bias"] = init["params"]["defer_logit"]["bias"] - 1e4
    w2["params"]["defer_logit"]["bias"] = init["params"]["defer_logit"]["bias"] + 1e4
    key = jax.random.PRNGKey(3)
    first = vte.evaluate({"net": make_policy(net, w1)}, params, key, 2)["net"]
    compiled = _run._cache_size()
    second = vte.evaluate({"net": make_policy(net, w2)}, params, key, 2)["net"]
    assert _run._cache_size() == compiled
    # the same weights closed over by a plain callable: a program of its own, the same scores
    closed = make_policy(net, w2)
    constants = vte.evaluate({"net": lambda k, o, p: closed(k, o, p)}, params, key, 2)["net"]
    assert _run._cache_size() == compiled + 1
    assert second == pytest.approx(constants, rel=1e-6)
    assert second["placed"] == 0 and second["deferred"] > 0
    assert first["placed"] > 0
