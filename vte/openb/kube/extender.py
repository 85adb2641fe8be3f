"""A kube-scheduler extender answered by an OpenB policy (`k8s.io/kube-scheduler/extender/v1`).

    app = create_app(twin, "fgd", url_prefix="/vte")

kube-scheduler POSTs JSON whose keys are the Go field names (the structs have no json
tags) to `urlPrefix/verb`:
  * `POST {prefix}/filter`: `ExtenderArgs {Pod, Nodes, NodeNames}` -> `ExtenderFilterResult
    {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}`. `Nodes` (a
    v1.NodeList) is sent when `nodeCacheCapable: false` and answered with the passing
    node objects as sent; `NodeNames` when true, answered with names. Every dropped node
    is named with its reason: in `FailedAndUnresolvableNodes` when no preemption can make
    the pod fit (too few GPUs, another model, a node unknown by name), else `FailedNodes`.
  * `POST {prefix}/prioritize`: `ExtenderArgs` -> `HostPriorityList [{Host, Score}]`,
    integer scores in [0, 10] (`Twin.prioritize`: 10 for the replay's choice alone).
  * `POST {prefix}/bind`: `ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node}` ->
    `ExtenderBindingResult {Error}`: the GPUs chosen on that node (`Twin.choose_gpus`),
    bound through the kube client when there is one (`client.Binder`), recorded always.
  * `GET /health` (and `{prefix}/health`): 200 once the scoring is compiled, 503 before.

Bad input never answers 500: filter and bind answer 200 with `Error` naming the field and
the value (kube-scheduler then fails that pod's attempt and retries it), prioritize
answers 400 with `{"Error": ...}`; a body beyond `max_body_bytes` 413, one that does not
arrive within `body_timeout_s` 408. Unknown fields are ignored. Requests are handled one
at a time on a worker thread, in arrival order (the state changes with each).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Callable

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from vte.openb.kube.convention import DEFAULT, Convention
from vte.openb.kube.objects import KubeInputError, PodRow, node_row, pod_row
from vte.openb.kube.twin import Twin
from vte.serve.http import read_body

MAX_BODY_BYTES = 64 * 1024 * 1024     # all nodes of a large cluster, in full, with their images
BODY_TIMEOUT_S = 30.0
FILTER_KEYS = ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error")
log = logging.getLogger("vte.openb.kube")


def _json(content, status: int = 200) -> Response:
    return Response(encode(content), status_code=status, media_type="application/json")


def _load(body: bytes, what: str) -> dict:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise KubeInputError(f"body: not JSON ({type(err).__name__}: {str(err)[:80]})") from None
    if not isinstance(doc, dict):
        raise KubeInputError(f"body: {what} must be a JSON object, got {type(doc).__name__}")
    return doc


class RawNode:
    """A node object of a request, kept as the bytes it was sent as (echoed back as is)."""

    __slots__ = ("raw", "name")

    def __init__(self, raw: bytes, name: str):
        self.raw, self.name = raw, name


def split_nodes(body: bytes) -> tuple[bytes, list[bytes]] | None:
    """The fast path for `Nodes` sent in full, as kube-scheduler's Go encoder writes them
    (compact, every node object's fields in one order): (the body with `Nodes` replaced by
    null, each node object's bytes), or None when the body is not of that form (then
    everything is parsed). The objects are split at `},{"K":`, K the first object's first
    key; inside a JSON string every quote is escaped, so that separator is structural, and
    a split inside an object leaves a piece that is not one JSON object: the caller then
    parses the whole body."""
    start = body.find(b'"Nodes":{')
    if start < 0 or body.find(b'"Nodes":', start + 1) >= 0:
        return None
    items = body.find(b'"items":[{"', start)
    end = body.rfind(b"]}")
    if items < 0 or end < items:
        return None
    inner = body[items + len(b'"items":['):end]
    key_end = inner.find(b'":', 2)
    if key_end < 0 or not inner.endswith(b"}"):
        return None
    head = inner[1:key_end + 2]                      # '"K":'
    parts = inner[1:-1].split(b"},{" + head)
    raws = [b"{" + parts[0] + b"}"] + [b"{" + head + p + b"}" for p in parts[1:]]
    return body[:start] + b'"Nodes":null' + body[end + 2:], raws


def encode(out) -> bytes:
    """A verb's answer as JSON; a filter's `RawNode`s are written as they were sent."""
    nodes = out.get("Nodes") if isinstance(out, dict) else None
    if isinstance(nodes, dict) and nodes.get("items") and isinstance(nodes["items"][0], RawNode):
        rest = json.dumps({k: v for k, v in out.items() if k != "Nodes"}, separators=(",", ":"))
        return (b'{"Nodes":{"items":[' + b",".join(n.raw for n in nodes["items"]) + b"]},"
                + rest[1:].encode())
    return json.dumps(out, separators=(",", ":")).encode()


class Extender:
    """The verbs on a `Twin` (see the module doc); `binder`: a `client.Binder` or None
    (record only)."""

    def __init__(self, twin: Twin, convention: Convention = DEFAULT, binder=None):
        self.twin, self.convention, self.binder = twin, convention, binder
        self._nodes: dict[str, tuple] = {}          # name -> (allocatable, capacity, labels)
        self._raw: dict[bytes, RawNode] = {}         # a node's JSON as sent -> its name
        self.counts = {"filter": 0, "prioritize": 0, "bind": 0}

    def _args(self, body: bytes, fast: bool = True) -> tuple[PodRow, list | None, list[str] | None]:
        """ExtenderArgs: the pod, the node objects (or None), the node names (or None);
        nodes sent in full are added to the twin (or updated when changed). The node
        objects are `RawNode`s when the fast path read them (`split_nodes`)."""
        fast = split_nodes(body) if fast else None
        doc = _load(body if fast is None else fast[0], "ExtenderArgs")
        pod = pod_row(doc.get("Pod"), self.convention, "Pod")
        nodes, names = doc.get("Nodes"), doc.get("NodeNames")
        items = None
        if fast is not None:
            items, names = [], []
            for k, raw in enumerate(fast[1]):
                node = self._raw.get(raw)
                if node is None:
                    try:
                        item = json.loads(raw)
                    except ValueError:
                        return self._args_slow(body)
                    if not isinstance(item, dict):
                        return self._args_slow(body)
                    self._node(item, f"Nodes.items[{k}]")
                    node = RawNode(raw, item["metadata"]["name"])
                    if len(self._raw) > 4 * max(self.twin.num_nodes, 1024):
                        self._raw.clear()
                    self._raw[raw] = node
                items.append(node)
                names.append(node.name)
        elif nodes is not None:
            if not isinstance(nodes, dict) or not isinstance(nodes.get("items") or [], list):
                raise KubeInputError("Nodes: must be a v1.NodeList {\"items\": [...]}")
            items = nodes.get("items") or []
            names = []
            for k, item in enumerate(items):
                self._node(item, f"Nodes.items[{k}]")
                names.append(item["metadata"]["name"])
        elif names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise KubeInputError(f"NodeNames: {str(names)[:80]} is not a list of strings")
        else:
            raise KubeInputError("ExtenderArgs: neither Nodes nor NodeNames is given")
        return pod, items, names

    def _args_slow(self, body: bytes):
        return self._args(body, fast=False)        # the fast path's split was not the items'

    def _node(self, item, field: str) -> None:
        """Adds a node sent in full unless it is known unchanged (a cheap comparison of its
        allocatable, capacity and labels with the last ones seen)."""
        try:
            name = item["metadata"]["name"]
            status, labels = item.get("status") or {}, item["metadata"].get("labels")
            seen = (status.get("allocatable"), status.get("capacity"), labels)
        except (TypeError, KeyError, AttributeError):
            node_row(item, self.convention, field)          # raises the precise error
            raise KubeInputError(f"{field}: not a v1.Node") from None
        if self._nodes.get(name) == seen:
            return
        row = node_row(item, self.convention, field)
        reason = self.twin.add_node(row)
        if reason:
            log.warning("node %s: %s", name, reason)
        self._nodes[name] = seen

    def filter(self, body: bytes) -> dict:
        self.counts["filter"] += 1
        try:
            pod, items, names = self._args(body)
        except KubeInputError as err:
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": str(err)}
        twin = self.twin
        with twin.lock:
            twin.see(pod)
            idx = [twin.index.get(n, -1) for n in names]
            known = np.asarray([i for i in idx if i >= 0], np.int64)
            reasons = dict(zip(known.tolist(), twin.reasons(pod, known)))
        passing, failed, unresolvable = [], {}, {}
        for k, (name, i) in enumerate(zip(names, idx)):
            if i < 0:
                unresolvable[name] = ("node unknown to the extender: send Nodes in full "
                                      "(nodeCacheCapable: false), --snapshot or --watch")
            elif reasons[i] is None:
                passing.append(k)
            elif reasons[i][1]:
                failed[name] = reasons[i][0]
            else:
                unresolvable[name] = reasons[i][0]
        return {"Nodes": None if items is None else {"items": [items[k] for k in passing]},
                "NodeNames": None if items is not None else [names[k] for k in passing],
                "FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable,
                "Error": ""}

    def prioritize(self, body: bytes) -> list[dict]:
        """HostPriorityList; KubeInputError on bad input (the app answers 400)."""
        self.counts["prioritize"] += 1
        pod, _, names = self._args(body)
        decision = self.twin.prioritize(pod, names)
        return [{"Host": n, "Score": s} for n, s in zip(names, decision.scores)]

    def bind(self, body: bytes) -> dict:
        self.counts["bind"] += 1
        try:
            doc = _load(body, "ExtenderBindingArgs")
            fields = {k: doc.get(k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
            for k in ("PodName", "Node"):
                if not isinstance(fields[k], str) or not fields[k]:
                    raise KubeInputError(f"{k}: {fields[k]!r} is not a non-empty string")
            for k in ("PodNamespace", "PodUID"):
                if fields[k] is not None and not isinstance(fields[k], str):
                    raise KubeInputError(f"{k}: {fields[k]!r} is not a string")
        except KubeInputError as err:
            return {"Error": str(err)}
        namespace = fields["PodNamespace"] or "default"
        key = fields["PodUID"] or f"{namespace}/{fields['PodName']}"
        pod = self.twin.seen_pod(key) or self.twin.seen_pod(f"{namespace}/{fields['PodName']}")
        if pod is None and self.binder is not None:
            try:
                pod = self.binder.fetch(namespace, fields["PodName"], self.convention)
            except Exception as err:
                return {"Error": f"pod {namespace}/{fields['PodName']}: not seen by filter or "
                                 f"prioritize and not read from the API server: {err}"}
        if pod is None:
            return {"Error": f"pod {namespace}/{fields['PodName']} (uid {fields['PodUID']!r}) "
                             "was seen by no filter or prioritize call; without a kube client "
                             "the extender cannot read its requests"}
        with self.twin.lock:
            gpus, reason = self.twin.choose_gpus(pod, fields["Node"])
            if gpus is None:
                return {"Error": reason}
            if self.binder is not None:
                try:
                    self.binder.bind(pod, fields["Node"], gpus)
                except Exception as err:
                    return {"Error": f"binding {namespace}/{pod.name} to {fields['Node']} "
                                     f"failed: {type(err).__name__}: {str(err)[:200]}"}
            self.twin.bind(pod, fields["Node"], gpus)
        return {"Error": ""}


def create_app(extender: Extender, name: str, url_prefix: str = "",
               warm_sizes=(), max_body_bytes: int = MAX_BODY_BYTES,
               body_timeout_s: float = BODY_TIMEOUT_S,
               on_start: Callable[[], None] | None = None) -> FastAPI:
    """The HTTP app of `extender` (module doc). `url_prefix`: the path before the verbs
    ("" or "/vte"); `warm_sizes`: node counts compiled at start (besides the current one),
    on a thread, `GET /health` 503 until done; `on_start`: called at start (the watch)."""
    prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
    if not max_body_bytes >= 1:
        raise ValueError(f"max_body_bytes={max_body_bytes} is invalid: allowed >= 1")
    warm = threading.Event()
    state = {"warm_s": None}
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vte-kube")

    def warm_up():
        try:
            state["warm_s"] = round(extender.twin.warm(warm_sizes), 3)
        except Exception:
            log.exception("warming up failed")
        warm.set()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if on_start is not None:
            on_start()
        threading.Thread(target=warm_up, name="vte-kube-warmup", daemon=True).start()
        yield
        pool.shutdown(wait=False)

    app = FastAPI(title="vte kube-scheduler extender", version="1", lifespan=lifespan,
                  summary="k8s.io/kube-scheduler/extender/v1 answered by an OpenB policy")
    app.state.extender = extender
    app.state.warm = warm

    async def run(raw: Request, verb: str):
        try:
            body = await read_body(raw, max_body_bytes, body_timeout_s)
        except ClientDisconnect:
            return Response(status_code=400)
        if isinstance(body, Response):
            return body
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            out = await loop.run_in_executor(pool, getattr(extender, verb), body)
        except KubeInputError as err:
            return _json({"Error": str(err)}, 400)
        except Exception as err:                    # never a 500 for one bad request
            log.exception("%s failed", verb)
            message = f"internal error: {type(err).__name__}: {str(err)[:200]}"
            if verb == "prioritize":
                return _json({"Error": message}, 400)
            if verb == "filter":
                return _json({"Nodes": None, "NodeNames": None, "FailedNodes": {},
                              "FailedAndUnresolvableNodes": {}, "Error": message})
            return _json({"Error": message})
        log.debug("%s in %.1f ms", verb, 1e3 * (time.perf_counter() - start))
        return _json(out)

    for verb in ("filter", "prioritize", "bind"):
        async def endpoint(raw: Request, verb=verb):
            return await run(raw, verb)
        app.add_api_route(f"{prefix}/{verb}", endpoint, methods=["POST"], name=verb)

    async def health():
        twin = extender.twin
        ready = warm.is_set()
        return _json({"status": "ok" if ready else "warming", "policy": name,
                      "nodes": twin.num_nodes, "bound_pods": len(twin.bound),
                      "compiled_buckets": sorted(twin.compiled), "warmup_s": state["warm_s"],
                      "requests": dict(extender.counts)}, 200 if ready else 503)

    app.add_api_route("/health", health, methods=["GET"])
    if prefix:
        app.add_api_route(f"{prefix}/health", health, methods=["GET"])
    return app


__all__ = ["Extender", "create_app", "MAX_BODY_BYTES", "FILTER_KEYS"]
