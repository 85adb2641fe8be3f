"""The examples/ scripts run unchanged at toy size and report every baseline.

The JAX ones (PureJaxRL-style, rejax) always run here (slow: they compile a whole
training); the PyTorch ones (sb3-contrib, CleanRL-style) run where torch and sb3-contrib
are installed (they are not in the dev extra: `pip install torch stable-baselines3
sb3-contrib`); their full-size figures are in docs/benchmarks.md, "Bring your own agent".
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
TOY = ["--num-nodes", "4"]


def run(name: str, argv: list[str]) -> dict:
    """Run `examples/NAME.py ARGV` as a user would (its own process: the clients' libraries
    stay out of the test process) and read back the held-out returns it printed."""
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, name + ".py"), *argv],
                         capture_output=True, text=True, timeout=1200, cwd=EXAMPLES)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "held-out" in out.stdout, out.stdout
    scores = {}
    for line in out.stdout.splitlines()[out.stdout.splitlines().index(
            next(l for l in out.stdout.splitlines() if "held-out" in l)) + 1:]:
        name_, value = line.split()
        scores[name_] = float(value)
    assert {"random_valid", "first_fit", "most_reliable"} <= set(scores)
    assert all(math.isfinite(v) for v in scores.values())
    return scores


@pytest.mark.slow
def test_purejaxrl_style_ppo_trains_and_reports():
    scores = run("purejaxrl_ppo", TOY + ["--total-timesteps", "4096", "--num-envs", "16"])  # 2 updates
    assert "purejaxrl_ppo" in scores


@pytest.mark.slow
def test_rejax_ppo_trains_and_reports():
    pytest.importorskip("rejax")
    assert "rejax_ppo" in run("rejax_ppo", TOY + ["--total-timesteps", "4096", "--num-envs", "16"])


@pytest.mark.slow   # the examples' held-out evaluation, end to end
def test_the_baselines_play_the_same_held_out_scenarios(monkeypatch):
    """Random valid actions are worse than the best heuristic on the shared held-out
    scenarios, and the same policy scores the same."""
    import vte
    monkeypatch.syspath_prepend(EXAMPLES)
    sys.modules.pop("common", None)
    common = importlib.import_module("common")
    params = vte.EnvParams(num_nodes=8, episode_len=16)
    a = common.held_out({}, params, episodes=8)
    b = common.held_out({}, params, episodes=8)
    assert a == b
    assert a["random_valid"] < a["most_reliable"]
