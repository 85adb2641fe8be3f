"""Trace input: the Alibaba OpenB node and pod CSV files, read and checked into NumPy arrays.

The two node lists and the seventeen pod lists of the FGD paper's experiment ship in
`vte/openb/data/` (attribution in its README), so `load_nodes("gpu")` and
`load_pods("default")` run offline; any other file of the same format is read by path. Every check runs before any simulation, and a bad value
raises `TraceError` naming the file, the line (the header is line 1) and the column.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"

# Short names of the bundled files. TRACES: the seventeen workloads of the paper's artifact,
# in the order of its figures (the cpu* ones are run by the artifact but in no figure).
NODE_FILES = {"gpu": "openb_node_list_gpu_node.csv", "all": "openb_node_list_all_node.csv"}
TRACES = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
          "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
          "multigpu20", "multigpu30", "multigpu40", "multigpu50",
          "cpu050", "cpu100", "cpu200", "cpu250")
POD_PREFIX = "openb_pod_list_"
POD_FILES = {name: f"{POD_PREFIX}{name}.csv" for name in TRACES}

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # gpu_spec optional
MAX_GPUS_PER_NODE = 8
MILLI = 1000                 # milli-GPU in one GPU
INT32_MAX = 2**31 - 1


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names file, line and column."""


@dataclasses.dataclass(frozen=True)
class NodeTable:
    """The nodes of one node file, in file order (shape (N,) each)."""

    path: str
    names: tuple[str, ...]
    cpu_milli: np.ndarray     # (N,) int32, thousandths of a core
    memory_mib: np.ndarray    # (N,) int32, MiB
    num_gpus: np.ndarray      # (N,) int32, in [0, 8]
    model: np.ndarray         # (N,) int32, index into `models`; -1 for a node without GPUs
    models: tuple[str, ...]   # GPU model vocabulary, sorted; a pod's model list is a bitmask over it

    @property
    def total_gpu_milli(self) -> int:
        return int(self.num_gpus.sum()) * MILLI

    def __len__(self) -> int:
        return len(self.names)

    def take(self, indices) -> "NodeTable":
        """The nodes at `indices` (node numbers, in that order) with the same model
        vocabulary: a sub-cluster of this node file."""
        pick = np.asarray(indices, dtype=np.int64)
        if pick.ndim != 1 or (pick.size and not (pick.min() >= 0 and pick.max() < len(self))):
            raise ValueError(f"indices must be a 1-D sequence of node numbers in [0, {len(self)}), "
                             f"got {pick.tolist()[:8]}{' ...' if pick.size > 8 else ''}")
        return dataclasses.replace(
            self, names=tuple(self.names[i] for i in pick), cpu_milli=self.cpu_milli[pick],
            memory_mib=self.memory_mib[pick], num_gpus=self.num_gpus[pick],
            model=self.model[pick])


@dataclasses.dataclass(frozen=True)
class PodTable:
    """The pods of one pod file, in file order (shape (P,) each)."""

    path: str
    names: tuple[str, ...]
    cpu_milli: np.ndarray     # (P,) int32, thousandths of a core
    memory_mib: np.ndarray    # (P,) int32, MiB
    num_gpus: np.ndarray      # (P,) int32, GPUs asked for (0 = CPU-only pod)
    gpu_milli: np.ndarray     # (P,) int32, milli-GPU asked for on each GPU, in (0, 1000]; 0 if CPU-only
    model_mask: np.ndarray    # (P,) int32, bitmask over NodeTable.models; 0 = any model
    gpu_spec: tuple[str, ...]  # the raw model list ("" = any), the key FGD groups typical pods by

    @property
    def gpu_demand(self) -> np.ndarray:
        """(P,) int64, milli-GPU each pod asks for in total (num_gpus x gpu_milli)."""
        return self.num_gpus.astype(np.int64) * self.gpu_milli

    def __len__(self) -> int:
        return len(self.names)


def model_names(mask: int, names: tuple[str, ...]) -> str:
    """A pod's GPU model list as text: the names of `mask`'s bits over the node models
    `names` (`NodeTable.models`; "model b" for a bit past them), comma-separated; "any"
    for 0."""
    if mask == 0:
        return "any"
    return ", ".join(names[b] if b < len(names) else f"model {b}"
                     for b in range(mask.bit_length()) if mask >> b & 1)


def resolve(name_or_path: str | os.PathLike, bundled: dict[str, str], kind: str) -> Path:
    """A bundled short name (e.g. "default") or a path to a file of the same format."""
    text = os.fspath(name_or_path)
    if text in bundled:
        return DATA_DIR / bundled[text]
    path = Path(text)
    if not path.is_file():
        raise TraceError(f"{kind} file {text!r} does not exist; give a path to a CSV file "
                         f"or one of the bundled names {sorted(bundled)}")
    return path


def _rows(path: Path, required: tuple[str, ...]):
    """Yields (line number, row dict) after checking the header holds `required`."""
    try:
        handle = open(path, newline="")
    except OSError as err:
        raise TraceError(f"{path}: cannot be read ({err.strerror})") from None
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames
        if not header:
            raise TraceError(f"{path}, line 1 (header): empty file; the header must hold the columns {list(required)}")
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}, line 1 (header): missing column(s) {missing}; the header holds {header} "
                             f"and must hold {list(required)}")
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                fields = sum(v is not None for k, v in row.items() if k is not None)
                fields += len(row.get(None) or [])
                raise TraceError(f"{path}, line {line}: the row has {fields} fields "
                                 f"where the header has {len(header)}")
            yield line, row


def _int(path: Path, line: int, column: str, text: str, low: int = 0, high: int = INT32_MAX) -> int:
    """A non-negative integer cell, or a TraceError naming where it is."""
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceError(f"{path}, line {line}, column {column!r}: {text!r} is not an integer") from None
    if not low <= value <= high:
        raise TraceError(f"{path}, line {line}, column {column!r}: {value} is outside [{low}, {high}]")
    return value


def _common(path: Path, line: int, row: dict, name_column: str, seen: dict, names: list,
            cpu: list, mem: list) -> None:
    """Checks and appends the columns nodes and pods share: a unique name, CPU and memory."""
    name = row[name_column].strip()
    if not name:
        raise TraceError(f"{path}, line {line}, column {name_column!r}: empty name")
    if name in seen:
        raise TraceError(f"{path}, line {line}, column {name_column!r}: {name!r} already on line {seen[name]}")
    seen[name] = line
    names.append(name)
    cpu.append(_int(path, line, "cpu_milli", row["cpu_milli"]))
    mem.append(_int(path, line, "memory_mib", row["memory_mib"]))


def load_nodes(name_or_path: str | os.PathLike = "gpu") -> NodeTable:
    """Reads a node file (columns sn, cpu_milli, memory_mib, gpu, model); bundled: "gpu", "all"."""
    path = resolve(name_or_path, NODE_FILES, "node")
    names, cpu, mem, gpus, model_names, seen = [], [], [], [], [], {}
    for line, row in _rows(path, NODE_COLUMNS):
        _common(path, line, row, "sn", seen, names, cpu, mem)
        g = _int(path, line, "gpu", row["gpu"], high=MAX_GPUS_PER_NODE)
        gpus.append(g)
        model = row["model"].strip()
        if g > 0 and not model:
            raise TraceError(f"{path}, line {line}, column 'model': a node with {g} GPUs needs a GPU model")
        if "|" in model:
            raise TraceError(f"{path}, line {line}, column 'model': {model!r} names several models; "
                             "a node has one")
        model_names.append(model if g > 0 else "")
    if not names:
        raise TraceError(f"{path}: no nodes; the file holds a header only")
    models = tuple(sorted({m for m in model_names if m}))
    if len(models) > 31:
        raise TraceError(f"{path}: {len(models)} GPU models; at most 31 are supported")
    index = {m: i for i, m in enumerate(models)}
    return NodeTable(
        path=str(path), names=tuple(names),
        cpu_milli=np.asarray(cpu, np.int32), memory_mib=np.asarray(mem, np.int32),
        num_gpus=np.asarray(gpus, np.int32),
        model=np.asarray([index[m] if m else -1 for m in model_names], np.int32),
        models=models)


def load_pods(name_or_path: str | os.PathLike, nodes: NodeTable) -> PodTable:
    """Reads a pod file against the cluster it will run on.

    Columns name, cpu_milli, memory_mib, num_gpu, gpu_milli are required, gpu_spec (models
    joined by "|") is optional; the others are ignored (no departures, section 2 of OPENB.md).
    Bundled: the names of `TRACES` ("default", "gpuspec10", ...).
    """
    path = resolve(name_or_path, POD_FILES, "pod")
    index = {m: i for i, m in enumerate(nodes.models)}
    names, cpu, mem, num, milli, masks, specs, seen = [], [], [], [], [], [], [], {}
    for line, row in _rows(path, POD_COLUMNS):
        _common(path, line, row, "name", seen, names, cpu, mem)
        n = _int(path, line, "num_gpu", row["num_gpu"], high=MAX_GPUS_PER_NODE)
        m = _int(path, line, "gpu_milli", row["gpu_milli"])
        if n > 0 and not 0 < m <= MILLI:
            raise TraceError(f"{path}, line {line}, column 'gpu_milli': {m} for a pod with num_gpu={n}; "
                             f"a GPU pod asks for gpu_milli in (0, {MILLI}]")
        num.append(n)
        milli.append(m if n > 0 else 0)
        spec = (row.get("gpu_spec") or "").strip() if n > 0 else ""
        mask = 0
        for model in filter(None, (s.strip() for s in spec.split("|"))) if spec else ():
            if model not in index:
                raise TraceError(f"{path}, line {line}, column 'gpu_spec': model {model!r} is on no node "
                                 f"of {nodes.path}; its models are {list(nodes.models)}")
            mask |= 1 << index[model]
        masks.append(mask)
        specs.append(spec)
    if not names:
        raise TraceError(f"{path}: no pods; the file holds a header only")
    return PodTable(
        path=str(path), names=tuple(names),
        cpu_milli=np.asarray(cpu, np.int32), memory_mib=np.asarray(mem, np.int32),
        num_gpus=np.asarray(num, np.int32), gpu_milli=np.asarray(milli, np.int32),
        model_mask=np.asarray(masks, np.int32), gpu_spec=tuple(specs))
