"""Export vte scenarios in other systems' formats.

    python -m vte.cluster.export decice --episodes N --out DIR [--seed 0] [--warmup-steps 16]
        [--set num_nodes=64 --set queue_len=8 ...]

`decice` writes, per episode e, `DIR/episode_{e:05d}.json`: a DECICE `ScheduleRequest`
(the queued requests as tasks, the cluster after `--warmup-steps` optimal decisions as
its digital twin reports it, running jobs as pods; `vte.cluster.decice.convert.cluster_state`),
and beside it `DIR/episode_{e:05d}.optimal.json`: vte's optimal placement of those tasks
as a DECICE `ScheduleResponse` (each task in turn on the least-cost feasible node of the
cluster as the previous ones left it, `strategy_used: "optimal"`; a task no node can host,
such as one wanting a GPU model no node carries, `target_node_ids: []` with its reason),
with each placement's cost. That is exactly what `python -m vte.serve --policy optimal` answers for the file.
`DIR/manifest.json` records the parameters, the seed, the file names and how many tasks
no node could host.

Deterministic: episode e is `vte.reset(fold_in(PRNGKey(seed), e))` followed by
`--warmup-steps` steps keyed by `fold_in` of the same key.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

import jax
import jax.numpy as jnp
import numpy as np

from vte.cluster.env import reset, step
from vte.files import atomic_write_text
from vte.cluster.params import EnvParams, parse_assignments

FORMATS = ("decice",)
# Namespace of the exported task ids: uuid5(TASK_NAMESPACE, "seed/episode/slot").
TASK_NAMESPACE = uuid.UUID("5d1b0f3e-7a51-4c8e-9a57-2f4c1e0b6a11")


def _parse_set(items: list[str]) -> dict:
    return parse_assignments(items)


def episode_states(params: EnvParams, seed: int, episodes: int, warmup_steps: int):
    """The exported states, batched over episodes (leading axis `episodes`): each a fresh
    scenario after `warmup_steps` decisions that take the optimal action."""

    def one(key):
        _, state = reset(key, params)

        def body(state, k):
            _, state, *_ = step(k, state, state.scores.optimum, params)
            return state, None

        keys = jax.random.split(jax.random.fold_in(key, 1), max(warmup_steps, 1))[:warmup_steps]
        state, _ = jax.lax.scan(body, state, keys)
        return state

    base = jax.random.PRNGKey(seed)
    keys = jax.vmap(lambda e: jax.random.fold_in(base, e))(jnp.arange(episodes))
    return jax.jit(jax.vmap(one))(keys)


def export_decice(out: str, episodes: int, params: EnvParams, seed: int = 0,
                  warmup_steps: int = 16) -> list[str]:
    """Write the DECICE files of `episodes` scenarios into `out`; returns their paths."""
    from vte.cluster.decice import schemas as S
    from vte.cluster.decice.convert import (cluster_state, cluster_view, placements, task_requests,
                                   tasks_from_requests)
    from vte.cluster.decice.place import OPTIMAL, Placer

    if episodes < 1:
        raise ValueError(f"--episodes {episodes} is invalid: allowed an integer >= 1")
    if warmup_steps < 0:
        raise ValueError(f"--warmup-steps {warmup_steps} is invalid: allowed an integer >= 0")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a file: allowed a directory (created if missing)")
    os.makedirs(out, exist_ok=True)
    states = jax.device_get(episode_states(params, seed, episodes, warmup_steps))
    placer = Placer(OPTIMAL, params, seed)
    written, left_out = [], 0
    for e in range(episodes):
        state = jax.tree_util.tree_map(lambda x: x[e], states)
        k = state.queue.valid.shape[0]
        ids = [uuid.uuid5(TASK_NAMESPACE, f"{seed}/{e}/{slot}") for slot in range(k)]
        cluster = cluster_state(state)
        view = cluster_view(cluster, params)
        request = S.ScheduleRequest(
            tasks=tasks_from_requests(state.queue, ids), cluster=cluster)
        requests, reasons = task_requests(request.tasks, view)
        nodes, costs, fits = placer([view], [requests])
        answer = placements(request.tasks, view, nodes[0], fits[0], reasons, OPTIMAL)
        left_out += sum(r is not None for r in reasons)
        answer = S.ScheduleResponse(placements=answer).model_dump(mode="json", exclude_none=True)
        answer["costs"] = [float(costs[0, t]) for t in range(len(request.tasks))]
        stem = os.path.join(out, f"episode_{e:05d}")
        atomic_write_text(stem + ".json", request.model_dump_json(indent=1))
        atomic_write_text(stem + ".optimal.json", json.dumps(answer, indent=1))
        written.append(stem + ".json")
    manifest = {"format": "decice", "seed": seed, "episodes": episodes,
                "warmup_steps": warmup_steps,
                "tasks_no_node_can_host": left_out,
                "params": {name: np.asarray(getattr(params, name)).tolist()
                           for name in EnvParams.__dataclass_fields__},
                "files": [os.path.basename(p) for p in written]}
    atomic_write_text(os.path.join(out, "manifest.json"), json.dumps(manifest, indent=1))
    return written


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m vte.cluster.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--out", required=True, help="directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-steps", type=int, default=16,
                        help="optimal decisions before the export, so jobs run (default 16)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an EnvParams field, e.g. --set num_nodes=64")
    args = parser.parse_args(argv)
    try:
        params = EnvParams(**_parse_set(args.set))
        written = export_decice(args.out, args.episodes, params, args.seed, args.warmup_steps)
    except ValueError as err:
        sys.exit(f"error: {err}")
    print(f"wrote {len(written)} requests and their optimal placements to {args.out}")
    return written


if __name__ == "__main__":
    main()
