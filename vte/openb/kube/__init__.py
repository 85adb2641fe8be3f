"""vte's OpenB schedulers inside Kubernetes: a kube-scheduler extender and a cluster twin.

    python -m vte.serve --protocol kube-extender --policy fgd --snapshot cluster.json
    python -m vte.openb --cluster cluster.json --policies all,zoo:openb-evidence --seeds 10
    python -m vte.openb.kube export --pods default --out DIR      # a trace as Node and Pod YAML

Modules: `quantity` (Kubernetes quantities, exact), `convention` (the GPU-sharing
annotation and label names), `objects` (Node and Pod objects <-> the replay's rows and
tables, the one converter), `twin` (the extender's state and scoring), `extender` (the
HTTP app: filter, prioritize, bind, health), `client` (the optional `kubernetes` client:
binding and watching pods), `cli` (the server's command line). The guide is
docs/kubernetes.md.
"""
