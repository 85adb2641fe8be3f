"""Cluster-v0 schedulers over DECICE's scheduler API (`POST /schedule`, `GET /health`):
`python -m vte.serve --protocol decice` (the default).

Modules: `schemas` (DECICE's request and answer as pydantic models), `convert` (DECICE's
cluster state and tasks to and from Cluster-v0's view), `place` (a policy placing a
request's tasks one after the other in one compiled, batched call), `app` (the FastAPI app
with micro-batching) and `cli` (the command line). Only `app` and `cli` need FastAPI. The
defaults for what DECICE does not report are listed in `vte/cluster/decice/SERVE.md`.
"""
