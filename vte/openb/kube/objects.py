"""Kubernetes Node and Pod objects <-> the replay's rows, tables and YAML: one converter.

Both the extender (`vte.openb.kube.twin`) and `python -m vte.openb --cluster SNAPSHOT` read
objects through `node_row` and `pod_row`, and `python -m vte.openb.kube export` writes a trace as
the objects these read back (`trace -> YAML -> trace` is the identity).

Units as the replay's (`vte/openb/OPENB.md`): CPU in milli-cores (a pod's requests rounded
up, as `Quantity.MilliValue()`; a node's allocatable rounded down), memory in MiB (a
pod's rounded up, a node's down), GPUs by the convention (`vte.openb.kube.convention`).

A pod's request is what kube-scheduler's NodeResourcesFit counts: the larger of the sum
over its containers and the largest init container, plus `spec.overhead`; a container
without requests takes its limits (the API server's defaulting). Unknown fields are
ignored; a malformed one raises `KubeInputError` naming the field and the value.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Iterable

import numpy as np

from vte.openb.kube import quantity
from vte.openb.kube.convention import DEFAULT, Convention
from vte.openb.trace import MAX_GPUS_PER_NODE, MILLI, NodeTable, PodTable

DEFAULT_POD_LIMIT = 110          # kubelet's default maxPods, when a node reports none
TERMINAL_PHASES = ("Succeeded", "Failed")
PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9./_-]*")      # a YAML key written unquoted
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class KubeInputError(ValueError):
    """An object the extender cannot read; the message names the field and the value."""


@dataclasses.dataclass(frozen=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpus: int
    model: str            # "" without GPUs
    pod_limit: int        # allocatable pods


@dataclasses.dataclass(frozen=True)
class PodRow:
    key: str              # the UID, else "namespace/name"
    namespace: str
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpus: int
    gpu_milli: int        # per GPU, 0 for a CPU-only pod
    models: tuple[str, ...]   # allowed GPU models, () = any
    spec: str             # the model annotation as given ("" = any)
    node: str             # spec.nodeName, "" when not bound
    gpu_index: tuple[int, ...] | None   # the convention's index annotation, None if absent
    active: bool          # bound or pending: not terminal, not being deleted

    @property
    def demand(self) -> int:
        return self.num_gpus * self.gpu_milli


def _dict(obj, field: str) -> dict:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise KubeInputError(f"{field}: {_short(obj)} is not an object")
    return obj


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name(meta: dict, field: str) -> str:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise KubeInputError(f"{field}.name: {_short(name)} is not a non-empty string")
    return name


def _int(text, field: str, low: int, high: int) -> int:
    try:
        v = quantity.value(text, field)
    except quantity.QuantityError as err:
        raise KubeInputError(str(err)) from None
    if not low <= v <= high:
        raise KubeInputError(f"{field}: {_short(text)} is outside [{low}, {high}]")
    return v


def node_row(node, convention: Convention = DEFAULT, field: str = "Node") -> NodeRow:
    """A v1.Node (a dict) as the replay's node: allocatable (else capacity) CPU, memory,
    pods and GPUs (`convention.gpu_count`), the model label (`convention.gpu_model`)."""
    node = _dict(node, field)
    meta = _dict(node.get("metadata"), f"{field}.metadata")
    name = _name(meta, f"{field}.metadata")
    status = _dict(node.get("status"), f"{field}.status")
    alloc = {**_dict(status.get("capacity"), f"{field}.status.capacity"),
             **_dict(status.get("allocatable"), f"{field}.status.allocatable")}
    where = f"{field} {name!r} status.allocatable"
    try:
        cpu = quantity.parse(alloc.get("cpu", 0), f"{where}.cpu")
        cpu_milli = int((cpu * 1000).to_integral_value(rounding="ROUND_FLOOR"))
        memory = quantity.mib(alloc.get("memory", 0), f"{where}.memory", round_up=False)
    except quantity.QuantityError as err:
        raise KubeInputError(str(err)) from None
    if not 0 <= cpu_milli < 2**31 or not 0 <= memory < 2**31:
        raise KubeInputError(f"{where}: cpu {alloc.get('cpu')!r} or memory "
                             f"{alloc.get('memory')!r} is outside what the replay holds")
    gpus = _int(alloc.get(convention.gpu_count, 0), f"{where}[{convention.gpu_count!r}]",
                0, MAX_GPUS_PER_NODE)
    pods = _int(alloc.get("pods", DEFAULT_POD_LIMIT), f"{where}.pods", 0, 1_000_000)
    labels = _dict(meta.get("labels"), f"{field} {name!r} metadata.labels")
    model = labels.get(convention.gpu_model, "") if gpus else ""
    if not isinstance(model, str) or (gpus and not model):
        raise KubeInputError(f"{field} {name!r} metadata.labels[{convention.gpu_model!r}]: "
                             f"{_short(model)}; a node with {gpus} GPUs needs its model there")
    return NodeRow(name, cpu_milli, memory, gpus, model, pods)


def _requests(containers, field: str) -> tuple[int, int, dict]:
    """(cpu milli, memory bytes as MiB rounded up later, extended) of containers: list of
    (cpu Decimal, memory Decimal, {name: value}) per container."""
    out = []
    if containers is None:
        return out
    if not isinstance(containers, list):
        raise KubeInputError(f"{field}: {_short(containers)} is not a list")
    for i, c in enumerate(containers):
        c = _dict(c, f"{field}[{i}]")
        res = _dict(c.get("resources"), f"{field}[{i}].resources")
        limits = _dict(res.get("limits"), f"{field}[{i}].resources.limits")
        requests = {**limits, **_dict(res.get("requests"), f"{field}[{i}].resources.requests")}
        out.append((requests, limits))
    return out


def _sum(items, key: str, field: str):
    total = quantity.Decimal(0)
    for i, (requests, _) in enumerate(items):
        if key in requests:
            v = quantity.parse(requests[key], f"{field}[{i}].resources.requests.{key}")
            if v < 0:
                raise quantity.QuantityError(f"{field}[{i}].resources.requests.{key}: "
                                             f"{requests[key]!r} is negative")
            total += v
    return total


def pod_row(pod, convention: Convention = DEFAULT, field: str = "Pod",
            known_models: Iterable[str] | None = None) -> PodRow:
    """A v1.Pod (a dict) as the replay's pod (module doc for the units and the rules)."""
    pod = _dict(pod, field)
    meta = _dict(pod.get("metadata"), f"{field}.metadata")
    name = _name(meta, f"{field}.metadata")
    namespace = meta.get("namespace") or "default"
    uid = meta.get("uid")
    if not isinstance(namespace, str) or (uid is not None and not isinstance(uid, str)):
        raise KubeInputError(f"{field}.metadata: namespace {_short(namespace)} and uid "
                             f"{_short(uid)} must be strings")
    spec = _dict(pod.get("spec"), f"{field}.spec")
    status = _dict(pod.get("status"), f"{field}.status")
    containers = _requests(spec.get("containers"), f"{field}.spec.containers")
    inits = _requests(spec.get("initContainers"), f"{field}.spec.initContainers")
    overhead = _dict(spec.get("overhead"), f"{field}.spec.overhead")
    try:
        def need(key):
            total = _sum(containers, key, f"{field}.spec.containers")
            for i, item in enumerate(inits):
                total = max(total, _sum([item], key, f"{field}.spec.initContainers"))
            if key in overhead:
                total += quantity.parse(overhead[key], f"{field}.spec.overhead.{key}")
            return total
        cpu = quantity.milli_value(need("cpu"))
        memory = quantity.mib(need("memory"))
    except quantity.QuantityError as err:
        raise KubeInputError(str(err)) from None
    if cpu >= 2**31 or memory >= 2**31:
        raise KubeInputError(f"{field} {name!r}: cpu or memory request beyond what the replay holds")
    notes = _dict(meta.get("annotations"), f"{field}.metadata.annotations")

    def extended(key: str):
        """The annotation `key`, else the containers' limits (else requests) of it, summed."""
        if key in notes:
            return notes[key], f"{field}.metadata.annotations[{key!r}]"
        found = [r.get(key, l.get(key)) for r, l in containers if key in r or key in l]
        if not found:
            return None, key
        try:
            total = sum(quantity.parse(v, f"{field}.spec.containers[].resources[{key!r}]")
                        for v in found)
        except quantity.QuantityError as err:
            raise KubeInputError(str(err)) from None
        return str(total), f"{field}.spec.containers[].resources[{key!r}]"

    count_text, count_field = extended(convention.gpu_count)
    num_gpus = 0 if count_text is None else _int(count_text, count_field, 0, MAX_GPUS_PER_NODE)
    milli = 0
    if num_gpus:
        milli_text, milli_field = extended(convention.gpu_milli)
        milli = (MILLI if milli_text is None
                 else _int(milli_text, milli_field, 1, MILLI) * convention.milli_per_unit)
        if not 0 < milli <= MILLI:
            raise KubeInputError(f"{milli_field}: {_short(milli_text)} x "
                                 f"{convention.milli_per_unit} is outside [1, {MILLI}] milli-GPU")
    raw_spec = notes.get(convention.gpu_model, "") if num_gpus else ""
    if not isinstance(raw_spec, str):
        raise KubeInputError(f"{field}.metadata.annotations[{convention.gpu_model!r}]: "
                             f"{_short(raw_spec)} is not a string")
    models = tuple(m.strip() for m in raw_spec.split(convention.model_separator) if m.strip())
    index = notes.get(convention.gpu_index)
    gpu_index = None
    if isinstance(index, str) and index.strip() and num_gpus:
        try:
            gpu_index = tuple(sorted({int(x) for x in index.split(convention.index_separator)}))
        except ValueError:
            raise KubeInputError(f"{field}.metadata.annotations[{convention.gpu_index!r}]: "
                                 f"{_short(index)} is not GPU indices joined by "
                                 f"{convention.index_separator!r}") from None
        if any(not 0 <= g < MAX_GPUS_PER_NODE for g in gpu_index):
            raise KubeInputError(f"{field}.metadata.annotations[{convention.gpu_index!r}]: "
                                 f"{index!r} names a GPU outside 0..{MAX_GPUS_PER_NODE - 1}")
    node = spec.get("nodeName") or ""
    if not isinstance(node, str):
        raise KubeInputError(f"{field}.spec.nodeName: {_short(node)} is not a string")
    active = (status.get("phase") not in TERMINAL_PHASES
              and meta.get("deletionTimestamp") is None)
    return PodRow(key=uid or f"{namespace}/{name}", namespace=namespace, name=name,
                  cpu_milli=cpu, memory_mib=memory, num_gpus=num_gpus, gpu_milli=milli,
                  models=models, spec=raw_spec.strip(), node=node, gpu_index=gpu_index,
                  active=active)


# --- snapshots: what `kubectl get nodes,pods -A -o json` prints ----------------------------

def load_items(path: str | os.PathLike) -> list[dict]:
    """The objects of a snapshot: a JSON file (a v1.List, a NodeList or PodList, or one
    object), a YAML file of one or more documents (needs PyYAML), or a directory of such
    files (read in name order, recursively)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        items = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".json", ".yaml", ".yml")):
                    items += load_items(os.path.join(root, name))
        return items
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError:
            raise ValueError(f"{path}: not JSON, and reading YAML needs PyYAML "
                             "(pip install pyyaml)") from None
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    items = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: a document is not a Kubernetes object")
        items += doc["items"] if isinstance(doc.get("items"), list) else [doc]
    return items


def _kind(item: dict) -> str:
    kind = item.get("kind")
    if kind is None and isinstance(item.get("status"), dict):        # items of a NodeList
        kind = "Node" if "allocatable" in item["status"] or "capacity" in item["status"] else None
    if kind is None and isinstance(item.get("spec"), dict) and "containers" in item["spec"]:
        kind = "Pod"
    return kind or ""


def split(items: Iterable[dict], convention: Convention = DEFAULT) -> tuple[list[NodeRow], list[PodRow]]:
    """The nodes and the active pods (bound or pending) of a snapshot's objects; other kinds,
    terminal and deleted pods are left out."""
    nodes, pods = [], []
    for i, item in enumerate(items):
        kind = _kind(item)
        if kind == "Node":
            nodes.append(node_row(item, convention, f"items[{i}] (Node)"))
        elif kind == "Pod":
            row = pod_row(item, convention, f"items[{i}] (Pod)")
            if row.active:
                pods.append(row)
    return nodes, pods


def vocabulary(models: Iterable[str], base: Iterable[str] | None = None) -> tuple[str, ...]:
    """The GPU model vocabulary: the bundled OpenB models (`power.BUNDLED_MODELS`, what the
    zoo's networks were trained on) and any other model given, sorted."""
    if base is None:
        from vte.openb.power import BUNDLED_MODELS as base
    return tuple(sorted(set(base) | {m for m in models if m}))


def _columns(rows, fields) -> dict[str, np.ndarray]:
    """{field: (len(rows),) int32 array of that field of each row}."""
    return {f: np.asarray([getattr(r, f) for r in rows], np.int32) for f in fields}


def tables(nodes: list[NodeRow], pods: list[PodRow], path: str = "snapshot",
           models: tuple[str, ...] | None = None) -> tuple[NodeTable, PodTable]:
    """A snapshot as the replay's tables: its nodes in order, its pods in order (named
    namespace/name). `models`: the vocabulary (default `vocabulary` of the nodes' and the
    pods' models)."""
    if not nodes:
        raise ValueError(f"{path}: no Node in the snapshot")
    if not pods:
        raise ValueError(f"{path}: no active Pod in the snapshot")
    if models is None:
        models = vocabulary([n.model for n in nodes] + [m for p in pods for m in p.models])
    index = {m: i for i, m in enumerate(models)}
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: a node name repeats")
    node_table = NodeTable(
        path=str(path), names=tuple(names), models=tuple(models),
        model=np.asarray([index[n.model] if n.model else -1 for n in nodes], np.int32),
        **_columns(nodes, ("cpu_milli", "memory_mib", "num_gpus")))
    masks = []
    for p in pods:
        missing = [m for m in p.models if m not in index]
        if missing:
            raise ValueError(f"{path}: pod {p.namespace}/{p.name} asks for GPU models "
                             f"{missing} outside the vocabulary {list(models)}")
        masks.append(sum(1 << index[m] for m in set(p.models)))
    pod_names = [p.name if p.namespace == "default" else f"{p.namespace}/{p.name}" for p in pods]
    if len(set(pod_names)) != len(pod_names):
        raise ValueError(f"{path}: a pod name repeats")
    pod_table = PodTable(
        path=str(path), names=tuple(pod_names), gpu_spec=tuple(p.spec for p in pods),
        model_mask=np.asarray(masks, np.int32),
        **_columns(pods, ("cpu_milli", "memory_mib", "num_gpus", "gpu_milli")))
    return node_table, pod_table


def load_snapshot(path, convention: Convention = DEFAULT) -> tuple[NodeTable, PodTable]:
    """`tables` of a snapshot file or directory (`load_items`)."""
    nodes, pods = split(load_items(path), convention)
    return tables(nodes, pods, os.fspath(path))


# --- export: a trace as Node and Pod objects (the FGD simulator's YAML) -------------------

def _check_name(name: str, what: str) -> str:
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(f"{what} name {name!r} is not a valid DNS subdomain (lowercase "
                         "letters, digits, '-' and '.'; at most 253 characters)")
    return name


def node_objects(nodes: NodeTable, convention: Convention = DEFAULT,
                 pod_limit: int = 1001) -> list[dict]:
    """A node table as v1.Node objects in the FGD simulator's form (its
    `example/test-cluster/node`): the model label, allocatable and capacity with the GPU
    count and milli. `pod_limit` 1001: the replay's ("fewer than 1001" bound pods)."""
    out = []
    for i, name in enumerate(nodes.names):
        gpus = int(nodes.num_gpus[i])
        labels = {"kubernetes.io/hostname": _check_name(name, "node")}
        res = {"cpu": f"{int(nodes.cpu_milli[i])}m", "memory": f"{int(nodes.memory_mib[i])}Mi",
               "pods": str(pod_limit)}
        if gpus:
            labels[convention.gpu_model] = nodes.models[int(nodes.model[i])]
            res[convention.gpu_count] = str(gpus)
            res[convention.gpu_milli] = str(gpus * MILLI)
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels},
                    "status": {"allocatable": dict(res), "capacity": dict(res)}})
    return out


def pod_objects(pods: PodTable, convention: Convention = DEFAULT,
                namespace: str = "default", image: str = "tensorflow:latest",
                scheduler_name: str | None = None) -> list[dict]:
    """A pod table as v1.Pod objects in the form of Alibaba's `pod_csv_to_yaml.py`: CPU and
    memory as requests = limits of one container, the GPU annotations on GPU pods;
    `scheduler_name`: their `spec.schedulerName` (e.g. a second scheduler's, which asks
    the extender), default none (the cluster's default scheduler)."""
    _check_name(namespace, "namespace")
    out = []
    for i, name in enumerate(pods.names):
        res = {"cpu": f"{int(pods.cpu_milli[i])}m", "memory": f"{int(pods.memory_mib[i])}Mi"}
        meta = {"name": _check_name(name, "pod"), "namespace": namespace}
        if int(pods.num_gpus[i]):
            meta["annotations"] = {convention.gpu_milli: str(int(pods.gpu_milli[i])),
                                   convention.gpu_count: str(int(pods.num_gpus[i]))}
            if pods.gpu_spec[i]:
                meta["annotations"][convention.gpu_model] = pods.gpu_spec[i]
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                    "spec": {"containers": [{"name": "main", "image": image,
                                             "resources": {"requests": dict(res),
                                                           "limits": dict(res)}}],
                             "restartPolicy": "OnFailure",
                             **({"schedulerName": scheduler_name} if scheduler_name else {})}})
    return out


def to_yaml(objects: list[dict]) -> str:
    """YAML documents separated by `---`, every value a JSON string (valid YAML 1.2 and
    1.1, read by kubectl and PyYAML alike; no dependency), keys plain where they can be."""
    def key(k: str) -> str:
        return k if PLAIN_KEY.fullmatch(k) else json.dumps(k)

    def emit(value, indent: int) -> list[str]:
        pad = "  " * indent
        lines = []
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, (dict, list)) and v:
                    lines.append(f"{pad}{key(k)}:")
                    lines += emit(v, indent + 1)
                else:
                    lines.append(f"{pad}{key(k)}: {json.dumps(v)}")
        else:
            for v in value:
                sub = emit(v, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines += sub[1:]
        return lines
    return "---\n".join("\n".join(emit(o, 0)) + "\n" for o in objects)


__all__ = ["KubeInputError", "NodeRow", "PodRow", "node_row", "pod_row", "load_items", "split",
           "vocabulary", "tables", "load_snapshot", "node_objects", "pod_objects", "to_yaml"]
