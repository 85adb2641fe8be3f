"""--tensorboard: the event files hold metrics.jsonl's scalars, one stream per seed, and a
resumed run appends to them without a step twice. The tiny PPO run of test_train.py (its
programs come from the compilation cache)."""

import json
import os
import sys

import numpy as np
import pytest

from vte.train import ppo
from vte.train import tensorboard
from tests.test_train import PPO_RUN

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

BATCH = 8 * 4   # num_envs * num_steps of PPO_RUN: env steps per update and seed


def _scalars(path: str) -> dict:
    """tag -> [(step, value)] of one event stream, as TensorBoard reads it."""
    acc = event_accumulator.EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


@pytest.mark.slow   # trains the tiny PPO of test_train.py, interrupted and resumed
def test_tensorboard_streams_are_metrics_jsonl_and_resume_appends(tmp_path, capsys):
    out = str(tmp_path / "tb_run")
    ppo.main(PPO_RUN + ["--out", out, "--eval-episodes", "2", "--tensorboard",
                        "--stop-after-updates", "3"])
    # The interrupted process had logged an update past its checkpoint: TensorBoard drops it.
    from tensorboardX import SummaryWriter
    with SummaryWriter(tensorboard.seed_dir(out, 0)) as w:
        w.add_scalar("train/return", 999.0, 4 * BATCH)
    ppo.main(["--resume", out])
    printed = capsys.readouterr()
    assert "compiling the training program (PPO, 8 environments x 8 nodes x 2 seeds" in printed.err
    assert f"tensorboard --logdir {os.path.join(out, 'tensorboard')}" in printed.out

    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert sorted(os.listdir(os.path.join(out, "tensorboard"))) == ["seed_0", "seed_1"]
    with open(os.path.join(out, "eval.json")) as f:
        evaluation = json.load(f)
    assert {"tb_run", "tb_run_seed1"} <= set(evaluation) and "policy" not in evaluation
    for seed in (0, 1):
        scalars = _scalars(tensorboard.seed_dir(out, seed))
        mine = [r for r in rows if r["seed"] == seed]
        expected = {}
        for r in mine:
            for k, v in r.items():
                if k not in tensorboard.AXES and v is not None:
                    expected.setdefault(tensorboard.tag(k), []).append((r["step"], v))
        assert {"train/return", "losses/policy_loss", "charts/SPS"} <= set(expected)
        logged = {t: v for t, v in scalars.items() if not t.startswith("eval/")}
        assert set(logged) == set(expected)
        assert expected["charts/SPS"][-1][0] == 4 * BATCH   # every update, once
        assert [s for s, _ in logged["charts/SPS"]] == [u * BATCH for u in (1, 2, 3, 4)]
        for tag, points in expected.items():     # (a return is null where no episode ended)
            assert [s for s, _ in logged[tag]] == [s for s, _ in points], tag
            np.testing.assert_allclose([v for _, v in logged[tag]], [v for _, v in points],
                                       rtol=1e-6, err_msg=tag)
        name = "tb_run" if seed == 0 else "tb_run_seed1"
        assert scalars["eval/match_rate"] == [(4 * BATCH, pytest.approx(
            evaluation[name]["match_rate"], rel=1e-6))]


def test_tensorboard_without_tensorboardx_is_one_line_before_any_work(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)     # import fails
    out = tmp_path / "never"
    with pytest.raises(SystemExit):
        ppo.main(PPO_RUN + ["--out", str(out), "--tensorboard"])
    err = capsys.readouterr().err
    assert 'pip install -e ".[tensorboard]"' in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
