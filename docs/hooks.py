"""MkDocs hook: the documentation's generated tables, built from the code at build time.

A page holds a marker, an HTML comment the hook replaces with Markdown:

- `<!-- vte:environment ID -->`: the environment's registration, its observation fields
  (shape, dtype, bounds from `observation_specs`), the named columns of each field
  (`observation_columns`), its action, the keys of `info` (traced with `jax.eval_shape`,
  no step runs) and its module's own description of reward and termination;
- `<!-- vte:flags -->`: every flag of `train/ppo.py` and `train/imitate.py`, by group,
  with default, range and help, from the run configuration's fields.

So the pages cannot drift from the registrations, the feature tables and the flags: a
change there changes the page, and `mkdocs build --strict` (a test) builds it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:           # `train` is imported from the checkout
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- vte:(environment|flags)(?: ([\w.-]+))? -->$", re.M)   # alone on a line

# Small instances to read shapes and bounds off (the tables say which size they show).
SMALL = {"Cluster-v0": {"num_nodes": 8}, "OpenB-v0": {"subset": 16, "seeds": range(2)}}


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _range(spec) -> str:
    import numpy as np
    if spec.dtype == np.bool_:
        return "bool"
    lo, hi = float(np.min(spec.low)), float(np.max(spec.high))
    return f"{lo:.4g} .. {hi:.4g}"


def _doc(obj) -> str:
    """A module docstring as Markdown: indented code stays code, the rest is prose."""
    text = inspect.cleandoc(obj.__doc__ or "")
    out, code = [], False
    for line in text.splitlines():
        if line.startswith("    ") and not code:
            out += ["", "```python"]
            code = True
        elif code and line and not line.startswith("    "):
            out += ["```", ""]
            code = False
        out.append(line[4:] if code else line)
    if code:
        out.append("```")
    return "\n".join(out)


def environment(env_id: str) -> str:
    import jax
    import vte
    reg = vte.registration(env_id)
    env, params = vte.make(env_id, **SMALL.get(env_id, {}))
    specs, columns = env.observation_specs(params), env.observation_columns(params)
    size = ", ".join(f"`{k}={v!r}`" for k, v in SMALL.get(env_id, {}).items())
    lines = [
        f"*{_cell(reg.summary)}*", "",
        "| registration | |", "|---|---|",
        f"| make | `vte.make(\"{env_id}\", ...)` |",
        f"| trainers' flag | `--env {reg.flag}` |",
        f"| actions | `{env.num_actions(params)}` at {size} "
        f"(`env.num_actions(params)`; the last one: {_cell(getattr(env, 'action_meaning', 'defer'))}) |",
        f"| reference policies | {', '.join(f'`{p}`' for p in reg.policies())} |",
        f"| imitation teachers | {', '.join(f'`{t}`' for t in reg.teachers)} "
        f"(default `{reg.default_teacher}`) |",
        f"| known optimum | {f'`{reg.optimum}`' if reg.optimum else 'none'} |",
        f"| served by `python -m vte.serve` | "
        f"{', '.join(f'`--protocol {p}`' for p in reg.protocols) or 'no'} |",
        f"| its run section | `{reg.config.__module__}.{reg.config.__name__}` "
        f"({', '.join(f'`--{f.name.replace(chr(95), chr(45))}`' for f in dataclasses.fields(reg.config))}) |",
        "", f"### Observation fields (at {size})", "",
        "| field | shape | dtype | range (min low .. max high) |", "|---|---|---|---|",
    ]
    lines += [f"| `{name}` | `{spec.shape}` | {spec.dtype} | {_range(spec)} |"
              for name, spec in specs.items()]
    for field, cols in columns.items():
        lines += ["", f"### Columns of `{field}`", "",
                  "| # | column | unit | meaning |", "|---:|---|---|---|"]
        lines += [f"| {i} | `{_cell(c.name)}` | {_cell(c.unit)} | {_cell(c.meaning)} |"
                  for i, c in enumerate(cols)]
    key = jax.random.PRNGKey(0)
    obs, state = jax.eval_shape(env.reset, key, params)
    out = jax.eval_shape(lambda k, s: env.step(k, s, jax.numpy.int32(0), params), key,
                         jax.tree_util.tree_map(lambda x: jax.numpy.zeros(x.shape, x.dtype),
                                                state))
    info = out[-1]
    lines += ["", "### `info` of a step", "", "| key | shape | dtype |", "|---|---|---|"]
    for k, v in info.items():
        leaves = jax.tree_util.tree_leaves(v)
        if len(leaves) == 1 and not isinstance(v, dict):
            lines.append(f"| `{k}` | `{tuple(v.shape)}` | {v.dtype} |")
        else:
            lines.append(f"| `{k}` | a pytree of {len(leaves)} arrays | |")
    module = sys.modules[type(env).__module__]
    lines += ["", f"### Reward, action and termination (`{module.__name__}`)", "",
              _doc(module)]
    return "\n".join(lines)


def _flag_rows(fields, which, prefix: str = "") -> list[str]:
    rows = []
    for f in fields:
        meta = f.metadata
        if meta.get("choices"):
            allowed = ", ".join(f"`{c}`" for c in meta["choices"])
        elif meta.get("low") is not None and meta.get("high") is not None:
            allowed = f"{meta['low']} .. {meta['high']}"
        elif meta.get("low") is not None:
            allowed = f"{'>' if meta.get('strict') else '≥'} {meta['low']}"
        else:
            allowed = ""
        default = f.default if f.default is not dataclasses.MISSING else ""
        rows.append(f"| `--{(prefix + f.name).replace('_', '-')}` | {which(f.name)} | "
                    f"`{_cell(default)}` | {_cell(allowed)} | {_cell(meta['help'])} |")
    return rows


HEADER = ["| flag | trainers | default | allowed | help |", "|---|---|---|---|---|"]


def flags() -> str:
    import vte
    from vte.train.config import GROUPS, SECTIONS, ImitateConfig, PPOConfig
    ppo = {f.name: f for f in dataclasses.fields(PPOConfig) if f.name not in SECTIONS}
    imitate = {f.name: f for f in dataclasses.fields(ImitateConfig) if f.name not in SECTIONS}
    order = list(ppo) + [n for n in imitate if n not in ppo]

    def which(n):
        return "both" if n in ppo and n in imitate else "ppo" if n in ppo else "imitate"

    lines = []
    for group in GROUPS:
        names = [n for n in order if (ppo.get(n) or imitate[n]).metadata["group"] == group]
        if names:
            lines += ["", f"### {group.capitalize()}", ""] + HEADER
            lines += _flag_rows([ppo.get(n) or imitate[n] for n in names], which)
        if group == "environment":
            for env in vte.registry.flags():
                reg = vte.registration(env)
                lines += ["", f"#### `--env {env}`: `{reg.config.__name__}`", "",
                          f"Its section of `config.json` (\"env\"); the names of "
                          f"`vte.make(\"{reg.id}\", ...)`"
                          + ("; old names still load, with a note: " + ", ".join(
                              f"`--{o.replace('_', '-')}` is `--{n.replace('_', '-')}`"
                              for o, n in reg.renamed.items()) if reg.renamed else "")
                          + ".", ""] + HEADER
                lines += _flag_rows(dataclasses.fields(reg.config), lambda n: "both")
                if reg.planner is not None:
                    lines += ["", f"#### A planning teacher's settings: `{reg.planner.__name__}`",
                              "", "With `--env " + env + " --teacher plan_fgd` or "
                              "`plan:<base>` (imitation); \"plan\" in `config.json`; the "
                              "same flags as `python -m vte.openb`'s.", ""] + HEADER
                    lines += _flag_rows(dataclasses.fields(reg.planner), lambda n: "imitate",
                                        prefix="plan_")
    return "\n".join(lines).strip()


def on_page_markdown(markdown, page, config, files):
    def replace(m):
        return environment(m.group(2)) if m.group(1) == "environment" else flags()
    return MARKER.sub(replace, markdown)
