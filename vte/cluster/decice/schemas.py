"""DECICE's scheduler API as pydantic v2 models, with range checks.

The field names, types and units follow DECICE's scheduler (`POST /schedule` with a
`ScheduleRequest`, answered 201 with a `ScheduleResponse`). Models that DECICE closes
(`extra="forbid"`: node metrics, nodes, devices, vertex pools, links, pods, policies,
jobs, profiles) are closed here too; the others ignore unknown keys as DECICE's do.
Everything DECICE's models accept is accepted, with three documented exceptions (a
negative `required_cpu` or `required_memory`, a `time_limit` that is not a number, and a
quantity beyond `MAX_QUANTITY`): the schema is the whole contract, so a request it
allows is answered 201 (what vte cannot place is answered `target_node_ids: []` with a
`reason`), and a request it refuses is answered 422 before any work starts.

Range checks, stated in the published schema: every number is finite (no NaN, no
Infinity: `allow_inf_nan=False`), every quantity lies in [0, MAX_QUANTITY] (1e9 in its
unit, far below float32's 3.4e38, so that products of two quantities stay finite inside
the compiled placement), timestamps in [0, MAX_TIMESTAMP], percentages in [0, 100], and
integers within the same bounds (a 400-digit integer is a 422 naming the field); a task
asks for at most MAX_UNITS cores and MAX_UNITS GiB, what vte can book. Fields
DECICE leaves unbounded and vte reads (`network_bandwidth_mbps`, `free_disk_gb`,
`total_disk_gb`, `network_delay_ms`, `time_limit`) accept negative values down to
-MAX_QUANTITY, read as "not reported" (`time_limit` <= 0 likewise).

Two optional extensions carry what vte knows and DECICE does not report (both are
ignored by DECICE's own models, so files written with them still load there):
  - `node_info` keys (`NodeInfo`): GPU model and count, tier, labels, readiness, speed,
    power model and failure rate of a node;
  - `Task.vte` (`TaskExtension`): the rest of a vte request (GPU count, accepted GPU
    models, work, data size, label policy, origin pool, latency bound).
Every default that applies when they are absent is listed in `vte/cluster/decice/SERVE.md`.

Units: cores; memory of a task in MiB (`required_memory`), of a node in GiB
(`mem_total`); disk in GB (GiB in vte); bandwidth in Mbit/s; delay in ms; power in W;
utilisation in percent; time in seconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional
from uuid import UUID

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from vte.cluster import catalogue as C

MAX_QUANTITY = 1e9          # the largest quantity in its unit (cores, MiB, GiB, W, ms, s, ...)
MAX_TIMESTAMP = 1e11        # epoch seconds (the year 5138)
MAX_TASKS = 512             # tasks per request (`convert.TASK_BUCKETS`)
MAX_POOLS = 64              # vertex pools per cluster (`convert.SITE_BUCKETS`)
MAX_NODES = 4096            # nodes per cluster (`convert.NODE_BUCKETS`)
MAX_UNITS = 65535           # the most whole cores (GiB) a placed task holds (`dynamics.held_demand`)
_Q = int(MAX_QUANTITY)

_OPEN = ConfigDict(allow_inf_nan=False, strict=True)
_CLOSED = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

Label = Literal[C.LABELS]    # a vte label name (`catalogue.LABELS`)


def _integral(value):
    """A float with no fractional part as the integer it is (JSON Schema's integers
    include 3.0); anything else is left to the strict integer check."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _int(lo: int, hi: int):
    """A strict integer in [lo, hi] that accepts 3.0 (the bounds are in the schema)."""
    return Annotated[int, Field(ge=lo, le=hi), BeforeValidator(_integral)]


Cores = _int(0, MAX_UNITS)
MiB = _int(0, MAX_UNITS * 1024)
GpuCount = _int(0, 64)
Count = _int(-_Q, _Q)


def _quantity(description: str, lower: float = 0.0, **kw):
    """A float field in [lower, MAX_QUANTITY] (finite: the models forbid inf and NaN)."""
    return Field(None, ge=lower, le=MAX_QUANTITY, description=description, **kw)


def _timestamp():
    return Field(None, ge=0.0, le=MAX_TIMESTAMP, description="epoch seconds")


# --------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------

class HardwareRequirements(BaseModel):
    """What one task needs: cores, memory (MiB) and optionally a GPU model by name."""

    model_config = _OPEN

    required_cpu: Cores = Field(description="CPU cores")
    required_memory: MiB = Field(description="memory, MiB")
    required_gpu: Optional[str] = Field(
        None, description='GPU model name such as "nvidia-a100"; None: no GPU. A model no '
        "node of the cluster carries (or one vte does not know) is answered "
        "`target_node_ids: []`")


class TaskExtension(BaseModel):
    """vte's view of a request beyond DECICE's `HardwareRequirements` (all optional)."""

    model_config = _CLOSED

    gpus: Optional[GpuCount] = Field(None, description="GPUs wanted")
    accepted_gpus: Optional[list[str]] = Field(
        None, description="GPU model names any of which will do (names vte does not know "
        "match no node)")
    work_s: Optional[float] = Field(None, gt=0.0, le=MAX_QUANTITY,
                                    description="run time on a reference node, s")
    data_gb: Optional[float] = _quantity("input data to move, GB")
    disk_gb: Optional[float] = _quantity("disk needed, GiB")
    required_labels: list[Label] = Field(default_factory=list)
    rejected_labels: list[Label] = Field(default_factory=list)
    preferred_labels: list[Label] = Field(default_factory=list)
    origin_pool: Optional[str] = Field(
        None, description="id of the vertex pool it comes from (one naming no pool of the "
        "cluster: the task is answered `target_node_ids: []`)")
    latency_bound_ms: Optional[float] = Field(
        None, gt=0.0, le=MAX_QUANTITY,
        description="most delay allowed from the origin pool to the node, ms")


class Task(BaseModel):
    """One unit of work to place."""

    model_config = _OPEN

    id: UUID = Field(strict=False)     # a UUID string also from Python dicts
    requirements: HardwareRequirements
    time_limit: Optional[float] = Field(
        None, ge=-MAX_QUANTITY, le=MAX_QUANTITY,
        description="s; read as the task's run time when `vte.work_s` is absent and it is "
        "> 0 (DECICE's model ignores it)")
    vte: Optional[TaskExtension] = None


# --------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------

class NodeInfo(BaseModel):
    """Static facts about a node. DECICE's own model has no fields yet (its scenario
    generator sends `location`, `rack` and `gpu_model`); unknown keys are kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)

    gpu_model: Optional[str] = Field(
        None, description='e.g. "nvidia-a100"; None: no GPU. A model vte does not know: the '
        "node's GPUs are not offered (CPU, memory and disk are)")
    gpu_count: Optional[GpuCount] = None
    tier: Optional[Literal[C.TIERS]] = None
    labels: Optional[list[str]] = Field(
        None, description="names that are not vte labels are ignored")
    ready: Optional[bool] = Field(None, description="False: the node accepts nothing")
    speed: Optional[float] = Field(None, gt=0.0, le=1e3,
                                   description="per-core speed, reference 1")
    power_idle_watts: Optional[float] = _quantity("W")
    power_peak_watts: Optional[float] = _quantity("W")
    failures_per_hour: Optional[float] = Field(None, ge=0.0, le=1e6)


class NodeMetrics(BaseModel):
    """What a node reports (every field optional, no other keys allowed)."""

    model_config = _CLOSED

    util: Optional[float] = Field(None, ge=0.0, le=100.0, description="CPU, percent")
    mem_util: Optional[float] = Field(None, ge=0.0, le=100.0, description="memory, percent")
    network_bandwidth_mbps: Optional[float] = _quantity("Mbit/s; < 0: not reported",
                                                        -MAX_QUANTITY)
    free_disk_gb: Optional[float] = _quantity("GB; < 0: not reported", -MAX_QUANTITY)
    total_disk_gb: Optional[float] = _quantity("GB; < 0: not reported", -MAX_QUANTITY)
    cpu_cores: Optional[float] = _quantity("cores")
    mem_total: Optional[float] = _quantity("GiB")
    power_watts: Optional[float] = _quantity("W")


class Node(BaseModel):
    model_config = _CLOSED

    id: Optional[str] = None
    name: Optional[str] = None
    system: Optional[str] = None
    node_info: Optional[NodeInfo] = Field(default_factory=NodeInfo)
    metrics: Optional[NodeMetrics] = None

    @property
    def key(self) -> str | None:
        """The id the answer names the node by: `id`, else `name` (neither: the node is
        left out, as no answer could name it)."""
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
    nodes: Optional[list[Node]] = Field(default_factory=list, max_length=MAX_NODES)
    devices: Optional[list[Device]] = Field(default_factory=list)
    lastUpdated: Optional[float] = _timestamp()


class Link(BaseModel):
    model_config = _CLOSED

    vertexpool_a_id: Optional[str] = None
    vertexpool_b_id: Optional[str] = None
    network_delay_ms: Optional[float] = _quantity("ms; < 0: not reported", -MAX_QUANTITY)
    lastUpdated: Optional[float] = _timestamp()


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
    restarts: Optional[Count] = None
    running_since: Optional[str] = None
    status: Optional[str] = None
    namespace: Optional[str] = None
    info: Optional[dict[str, Any]] = Field(
        None, description="`gpus`: GPUs the pod holds (a number in [0, 64]; anything else "
        "reads as 0)")
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
    lastUpdated: Optional[float] = _timestamp()


class ClusterState(BaseModel):
    """The cluster as DECICE's digital twin reports it. A cluster without nodes is valid:
    every task is answered `target_node_ids: []`."""

    model_config = _OPEN

    lastUpdated: Optional[float] = _timestamp()
    vertexpools: Optional[list[VertexPool]] = Field(default_factory=list,
                                                    max_length=MAX_POOLS)
    links: Optional[list[Link]] = Field(default_factory=list)
    jobs: Optional[list[Job]] = Field(default_factory=list)
    cluster_info: Optional[dict[str, Any]] = Field(default_factory=dict)


class ScheduleRequest(BaseModel):
    """`POST /schedule`: the tasks to place and the cluster to place them on."""

    model_config = _OPEN

    tasks: list[Task] = Field(max_length=MAX_TASKS)
    cluster: ClusterState


# --------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------

class TaskPlacement(BaseModel):
    task_id: UUID
    target_node_ids: list[str] = Field(description="the node chosen; empty: fits nowhere")
    strategy_used: Optional[str] = None
    reason: Optional[str] = Field(
        None, description="why `target_node_ids` is empty (vte's addition; absent when placed)")


class ScheduleResponse(BaseModel):
    placements: list[TaskPlacement]
    scheduling_duration_ms: Optional[float] = None


class ErrorItem(BaseModel):
    type: str = Field(description='what is wrong, e.g. "less_than_equal", "too_many_nodes"')
    loc: list[str | int] = Field(description='where: ["body", "cluster", ...] or ["header", ...]')
    msg: str = Field(description="the bad value and what is allowed")


class ErrorResponse(BaseModel):
    """The body of every 403, 413, 422 and 500 answer."""

    detail: list[ErrorItem]


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
           "ErrorItem", "ErrorResponse", "ComponentStatus", "HealthCheckResponse",
           "MAX_QUANTITY", "MAX_TIMESTAMP", "MAX_UNITS", "MAX_TASKS", "MAX_POOLS", "MAX_NODES"]
