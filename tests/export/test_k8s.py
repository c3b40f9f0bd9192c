"""`export k8s`: every manifest shape passes kubernetes-validate (strict) and our own lint;
the pod templates inside JobSet / PyTorchJob are validated as core objects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.export.k8s import KINDS, render_docs
from gpulaunch.export.lint import lint_manifests
from gpulaunch.export.spec import ExportOptions, build_spec

K8S_VERSIONS = ("1.29", "1.37")
IMAGE = "registry.example.com/ml/train@sha256:" + "ab" * 32


def _project(tmp_path: Path, launch: dict[str, Any] | None = None) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    config = {"version": 1, "name": "team/trainer", "image": {"torch": "2.4.1"}}
    config["launch"] = {"gpus": 8, **(launch or {})}
    (tmp_path / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


SELECTION = {
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "node_affinity": {"cloud.google.com/gke-accelerator": ["nvidia-tesla-a100"]},
    "checkpoint_pvc": "ckpt-claim",
}


def _docs(tmp_path: Path, kind: str, nodes: int, launch: dict[str, Any] | None) -> list[Any]:
    from gpulaunch.config import load_config

    project = _project(tmp_path, launch)
    cfg = load_config(project / "gpulaunch.yaml")
    opts = ExportOptions(script="train.py", args=["--epochs", "3"], nodes=nodes, restarts=2)
    return render_docs(build_spec(cfg, project, project, opts, IMAGE), kind)


def _core_objects(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The core objects to validate: the doc itself, or the Job / PodTemplate inside a CRD."""
    if doc["kind"] in ("Service", "Job"):
        return [doc]
    meta = {"name": doc["metadata"]["name"]}
    out = []
    if doc["kind"] == "JobSet":
        for rj in doc["spec"]["replicatedJobs"]:
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}
            out.append({**job, "spec": rj["template"]["spec"]})
            template = rj["template"]["spec"]["template"]
            out.append(
                {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template}
            )
    else:
        for spec in doc["spec"]["pytorchReplicaSpecs"].values():
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": meta,
                    "template": spec["template"],
                }
            )
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize("selection", [False, True], ids=["any-node", "selected"])
def test_every_shape_validates(tmp_path: Path, kind: str, nodes: int, selection: bool) -> None:
    docs = _docs(tmp_path, kind, nodes, SELECTION if selection else None)
    assert lint_manifests(docs) == []
    objects = [obj for doc in docs for obj in _core_objects(doc)]
    assert objects
    for version in K8S_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    pod = objects[-1]["template"] if "template" in objects[-1] else objects[-1]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert container["resources"]["requests"] == {"nvidia.com/gpu": 8}
    assert container["args"] == ["/workspace/train.py", "--epochs", "3"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    if selection:
        assert pod["spec"]["nodeSelector"] == SELECTION["node_selector"]
        term = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert term == {
            "key": "cloud.google.com/gke-accelerator",
            "operator": "In",
            "values": ["nvidia-tesla-a100"],
        }
        assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-claim"}} in (
            pod["spec"]["volumes"]
        )
    else:
        assert "nodeSelector" not in pod["spec"] and "affinity" not in pod["spec"]


def test_job_rendezvous_is_pod_zero_of_the_service(tmp_path: Path) -> None:
    service, job = _docs(tmp_path, "job", 4, None)
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    name = service["metadata"]["name"]
    assert name == "team-trainer" and job["metadata"]["name"] == name
    pod = job["spec"]["template"]
    assert pod["spec"]["subdomain"] == name
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert env["PET_NNODES"]["value"] == "4" and env["PET_NPROC_PER_NODE"]["value"] == "8"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["backoffLimit"] == 2
    assert pod["spec"]["restartPolicy"] == "Never"


def test_pytorchjob_shape(tmp_path: Path) -> None:
    (doc,) = _docs(tmp_path, "pytorchjob", 4, None)
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    assert doc["spec"]["nprocPerNode"] == "8"  # a string in the CRD
    container = specs["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert not any(e["name"].startswith("PET_") for e in container["env"])
    (tmp_path / "one").mkdir()
    (one,) = _docs(tmp_path / "one", "pytorchjob", 1, None)
    assert "Worker" not in one["spec"]["pytorchReplicaSpecs"]


@pytest.mark.parametrize("kind", KINDS)
def test_profile_memory_and_shm_reach_every_pod(tmp_path: Path, kind: str) -> None:
    """`docker.memory` of the profile in use is the container's memory limit (and request:
    `docker run --memory` lets it use all of it), `docker.shm_size` the /dev/shm size."""
    from gpulaunch.config import load_config

    project = _project(tmp_path)
    config = yaml.safe_load((project / "gpulaunch.yaml").read_text())
    config["profiles"] = {"big": {"docker": {"memory": "64g", "shm_size": "512m"}}}
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    cfg = load_config(project / "gpulaunch.yaml")
    opts = ExportOptions(script="train.py", nodes=2, profile="big")
    docs = render_docs(build_spec(cfg, project, project, opts, IMAGE), kind)
    assert lint_manifests(docs) == []
    objects = [obj for doc in docs for obj in _core_objects(doc)]
    pods = [_pod(o) for o in objects if o["kind"] in ("Job", "PodTemplate")]
    assert pods
    for obj in objects:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    for pod in pods:
        container = pod["spec"]["containers"][0]
        wanted = {"nvidia.com/gpu": 8, "memory": "64Gi"}
        assert container["resources"] == {"limits": wanted, "requests": wanted}
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}} in (
            pod["spec"]["volumes"]
        )
    # without the profile: GPUs only, and /dev/shm unbounded
    plain = render_docs(build_spec(cfg, project, project, ExportOptions("train.py"), IMAGE), kind)
    pod = next(_pod(o) for d in plain for o in _core_objects(d) if o["kind"] != "Service")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a Job or PodTemplate object."""
    return obj["template"] if obj["kind"] == "PodTemplate" else obj["spec"]["template"]


def _mutate(docs: list[Any], path: str, value: Any) -> list[Any]:
    docs = copy.deepcopy(docs)
    target: Any = docs
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    target[int(last) if last.isdigit() else last] = value
    return docs


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            "1.spec.template.spec.containers.0.resources.requests",
            {"nvidia.com/gpu": 4},
            "!= limits",
        ),
        ("1.spec.template.spec.subdomain", "other", "not the name of a headless Service"),
        ("0.spec.clusterIP", "10.0.0.1", "not headless"),
        ("0.spec.selector", {"app.kubernetes.io/name": "x"}, "selector does not match"),
        ("1.spec.template.spec.containers.0.env.3.value", "x-0.other", "is not pod 0"),
        ("1.metadata.name", "Bad_Name", "not a DNS label"),
        ("1.metadata.name", "a" * 64, "not a DNS label"),
        ("1.spec.completions", 10**70, "pod hostname"),
    ],
)
def test_lint_catches(tmp_path: Path, path: str, value: Any, expected: str) -> None:
    docs = _docs(tmp_path, "job", 2, None)
    assert lint_manifests(docs) == []
    problems = lint_manifests(_mutate(docs, path, value))
    assert any(expected in p for p in problems), problems


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_writes_with_o_and_refuses_local_image(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", "k8s", "train.py", "--nodes", "2")
    assert code == 2 and out == ""
    assert err.startswith("gpulaunch: error: export k8s: the image team/trainer:gl-")
    assert "exists only on this machine" in err and "build --push REGISTRY/NAME" in err
    code, out, err = invoke(
        runner, "export", "k8s", "train.py", "--image", "trainer:v1", "-o", "job.yaml"
    )
    assert code == 2 and "names no registry" in err and not (project / "job.yaml").exists()
    code, out, err = invoke(
        runner,
        "export",
        "k8s",
        "train.py",
        "--nodes",
        "2",
        "--image",
        IMAGE,
        "-o",
        "job.yaml",
        "--kind",
        "jobset",
    )
    assert code == 0, err
    docs = list(yaml.safe_load_all((project / "job.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["JobSet"]


@pytest.mark.parametrize("to", ["k8s", "slurm"])
def test_cli_o_through_a_link_inside_the_project_is_refused(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, to: str
) -> None:
    """`export -o` judges its path as `render -o` does: a link inside the project (a job can
    plant one) is refused, not followed, and nothing is written on either side of it."""
    (tmp_path / "project").mkdir()
    project = _project(tmp_path / "project")
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "out").symlink_to(outside)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", to, "train.py", "--image", IMAGE, "-o", "out/job")
    assert code == 2 and out == ""
    assert err.startswith("gpulaunch: error: --output: "), err
    assert "out is a symbolic link inside the project; gpulaunch does not write through it" in err
    assert list(outside.iterdir()) == [] and not (project / "job").exists()


def test_cli_uses_the_pushed_digest(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.config import load_config
    from gpulaunch.export.api import local_tag
    from gpulaunch.export.images import write_push_record

    project = _project(tmp_path)
    monkeypatch.chdir(project)
    # the project is tmp_path itself: the user's cache and state folders (the config cache and
    # its key) must not be in it, or the first command's write would change the context's tag
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(tmp_path.parent / f"{tmp_path.name}-state"))
    tag = local_tag(load_config(project / "gpulaunch.yaml"), project, None)
    write_push_record(project, tag, IMAGE)
    code, out, err = invoke(runner, "export", "k8s", "train.py")
    assert code == 0, err
    assert f'image: "{IMAGE}"' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes: 0 is not between 1 and 4096"),
        (["--kind", "mpijob"], "--kind: 'mpijob' is not one of job, jobset, pytorchjob"),
        (["--name", "Bad_Name"], "--name: 'Bad_Name' is not a DNS label"),
        (["--namespace", "a.b"], "--namespace: 'a.b' is not a DNS label"),
        (["--gpus", "all"], '--gpus: give a count per node for a cluster ("all" is per machine)'),
        (["--restarts", "-1"], "--restarts: -1 is not between 0 and 1000"),
        (["--image", "reg.io/x@sha256:12"], "--image: 'reg.io/x@sha256:12' has an invalid digest"),
    ],
)
def test_cli_bad_input(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", "k8s", "train.py", "--image", IMAGE, *args)
    assert code == 2 and out == ""
    assert err.splitlines()[0].startswith(f"gpulaunch: error: {message}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("launch", "field"),
    [
        ({"node_selector": {"nvidia.com/gpu product": "x"}}, "launch.node_selector"),
        ({"node_selector": {"-bad": "x"}}, "launch.node_selector"),
        ({"node_affinity": {"accelerator": ["nvidia tesla"]}}, "launch.node_affinity"),
        ({"checkpoint_pvc": "Bad_Claim"}, "launch.checkpoint_pvc"),
        ({"image": "reg.io/x y"}, "launch.image"),
    ],
)
def test_config_bad_node_selection(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    launch: dict[str, Any],
    field: str,
) -> None:
    project = _project(tmp_path, launch)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", "k8s", "train.py", "--image", IMAGE)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"gpulaunch: error: {field}")
