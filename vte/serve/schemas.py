"""DECICE's scheduler API as pydantic v2 models, with range checks.

The field names, types and units follow DECICE's scheduler (`POST /schedule` with a
`ScheduleRequest`, answered 201 with a `ScheduleResponse`). Models that DECICE closes
(`extra="forbid"`: node metrics, nodes, devices, vertex pools, links, pods, policies,
jobs, profiles) are closed here too; the others ignore unknown keys as DECICE's do. On top
of DECICE's own checks (percentages in [0, 100], non-negative cores, memory and power)
these models check that every quantity is finite and non-negative, that a request names
at least one node, and that node, vertex-pool and task ids are unique.

Two optional extensions carry what vte knows and DECICE does not report (both are
ignored by DECICE's own models, so files written with them still load there):
  - `node_info` keys (`NodeInfo`): GPU model and count, tier, labels, readiness, speed,
    power model and failure rate of a node;
  - `Task.vte` (`TaskExtension`): the rest of a vte request (GPU count, accepted GPU
    models, work, data size, label policy, origin pool, latency bound).
Every default that applies when they are absent is listed in `vte/serve/SERVE.md`.

Units: cores; memory of a task in MiB (`required_memory`), of a node in GiB
(`mem_total`); disk in GB (GiB in vte); bandwidth in Mbit/s; delay in ms; power in W;
utilisation in percent; time in seconds.
"""

from __future__ import annotations

import math
from typing import Any, Optional
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_CLOSED = ConfigDict(extra="forbid")


def _duplicates(items) -> list:
    """The items that occur more than once, sorted as strings."""
    seen, dup = set(), set()
    for item in items:
        (dup if item in seen else seen).add(item)
    return sorted(dup, key=str)


def _finite(value: float | None, name: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name}={value!r} is invalid: allowed a finite number")
    return value


# --------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------

class HardwareRequirements(BaseModel):
    """What one task needs: cores, memory (MiB) and optionally a GPU model by name."""

    required_cpu: int = Field(ge=0, description="CPU cores")
    required_memory: int = Field(ge=0, description="memory, MiB")
    required_gpu: Optional[str] = Field(
        None, description='GPU model name such as "nvidia-a100"; None: no GPU')


class TaskExtension(BaseModel):
    """vte's view of a request beyond DECICE's `HardwareRequirements` (all optional)."""

    model_config = _CLOSED

    gpus: Optional[int] = Field(None, ge=0, le=64, description="GPUs wanted")
    accepted_gpus: Optional[list[str]] = Field(
        None, description="GPU model names any of which will do")
    work_s: Optional[float] = Field(None, gt=0.0, description="run time on a reference node, s")
    data_gb: Optional[float] = Field(None, ge=0.0, description="input data to move, GB")
    disk_gb: Optional[float] = Field(None, ge=0.0, description="disk needed, GiB")
    required_labels: list[str] = Field(default_factory=list)
    rejected_labels: list[str] = Field(default_factory=list)
    preferred_labels: list[str] = Field(default_factory=list)
    origin_pool: Optional[str] = Field(None, description="id of the vertex pool it comes from")
    latency_bound_ms: Optional[float] = Field(
        None, gt=0.0, description="most delay allowed from the origin pool to the node, ms")

    @field_validator("work_s", "data_gb", "disk_gb", "latency_bound_ms")
    @classmethod
    def _check_finite(cls, v, info):
        return _finite(v, info.field_name)


class Task(BaseModel):
    """One unit of work to place."""

    id: UUID
    requirements: HardwareRequirements
    time_limit: Optional[int] = Field(
        None, ge=1, description="s; read as the task's run time when `vte.work_s` is absent")
    vte: Optional[TaskExtension] = None


# --------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------

class NodeInfo(BaseModel):
    """Static facts about a node. DECICE's own model has no fields yet (its scenario
    generator sends `location`, `rack` and `gpu_model`); unknown keys are kept."""

    model_config = ConfigDict(extra="allow")

    gpu_model: Optional[str] = Field(None, description='e.g. "nvidia-a100"; None: no GPU')
    gpu_count: Optional[int] = Field(None, ge=0, le=64)
    tier: Optional[str] = Field(None, description='"cloud", "edge" or "hpc"')
    labels: Optional[list[str]] = None
    ready: Optional[bool] = Field(None, description="False: the node accepts nothing")
    speed: Optional[float] = Field(None, gt=0.0, description="per-core speed, reference 1")
    power_idle_watts: Optional[float] = Field(None, ge=0.0)
    power_peak_watts: Optional[float] = Field(None, ge=0.0)
    failures_per_hour: Optional[float] = Field(None, ge=0.0)

    @field_validator("speed", "power_idle_watts", "power_peak_watts", "failures_per_hour")
    @classmethod
    def _check_finite(cls, v, info):
        return _finite(v, info.field_name)


class NodeMetrics(BaseModel):
    """What a node reports (every field optional, no other keys allowed)."""

    model_config = _CLOSED

    util: Optional[float] = Field(None, ge=0.0, le=100.0, description="CPU, percent")
    mem_util: Optional[float] = Field(None, ge=0.0, le=100.0, description="memory, percent")
    network_bandwidth_mbps: Optional[float] = Field(None, ge=0.0)
    free_disk_gb: Optional[float] = Field(None, ge=0.0)
    total_disk_gb: Optional[float] = Field(None, ge=0.0)
    cpu_cores: Optional[float] = Field(None, ge=0.0)
    mem_total: Optional[float] = Field(None, ge=0.0, description="GiB")
    power_watts: Optional[float] = Field(None, ge=0.0)

    @field_validator("*")
    @classmethod
    def _check_finite(cls, v, info):
        return _finite(v, info.field_name)


class Node(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    name: Optional[str] = None
    system: Optional[str] = None
    node_info: Optional[NodeInfo] = Field(default_factory=NodeInfo)
    metrics: Optional[NodeMetrics] = None

    @property
    def key(self) -> str | None:
        """The id the answer names the node by: `id`, else `name`."""
        return self.id if self.id is not None else self.name


class Device(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    name: Optional[str] = None
    labels: Optional[dict[str, Any]] = None
    device_info: Optional[dict[str, Any]] = Field(default_factory=dict)


class VertexPool(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    vertexpool_labels: Optional[dict[str, Any]] = None
    nodes: Optional[list[Node]] = Field(default_factory=list)
    devices: Optional[list[Device]] = Field(default_factory=list)
    lastUpdated: Optional[float] = Field(None, ge=0.0, description="epoch seconds")


class Link(BaseModel):
    model_config = _CLOSED

    vertexpool_a_id: Optional[str] = None
    vertexpool_b_id: Optional[str] = None
    network_delay_ms: Optional[float] = Field(None, ge=0.0)
    lastUpdated: Optional[float] = Field(None, ge=0.0, description="epoch seconds")

    @field_validator("network_delay_ms")
    @classmethod
    def _check_finite(cls, v, info):
        return _finite(v, info.field_name)


class Policy(BaseModel):
    model_config = _CLOSED

    required_labels: Optional[list[str]] = Field(default_factory=list)
    rejected_labels: Optional[list[str]] = Field(default_factory=list)
    prefered_labels: Optional[list[str]] = Field(default_factory=list)   # DECICE's spelling
    retracted_labels: Optional[list[str]] = Field(default_factory=list)


class Pod(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    name: Optional[str] = None
    scheduled: Optional[bool] = None
    restarts: Optional[int] = None
    running_since: Optional[str] = None
    status: Optional[str] = None
    namespace: Optional[str] = None
    info: Optional[dict[str, Any]] = None
    policies: Optional[list[Policy]] = Field(default_factory=list)
    node_id: Optional[str] = None
    nodename: Optional[str] = None
    job_id: Optional[str] = None


class Weight(BaseModel):
    model_config = _CLOSED

    models_name: Optional[str] = None
    models_weight: Optional[float] = Field(None, ge=0.0, le=100.0)


class Profile(BaseModel):
    model_config = _CLOSED

    name: Optional[str] = None
    weights: Optional[list[Weight]] = Field(default_factory=list)


class Job(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    pods: Optional[list[Pod]] = Field(default_factory=list)
    profile: Optional[Profile] = None
    lastUpdated: Optional[float] = Field(None, ge=0.0, description="epoch seconds")


class ClusterState(BaseModel):
    """The cluster as DECICE's digital twin reports it."""

    lastUpdated: Optional[float] = Field(None, ge=0.0, description="epoch seconds")
    vertexpools: Optional[list[VertexPool]] = Field(default_factory=list)
    links: Optional[list[Link]] = Field(default_factory=list)
    jobs: Optional[list[Job]] = Field(default_factory=list)
    cluster_info: Optional[dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_nodes(self):
        pools = self.vertexpools or []
        pool_ids = [p.id for p in pools if p.id is not None]
        dup = _duplicates(pool_ids)
        if dup:
            raise ValueError(f"vertexpools: ids {dup} appear more than once; allowed unique ids")
        nodes = [n for p in pools for n in (p.nodes or [])]
        if not nodes:
            raise ValueError("vertexpools: the cluster has no node; allowed at least one node "
                             "in some vertex pool")
        keys = [n.key for n in nodes]
        if any(k is None for k in keys):
            raise ValueError("vertexpools[].nodes[]: a node has neither id nor name; allowed "
                             "nodes named by `id` (or `name`)")
        dup = _duplicates(keys)
        if dup:
            raise ValueError(f"vertexpools[].nodes[]: node ids {dup} appear more than once; "
                             "allowed unique ids")
        return self


class ScheduleRequest(BaseModel):
    """`POST /schedule`: the tasks to place and the cluster to place them on."""

    tasks: list[Task]
    cluster: ClusterState

    @model_validator(mode="after")
    def _check_tasks(self):
        ids = [t.id for t in self.tasks]
        dup = [str(i) for i in _duplicates(ids)]
        if dup:
            raise ValueError(f"tasks: ids {dup} appear more than once; allowed unique ids")
        return self


# --------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------

class TaskPlacement(BaseModel):
    task_id: UUID
    target_node_ids: list[str] = Field(description="the node chosen; empty: fits nowhere")
    strategy_used: Optional[str] = None


class ScheduleResponse(BaseModel):
    placements: list[TaskPlacement]
    scheduling_duration_ms: Optional[float] = None


class ComponentStatus(BaseModel):
    status: str
    details: Optional[str] = None


class HealthCheckResponse(BaseModel):
    overall_status: str
    message: Optional[str] = None
    components: dict[str, ComponentStatus]


__all__ = ["HardwareRequirements", "TaskExtension", "Task", "NodeInfo", "NodeMetrics", "Node",
           "Device", "VertexPool", "Link", "Policy", "Pod", "Weight", "Profile", "Job",
           "ClusterState", "ScheduleRequest", "TaskPlacement", "ScheduleResponse",
           "ComponentStatus", "HealthCheckResponse"]
