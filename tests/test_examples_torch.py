"""The PyTorch examples (sb3-contrib's MaskablePPO, CleanRL-style PPO) at toy size, where
torch and sb3-contrib are installed (CI installs torch's CPU build first). A file of their
own so that a second test worker runs them beside the JAX examples."""

import pytest

from tests.test_examples import TOY, run


@pytest.mark.slow
def test_sb3_maskable_ppo_trains_and_reports():
    pytest.importorskip("torch")
    pytest.importorskip("sb3_contrib")
    assert "maskable_ppo" in run("sb3_maskable_ppo", TOY + ["--total-timesteps", "1024"])  # one rollout


@pytest.mark.slow
def test_cleanrl_style_ppo_trains_and_reports():
    pytest.importorskip("torch")
    assert "cleanrl_ppo" in run("cleanrl_ppo", TOY + ["--total-timesteps", "512",
                                                      "--num-envs", "4", "--num-steps", "64"])
