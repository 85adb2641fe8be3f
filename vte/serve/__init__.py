"""Serving a vte scheduler over DECICE's scheduler API (`POST /schedule`, `GET /health`).

    python -m vte.serve --policy runs/ppo --host 127.0.0.1 --port 8030 --api-key-env KEY

Modules: `schemas` (DECICE's request and answer as pydantic models), `convert`
(DECICE's cluster state and tasks to and from vte's view), `place` (a policy placing a
request's tasks one after the other in one compiled, batched call), `app` (the FastAPI
app with micro-batching). Only `app` needs FastAPI; `import vte` imports none of them.
The defaults for what DECICE does not report are listed in `vte/serve/SERVE.md`.
"""
