"""The GPU-sharing convention: where a pod asks for GPUs and where a node offers them.

The defaults are the names of Alibaba's OpenB trace (its `pod_csv_to_yaml.py`) and of the
FGD paper's simulator (`hkust-adsl/kubernetes-scheduler-simulator`,
`pkg/type/open-gpu-share/utils/const.go`):

| name | on a pod | on a node |
|---|---|---|
| `alibabacloud.com/gpu-milli` | annotation: milli-GPU on each of its GPUs (1..1000) | (allocatable: total milli; not read) |
| `alibabacloud.com/gpu-count` | annotation: number of GPUs | allocatable (else capacity): GPUs |
| `alibabacloud.com/gpu-card-model` | annotation: allowed models joined by `|` | label: its model |
| `alibabacloud.com/gpu-index` | annotation written at bind: its GPUs joined by `-` ("2", "0-1") | |

Each is a setting (`Convention`): flags of `python -m vte.serve --protocol kube-extender`
or a JSON file of these fields (`Convention.load`). A pod's count and milli are read from
its annotation, else from its containers' resource limits (else requests) of that name,
summed, so a convention of extended resources (HAMi's `nvidia.com/gpu`, `nvidia.com/gpucores`
with `milli_per_unit` 10) reads too. See docs/kubernetes.md for HAMi's names.
"""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class Convention:
    gpu_milli: str = "alibabacloud.com/gpu-milli"        # pod: milli-GPU per GPU
    gpu_count: str = "alibabacloud.com/gpu-count"        # pod: GPUs; node: allocatable GPUs
    gpu_model: str = "alibabacloud.com/gpu-card-model"   # pod: allowed models; node: label
    gpu_index: str = "alibabacloud.com/gpu-index"        # pod: GPUs chosen at bind
    model_separator: str = "|"                           # between a pod's allowed models
    index_separator: str = "-"                           # between GPU indices ("0-1")
    milli_per_unit: int = 1                              # milli-GPU per unit of gpu_milli's value

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "int" or isinstance(f.default, int):
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
                    raise ValueError(f"convention {f.name}={v!r} is invalid: allowed an "
                                     "integer in [1, 1000]")
            elif not isinstance(v, str) or not v:
                raise ValueError(f"convention {f.name}={v!r} is invalid: allowed a non-empty "
                                 "string")

    @classmethod
    def load(cls, path: str | None = None, **overrides) -> "Convention":
        """The defaults, replaced by a JSON file's fields, then by `overrides` (not None)."""
        fields = {}
        if path is not None:
            with open(path, encoding="utf-8") as f:
                fields = json.load(f)
            if not isinstance(fields, dict):
                raise ValueError(f"{path}: a convention file holds a JSON object")
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(fields) - names)
            if unknown:
                raise ValueError(f"{path}: unknown field(s) {unknown}; allowed {sorted(names)}")
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)


DEFAULT = Convention()

__all__ = ["Convention", "DEFAULT"]
