"""TensorBoard event files of a run (`--tensorboard`): the scalars of `metrics.jsonl`.

    OUT/tensorboard/seed_0/events.out.tfevents...   one event stream (a TensorBoard run)
    OUT/tensorboard/seed_1/...                      per seed of `--seeds N`

    tensorboard --logdir OUT/tensorboard

Every scalar a row of `metrics.jsonl` holds is written under the same name, grouped as
CleanRL groups its own: the losses under `losses/` (`losses/policy_loss`, ...), the speed
as `charts/SPS` and the wall time as `charts/time`, every other metric of the rollout
under `train/` (`train/return`, `train/greedy_match`, ...); the x-axis is the row's
`step`, environment steps per seed. A row's value that was not finite (null in the file)
is left out, as are `update`, `seed`, `step` and `devices` (the axes and the device
count). At the end of a run each seed's trained entry of `eval.json` goes under `eval/`
at the last step (its numbers; `eval/alloc_at_100/mean`, ... for nested ones). Seed 0's
stream also holds the configuration as a text (`config`).

A resumed run (`--resume`) appends to the same streams: each one restarts with
TensorBoard's purge marker at the first step after the restored checkpoint, so rows
written after that checkpoint by the interrupted process (dropped from metrics.jsonl
too) are discarded by TensorBoard and no step appears twice.

tensorboardX is imported only when a run asks for it (`require`, before any work).
"""

from __future__ import annotations

import json
import os

INSTALL = 'pip install -e ".[tensorboard]"'
DIR = "tensorboard"
AXES = ("update", "seed", "step", "devices")   # metrics.jsonl's keys that are not scalars
LOSSES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac",
          "cross_entropy", "distill_cross_entropy")
CHARTS = {"sps": "charts/SPS", "time": "charts/time"}


def require() -> None:
    """RuntimeError in one line, naming the install command, unless tensorboardX imports."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise RuntimeError("--tensorboard needs tensorboardX, which is not installed: "
                           f"{INSTALL}") from None


def tag(key: str) -> str:
    """The TensorBoard tag of a metrics.jsonl key."""
    if key in CHARTS:
        return CHARTS[key]
    return ("losses/" if key in LOSSES else "train/") + key


def seed_dir(out: str, seed: int) -> str:
    return os.path.join(out, DIR, f"seed_{seed}")


def numbers(entry, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of an evaluation entry, nested keys joined by "/" (lists, text,
    booleans and the published figures left out)."""
    out = {}
    if isinstance(entry, dict):
        for k, v in entry.items():
            if k == "published":
                continue
            out.update(numbers(v, f"{prefix}{k}/"))
    elif isinstance(entry, (int, float)) and not isinstance(entry, bool):
        out[prefix.rstrip("/")] = float(entry)
    return out


class Writer:
    """One tensorboardX SummaryWriter per seed in OUT/tensorboard/seed_S. `purge_step`:
    the first step this process writes, on a resumed run (events of the streams at or
    past it are discarded by TensorBoard)."""

    def __init__(self, out: str, seeds: int, purge_step: int | None = None,
                 config: dict | None = None):
        require()
        from tensorboardX import SummaryWriter
        self.writers = [SummaryWriter(seed_dir(out, s), purge_step=purge_step)
                        for s in range(seeds)]
        if config is not None:
            self.writers[0].add_text("config", "```\n" + json.dumps(config, indent=1) + "\n```")

    def rows(self, rows) -> None:
        """metrics.jsonl rows (dicts with "seed" and "step"), flushed at once so that a
        running TensorBoard shows them."""
        for row in rows:
            w = self.writers[row["seed"]]
            for key, value in row.items():
                if key in AXES or value is None or isinstance(value, bool):
                    continue
                w.add_scalar(tag(key), float(value), row["step"])
        self.flush()

    def evaluation(self, entries: list, step: int) -> None:
        """Each seed's trained entry of the evaluation (`entries[s]`, or None), at `step`."""
        for w, entry in zip(self.writers, entries):
            for name, value in numbers(entry).items():
                w.add_scalar("eval/" + name, value, step)
        self.flush()

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        for w in self.writers:
            w.close()
