"""ExportSpec -> Kubernetes manifests: an Indexed Job + headless Service (any cluster),
a JobSet, or a Kubeflow PyTorchJob, all wrapping one pod template (templates/k8s/).

The templates hold layout; this module decides every value. The rendered text is parsed
back (it must be YAML), checked by `export.lint`, and written in one canonical form.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Literal, get_args

from gpulaunch.errors import ConfigError
from gpulaunch.export.lint import INDEX_ANNOTATION, lint_manifests
from gpulaunch.export.spec import RDZV_PORT, ExportSpec, k8s_quantity
from gpulaunch.launch.plan import CHECKPOINTS

Kind = Literal["job", "jobset", "pytorchjob"]
KINDS: tuple[str, ...] = get_args(Kind)
GPU_RESOURCE = "nvidia.com/gpu"
PYTORCHJOB_PORT = 23456  # the operator's default, on a port named pytorchjob-port
JOBSET_REPLICATED_JOB = "node"
NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpulaunch"}


def container_environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from gpulaunch.image.render import template_root

    env = Environment(
        loader=FileSystemLoader(template_root()),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["j"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    return env


def master_host(spec: ExportSpec, kind: Kind) -> str:
    """The rendezvous host: pod 0 under the headless Service (or JobSet's subdomain)."""
    if kind == "jobset":
        return f"{spec.name}-{JOBSET_REPLICATED_JOB}-0-0.{spec.name}"
    if kind == "pytorchjob":
        return f"{spec.name}-master-0"
    return f"{spec.name}-0.{spec.name}"


def literal(text: str) -> str:
    """`text` as Kubernetes hands it to the process. The kubelet expands `$(VAR)` in a
    container's command, args and env values and reads `$$` as `$`, so a `$(HOME)` or a `$$`
    meant for the job would change on the way; doubling every `$` (the documented escape)
    makes any text arrive as written, as `gpulaunch run` passes it."""
    return text.replace("$", "$$")


def _env(spec: ExportSpec, kind: Kind) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if kind != "pytorchjob":  # the Kubeflow operator injects these itself
        index = f"metadata.annotations['{INDEX_ANNOTATION}']"
        items += [
            {"name": "PET_NNODES", "value": str(spec.nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": str(spec.nproc)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": index}}},
            {"name": "PET_MASTER_ADDR", "value": master_host(spec, kind)},
            {"name": "PET_MASTER_PORT", "value": str(RDZV_PORT)},
        ]
    items += [{"name": key, "value": value} for key, value in sorted(spec.env.items())]
    return [{**e, "value": literal(e["value"])} if "value" in e else e for e in items]


def _affinity(spec: ExportSpec) -> dict[str, Any] | None:
    if not spec.node_affinity:
        return None
    expressions = [
        {"key": key, "operator": "In", "values": values}
        for key, values in sorted(spec.node_affinity.items())
    ]
    term = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}


def pod_context(spec: ExportSpec, kind: Kind) -> dict[str, Any]:
    labels = {NAME_LABEL: spec.name, **MANAGED_BY}
    shm: dict[str, Any] = {"medium": "Memory"}
    if spec.shm:
        shm["sizeLimit"] = spec.shm
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.checkpoint_pvc:
        volumes.append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.checkpoint_pvc}}
        )
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINTS})
    pytorchjob = kind == "pytorchjob"
    return {
        "labels": labels,
        "annotations": {"sidecar.istio.io/inject": "false"} if pytorchjob else {},
        "subdomain": spec.name if kind == "job" else "",
        "restart_policy": restart_policy(spec, kind),
        "host_network": spec.host_network,
        "container": "pytorch" if pytorchjob else "trainer",
        "image": spec.image,
        "command": ["torchrun"],
        "args": [literal(arg) for arg in (spec.script, *spec.args)],
        "env": _env(spec, kind),
        "port_name": "pytorchjob-port" if pytorchjob else "c10d",
        "port": PYTORCHJOB_PORT if pytorchjob else RDZV_PORT,
        "resources": _resources(spec),
        "cap_add": list(spec.cap_add),
        "volume_mounts": mounts,
        "volumes": volumes,
        "tolerations": (
            [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
            if spec.gpus
            else []
        ),
        "node_selector": spec.node_selector,
        "affinity": _affinity(spec),
    }


def _resources(spec: ExportSpec) -> dict[str, Any]:
    """GPUs, and docker.memory as the memory limit (requested as much: `docker run --memory`
    lets the container use all of it, so the scheduler must find it on the node)."""
    wanted: dict[str, Any] = {}
    if spec.gpus:
        wanted[GPU_RESOURCE] = spec.gpus
    if spec.memory:
        wanted["memory"] = k8s_quantity(spec.memory, "docker.memory")
    return {"limits": wanted, "requests": dict(wanted)} if wanted else {}


def restart_policy(spec: ExportSpec, kind: Kind) -> str:
    """Never: the Job / JobSet / operator replaces failed pods (`--restarts`); PyTorchJob
    restarts in place only when restarts are asked for."""
    return "OnFailure" if kind == "pytorchjob" and spec.restarts else "Never"


def render_docs(spec: ExportSpec, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The manifests as data, checked by our own lint (a failure is a ConfigError). `kind` is
    one of KINDS (export_k8s checks --kind)."""
    import yaml

    env = container_environment()
    ctx = pod_context(spec, kind)  # type: ignore[arg-type]
    pod = yaml.safe_load(env.get_template("k8s/pod.yaml.j2").render(**ctx))
    text = env.get_template(f"k8s/{kind}.yaml.j2").render(
        name=spec.name,
        namespace=namespace,
        labels=ctx["labels"],
        selector={NAME_LABEL: spec.name},
        port=RDZV_PORT,
        nodes=spec.nodes,
        nproc=spec.nproc,
        restarts=spec.restarts,
        restart_policy=ctx["restart_policy"],
        replicated_job=JOBSET_REPLICATED_JOB,
        pod=pod,
    )
    docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    problems = lint_manifests(docs)
    if problems:
        raise ConfigError(f"export k8s: {problems[0]}")
    return docs


def render_text(spec: ExportSpec, kind: str, namespace: str | None = None) -> str:
    import yaml

    docs = render_docs(spec, kind, namespace)
    header = (
        f"# gpulaunch export k8s --kind {kind}: {spec.nodes} node(s) x {spec.nproc} process(es)\n"
    )
    return header + yaml.dump_all(
        docs, Dumper=_quoting_dumper(), sort_keys=False, default_flow_style=False
    )


def _quoting_dumper() -> Any:
    """A dumper that double-quotes every string. kubectl decodes YAML 1.1 (go-yaml), which
    reads plain `y`, `n`, `1e3` and `1e-4` as booleans and numbers where PyYAML (also 1.1,
    but without `y`/`n` and needing a dot in floats) writes them plain: an env value of
    `1e-4` would reach the API server as a number and be refused. Quoted, a string stays one."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def quoted(dumper: Any, value: str) -> Any:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')

    def mapping(dumper: Any, data: dict[Any, Any]) -> Any:
        """Keys that are plain names stay plain (readable manifests); any other is quoted."""
        pairs = []
        for key, value in data.items():
            plain = isinstance(key, str) and _PLAIN_KEY.fullmatch(key) and key.lower() not in _WORDS
            key_node = (
                yaml.ScalarNode("tag:yaml.org,2002:str", key)
                if plain
                else dumper.represent_data(key)
            )
            pairs.append((key_node, dumper.represent_data(value)))
        return yaml.MappingNode("tag:yaml.org,2002:map", pairs, flow_style=False)

    Dumper.add_representer(str, quoted)
    Dumper.add_representer(dict, mapping)
    return Dumper


_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # YAML 1.1's non-strings
