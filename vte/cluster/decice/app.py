"""The FastAPI app: DECICE's `POST /schedule` and `GET /health`, answered by a vte policy.

    app = create_app(Placer(policy, params), name="kube_default", api_key="...")

`POST /schedule` refuses a body that is not JSON by its Content-Type (415, `json_content`),
reads the body (413 beyond `max_body_bytes`, 408 when it does not
arrive within `body_timeout_s`), validates it against the published schema (422 naming
each bad field: `{"detail": [{"type", "loc", "msg"}]}`, the one shape of every error
answer), converts the cluster and the tasks (`vte.cluster.decice.convert`), queues them for a
batch, and answers 201 with one placement per task, in the order of the tasks: the node
chosen, or `target_node_ids: []` with a `reason` when the task is not placed.
`strategy_used` is the policy's name; `scheduling_duration_ms` is the time from the
request's arrival to its answer, batching wait included.

Batching: requests that arrive while the placement thread is busy are taken together as
the next batch (at most `max_batch`; `window_ms` > 0 also waits that long for more),
grouped by padded shape, and each group runs as one compiled call (`Placer.run`) on the
placement thread, so the event loop keeps accepting requests. Every request is its own
row of the batch: concurrent requests never see each other's state.

No request waits for a compile when a compiled shape can hold it: a group runs in the
cheapest compiled shape whose every bucket (batch, nodes, sites, tasks) is at least its
own (`Placer.ready`; the views are padded with absent nodes and unused sites, for a policy
whose answer that does not change, `Placer.pad_nodes`), or in at most `MAX_PARTS` parts
of the largest compiled batch size that holds them (a larger burst waits for its own
shape's compile instead of queueing every other request behind many parts); a shape of
new node or site buckets then compiles on a thread of its own (in a `CompilerProcess`
when one is given, so that tracing never holds this process's GIL) for next time. Only
while no compiled shape holds a request, before the warm-up has reached its buckets, does
it wait for its own compile (seconds: 1.5-5 s a shape on a 2-core CPU).
At start-up the shapes of `warmup` compile first, smallest first; `GET /health` answers
503 until they are ready, 200 after; then `warmup_later`, the largest buckets, so that
soon every request within the schema's bounds has a warm shape.

When the app has an API key (declared in the OpenAPI document as an API-key security
scheme), a request to `/schedule` without the header `X-Internal-Api-Key` or with another
value gets 403. An error inside a batch answers 500 to the requests of that batch only;
the server keeps serving.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Sequence

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from vte.cluster.decice import schemas as S
from vte.cluster.decice.convert import (ClusterView, ConversionError, cluster_view, placements,
                               task_requests)
from vte.cluster.decice.place import BATCH_BUCKETS, Placer, Shape
from vte.cluster.types import Requests
from vte.serve.http import BODY_TIMEOUT_S, MAX_BODY_BYTES, error, json_content, read_body  # noqa: F401

API_KEY_HEADER = "X-Internal-Api-Key"
MAX_PARTS = 4       # a group no warm batch size holds runs in at most this many parts; a
                    # larger one waits for its own shape's compile (seconds), not a queue of
                    # parts that would hold every other request behind it
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
    """Collects requests into batches and runs each shape group as one compiled call on a
    placement thread; compiles unseen shapes on a compile thread (see the module doc)."""

    def __init__(self, placer: Placer, window_s: float = 0.0, max_batch: int = 64,
                 compiler=None):
        self.placer = placer
        self.compiler = compiler
        self.window_s = window_s
        self.max_batch = max_batch
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.placing: ThreadPoolExecutor | None = None
        self.compiling: ThreadPoolExecutor | None = None
        self._compiles: dict[Shape, asyncio.Future] = {}
        self._pending: set[asyncio.Task] = set()
        self.batches = 0
        self.warm = asyncio.Event()
        self.warmup_shapes: list[Shape] = []
        self.later_shapes: list[Shape] = []     # compiled after `warm`: the large buckets

    def start(self, warmup: Sequence[Shape] = (), then: Sequence[Shape] = ()) -> None:
        """Start the worker (again, after `stop`) on the running loop, compiling the shapes
        of `warmup` (`warm` is set when they are ready), then those of `then`."""
        loop = asyncio.get_running_loop()
        self.placing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vte-place")
        self.compiling = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vte-compile")
        self._compiles = {}
        self.warm = asyncio.Event()
        self.queue = asyncio.Queue()
        self.task = loop.create_task(self._run())
        self.warmup_shapes = list(warmup)
        self.later_shapes = [x for x in then if x not in self.warmup_shapes]
        self._spawn(self._warmup())

    async def stop(self) -> None:
        for task in [self.task, *self._pending]:
            if task is not None:
                task.cancel()
        for task in [self.task, *self._pending]:
            if task is not None:
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        self.placing.shutdown(wait=True)
        self.compiling.shutdown(wait=True, cancel_futures=True)
        if self.compiler is not None:
            self.compiler.close()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _warmup(self) -> None:
        """Compile the warm-up shapes one after the other (a request's own shape can go
        between two of them), then the later ones; a shape that fails is logged and
        skipped."""
        start = time.perf_counter()
        for shapes, event in ((self.warmup_shapes, self.warm), (self.later_shapes, None)):
            for shape in shapes:
                await self._compile_quietly(shape)
            if event is not None:
                log.info("warm: compiled %d shapes in %.1f s", len(shapes),
                         time.perf_counter() - start)
                event.set()
        if self.later_shapes:
            done = sum(1 for x in self.later_shapes if x in self.placer.shapes)
            log.info("%d of %d largest buckets compiled after %.1f s", done,
                     len(self.later_shapes), time.perf_counter() - start)

    def _compile(self, shape: Shape) -> asyncio.Future:
        """A future of `shape`'s compilation on the compile thread (one per shape)."""
        if shape not in self._compiles:
            loop = asyncio.get_running_loop()
            self._compiles[shape] = asyncio.ensure_future(
                loop.run_in_executor(self.compiling, self._compile_now, shape))
        return self._compiles[shape]

    def _compile_now(self, shape: Shape) -> None:
        """On the compile thread: in the compiler process when there is one (in this
        process if it fails, with a WARNING)."""
        if self.compiler is not None:
            try:
                return self.placer.compile(shape, self.compiler)
            except RuntimeError as err:
                log.warning("compiling %s in this process: %s", shape, err)
        self.placer.compile(shape)

    async def submit(self, view: ClusterView, requests: Requests):
        """The placer's (nodes (T,), costs (T,), outcome (T,)) for one request."""
        if not self.alive:
            raise RuntimeError("the batching worker is not running")
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Item(view, requests, future))
        return await future

    async def _take(self) -> list[_Item]:
        """The next batch: what is queued now (waiting for one request), plus what arrives
        within `window_s`, at most `max_batch`."""
        loop = asyncio.get_running_loop()
        batch = [await self.queue.get()]
        while len(batch) < self.max_batch and not self.queue.empty():
            batch.append(self.queue.get_nowait())
        deadline = loop.time() + self.window_s
        while len(batch) < self.max_batch:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), left))
            except asyncio.TimeoutError:
                break
        return batch

    async def _place(self, items: list[_Item], shape: Shape) -> None:
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(self.placing, self.placer.run, shape,
                                             [i.view for i in items],
                                             [i.requests for i in items])
        except Exception as err:   # answer this group 500, keep serving
            log.exception("placing a batch failed")
            for item in items:
                if not item.future.done():
                    item.future.set_exception(err)
            return
        self.batches += 1
        for row, item in enumerate(items):
            if not item.future.done():
                item.future.set_result(tuple(x[row] for x in out))

    async def _compile_then_place(self, items: list[_Item], shape: Shape) -> None:
        try:
            await self._compile(shape)
        except Exception as err:
            log.exception("compiling shape %s failed", shape)
            self._compiles.pop(shape, None)
            for item in items:
                if not item.future.done():
                    item.future.set_exception(err)
            return
        await self._place(items, self.placer.ready(shape))

    async def _run(self) -> None:
        while True:
            batch = await self._take()
            groups: dict[tuple, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.shape, []).append(item)
            for items in groups.values():
                need = self.placer.shape_of([i.view for i in items], [i.requests for i in items])
                ready = self.placer.ready(need)
                if ready is not None:
                    self._compile_later(need, ready)   # a larger warm shape: its own, later
                    await self._place(items, ready)
                    continue
                size, part = self._largest_ready_batch(need)
                parts = -(-len(items) // size) if part is not None else 0
                if 0 < parts <= MAX_PARTS:   # no warm shape holds the whole group: in a few
                    self._compile_later(need, part)   # parts of the largest warm batch size
                    for i in range(0, len(items), size):
                        await self._place(items[i:i + size], part)
                else:                        # nothing warm holds it (still warming up), or
                    self._spawn(self._compile_then_place(items, need))   # too many parts

    def _largest_ready_batch(self, need: Shape) -> tuple[int, Shape | None]:
        """(batch size, compiled shape) of the largest batch bucket below `need`'s that a
        compiled shape holds with `need`'s other buckets; (0, None) when none does."""
        for size in sorted((b for b in BATCH_BUCKETS if b < need[0]), reverse=True):
            shape = self.placer.ready((size,) + need[1:])
            if shape is not None:
                return size, shape
        return 0, None

    def _compile_later(self, shape: Shape, used: Shape) -> None:
        """Compile `shape` on the compile thread without anyone waiting for it, when the
        shape `used` instead had larger node or site buckets (a larger batch or task bucket
        costs little more: those are not compiled, as before the node padding)."""
        if used[1:3] != shape[1:3] and shape not in self._compiles:
            self._spawn(self._compile_quietly(shape))

    async def _compile_quietly(self, shape: Shape) -> None:
        """Compile `shape`; a failure is logged and forgotten (a later request retries)."""
        try:
            await self._compile(shape)
        except Exception:
            log.exception("compiling shape %s failed", shape)
            self._compiles.pop(shape, None)


_ERRORS = {code: {"model": S.ErrorResponse, "description": text} for code, text in {
    403: f"`{API_KEY_HEADER}` missing or wrong (only when the server has a key)",
    408: "the body did not arrive in time",
    413: "the body is larger than the server's limit",
    415: "the Content-Type is not JSON (application/json, application/*+json, or none)",
    422: "a field is malformed or out of range, or the request exceeds the largest bucket "
         "(nodes, vertex pools, tasks); `loc` names where",
    500: "an error inside this request's batch; other requests keep being served",
    503: "the batching worker is not running"}.items()}


def create_app(placer: Placer, name: str, api_key: str | None = None,
               window_ms: float = 0.0, max_batch: int = 64,
               warmup: Sequence[Shape] = (), max_body_bytes: int = MAX_BODY_BYTES,
               body_timeout_s: float = BODY_TIMEOUT_S, compiler=None,
               warmup_later: Sequence[Shape] = ()) -> FastAPI:
    """The app serving `placer` under the strategy name `name`.

    Args:
      api_key: when set, `/schedule` needs the header X-Internal-Api-Key with this value.
      window_ms: how long a batch waits for more requests, ms (0: it takes what is queued).
      max_batch: the most requests in one compiled call (at most 64).
      warmup: (batch, N, S, T) shapes compiled at start-up, off the request path;
        `/health` answers 200 once they are ready.
      warmup_later: shapes compiled after those (the largest buckets, so that every
        request the schema allows has a compiled shape that holds it).
      max_body_bytes: the largest request body (413 beyond).
      body_timeout_s: the time a body may take to arrive (408 after).
      compiler: a `place.CompilerProcess` of the same policy: shapes compile there (closed
        when the app stops); None: on a thread of this process.
    """
    if not 1 <= max_batch <= 64:
        raise ValueError(f"max_batch={max_batch} is invalid: allowed 1..64")
    if not window_ms >= 0:
        raise ValueError(f"window_ms={window_ms} is invalid: allowed a number >= 0")
    if not max_body_bytes >= 1:
        raise ValueError(f"max_body_bytes={max_body_bytes} is invalid: allowed an integer >= 1")
    if not body_timeout_s > 0:
        raise ValueError(f"body_timeout_s={body_timeout_s} is invalid: allowed a number > 0")
    batcher = Batcher(placer, window_ms / 1000.0, max_batch, compiler)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start(warmup, warmup_later)
        yield
        await batcher.stop()

    app = FastAPI(title="vte scheduler", version="1", lifespan=lifespan,
                  summary="DECICE's scheduler API answered by a vte policy")
    app.state.batcher = batcher

    dependencies = []
    if api_key is not None:
        scheme = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                              description="the server's key (`--api-key-env`)")

        def check_key(key: str | None = Depends(scheme)) -> None:
            if key is None or not hmac.compare_digest(key.encode(), api_key.encode()):
                raise HTTPException(status.HTTP_403_FORBIDDEN, detail=[{
                    "type": "forbidden", "loc": ["header", API_KEY_HEADER],
                    "msg": f"missing or wrong {API_KEY_HEADER} header"}])

        dependencies.append(Depends(check_key))

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
              status_code=status.HTTP_201_CREATED, dependencies=dependencies,
              openapi_extra=body_doc,
              responses={c: _ERRORS[c] for c in ((403,) if api_key else ()) + (
                  408, 413, 415, 422, 500, 503)})
    async def schedule(raw: Request):
        start = time.perf_counter()
        if not json_content(raw.headers.get("content-type")):
            return error(415, "unsupported_media_type", ["header", "Content-Type"],
                         f"Content-Type {raw.headers.get('content-type')!r} is not JSON: "
                         "allowed application/json (or application/*+json, or none)")
        try:
            body = await read_body(raw, max_body_bytes, body_timeout_s)
        except ClientDisconnect:
            log.info("client %s disconnected before sending its whole request",
                     raw.client.host if raw.client else "?")
            return Response(status_code=400)
        if isinstance(body, Response):
            return body
        try:
            request = S.ScheduleRequest.model_validate_json(body)
        except ValidationError as err:
            detail = [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]}
                      for e in err.errors(include_url=False)]
            return JSONResponse(status_code=422, content={"detail": detail})
        try:
            view = cluster_view(request.cluster, placer.params)
            requests, reasons = task_requests(request.tasks, view)
        except ConversionError as err:
            return error(422, err.kind, err.loc, str(err))
        if not batcher.alive:
            return error(503, "unavailable", ["server"], "the batching worker is not running")
        try:
            nodes, _, outcome = await batcher.submit(view, requests)
        except Exception as err:
            return error(500, "internal", ["server"],
                         f"placing failed: {type(err).__name__}: {err}")
        answer = S.ScheduleResponse(
            placements=placements(request.tasks, view, nodes, outcome, reasons, name),
            scheduling_duration_ms=(time.perf_counter() - start) * 1e3)
        return Response(answer.model_dump_json(exclude_none=True), status_code=201,
                        media_type="application/json")

    @app.get("/health", response_model=S.HealthCheckResponse,
             responses={503: {"model": S.HealthCheckResponse,
                              "description": "warming up, or the batching worker is down"}})
    async def health():
        warm = batcher.warm.is_set()
        compiled = sum(1 for s in batcher.warmup_shapes if s in placer.shapes)
        later = sum(1 for s in batcher.later_shapes if s in placer.shapes)
        components = {
            "policy": S.ComponentStatus(status="OK", details=name),
            "batching_worker": S.ComponentStatus(
                status="OK" if batcher.alive else "ERROR",
                details=f"{batcher.batches} batches run" if batcher.alive else "not running"),
            "warmup": S.ComponentStatus(
                status="OK" if warm else "WARMING",
                details=f"{compiled} of {len(batcher.warmup_shapes)} start-up shapes and "
                        f"{later} of {len(batcher.later_shapes)} largest buckets compiled"),
        }
        healthy = batcher.alive and warm
        message = (f"policy {name!r} loaded" if healthy else
                   "the batching worker is not running" if not batcher.alive else
                   "warming up: compiling the start-up shapes")
        answer = S.HealthCheckResponse(overall_status="healthy" if healthy else "unhealthy",
                                       message=message, components=components)
        return JSONResponse(status_code=200 if healthy else 503,
                            content=answer.model_dump(exclude_none=True))

    return app


__all__ = ["create_app", "Batcher", "API_KEY_HEADER", "MAX_BODY_BYTES", "BODY_TIMEOUT_S",
           "read_body", "error", "json_content"]
