"""The optional Kubernetes client (`pip install 'vte[kube]'`, the official `kubernetes`):
binding pods as kube-scheduler's default binder does, and watching pods.

    api = load_api(kubeconfig=None, in_cluster=False)   # ~/.kube/config, or in-cluster
    binder = Binder(api, convention)                     # bind(pod, node, gpus)
    watcher = PodWatcher(api, twin, convention).start()  # pods bound or deleted by others

RBAC the extender's service account needs: pods get, list, watch, patch; pods/binding
create; nodes get, list (docs/kubernetes.md has the manifest).
"""

from __future__ import annotations

import logging
import threading

from vte.openb.kube.convention import Convention
from vte.openb.kube.objects import KubeInputError, PodRow, node_row, pod_row

log = logging.getLogger("vte.openb.kube")


def load_api(kubeconfig: str | None = None, in_cluster: bool = False):
    """A `CoreV1Api` from a kubeconfig file (None: the default one) or, with `in_cluster`,
    from the pod's service account. ImportError naming the extra when the client is absent."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise ImportError("the Kubernetes client is not installed: pip install 'vte[kube]' "
                          "(or pip install kubernetes)") from None
    if in_cluster:
        config.load_incluster_config()
    else:
        config.load_kube_config(config_file=kubeconfig)
    return client.CoreV1Api()


def _plain(api, obj) -> dict:
    """A client model object as the API's JSON (camelCase keys)."""
    return api.api_client.sanitize_for_serialization(obj)


class Binder:
    """What kube-scheduler's DefaultBinder does, plus the GPUs: patches the pod's
    annotation `convention.gpu_index` ("0-1") and creates its `pods/binding`."""

    def __init__(self, api, convention: Convention):
        self.api = api
        self.convention = convention

    def bind(self, pod: PodRow, node: str, gpus: tuple[int, ...]) -> None:
        if gpus:
            index = self.convention.index_separator.join(str(g) for g in gpus)
            self.api.patch_namespaced_pod(
                pod.name, pod.namespace,
                {"metadata": {"annotations": {self.convention.gpu_index: index}}})
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": pod.namespace,
                             **({"uid": pod.key} if pod.key != f"{pod.namespace}/{pod.name}"
                                else {})},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        # The generated client fails to read the Binding it gets back (a known issue of
        # create_namespaced_binding): the raw answer is not deserialised.
        self.api.create_namespaced_binding(pod.namespace, body, _preload_content=False)

    def fetch(self, namespace: str, name: str, convention: Convention) -> PodRow:
        """A pod's row read from the API server (a bind of a pod no filter showed)."""
        return pod_row(_plain(self.api, self.api.read_namespaced_pod(name, namespace)),
                       convention)


class PodWatcher:
    """Lists then watches every pod (all namespaces) on a daemon thread and tells the twin
    (`Twin.observe`); restarts the watch from a fresh list when it ends or fails.
    With `nodes`, also lists the nodes first (`Twin.add_node`)."""

    def __init__(self, api, twin, convention: Convention, nodes: bool = True,
                 timeout_s: int = 300):
        self.api, self.twin, self.convention = api, twin, convention
        self.nodes, self.timeout_s = nodes, timeout_s
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="vte-kube-watch", daemon=True)
        self.synced = threading.Event()

    def start(self) -> "PodWatcher":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def _pod(self, obj) -> None:
        try:
            row = pod_row(obj if isinstance(obj, dict) else _plain(self.api, obj), self.convention)
        except KubeInputError as err:
            log.warning("watch: a pod is left out: %s", err)
            return
        reason = self.twin.observe(row)
        if reason:
            log.info("watch: %s", reason)

    def _loop(self) -> None:
        from kubernetes import watch
        while not self.stop_event.is_set():
            try:
                if self.nodes:
                    for node in self.api.list_node().items:
                        try:
                            self.twin.add_node(node_row(_plain(self.api, node), self.convention))
                        except KubeInputError as err:
                            log.warning("watch: a node is left out: %s", err)
                listed = self.api.list_pod_for_all_namespaces()
                for pod in listed.items:
                    self._pod(pod)
                self.synced.set()
                stream = watch.Watch()
                for event in stream.stream(self.api.list_pod_for_all_namespaces,
                                           resource_version=listed.metadata.resource_version,
                                           timeout_seconds=self.timeout_s):
                    if self.stop_event.is_set():
                        stream.stop()
                        break
                    obj = event["object"]
                    if event["type"] == "DELETED":
                        row = pod_row(_plain(self.api, obj), self.convention)
                        self.twin.release(row.key)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._pod(obj)
            except Exception as err:          # keep watching: log, list again
                log.warning("watch failed (%s: %s); listing again in 5 s",
                            type(err).__name__, err)
                self.stop_event.wait(5)


__all__ = ["load_api", "Binder", "PodWatcher"]
