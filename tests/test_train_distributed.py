"""Training on several devices and processes: the same metrics and parameters on 4
devices (PPO in one process, imitation in 2 processes of 2 devices) as on 1 device; a
checkpoint saved on 4 devices loads on 1, and one saved by 2 processes resumes on 1.

The devices are forced CPU devices, so those runs are subprocesses (the flag must be set
before jax is imported; they compile at a low XLA optimisation level, which is faster and
must not change the results either). The 1-device runs happen here meanwhile, with the
configurations of `test_train.py`, whose compiled programs they share in one session."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import vte
from tests.conftest import FAST_COMPILE
from tests.test_train import BIG, PPO_RUN, RESET, TINY
from vte.train import imitate, ppo
from vte import checkpoint as ckpt

pytestmark = pytest.mark.slow   # end-to-end runs: `pytest -m slow`, and in CI

ROOT = str(Path(__file__).resolve().parents[1])

# 8 envs x 4 steps, 4 updates in chunks of 2 (episodes of 6 decisions end inside the
# run), minibatches of 16 samples: 4 per device on 4 devices. PPO: 2 seeds, imitation: 1,
# online (the default) in minibatches of 4 environments, two blocks a step: 1 per device.
QUIET = ["--eval-episodes", "0"]
PPO = PPO_RUN + QUIET
IMITATE = TINY + ["--total-timesteps", str(8 * 4 * 4), "--num-minibatches", "8"] + QUIET

FOUR_DEVICES = textwrap.dedent("""
    import os, sys
    import jax
    from vte.train import ppo
    assert jax.local_device_count() == 4
    out = sys.argv[1]
    ppo.main({ppo!r} + ["--devices", "4", "--out", out + "/ppo4"])
    try:
        ppo.main({ppo!r} + ["--devices", "3", "--out", out + "/bad"])
    except SystemExit as e:
        assert e.code == 2 and not os.path.exists(out + "/bad")
    else:
        raise AssertionError("--devices 3 must be refused")
    print("OK")
""").format(ppo=PPO)


def _launch(argv, devices, log):
    """Run python `argv` on `devices` forced CPU devices, its output to the file `log`."""
    env = {**os.environ, "XLA_FLAGS": " ".join(
        [f"--xla_force_host_platform_device_count={devices}", *FAST_COMPILE])}
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable] + argv, cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("devices"))
    hosts = [f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    logs = [f"{out}/four_devices.log", f"{out}/process0.log", f"{out}/process1.log"]
    jobs = [_launch(["-c", FOUR_DEVICES, out], 4, logs[0])] + [
        _launch(["train/imitate.py"] + IMITATE + ["--devices", "2", "--out", f"{out}/hosts",
                                                  "--stop-after-updates", "2", "--coordinator"]
                + hosts + ["--process-id", str(i)], 2, logs[1 + i]) for i in (0, 1)]
    try:
        ppo.main(PPO + ["--devices", "1", "--out", f"{out}/ppo1"])
        imitate.main(IMITATE + ["--devices", "1", "--out", f"{out}/imitate1"])
        for job in jobs:
            job.wait(timeout=900)
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    outputs = [Path(log).read_text() for log in logs]
    for job, output in zip(jobs, outputs):
        assert job.returncode == 0, output
    assert "OK" in outputs[0]
    imitate.main(["--resume", f"{out}/hosts", "--devices", "1"])   # saved by 2 processes
    return out, outputs[0]


def _rows(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _assert_same_rows(run, reference, devices):
    """`run` logged the metrics of `reference` (4 updates), on `devices` (one per row)."""
    rows, ref = _rows(run), _rows(reference)
    seeds = ckpt.load_config(reference)["seeds"]
    assert [(r["update"], r["seed"]) for r in rows] == [
        (u, s) for u in (1, 2, 3, 4) for s in range(seeds)]
    assert [(r["update"], r["seed"]) for r in ref] == [(r["update"], r["seed"]) for r in rows]
    assert [r["devices"] for r in rows] == devices
    for a, b in zip(rows, ref):
        assert set(a) == set(b)
        for key in set(a) - {"sps", "time", "devices"}:
            if b[key] is None:
                assert a[key] is None, (key, a, b)
            else:
                np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{key} at update {a['update']}")


def _assert_same_params(run, reference):
    for seed in range(ckpt.load_config(reference)["seeds"]):
        a, b = ckpt.load_variables(run, seed=seed), ckpt.load_variables(reference, seed=seed)
        jax.tree_util.tree_map(
            lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6), a, b)


def test_ppo_on_four_devices_equals_one(runs):
    out, _ = runs
    _assert_same_rows(f"{out}/ppo4", f"{out}/ppo1", [4] * 8)
    _assert_same_params(f"{out}/ppo4", f"{out}/ppo1")   # saved on 4 devices, loaded on 1


def test_imitation_on_two_processes_of_two_devices_equals_one_device_and_resumes_on_one(
        runs):
    out, _ = runs
    assert ckpt.checkpoint_steps(f"{out}/hosts") == [2, 4]
    _assert_same_rows(f"{out}/hosts", f"{out}/imitate1", [4, 4, 1, 1])
    _assert_same_params(f"{out}/hosts", f"{out}/imitate1")


def test_a_policy_trained_on_four_devices_acts_on_one(runs):
    out, _ = runs
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    obs, _ = RESET(keys, BIG)
    policy = jax.jit(jax.vmap(vte.load_policy(f"{out}/ppo4", seed=1), (0, 0, None)),
                     static_argnums=2)
    net = ckpt.network_from_config(ckpt.load_config(f"{out}/ppo1"))
    logits = jax.jit(net.apply)(ckpt.load_variables(f"{out}/ppo1", seed=1), obs)[0]
    np.testing.assert_array_equal(np.asarray(policy(keys, obs, BIG)),
                                  np.argmax(np.asarray(logits), -1))


def test_devices_that_do_not_split_the_batch_are_refused(runs):
    _, output = runs
    assert ("--devices=3 is invalid: allowed 1, 2, 4: device counts up to 4 that divide "
            "num_envs = 8 and the minibatch, num_envs * num_steps / num_minibatches = 16"
            ) in output


@pytest.mark.parametrize("devices", [0, jax.local_device_count() + 1])
def test_more_devices_than_the_process_has_are_refused(devices, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        ppo.main(PPO + ["--devices", str(devices), "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    local = jax.local_device_count()
    assert (f"--devices={devices} is invalid: allowed 1..{local}, the number of devices of "
            "this process" in capsys.readouterr().err)
    assert not os.path.exists(tmp_path / "x")
