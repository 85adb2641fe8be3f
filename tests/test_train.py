"""The training scripts, in-process on a tiny configuration: outputs, checkpoints,
several seeds at once, exact resume, imitation, and clear errors for bad flags."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from vte import checkpoint as ckpt
from vte.train import core, imitate, ppo
from vte.train import run as run_lib
from vte.train.config import ImitateConfig, PPOConfig, minibatches_of
from vte.train.envs import make_env
from vte.cluster.network import masked_logits

TINY = ["--num-nodes", "8", "--queue-len", "4", "--episode-len", "6", "--num-envs", "8",
        "--num-steps", "4", "--num-minibatches", "2", "--hidden", "16",
        "--log-every", "2", "--checkpoint-every", "2"]
PPO_RUN = TINY + ["--total-timesteps", str(8 * 4 * 4), "--seeds", "2"]   # 4 updates


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ppo"))
    results = ppo.main(PPO_RUN + ["--out", out, "--eval-episodes", "2"])
    return out, results


RESET = jax.jit(jax.vmap(vte.reset, (0, None)), static_argnums=1)


def _rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _final_params(out, seed):
    return ckpt.load_variables(out, seed=seed)["params"]


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_ppo_writes_every_output(ppo_run):
    out, results = ppo_run
    for name in ("config.json", "metrics.jsonl", "learning_curve.png", "eval.json"):
        assert os.path.isfile(os.path.join(out, name)), name
    assert sorted(int(s) for s in os.listdir(os.path.join(out, "checkpoints"))) == [2, 4]
    rows = _rows(out)
    assert [(r["update"], r["seed"]) for r in rows] == [(u, s) for u in (1, 2, 3, 4)
                                                        for s in (0, 1)]
    for key in ("step", "return", "greedy_match", "match_rate", "regret", "loss",
                "policy_loss", "value_loss", "entropy", "sps"):
        assert key in rows[0], key
    assert all(np.isfinite(r["loss"]) and r["sps"] > 0 for r in rows)
    with open(os.path.join(out, "eval.json")) as f:
        table = json.load(f)
    name = os.path.basename(out)             # the trained rows are named by the run
    assert {name, f"{name}_seed1", "optimal", *vte.cluster.heuristics.ALL} <= set(table)
    assert "policy" not in table
    assert table["optimal"]["mean_regret"] == 0.0
    assert table[name]["invalid_rate"] == 0.0
    assert results == table


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_seeds_train_different_models(ppo_run):
    out, _ = ppo_run
    a, b = _final_params(out, 0), _final_params(out, 1)
    diffs = jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))), a, b))
    assert max(diffs) > 1e-3


BIG = vte.EnvParams(num_nodes=20, queue_len=4)   # larger than the cluster trained on


@pytest.mark.slow
def test_checkpoint_round_trips_into_a_policy(ppo_run):
    out, _ = ppo_run
    variables = ckpt.load_variables(out, seed=1)
    net = ckpt.network_from_config(ckpt.load_config(out))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    obs, _ = RESET(keys, BIG)
    # Both compiled whole: run op by op, each network would compile some 80 one-op programs.
    policy = jax.jit(jax.vmap(vte.load_policy(out, seed=1), (0, 0, None)))
    actions = np.asarray(policy(keys, obs, BIG))
    expected = np.argmax(np.asarray(jax.jit(net.apply)(variables, obs)[0]), -1)
    np.testing.assert_array_equal(actions, expected)
    assert np.all(np.asarray(obs.action_mask)[np.arange(4), actions])
    with pytest.raises(ValueError, match="seed=2"):
        ckpt.load_variables(out, seed=2)


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_a_fresh_run_refuses_an_out_that_holds_checkpoints(ppo_run, capsys):
    out, _ = ppo_run
    with pytest.raises(SystemExit):
        ppo.main(PPO_RUN + ["--out", out])
    assert f"continue it with --resume {out}" in capsys.readouterr().err


@pytest.mark.slow
def test_interrupted_and_resumed_equals_uninterrupted(ppo_run, tmp_path):
    """Stopped after 3 updates (chunks of 2 and 1: the shorter chunk runs the run's one
    compiled program, its length an argument) and resumed for the 4th: the same rows and
    weights as the run of two full chunks."""
    out_full, _ = ppo_run
    out = str(tmp_path / "resumed")
    ppo.main(PPO_RUN + ["--out", out, "--eval-episodes", "0", "--stop-after-updates", "3"])
    with ckpt.checkpoint_manager(out) as mngr:
        assert mngr.latest_step() == 3
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:   # a row written after the
        f.write(json.dumps({**_rows(out)[-1], "update": 4}) + "\n")   # checkpoint: dropped
    ppo.main(["--resume", out])
    for seed in (0, 1):
        jax.tree_util.tree_map(
            lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
            _final_params(out, seed), _final_params(out_full, seed))
    resumed, full = _rows(out), _rows(out_full)
    assert [(r["update"], r["seed"]) for r in resumed] == [(r["update"], r["seed"])
                                                           for r in full]
    for a, b in zip(resumed, full):
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)
        assert a["greedy_match"] == pytest.approx(b["greedy_match"])


@pytest.mark.slow
def test_imitation_trains_and_writes_outputs(tmp_path):
    out = str(tmp_path / "imitate")
    imitate.main(TINY + ["--total-timesteps", str(8 * 4 * 4), "--out", out,
                         "--eval-episodes", "0"])
    rows = _rows(out)
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    assert all(np.isfinite(r["cross_entropy"]) for r in rows)
    assert all(np.isfinite(r["distill_cross_entropy"]) for r in rows)   # on by default
    assert os.path.isfile(os.path.join(out, "learning_curve.png"))
    with ckpt.checkpoint_manager(out) as mngr:
        assert mngr.latest_step() == 4
    obs, _ = RESET(jax.random.split(jax.random.PRNGKey(1), 4), BIG)
    actions = np.asarray(vte.load_policy(out)(jax.random.PRNGKey(0), obs, BIG))
    assert actions.shape == (4,) and np.all(np.asarray(obs.action_mask)[np.arange(4), actions])


def _policy_and_reference(cost, mask, temp):
    """Random masked log-probabilities and the NumPy distillation cross-entropy to them."""
    logits = masked_logits(jax.random.normal(jax.random.PRNGKey(0), cost.shape), mask)
    log_probs = np.asarray(jax.nn.log_softmax(logits))
    want = []
    for c, lp, m in zip(cost, log_probs, mask):
        t = np.exp(-(c[m] - c[m].min()) / temp)
        want.append(-(t / t.sum() * lp[m]).sum())
    return log_probs, np.mean(want)


def test_the_distilled_target_is_the_softmax_of_the_feasible_costs():
    cost = np.array([[0.30, 0.10, np.inf, 0.12, 0.90],
                     [np.inf, np.inf, np.inf, np.inf, 0.0]], np.float32)   # 4 nodes + defer
    mask = np.isfinite(cost)
    log_probs, want = _policy_and_reference(cost, mask, 0.05)
    got = float(imitate.distill_cross_entropy(log_probs, cost, mask, 0.05))
    assert got == pytest.approx(want, rel=1e-5)
    # A cold teacher is the label: the cross-entropy to the least-cost action.
    cold = float(imitate.distill_cross_entropy(log_probs, cost, mask, 1e-4))
    label = np.array([1, 4])
    assert cold == pytest.approx(-log_probs[np.arange(2), label].mean(), rel=1e-4)
    # An action the policy may not take gets no teacher mass, whatever its cost: the
    # teacher is the softmax over the actions both allow (here without the least-cost one).
    hidden = mask.copy()
    hidden[0, 1] = False
    lp_h, want_h = _policy_and_reference(cost, hidden, 0.05)
    got_h = float(imitate.distill_cross_entropy(lp_h, cost, hidden, 0.05))
    assert got_h == pytest.approx(want_h, rel=1e-5)
    # A temperature far below the cost gaps is still finite (the gaps, not the costs, are
    # divided by it).
    assert np.isfinite(float(imitate.distill_cross_entropy(log_probs, cost, mask, 1e-6)))


def test_the_training_env_reports_the_cost_of_every_action():
    from vte.train.envs import make_env
    env = make_env(ImitateConfig.of(num_nodes=8, queue_len=4, episode_len=6))
    obs, state = env.reset(jax.random.PRNGKey(3))
    for t in range(6):
        action = jax.random.randint(jax.random.PRNGKey(t), (), 0, 9)
        cost = np.asarray(env.action_costs(state))
        next_obs, next_state, reward, _, _, info = env.step(jax.random.PRNGKey(t), state, action)
        assert cost.shape == (9,)
        np.testing.assert_array_equal(np.isfinite(cost), np.asarray(obs.action_mask))
        assert int(np.argmin(cost)) == int(info["optimal_action"])
        if np.isfinite(cost[int(action)]):
            assert -float(reward) == pytest.approx(cost[int(action)] - cost.min(), abs=1e-5)
        obs, state = next_obs, next_state


def test_runs_saved_before_a_field_existed_load_with_what_they_did():
    old = ImitateConfig.of(num_nodes=8).to_dict()
    for name in ("distill_temp", "distill_coef", "teacher", "online"):
        del old[name]
    config = ImitateConfig.from_dict(old)
    assert (config.distill_temp, config.distill_coef, config.teacher) == (0.0, 1.0, "optimal")
    assert config.online is False                    # learned after collecting
    assert ImitateConfig().distill_temp > 0          # what a new run does


@pytest.mark.parametrize("argv, message", [
    (["--num-envs", "0"], "--num-envs=0 is invalid: allowed an integer >= 1"),
    (["--num-envs", "6", "--num-steps", "5", "--num-minibatches", "4"],
     "--num-minibatches=4 is invalid: allowed a divisor of num_envs * num_steps = 6 * 5 = 30"),
    (["--total-timesteps", "10"], "--total-timesteps=10 is invalid"),
    (["--gamma", "1.5"], "--gamma=1.5 is invalid: allowed a number in [0.0, 1.0]"),
    (["--lr", "-1"], "--lr=-1.0 is invalid"),
    (["--num-nodes", "0"], "--num-nodes=0 is invalid: allowed an integer >= 1"),
    (["--resume", "/nonexistent-run"], "not a training run directory"),
    (["--seed", str(2**70)], f"--seed={2**70} is invalid: allowed an integer in [0, 2**32)"),
    (["--seed", str(2**32)], f"--seed={2**32} is invalid: allowed an integer in [0, 2**32)"),
    (["--seed", "-1"], "--seed=-1 is invalid: allowed an integer in [0, 2**32)"),
    (["--seed", "1e23"], "argument --seed: invalid int value: '1e23'"),
    (["--samples-per-state", "4", "--gamma", "0.9"],
     "--samples-per-state=4 is invalid: allowed 1 with --gamma 0.9"),
    (["--samples-per-state", "0"], "--samples-per-state=0 is invalid"),
    (["--critic-warmup", "-1"], "--critic-warmup=-1 is invalid: allowed an integer >= 0"),
    (["--env", "openb", "--frag-shaping", "-0.5"], "--frag-shaping=-0.5 is invalid: allowed a finite number >= 0"),
    (["--env", "openb", "--frag-shaping", "nan"], "--frag-shaping=nan is invalid: allowed a finite number"),
    # A default made invalid by a flag passed: the message blames the flag passed.
    (["--num-envs", "1000000"], "--total-timesteps was not given: its default 2400000 does "
                                "not fit --num-envs=1000000; pass --total-timesteps too"),
    # A number of minibatches given is checked (the default, None, is resolved).
    (["--num-envs", "6", "--num-steps", "5", "--num-minibatches", "0"],
     "--num-minibatches=0 is invalid: allowed an integer >= 1"),
    (["--devices", "2"], "XLA_FLAGS=--xla_force_host_platform_device_count=N gives N devices"),
])
def test_bad_flags_fail_before_any_work(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        ppo.main(argv + ["--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err   # one line, not the usage of every flag
    assert not os.path.exists(tmp_path / "x")


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_runs_without_a_checkpoint_and_file_outs_are_refused_before_any_work(
        ppo_run, capsys, tmp_path):
    """A run directory that never saved a checkpoint (stopped before its first one) can
    neither be resumed nor started from; an --out that is a file is refused too. Each
    exits with a usage error and writes nothing."""
    out, _ = ppo_run
    empty = tmp_path / "empty"
    empty.mkdir()
    with open(os.path.join(out, "config.json")) as f:
        (empty / "config.json").write_text(f.read())
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cases = [
        (["--resume", str(empty)], "holds no checkpoint: the run stopped before"),
        (TINY + ["--init-from", str(empty), "--out", str(tmp_path / "new")],
         "holds no checkpoint to start from"),
        (TINY + ["--init-from", f"{out}@3", "--out", str(tmp_path / "new")],
         "has no checkpoint 3 (its checkpoints: [2, 4])"),
        (TINY + ["--out", str(a_file)], "is a file"),
    ]
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text(json.dumps({"algorithm": "ppo", "hidden": 16}))
    cases.append((["--resume", str(partial)], "its config.json lacks"))
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            ppo.main(argv)
        assert exc.value.code == 2, argv
        assert message in capsys.readouterr().err, argv
    assert sorted(os.listdir(empty)) == ["config.json"] and not (tmp_path / "new").exists()
    assert a_file.read_text() == ""


@pytest.mark.slow
def test_make_train_is_the_training_the_script_runs(ppo_run):
    """`make_train(config)`, jitted whole and vmapped over seeds (the research-code
    entry point), ends where the script's chunked loop does."""
    out, _ = ppo_run
    config = PPOConfig.from_dict(ckpt.load_config(out))
    runner, metrics = jax.vmap(ppo.make_train(config))(core.seed_keys(config))
    assert metrics["loss"].shape == (2, 4)
    for seed in (0, 1):
        jax.tree_util.tree_map(
            lambda x, y: np.testing.assert_allclose(x[seed], y, rtol=1e-4, atol=1e-5),
            runner.params["params"], _final_params(out, seed))
    losses = [r["loss"] for r in _rows(out) if r["seed"] == 1]
    np.testing.assert_allclose(np.asarray(metrics["loss"][1]), losses, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------
# Nothing lost, nothing silent: run directories, checkpoints and flags
# --------------------------------------------------------------------------

@pytest.mark.slow   # reads the module's PPO run
def test_dir_at_step_names_one_checkpoint_of_a_run(ppo_run, tmp_path):
    """`DIR@STEP` reads checkpoint STEP of DIR wherever a run is read (its config, its
    variables, --init-from); a STEP the run lacks is an error naming the ones it has; a
    directory whose own name holds an '@' is taken as written."""
    out, _ = ppo_run
    assert ckpt.split_step(f"{out}@2") == (out, 2) and ckpt.split_step(out) == (out, None)
    assert ckpt.is_run_path(f"{out}@4") and not ckpt.is_run_path("fgd@2")
    assert ckpt.load_config(f"{out}@2") == ckpt.load_config(out)
    assert ckpt.checkpoint_steps(f"{out}@2") == [2, 4]
    at_2 = ckpt.load_variables(f"{out}@2", seed=1)["params"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, at_2,
                           ckpt.load_variables(out, seed=1, step=2)["params"])
    assert not np.array_equal(*(jax.tree_util.tree_leaves(p)[0] for p in
                                (at_2, ckpt.load_variables(out, seed=1)["params"])))
    config = PPOConfig.from_dict({**ckpt.load_config(out), "init_from": f"{out}@2"})
    jax.tree_util.tree_map(np.testing.assert_array_equal, run_lib._initial_params(config),
                           ckpt.load_variables(out, seed=0, step=2))
    with pytest.raises(ValueError, match=r"has no checkpoint 3 \(its checkpoints: \[2, 4\]\)"):
        ckpt.load_variables(f"{out}@3")
    with pytest.raises(ValueError, match="named at checkpoint 2"):
        ckpt.load_variables(f"{out}@2", step=4)
    literal = _copy_run(out, tmp_path / "run@2")         # a directory named with an '@'
    assert ckpt.split_step(literal) == (literal, None)
    assert ckpt.split_step(f"{literal}@4") == (literal, 4)


@pytest.mark.slow   # trains the module's tiny PPO again (its programs are compiled)
def test_keep_checkpoints_bounds_the_checkpoints_on_disk_and_old_runs_keep_three(ppo_run, tmp_path,
                                                                                capsys):
    """--keep-checkpoints K keeps the K newest (the module's run kept both of its 2 at the
    default 3); its checksums follow. A run saved before the flag loads with 3; a negative
    K is refused before any work."""
    out, _ = ppo_run
    assert ckpt.checkpoint_steps(out) == [2, 4] and ckpt.load_config(out)["keep_checkpoints"] == 3
    one = str(tmp_path / "one")
    ppo.main(PPO_RUN + ["--keep-checkpoints", "1", "--eval-episodes", "0", "--out", one])
    assert ckpt.checkpoint_steps(one) == [4]
    with open(os.path.join(one, "checksums.json")) as f:
        assert sorted(json.load(f)) == ["4"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, ckpt.load_variables(one, seed=1),
                           ckpt.load_variables(out, seed=1))      # the same run, fewer kept
    older = {k: v for k, v in ckpt.load_config(out).items() if k != "keep_checkpoints"}
    assert PPOConfig.from_dict(older).keep_checkpoints == 3
    with pytest.raises(SystemExit) as exc:
        ppo.main(PPO_RUN + ["--keep-checkpoints", "-1", "--out", str(tmp_path / "bad")])
    assert exc.value.code == 2 and "--keep-checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def _copy_run(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return str(dst)


def _damage(run_dir, step):
    """Flip one byte in the middle of the largest file of checkpoint `step`."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(run_dir, "checkpoints", str(step)))
             for f in fs]
    path = max(files, key=os.path.getsize)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.mark.slow
def test_out_holding_anything_is_refused_unless_overwrite_replaces_a_run(ppo_run, capsys, tmp_path):
    out, _ = ppo_run
    old_run = tmp_path / "old"               # a previous run whose checkpoints were removed
    old_run.mkdir()
    (old_run / "metrics.jsonl").write_text('{"update": 1}\n')
    (old_run / "eval.json").write_text("{}")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases = [(["--out", ""], "--out '' is invalid"),
             (["--out", str(old_run)], "already holds files (eval.json, metrics.jsonl)"),
             (["--out", str(foreign)], "already holds files (notes.txt)"),
             (["--out", str(foreign), "--overwrite"], "holds files that are not a run's (notes.txt)")]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            ppo.main(TINY + argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err, argv
    assert (old_run / "eval.json").read_text() == "{}" and (foreign / "notes.txt").read_text() == "mine"
    # --overwrite replaces a previous run: nothing of it is left beside the new one.
    again = _copy_run(out, tmp_path / "again")
    ppo.main(PPO_RUN + ["--out", again, "--eval-episodes", "0", "--overwrite"])
    assert sorted(os.listdir(again)) == ["checkpoints", "checksums.json", "config.json",
                                         "learning_curve.png", "metrics.jsonl"]
    assert len(_rows(again)) == len(_rows(out))
    assert not [n for n in os.listdir(again) if n.startswith(".")]          # no temporary files


@pytest.mark.slow
def test_damaged_checkpoints_are_named_and_the_newest_good_one_is_used(ppo_run, capsys, tmp_path):
    out, _ = ppo_run
    with open(os.path.join(out, "checksums.json")) as f:
        assert sorted(json.load(f)) == ["2", "4"]
    assert ckpt.verify_checkpoint(out, 4) is None
    run = _copy_run(out, tmp_path / "run")
    _damage(run, 4)
    assert "checkpoint 4 does not match its checksum" in ckpt.verify_checkpoint(run, 4)
    params = ckpt.load_variables(run, seed=1)["params"]                   # falls back to step 2
    assert "checkpoint 4 does not match its checksum" in capsys.readouterr().err
    jax.tree_util.tree_map(np.testing.assert_array_equal, params,
                           ckpt.load_variables(out, seed=1, step=2)["params"])
    with pytest.raises(ckpt.CheckpointError, match="checkpoint 4 does not match"):
        ckpt.load_variables(run, step=4)
    # --resume restarts from the good checkpoint and ends where the undamaged run ended.
    ppo.main(["--resume", run])
    for seed in (0, 1):
        jax.tree_util.tree_map(
            lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
            _final_params(run, seed), _final_params(out, seed))
    assert ckpt.verify_checkpoint(run, 4) is None                         # saved afresh
    # Every checkpoint damaged: one line, no traceback.
    _damage(run, 2)
    _damage(run, 4)
    with pytest.raises(ckpt.CheckpointError) as err:
        vte.load_policy(run)
    assert "no usable checkpoint" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SystemExit) as exc:
        ppo.main(["--resume", run])
    assert "error:" in str(exc.value.code) and "no usable checkpoint" in str(exc.value.code)


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_a_damaged_config_is_one_clear_error(ppo_run, capsys, tmp_path):
    run = _copy_run(ppo_run[0], tmp_path / "run")
    with open(os.path.join(run, "config.json"), "r+") as f:
        f.truncate(40)
    with pytest.raises(ckpt.CheckpointError, match=r"config.json is damaged: not valid JSON"):
        vte.load_policy(run)
    with pytest.raises(SystemExit) as exc:
        ppo.main(["--resume", run])
    assert exc.value.code == 2 and "config.json is damaged" in capsys.readouterr().err


@pytest.mark.slow   # trains PPO (the module's ppo_run)
def test_resume_refuses_flags_it_would_ignore(ppo_run, capsys):
    out, _ = ppo_run
    for argv, named in ((["--lr", "0.1"], "--lr"), (["--num-env", "4"], "--num-envs"),
                        (["--eval-episodes=3", "--seeds", "1"], "--eval-episodes, --seeds")):
        with pytest.raises(SystemExit) as exc:
            ppo.main(["--resume", out] + argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"so {named} would be ignored" in err, argv
        assert "allowed with --resume: --compilation-cache, --coordinator, --devices" in err


def test_the_compilation_cache_is_on_by_default_and_can_be_moved_or_turned_off(
        tmp_path, capsys):
    """The trainers keep compiled programs between runs: in a directory already configured
    (JAX_COMPILATION_CACHE_DIR, research code), else in DEFAULT_CACHE; the flag moves it or
    turns it off; an empty value is refused before any work."""
    from vte.train import run as run_module
    saved = {k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir",
                                                 "jax_enable_compilation_cache")}
    try:
        configured = jax.config.jax_compilation_cache_dir
        assert run_module.use_compilation_cache(None) == configured       # kept
        jax.config.update("jax_compilation_cache_dir", None)
        assert run_module.use_compilation_cache(None) == run_module.DEFAULT_CACHE
        assert jax.config.jax_compilation_cache_dir == run_module.DEFAULT_CACHE
        assert run_module.DEFAULT_CACHE.endswith(os.path.join("vte", "jax"))
        here = str(tmp_path / "cache")
        # An --out of its own: the default (runs/ppo) may hold a user's run, which parse
        # refuses to overwrite.
        tiny = TINY + ["--out", str(tmp_path / "run")]
        run_module.parse(tiny + ["--compilation-cache", here], PPOConfig, "")
        assert jax.config.jax_compilation_cache_dir == here
        assert jax.config.jax_enable_compilation_cache
        run_module.parse(tiny + ["--compilation-cache", "off"], PPOConfig, "")
        assert not jax.config.jax_enable_compilation_cache
        assert run_module.use_compilation_cache(None) is None          # off stays off
        assert not jax.config.jax_enable_compilation_cache
        with pytest.raises(SystemExit):
            run_module.parse(tiny + ["--compilation-cache="], PPOConfig, "")
        assert "--compilation-cache='' is invalid: allowed a directory or 'off'" in (
            capsys.readouterr().err)
    finally:
        for k, v in saved.items():
            jax.config.update(k, v)


@pytest.mark.slow
def test_a_second_ctrl_c_cannot_interrupt_a_save(ppo_run, monkeypatch, tmp_path):
    import signal
    seen = []
    original = ckpt.record_checksum

    def record(run_dir, step):
        seen.append(signal.getsignal(signal.SIGINT))
        original(run_dir, step)
    monkeypatch.setattr(ckpt, "record_checksum", record)
    before = signal.getsignal(signal.SIGINT)
    out = str(tmp_path / "run")
    ppo.main(PPO_RUN + ["--out", out, "--eval-episodes", "0"])
    assert seen and all(h is signal.SIG_IGN for h in seen)               # held off while saving
    assert signal.getsignal(signal.SIGINT) is before                      # and given back


@pytest.mark.parametrize("value, allowed", [
    ("-0.5", "allowed a number in [0.0, 1000.0]"),
    ("1e-9", "allowed 0 (off) or a number in [1e-06, 1000.0]"),
])
def test_a_bad_distillation_flag_fails_before_any_work(value, allowed, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        imitate.main(["--distill-temp", value, "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    assert f"--distill-temp={float(value)!r} is invalid: {allowed}" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")


SYNTHETIC_TINY = dict(num_nodes=8, queue_len=4, episode_len=6, num_envs=8, num_steps=4)


def _one_update(online: bool, num_minibatches: int, env: dict):
    config = ImitateConfig.of(num_minibatches=num_minibatches, update_epochs=1, hidden=16,
                           total_timesteps=env["num_envs"] * env["num_steps"], online=online,
                           **env)
    init, update = imitate.make_update(config)
    return jax.jit(update)(jax.jit(init)(jax.random.PRNGKey(3)))   # init compiled, not op by op


@pytest.mark.slow   # compiles three updates
def test_online_imitation_is_the_offline_update_when_the_network_waits_for_the_rollout():
    check_online_imitation(SYNTHETIC_TINY)


def check_online_imitation(env: dict):
    """`--online` with one minibatch per rollout (its gradient accumulated over the steps)
    acts with the same network, takes the same actions and applies the same gradient as the
    offline update with one minibatch and one epoch: same parameters, same metrics. (The
    synthetic environment scores an action without stepping; the OpenB test calls this
    with its environment, which steps each block.)"""
    (online, m_on), (offline, m_off) = _one_update(True, 1, env), _one_update(False, 1, env)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                           online.params, offline.params)
    assert set(m_on) == set(m_off)
    for k in m_on:
        np.testing.assert_allclose(m_on[k], m_off[k], rtol=1e-5, atol=1e-6, err_msg=k)
    jax.tree_util.tree_map(np.testing.assert_array_equal, online.env_state, offline.env_state)
    # In blocks of half the environments the second block acts with the network the first moved.
    blocks, m_blocks = _one_update(True, 2 * env["num_steps"], env)
    assert not all(np.allclose(a, b) for a, b in zip(jax.tree_util.tree_leaves(blocks.params),
                                                    jax.tree_util.tree_leaves(online.params)))
    assert all(np.isfinite(v).all() for v in jax.tree_util.tree_leaves(blocks.params))
    assert all(np.isfinite(m_blocks[k]) for k in ("loss", "cross_entropy", "value_loss",
                                                   "match_rate"))


@pytest.mark.parametrize("argv, message", [
    (["--online", "--update-epochs", "2"], "--update-epochs=2 is invalid: allowed 1 with "
                                           "--online"),
    (["--online", "--update-epochs", "1", "--num-envs", "6", "--num-steps", "4",
      "--num-minibatches", "3",
      "--total-timesteps", "24"],
     "--num-minibatches=3 is invalid: allowed with --online, a count whose minibatch size "
     "(num_envs * num_steps / num_minibatches = 8) divides num_envs = 6 or is a multiple"),
])
def test_online_imitation_refuses_what_it_cannot_do(argv, message, capsys, tmp_path):
    assert message in refused(imitate.main, argv, capsys, tmp_path)


def refused(main, argv, capsys, tmp_path) -> str:
    """The trainer `main` exits with status 2 on `argv` before writing its --out; returns
    what it printed to stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    assert not os.path.exists(tmp_path / "x")
    return capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("flags, field, value", [
    (["--samples-per-state", "4"], "samples_per_state", 4),
    (["--all-actions"], "all_actions", True),
])
def test_ppo_with_several_actions_per_state_trains(flags, field, value, tmp_path):
    """--samples-per-state (K actions per state scored with vte.reward) and --all-actions
    (every action scored): the run writes finite losses and its config round-trips."""
    out = str(tmp_path / "ppo_k")
    ppo.main(TINY + ["--total-timesteps", str(8 * 4 * 2), *flags,
                     "--out", out, "--eval-episodes", "0"])
    rows = _rows(out)
    assert [r["update"] for r in rows] == [1, 2]
    assert all(np.isfinite(r[k]) for r in rows
               for k in ("policy_loss", "value_loss", "approx_kl", "clip_frac", "entropy"))
    assert getattr(PPOConfig.from_dict(ckpt.load_config(out)), field) == value


@pytest.mark.parametrize("flags, bad, allowed", [
    (["--all-actions", "--samples-per-state", "4"], "--samples-per-state=4",
     "1 with --all-actions"),
    (["--all-actions", "--gamma", "0.9"], "--gamma=0.9", "0 with --all-actions"),
    (["--all-actions", "--env", "openb"], "--env='openb'", "one of synthetic with --all-actions"),
])
def test_all_actions_refuses_what_it_cannot_score(flags, bad, allowed, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        ppo.main(flags + ["--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    assert f"{bad} is invalid: allowed {allowed}" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")


def test_all_actions_is_on_by_default_wherever_every_action_can_be_scored():
    assert PPOConfig().all_actions is True
    assert PPOConfig(gamma=0.99).all_actions is False
    assert PPOConfig(samples_per_state=4).all_actions is False
    assert PPOConfig(all_actions=False).all_actions is False
    # The resolved value is what a run saves, so the round trip keeps it.
    assert PPOConfig.from_dict(PPOConfig().to_dict()).all_actions is True
    # A run saved before the option existed learned from sampled actions.
    old = PPOConfig().to_dict()
    del old["all_actions"]
    assert PPOConfig.from_dict(old).all_actions is False


def test_minibatches_hold_128_decisions_unless_given():
    """Both trainers' default minibatch is 128 decisions, as many minibatches as the
    rollout holds, or the largest number below that which divides it; a number given is
    kept and checked. The resolved number is what a run saves."""
    def minibatch(**kw):
        c = PPOConfig(**kw)
        return c.num_minibatches, c.batch_size // c.num_minibatches

    assert minibatch(num_envs=4096) == (128, 128)
    assert minibatch(num_envs=1024) == (32, 128)
    assert minibatch(num_envs=1000, num_steps=4) == (25, 160)     # 4000 / 31 is no integer
    assert minibatch(num_envs=8) == (1, 32)                      # a rollout under 128
    assert minibatch(num_envs=4096, num_minibatches=32) == (32, 512)
    assert minibatches_of(4095 * 4, 128) == 126 and 4095 * 4 % 126 == 0
    assert PPOConfig.from_dict(PPOConfig(num_envs=256).to_dict()).num_minibatches == 8
    assert ImitateConfig().num_minibatches == 32                 # 1024 environments x 4 steps
    assert ImitateConfig(num_envs=8, num_minibatches=2).num_minibatches == 2


def test_the_all_actions_loss_is_the_expected_sampled_surrogate():
    """--all-actions weighs every action's clipped surrogate by its behaviour probability:
    the expectation, over the behaviour policy, of what one sampled action gives. Checked
    against the average over many sampled actions, at a policy moved away from the
    behaviour one so that the clip acts, with one masked action that must weigh nothing."""
    rng = np.random.default_rng(0)
    b, a, clip_eps = 3, 5, 0.2
    mask = np.ones((b, a), bool)
    mask[:, -1] = False
    behaviour = jax.nn.log_softmax(jnp.where(mask, rng.normal(size=(b, a)), -1e30))
    current = jax.nn.log_softmax(jnp.where(mask, rng.normal(size=(b, a)), -1e30))
    adv = jnp.asarray(np.where(mask, rng.normal(size=(b, a)), 1e6), jnp.float32)
    loss, kl, clip_frac = ppo.expected_surrogate(current, behaviour, adv, mask, clip_eps)
    # Monte Carlo: actions drawn from the behaviour policy, the sampled surrogate.
    n = 200_000
    actions = jax.random.categorical(jax.random.PRNGKey(1), behaviour, shape=(n, b))
    take = lambda x: jnp.take_along_axis(x, actions.T, -1).T      # noqa: E731 (n, b)
    scale = np.sqrt(np.mean(np.asarray(take(jnp.where(mask, adv, 0.0))) ** 2))
    sur, mc_kl, clipped = ppo.clipped_surrogate(take(current) - take(behaviour),
                                                take(adv) / scale, clip_eps)
    assert 0.05 < float(clipped.mean()) < 0.95                  # the clip is exercised
    np.testing.assert_allclose(float(loss), -float(sur.mean()), rtol=0.02, atol=0.01)
    np.testing.assert_allclose(float(kl), float(mc_kl.mean()), rtol=0.03, atol=0.003)
    np.testing.assert_allclose(float(clip_frac), float(clipped.mean()), atol=0.01)
    assert np.isfinite([float(loss), float(kl), float(clip_frac)]).all()


def test_the_all_actions_loss_stays_finite_where_the_behaviour_probability_underflows():
    """An action the behaviour policy gave exp(-200) (0 in float32) and the current policy
    a fair chance: its ratio would overflow, and weighted by a zero probability give NaN.
    The loss, its gradient, the KL and the clip fraction stay finite."""
    mask = jnp.array([[True, True, True, False]])
    behaviour = jnp.array([[-200.0, -1e-3, -7.0, -3.4e38]])
    adv = jnp.array([[-1.0, 0.5, 2.0, 0.0]])

    def loss(logits):
        out = ppo.expected_surrogate(jax.nn.log_softmax(jnp.where(mask, logits, -3.4e38)),
                                     behaviour, adv, mask, 0.2)
        return out[0], out

    grad, (value, kl, clip_frac) = jax.grad(loss, has_aux=True)(jnp.array([[0.0, 0.0, 0.0,
                                                                           0.0]]))
    assert np.isfinite([float(value), float(kl), float(clip_frac)]).all()
    assert np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.slow
def test_the_extra_actions_are_the_policy_samples_with_their_rewards():
    """collect's group: column 0 is the stepped action, every column's reward is
    vte.reward of that action in the state it was sampled in, and its log-probability
    the behaviour policy's."""
    config = PPOConfig.of(num_nodes=8, queue_len=4, episode_len=6, num_envs=8, num_steps=3,
                       num_minibatches=2, hidden=16, samples_per_state=5,
                       total_timesteps=24)
    init, _ = ppo.make_update(config)
    from vte.train.envs import make_env
    env = make_env(config)
    runner = jax.jit(init)(jax.random.PRNGKey(0))
    _, (traj, _) = jax.jit(lambda r: core.collect(env, env.network, r, config,
                                                  samples_per_state=5))(runner)
    assert traj.group_action.shape == (3, 8, 5)
    np.testing.assert_array_equal(traj.group_action[..., 0], traj.action)
    np.testing.assert_array_equal(traj.group_reward[..., 0], traj.reward)
    np.testing.assert_allclose(traj.group_log_prob[..., 0], traj.log_prob, rtol=1e-6)
    # Every column: the reward is the cost gap of that action in its state (the env's
    # action_costs), and the log-probability the network's in that observation.
    cost = np.asarray(traj.label_cost)
    actions = np.asarray(traj.group_action)
    gap = np.take_along_axis(cost, actions, -1) - cost.min(-1, keepdims=True)
    np.testing.assert_allclose(-np.asarray(traj.group_reward), gap, rtol=1e-5, atol=1e-6)
    logits = jax.jit(jax.vmap(lambda o: env.network.apply(runner.params, o)[0]))(traj.obs)
    want = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), actions, -1)
    np.testing.assert_allclose(np.asarray(traj.group_log_prob), want, rtol=1e-5, atol=1e-5)
    # Every sampled action is allowed by the mask, so none is penalised as invalid.
    mask = np.asarray(traj.obs.action_mask)
    chosen = np.take_along_axis(mask, np.asarray(traj.group_action), -1)
    assert chosen.all()
    assert np.all(np.asarray(traj.group_reward) <= 0)
    # More than one distinct action is sampled somewhere (the policy is not greedy).
    assert any(len(set(row)) > 1 for row in np.asarray(traj.group_action).reshape(-1, 5))


def test_the_critic_warmup_passes_gradients_to_the_critics_own_layers_only():
    """`critic_only`: the same values; while warm, a gradient reaches only the layers named
    value_hidden and value (at any depth), afterwards every layer; a network without them
    is refused."""
    params = {"params": {"node_in": {"kernel": jnp.ones((2, 3))},
                         "value_hidden": {"kernel": jnp.ones((3, 3)), "bias": jnp.ones(3)},
                         "value": {"kernel": jnp.ones((3, 1))}}}

    def total(p, warm):
        return sum(jnp.sum(2.0 * x) for x in jax.tree_util.tree_leaves(ppo.critic_only(p, warm)))

    held = ppo.critic_only(params, jnp.bool_(True))
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(jnp.array_equal, held, params))
    for warm in (True, False):
        grads = jax.jit(jax.grad(total), static_argnums=1)(params, warm)["params"]
        for layer, leaves in grads.items():
            expect = 0.0 if warm and layer == "node_in" else 2.0
            assert all(bool(jnp.all(g == expect)) for g in leaves.values()), (warm, layer)
    with pytest.raises(ValueError, match="no layer named value_hidden or value"):
        ppo.critic_only({"params": {"dense": {"kernel": jnp.ones(2)}}}, jnp.bool_(True))


def test_spread_starts_puts_each_environment_at_its_own_phase_of_an_episode(ppo_run):
    """--spread-starts: the environments of a fresh runner sit at steps drawn in 0..L - 1
    (L the episode's step limit), not all at 0; the draw is the key's, and the rest of the
    runner (network, optimiser, key stream) is the run's without it (to float rounding:
    another program). Saved runs from before the flag load with it off."""
    config = PPOConfig.from_args(PPO_RUN)
    spread = PPOConfig.from_args(PPO_RUN + ["--spread-starts"])
    length = 6                                           # TINY's --episode-len
    runners = []
    for c in (config, spread, spread):
        init, _ = ppo.make_update(c)
        runners.append(jax.jit(init)(jax.random.PRNGKey(3)))
    plain, a, b = runners
    assert np.all(np.asarray(plain.env_state.steps) == 0)
    steps = np.asarray(a.env_state.steps)
    assert steps.min() >= 0 and steps.max() < length and len(set(steps.tolist())) > 2, steps
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)      # the key's, each time
    for same in ("rng", "update"):
        np.testing.assert_array_equal(getattr(plain, same), getattr(a, same))
    close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)   # noqa: E731
    jax.tree_util.tree_map(close, (plain.params, plain.opt_state), (a.params, a.opt_state))
    # the observation is the one of the state it sits in
    obs = jax.jit(jax.vmap(vte.get_obs, (0, None)))(a.env_state, make_env(spread).params)
    jax.tree_util.tree_map(np.testing.assert_allclose, obs, a.obs)
    out, _ = ppo_run
    older = {k: v for k, v in ckpt.load_config(out).items() if k != "spread_starts"}
    assert PPOConfig.from_dict(older).spread_starts is False
    assert spread.to_dict()["spread_starts"] is True
    assert PPOConfig.from_dict(spread.to_dict()) == spread
