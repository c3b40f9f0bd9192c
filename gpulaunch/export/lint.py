"""gpulaunch's own checks on Kubernetes manifests, for what schemas cannot see.

kubernetes-validate (the tests) checks field names and types; these check the meaning:
GPU requests equal limits, every `name` the manifests hold (objects, containers, ports,
volumes, replicated jobs: found by walking, so a new one is checked too) and every pod
hostname is a DNS-1035 label of at most 63 characters, the headless Service is the pods'
subdomain and selects them, and the rendezvous host is pod 0's DNS name under that Service.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpulaunch.textcheck import dns_1035, label_key, label_value

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# Maps whose keys are the user's data (a label called `name`), and the env list, whose
# `name` is a variable name: the only places a `name` key is not an object's DNS name.
_NOT_NAMES = frozenset({"labels", "annotations", "nodeSelector", "selector", "matchLabels", "env"})


def _pods(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], int]]:
    """(where, pod template, pod count) for every pod template in a manifest."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Job":
        yield "Job", spec.get("template") or {}, int(spec.get("completions") or 1)
    elif kind == "JobSet":
        for rj in spec.get("replicatedJobs") or []:
            job = (rj.get("template") or {}).get("spec") or {}
            yield (
                f"JobSet/{rj.get('name')}",
                job.get("template") or {},
                int(job.get("completions") or 1),
            )
    elif kind == "PyTorchJob":
        for role, rs in (spec.get("pytorchReplicaSpecs") or {}).items():
            yield f"PyTorchJob/{role}", rs.get("template") or {}, int(rs.get("replicas") or 1)


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {e.get("name"): e for e in containers[0].get("env") or []}


def _check_name(what: str, name: Any) -> list[str]:
    try:
        dns_1035(str(name))
    except ValueError as err:
        return [f"{what}: {err}"]
    return []


def _names(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(field path, value) for every `name` key in a manifest, outside _NOT_NAMES."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "name":
                yield f"{path}.name", value
            elif key not in _NOT_NAMES:
                yield from _names(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _names(item, f"{path}[{index}]")


def lint_manifests(docs: list[dict[str, Any]]) -> list[str]:
    """Every problem found, as `where: what` lines (empty when the manifests are sound)."""
    problems: list[str] = []
    services = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Service"}
    for doc in docs:
        meta = doc.get("metadata") or {}
        problems += _check_name(f"{doc.get('kind')} name", meta.get("name", ""))
        for where, value in _names(doc, str(doc.get("kind"))):
            if where != f"{doc.get('kind')}.metadata.name":
                problems += _check_name(where, value)
        for key, value in (meta.get("labels") or {}).items():
            try:
                label_key(key)
                label_value(value)
            except ValueError as err:
                problems.append(f"{doc.get('kind')} label: {err}")
        for where, pod, count in _pods(doc):
            problems += _lint_pod(doc, where, pod, count, services)
    return problems


def _lint_pod(
    doc: dict[str, Any], where: str, pod: dict[str, Any], count: int, services: dict[str, Any]
) -> list[str]:
    problems: list[str] = []
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for res in sorted(set(limits) | set(requests)):
            if res.endswith("/gpu") and limits.get(res) != requests.get(res, limits.get(res)):
                problems.append(f"{where}: {res} requests {requests.get(res)} != limits")
    name = doc["metadata"]["name"]
    env = _env(pod)
    master = (env.get("PET_MASTER_ADDR") or {}).get("value")
    if doc["kind"] == "Job":
        sub = spec.get("subdomain")
        if sub not in services:
            problems.append(f"{where}: subdomain {sub!r} is not the name of a headless Service")
        else:
            svc = services[sub]["spec"]
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if svc.get("clusterIP") != "None":
                problems.append(f"Service {sub}: not headless (clusterIP: None)")
            if any(labels.get(k) != v for k, v in (svc.get("selector") or {}).items()):
                problems.append(f"Service {sub}: its selector does not match the pods")
        problems += _check_name(f"{where} pod hostname", f"{name}-{count - 1}")
        if master != f"{name}-0.{sub}":
            problems.append(f"{where}: PET_MASTER_ADDR {master!r} is not pod 0 ({name}-0.{sub})")
    elif doc["kind"] == "JobSet":
        rj = doc["spec"]["replicatedJobs"][0]["name"]
        sub = (doc["spec"].get("network") or {}).get("subdomain") or name
        problems += _check_name(f"{where} pod hostname", f"{name}-{rj}-0-{count - 1}")
        if master != f"{name}-{rj}-0-0.{sub}":
            problems.append(f"{where}: PET_MASTER_ADDR {master!r} is not {name}-{rj}-0-0.{sub}")
    elif master is not None:
        problems.append(f"{where}: PET_MASTER_ADDR is set by the operator, not the manifest")
    if doc["kind"] != "PyTorchJob":
        rank = ((env.get("PET_NODE_RANK") or {}).get("valueFrom") or {}).get("fieldRef") or {}
        if INDEX_ANNOTATION not in str(rank.get("fieldPath", "")):
            problems.append(f"{where}: PET_NODE_RANK does not come from the completion index")
    return problems
