"""The FGD artifact's published results, read from its own files (`data/expected/`).

Every comparison with the paper is computed here from those files, never typed by hand: per
trace, policy and metric, the mean and the standard deviation over the published seeds (42..51
at tune 1.3) at 100 % arrived GPU demand and at the end (x = 130), and the mean curve
(OPENB.md section 9).
"""

from __future__ import annotations

import csv
import functools
import os
from pathlib import Path

import numpy as np

from vte.openb.trace import DATA_DIR, POD_PREFIX

EXPECTED_DIR = DATA_DIR / "expected"
# vte's curve name -> the artifact's file of that metric (each binned as OPENB.md section 8).
METRIC_FILES = {"alloc": "analysis_allo_discrete.csv",
                "frag": "analysis_frag_discrete.csv",
                "frag_ratio": "analysis_frag_ratio_discrete.csv"}
# The artifact's policy folders -> vte's policy names (`policies.POLICIES`).
POLICY_NAMES = {"01-Random": "random", "02-DotProd": "dot_product",
                "03-GpuClustering": "gpu_clustering", "04-GpuPacking": "gpu_packing",
                "05-BestFit": "best_fit", "06-FGD": "fgd"}
PUBLISHED_SEEDS = tuple(range(42, 52))
PUBLISHED_TUNE = 1.3
PUBLISHED_END = 130           # the last column: x = 100 x tune, in practice the end of a run
POINTS = {"100": 100, "end": PUBLISHED_END}


def mean_std(values) -> tuple[float, float]:
    """(mean, sample standard deviation with ddof 1, the published ±), both rounded to 2
    decimals; the std of a single value is 0. `values` must be finite and non-empty."""
    values = np.asarray(values, np.float64)
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    return round(float(values.mean()), 2), round(std, 2)


def policy_name(folder: str) -> str:
    """vte's name of an artifact policy folder: "06-FGD" -> "fgd"; an unknown one loses its
    number and is lower-cased ("07-PWR" -> "pwr")."""
    return POLICY_NAMES.get(folder, folder.split("-", 1)[-1].lower())


def read_metric(path: str | os.PathLike) -> dict[tuple[str, str], dict[int, np.ndarray]]:
    """One published file: (trace, policy) -> seed -> (131,) float64 curve over x = 0..130.

    Only rows at the published tune count. The trace is the pod file's short name
    ("openb_pod_list_default" -> "default"). A malformed file raises ValueError naming the file,
    the line and the column."""
    path = Path(path)
    columns = [str(x) for x in range(PUBLISHED_END + 1)]
    out: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("workload", "sc_policy", "tune", "seed", *columns)
                   if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}, line 1 (header): missing column(s) {missing[:5]}"
                             f"{' ...' if len(missing) > 5 else ''}; a published file has workload, "
                             f"sc_policy, tune, seed and 0..{PUBLISHED_END}")
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            try:
                tune, seed = float(row["tune"]), int(row["seed"])
                curve = np.array([float(row[c]) for c in columns])
            except (TypeError, ValueError):
                raise ValueError(f"{where}: tune, seed and 0..{PUBLISHED_END} must be numbers") from None
            if not np.isfinite(curve).all():
                raise ValueError(f"{where}: a value of 0..{PUBLISHED_END} is not finite")
            if tune != PUBLISHED_TUNE:
                continue
            trace = row["workload"].removeprefix(POD_PREFIX)
            runs = out.setdefault((trace, policy_name(row["sc_policy"])), {})
            if seed in runs:
                raise ValueError(f"{where}: {row['workload']} {row['sc_policy']} seed {seed} repeats")
            runs[seed] = curve
    return out


def load(directory: str | os.PathLike = EXPECTED_DIR) -> dict[str, dict[str, dict[str, dict]]]:
    """The published figures: trace -> policy -> metric -> {"100": (mean, std), "end": (mean,
    std), "curve": [(131,) seed means, 2 decimals], "seeds": [seeds]}, over the seeds each
    (trace, policy) has in the file (the published files have 42..51 everywhere).
    Metrics: the keys of `METRIC_FILES`; a metric whose file is missing is left out."""
    figures: dict[str, dict[str, dict[str, dict]]] = {}
    for metric, file in METRIC_FILES.items():
        if not (Path(directory) / file).is_file():
            continue
        for (trace, policy), runs in read_metric(Path(directory) / file).items():
            seeds = sorted(runs)
            curves = np.stack([runs[s] for s in seeds])                    # (S, 131)
            entry = {key: mean_std(curves[:, x]) for key, x in POINTS.items()}
            entry["curve"] = [round(float(v), 2) for v in curves.mean(axis=0)]
            entry["seeds"] = seeds
            figures.setdefault(trace, {}).setdefault(policy, {})[metric] = entry
    return figures


@functools.lru_cache(maxsize=1)
def bundled() -> dict[str, dict[str, dict[str, dict]]]:
    """`load()` of the bundled files, read once per process."""
    return load(EXPECTED_DIR)
