"""The README's Python blocks run as written, in order, in one process.

A newcomer pastes them one after the other into one interpreter, so they are run so: one
namespace, in the order of the README, in a fresh directory. Only sizes shrink (every
substitution must still find its text, so the README cannot drift from this test), and the
run directory `runs/ppo` the README's blocks load is made first, as the README's main job
(`python train/ppo.py`) makes it, at a tiny size.
"""

import re
from pathlib import Path

import pytest

from tests.test_train import PPO_RUN

README = Path(__file__).resolve().parents[1] / "README.md"

# (text in the README, the same at test size)
SMALLER = [
    ("keys = jax.random.split(key, 4096)", "keys = jax.random.split(key, 16)"),
    ('vte.make("Cluster-v0", num_nodes=64)', 'vte.make("Cluster-v0", num_nodes=8)'),
    ("seeds=range(42, 52))", "seeds=range(42, 43), tune=0.2)"),   # a fifth of the pods
    ("seeds=range(100), subset=128)", "seeds=range(2), subset=16)"),
    ("num_envs=64, subset=64,", "num_envs=2, subset=16,"),
    ("PPOConfig(num_envs=256, total_timesteps=200_000)",
     "PPOConfig(num_envs=8, num_steps=4, num_minibatches=2, total_timesteps=64, num_nodes=8, "
     "queue_len=4, episode_len=6, hidden=16)"),
]

# The main job at test size: test_train's run (2 seeds, 4 updates), whose compiled program
# the training tests share.
TINY_RUN = PPO_RUN + ["--eval-episodes", "0"]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_substitution_finds_its_text():
    text = README.read_text()
    for old, _ in SMALLER:
        assert old in text, f"the README no longer holds {old!r}: update SMALLER"


@pytest.mark.slow
def test_readme_python_blocks_run_in_order_in_one_process(tmp_path, monkeypatch):
    pytest.importorskip("rejax")
    pytest.importorskip("gymnasium")
    from train import ppo
    text = README.read_text()
    for old, new in SMALLER:
        text = text.replace(old, new)
    blocks = python_blocks(text)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    ppo.main(TINY_RUN + ["--out", "runs/ppo"])          # the README's main job, tiny
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as err:  # name the block: the traceback shows its line
            raise AssertionError(f"README python block {i + 1} failed:\n{block}") from err
    assert (tmp_path / "cluster.png").stat().st_size > 0
    assert callable(namespace["policy"])
