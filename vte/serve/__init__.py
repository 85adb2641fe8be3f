"""Serving vte's schedulers: `python -m vte.serve --protocol decice|kube-extender`.

    python -m vte.serve --policy runs/ppo --host 127.0.0.1 --port 8030 --api-key-env KEY

This package is the front door and what every protocol shares: `server` (uvicorn on a
bound socket, TLS, connection limits) and `http` (the error shape, the body limits).
Each protocol lives with its environment (`vte.registry.protocols`): DECICE's API in
`vte.cluster.decice` (its defaults in `vte/cluster/decice/SERVE.md`), the kube-scheduler
extender in `vte.openb.kube`. `import vte` imports none of them.
"""
