"""The FastAPI app: DECICE's `POST /schedule` and `GET /health`, answered by a vte policy.

    app = create_app(Placer(policy, params), name="kube_default", api_key="...")

`POST /schedule` validates the body (422 naming the field when it is malformed),
converts the cluster and the tasks (`vte.serve.convert`; 422 with the reason when the
request is impossible: a GPU model no node has, an unknown label, too many nodes),
waits for a micro-batch, and answers 201 with one placement per task, in the order of
the tasks: the node chosen, or `target_node_ids: []` when the task fits nowhere.
`strategy_used` is the policy's name; `scheduling_duration_ms` is the time from the
request's arrival to its answer, batching wait included.

Micro-batching: requests that arrive within `window_ms` of the first of a batch (at
most `max_batch`) are grouped by their padded shape and each group runs as one compiled
call (`Placer`), on one worker thread, so the event loop keeps accepting requests. Every
request is its own row of the batch: concurrent requests never see each other's state.

When the app has an API key, a request to `/schedule` without the header
`X-Internal-Api-Key` or with another value gets 403. An error inside a batch answers
500 to the requests of that batch only; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import Depends, FastAPI, Header, HTTPException, Request, status
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from vte.serve import schemas as S
from vte.serve.convert import ClusterView, ConversionError, cluster_view, task_requests
from vte.serve.place import Placer
from vte.types import Requests

API_KEY_HEADER = "X-Internal-Api-Key"
log = logging.getLogger("vte.serve")


@dataclass
class _Item:
    """One converted request waiting for its batch."""

    view: ClusterView
    requests: Requests
    future: asyncio.Future
    shape: tuple[int, int, int] = field(init=False)

    def __post_init__(self):
        self.shape = (self.view.num_nodes, self.view.num_sites,
                      int(self.requests.valid.shape[0]))


class Batcher:
    """Collects requests for `window_s` (at most `max_batch`) and runs each shape group as
    one call of the placer on a single worker thread."""

    def __init__(self, placer: Placer, window_s: float = 0.002, max_batch: int = 64):
        self.placer = placer
        self.window_s = window_s
        self.max_batch = max_batch
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vte-place")
        self.batches = 0

    def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    async def submit(self, view: ClusterView, requests: Requests):
        """The placer's (nodes (T,), costs (T,)) for one request."""
        if not self.alive:
            raise RuntimeError("the batching worker is not running")
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Item(view, requests, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.window_s
            while len(batch) < self.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            groups: dict[tuple, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.shape, []).append(item)
            for items in groups.values():
                try:
                    nodes, costs = await loop.run_in_executor(
                        self.executor, self.placer, [i.view for i in items],
                        [i.requests for i in items])
                except Exception as err:   # answer this group 500, keep serving
                    log.exception("placing a batch failed")
                    for item in items:
                        if not item.future.done():
                            item.future.set_exception(err)
                    continue
                self.batches += 1
                for row, item in enumerate(items):
                    if not item.future.done():
                        item.future.set_result((nodes[row], costs[row]))


def create_app(placer: Placer, name: str, api_key: str | None = None,
               window_ms: float = 2.0, max_batch: int = 64,
               warmup_nodes: tuple[int, ...] = (), warmup_tasks: tuple[int, ...] = (1,)
               ) -> FastAPI:
    """The app serving `placer` under the strategy name `name`.

    Args:
      api_key: when set, `/schedule` needs the header X-Internal-Api-Key with this value.
      window_ms: how long the first request of a batch waits for others, ms.
      max_batch: the most requests in one compiled call (at most 64).
      warmup_nodes, warmup_tasks: node and task counts compiled at start-up (every batch
        size), so that requests of those sizes never wait for a compilation.
    """
    if not 1 <= max_batch <= 64:
        raise ValueError(f"max_batch={max_batch} is invalid: allowed 1..64")
    if not window_ms >= 0:
        raise ValueError(f"window_ms={window_ms} is invalid: allowed a number >= 0")
    batcher = Batcher(placer, window_ms / 1000.0, max_batch)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if warmup_nodes:
            from vte.serve.convert import NODE_BUCKETS, TASK_BUCKETS, bucket
            compiled = placer.warmup(
                sorted({bucket(n, NODE_BUCKETS, "--warmup-nodes") for n in warmup_nodes}),
                tasks=sorted({bucket(t, TASK_BUCKETS, "--warmup-tasks") for t in warmup_tasks}))
            log.info("compiled %d shapes", compiled)
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="vte scheduler", version="1", lifespan=lifespan,
                  summary="DECICE's scheduler API answered by a vte policy")
    app.state.batcher = batcher

    def check_key(key: str | None = Header(None, alias=API_KEY_HEADER)) -> None:
        if api_key is None:
            return
        if key is None or not hmac.compare_digest(key.encode(), api_key.encode()):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                detail=f"missing or wrong {API_KEY_HEADER} header")

    # The body is parsed straight from its bytes (`model_validate_json`, several times
    # faster than FastAPI's parse to dicts and validate); the schema is still documented.
    body_schema = S.ScheduleRequest.model_json_schema(
        ref_template="#/components/schemas/{model}")
    body_defs = body_schema.pop("$defs", {})
    body_doc = {"requestBody": {"required": True,
                                "content": {"application/json": {"schema": body_schema}}}}
    default_openapi = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = default_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(body_defs)
        return app.openapi_schema

    app.openapi = openapi

    @app.post("/schedule", response_model=S.ScheduleResponse,
              status_code=status.HTTP_201_CREATED, dependencies=[Depends(check_key)],
              openapi_extra=body_doc)
    async def schedule(raw: Request):
        start = time.perf_counter()
        try:
            request = S.ScheduleRequest.model_validate_json(await raw.body())
        except ValidationError as err:
            detail = [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]}
                      for e in err.errors(include_url=False)]
            return JSONResponse(status_code=422, content={"detail": detail})
        try:
            view = cluster_view(request.cluster, placer.params)
            requests = task_requests(request.tasks, view)
        except ConversionError as err:
            return JSONResponse(status_code=422,
                                content={"detail": str(err)})
        try:
            nodes, _ = await batcher.submit(view, requests)
        except Exception as err:
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR,
                                detail=f"placing failed: {type(err).__name__}: {err}")
        placements = [
            S.TaskPlacement(task_id=task.id, strategy_used=name,
                            target_node_ids=[view.node_ids[int(nodes[k])]] if nodes[k] >= 0
                            else [])
            for k, task in enumerate(request.tasks)]
        answer = S.ScheduleResponse(placements=placements,
                                    scheduling_duration_ms=(time.perf_counter() - start) * 1e3)
        return Response(answer.model_dump_json(), status_code=201,
                        media_type="application/json")

    @app.get("/health", response_model=S.HealthCheckResponse)
    async def health():
        components = {
            "policy": S.ComponentStatus(status="OK", details=name),
            "batching_worker": S.ComponentStatus(
                status="OK" if batcher.alive else "ERROR",
                details=f"{batcher.batches} batches run" if batcher.alive else "not running"),
        }
        if not batcher.alive:
            return JSONResponse(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, content={
                "overall_status": "unhealthy",
                "message": "the batching worker is not running",
                "components": {k: v.model_dump(exclude_none=True)
                               for k, v in components.items()}})
        return S.HealthCheckResponse(overall_status="healthy",
                                     message=f"policy {name!r} loaded", components=components)

    return app


__all__ = ["create_app", "Batcher", "API_KEY_HEADER"]
