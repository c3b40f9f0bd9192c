"""The config cache (gpulaunch/configcache.py): a hit answers exactly as validating the file
does, and anything stale, corrupt, planted or unsealed is a miss that validates again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES
from typer.testing import CliRunner

from gpulaunch import config as config_mod
from gpulaunch import configcache
from gpulaunch.cli import app
from gpulaunch.config import load_config
from gpulaunch.configcache import ConfigView, entry_path, load
from gpulaunch.errors import ConfigError
from gpulaunch.fsio import cache_dir
from gpulaunch.image.render import plan_image, render_dockerfile
from gpulaunch.records.seal import seal

EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/gpulaunch.yaml"))

FULL = """\
version: 1
name: team/full-config
image:
  python: "3.11"
  torch: "2.4.1"
  torch_extras: [torchvision]
  cuda: "12.1"
  os: ubuntu22.04
  flavor: devel
  python_source: deadsnakes
  system_packages: [git, libgl1]
  requirements: requirements.txt
  pip:
    index_url: https://pypi.example.org/simple
    extra_index_urls: [https://mirror.example.org/simple]
    find_links: [wheels]
  env: {A: "1", B: two}
  run: ["echo one", "echo two\\n  continued"]
build:
  network: host
launch:
  gpus: "0,2"
  profile: fast
  nccl: pcie
  numa: "off"
  precision: bf16
  network: none
  env: {NCCL_DEBUG: WARN}
  mounts: ["/data:/data:ro"]
  price_per_gpu_hour: 2.49
  checkpoint_dir: ckpt
  stop_grace: 60
  node_selector: {nvidia.com/gpu.product: H100}
  node_affinity: {zone: [a, b]}
profiles:
  fast:
    extends: default
    description: quick
    precision: fp16
    expandable_segments: true
    env: {X: "1"}
    docker:
      shm_size: 16g
      ipc: host
      cap_add: [SYS_NICE]
      ulimits: {memlock: -1}
      cpuset_cpus: "0"
  bare: {}
"""

CONFIGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "minimal (all defaults)": ("name: tiny\n", ()),
    "empty sections": ("version: 1\nname: x\nimage: {}\nlaunch: {}\nprofiles: {}\n", ()),
    "full": (FULL, ()),
    "overrides": (
        "name: over\nimage: {torch: '2.4.1'}\n",
        (
            "image.torch=2.5.1",
            "launch.gpus=2",
            "image.torch_extras=[torchaudio]",
            "launch.nccl=null",
        ),
    ),
    "override creates a profile": ("name: over\n", ("profiles.p.docker.memory=8g",)),
}


def _assert_same(hit: Any, miss: Any, where: str = "config") -> None:
    """Field by field, with types, and every nested model's fields set (not through
    configcache.same, so a fault there cannot hide one here)."""
    assert isinstance(hit, ConfigView), where
    assert hit.model_fields_set == miss.model_fields_set, where
    assert set(hit.model_dump()) == set(type(miss).model_fields), where
    for name in type(miss).model_fields:
        mine, theirs = getattr(hit, name), getattr(miss, name)
        if _is_model(theirs):
            _assert_same(mine, theirs, f"{where}.{name}")
        elif isinstance(theirs, dict) and any(_is_model(v) for v in theirs.values()):
            assert set(mine) == set(theirs), where
            for key in theirs:
                _assert_same(mine[key], theirs[key], f"{where}.{name}.{key}")
        else:
            assert type(mine) is type(theirs) and mine == theirs, (f"{where}.{name}", mine)
    for mode in ("python", "json"):
        assert hit.model_dump(mode=mode) == miss.model_dump(mode=mode), where
        assert hit.model_dump(mode=mode, exclude_unset=True) == miss.model_dump(
            mode=mode, exclude_unset=True
        ), where


def _is_model(value: Any) -> bool:
    return hasattr(type(value), "model_fields")


def _load(path: Path, overrides: tuple[str, ...] = (), *, write: bool = False) -> tuple[Any, bool]:
    """(what load answers, whether it validated the file: a miss)."""
    calls: list[Path] = []
    real = config_mod.load_config_bytes

    def counting(raw: bytes, where: Path, sets: tuple[str, ...]) -> Any:
        calls.append(where)
        return real(raw, where, sets)

    config_mod.load_config_bytes = counting  # type: ignore[assignment]
    try:
        return load(path, overrides, write=write), bool(calls)
    finally:
        config_mod.load_config_bytes = real


def _warm_then_hit(path: Path, overrides: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """(a hit, the pydantic model); the miss that wrote the entry is a view as the hit is."""
    model = load_config(path, overrides)
    miss, validated = _load(path, overrides, write=True)
    assert validated
    _assert_same(miss, model)
    assert entry_path(path, overrides).is_file()
    hit, validated = _load(path, overrides)
    assert not validated
    return hit, model


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_a_hit_equals_the_validated_example(
    example: Path, example_copy: Callable[[str], Path]
) -> None:
    project = example_copy(example.name)
    hit, miss = _warm_then_hit(project / "gpulaunch.yaml")
    _assert_same(hit, miss)
    assert miss.model_dump() == load_config(project / "gpulaunch.yaml").model_dump()
    for builder in ("buildkit", "classic"):  # what the image is made of, from either object
        assert render_dockerfile(plan_image(hit, project, builder)) == render_dockerfile(
            plan_image(miss, project, builder)
        )


@pytest.mark.parametrize("name", CONFIGS)
def test_a_hit_equals_the_validated_config(name: str, in_tmp: Path) -> None:
    text, overrides = CONFIGS[name]
    (in_tmp / "gpulaunch.yaml").write_text(text)
    hit, miss = _warm_then_hit(in_tmp / "gpulaunch.yaml", overrides)
    _assert_same(hit, miss)
    assert hit == load(in_tmp / "gpulaunch.yaml", overrides, write=False)


def test_a_view_behaves_as_a_loaded_config(in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text(FULL)
    hit, _ = _warm_then_hit(in_tmp / "gpulaunch.yaml")
    with pytest.raises(AttributeError, match="read-only"):
        hit.launch.gpus = 1
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = hit.launch.nope
    assert "network" in hit.launch.model_fields_set  # what launch profiles read
    dumped = hit.model_dump()
    dumped["image"]["env"]["A"] = "changed"  # a dump is a copy, as pydantic's
    assert hit.image.env["A"] == "1"
    import copy
    import pickle

    assert copy.deepcopy(hit) == hit and pickle.loads(pickle.dumps(hit)) == hit
    assert repr(hit.build) == "BuildSettings(network='host')"


def test_commands_read_it_and_dry_runs_do_not_write_it(
    example_copy: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = example_copy("cpu")
    monkeypatch.chdir(project)
    runner = CliRunner()
    dry = ["run", "--dry-run", "--json", "train_ddp.py"]
    cold = runner.invoke(app, dry, catch_exceptions=False)
    assert cold.exit_code == 0, cold.output
    for args in (dry, ["build", "--dry-run", "--builder", "classic"]):
        assert runner.invoke(app, args, catch_exceptions=False).exit_code == 0
    assert not cache_dir().exists()  # a dry run writes nothing, the cache included
    assert runner.invoke(app, ["render"], catch_exceptions=False).exit_code == 0
    assert entry_path(project / "gpulaunch.yaml", ()).is_file()
    monkeypatch.setattr(config_mod, "load_config_bytes", None)  # a hit or it fails
    warm = runner.invoke(app, dry, catch_exceptions=False)
    assert warm.exit_code == 0
    run_id = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")  # new for every run
    assert run_id.sub("ID", warm.stdout) == run_id.sub("ID", cold.stdout)
    assert run_id.search(cold.stdout)


def test_an_edited_file_is_validated_again(in_tmp: Path) -> None:
    path = in_tmp / "gpulaunch.yaml"
    path.write_text("name: first\nlaunch: {gpus: 2}\n")
    _warm_then_hit(path)
    path.write_text("name: first\nlaunch: {gpus: 3}\n")
    fresh, validated = _load(path)
    assert validated and isinstance(fresh, ConfigView) and fresh.launch.gpus == 3
    path.write_text("name: first\nlaunch: {gpus: -3}\n")
    with pytest.raises(ConfigError) as err:
        load(path, (), write=True)
    with pytest.raises(ConfigError) as direct:
        load_config(path)
    assert err.value.message == direct.value.message
    assert err.value.message.startswith("launch.gpus:")


def _libs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """pydantic, pydantic_core and yaml as configcache finds them, each pointed at a stand-in
    file here (so a test can change its size or time without touching the installed one)."""
    import importlib.util
    import types

    real = importlib.util.find_spec
    assert set(configcache._LIBS) == set(LIBS)
    files = {lib: tmp_path / "libs" / f"{lib}.py" for lib in LIBS}
    for file in files.values():
        file.parent.mkdir(exist_ok=True)
        file.write_text("# stand-in\n")

    def find_spec(name: str, *args: Any) -> Any:
        return types.SimpleNamespace(origin=str(files[name])) if name in files else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return files


LIBS = ("pydantic", "pydantic_core", "yaml")
KEY_INPUTS = [
    "the file's bytes (same config)",
    "its path (same bytes)",
    "the --set items",
    "FORMAT",
    "gpulaunch's version",
    "the Python version",
    "the host's possible CPUs",
    "the record key (another user's seal)",
    *(f"{lib}'s {what}" for lib in LIBS for what in ("size", "time")),
]


def _perturb(
    change: str, path: Path, monkeypatch: pytest.MonkeyPatch, libs: dict[str, Path]
) -> tuple[Path, tuple[str, ...]]:
    """One input of the key changed; the (path, --set items) to load next."""
    if change == "the file's bytes (same config)":
        path.write_text("name: keyed\n# a comment\n")
    elif change == "its path (same bytes)":
        path = path.parent / "copy.yaml"
        path.write_text("name: keyed\n")
    elif change == "the --set items":
        return path, ("launch.gpus=2",)
    elif change == "FORMAT":
        monkeypatch.setattr(configcache, "FORMAT", configcache.FORMAT + 1)
    elif change == "gpulaunch's version":
        monkeypatch.setattr(configcache, "__version__", "0.0.0+other")
    elif change == "the Python version":
        monkeypatch.setattr(sys, "version", sys.version + " other")
    elif change == "the host's possible CPUs":
        monkeypatch.setattr("gpulaunch.cpulist.possible_cpus", lambda: 100_000)
    elif change == "the record key (another user's seal)":
        monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(path.parent / "another-user"))
    elif change.endswith("'s size"):
        libs[change.removesuffix("'s size")].write_text("# stand-in, upgraded\n")
    else:
        lib = libs[change.removesuffix("'s time")]
        os.utime(lib, ns=(1, os.stat(lib).st_mtime_ns + 1_000_000_000))
    return path, ()


@pytest.mark.parametrize("change", KEY_INPUTS)
def test_every_input_of_the_key_misses(
    change: str, in_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    libs = _libs_in(tmp_path, monkeypatch)
    path = in_tmp / "gpulaunch.yaml"
    path.write_text("name: keyed\n")
    _warm_then_hit(path)
    assert not _load(path)[1]  # unchanged: still a hit
    path, overrides = _perturb(change, path, monkeypatch, libs)
    assert _load(path, overrides)[1], change


@pytest.mark.parametrize("module", configcache._CODE)
def test_every_module_of_the_code_is_in_the_key(
    module: str, in_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation code edited (in a copy of the package's sources here): a miss."""
    import shutil

    package = tmp_path / "package"
    package.mkdir()
    for name in configcache._CODE:
        shutil.copy(Path(configcache.__file__).parent / name, package / name)
    monkeypatch.setattr(configcache, "_PACKAGE", package)
    path = in_tmp / "gpulaunch.yaml"
    path.write_text("name: keyed\n")
    _warm_then_hit(path)
    with (package / module).open("a") as file:
        file.write("\n# edited\n")
    assert _load(path)[1], module


def _sealed_entry(path: Path) -> dict[str, Any]:
    raw = (entry_path(path, ())).read_text()
    return dict(json.loads(raw))


@pytest.mark.parametrize(
    "plant",
    [
        "garbage",
        "not an object",
        "seal removed",
        "a value edited after sealing",
        "sealed by another key",
        "sealed but malformed",
        "a link to a sealed entry",
    ],
)
def test_a_corrupt_planted_or_unsealed_entry_is_ignored(
    plant: str, in_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = in_tmp / "gpulaunch.yaml"
    path.write_text("name: planted\nlaunch: {gpus: 1}\n")
    _warm_then_hit(path)
    entry_file = entry_path(path, ())
    entry = _sealed_entry(path)
    gpus = entry["config"]["fields"]["launch"]["model"]["fields"]["gpus"]
    if plant == "garbage":
        entry_file.write_bytes(b"\x00{not json")
    elif plant == "not an object":
        entry_file.write_text("[1, 2]")
    elif plant == "seal removed":
        del entry["seal"]
        entry_file.write_text(json.dumps(entry))
    elif plant == "a value edited after sealing":
        gpus["value"] = 8
        entry_file.write_text(json.dumps(entry))
    elif plant == "sealed by another key":
        gpus["value"] = 8
        del entry["seal"]
        ours = os.environ["GPULAUNCH_STATE_DIR"]
        monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(tmp_path / "another-user"))
        forged = seal(entry)
        monkeypatch.setenv("GPULAUNCH_STATE_DIR", ours)
        entry_file.write_text(json.dumps(forged))
    elif plant == "sealed but malformed":
        del entry["seal"]
        entry["config"]["fields"]["launch"] = {"oops": 1}
        entry_file.write_text(json.dumps(seal(entry)))
    else:
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(entry_file.read_text())
        entry_file.unlink()
        entry_file.symlink_to(elsewhere)
    loaded, validated = _load(path)
    assert validated and loaded.launch.gpus == 1


def test_the_cli_error_for_an_invalid_config_is_unchanged(in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text("name: ok\n")
    runner = CliRunner()
    assert runner.invoke(app, ["history"], catch_exceptions=False).exit_code == 0
    (in_tmp / "gpulaunch.yaml").write_text("name: ok\nlaunch: {gpuz: 1}\n")
    for command in ("history", "render"):
        result = runner.invoke(app, [command], catch_exceptions=False)
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert lines == ["gpulaunch: error: " + _message(in_tmp / "gpulaunch.yaml")]
        assert lines[0].startswith("gpulaunch: error: launch.gpuz: unknown field")


def _message(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return err.value.message


def test_the_fingerprint_covers_every_module_validation_runs() -> None:
    script = (
        "import sys, gpulaunch.config as c, gpulaunch.cpulist\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpulaunch')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = {name.removeprefix("gpulaunch.") for name in json.loads(out.replace("'", '"'))}
    files = {os.path.splitext(name)[0] for name in configcache._CODE}
    assert loaded - {"gpulaunch"} <= files - {"__init__", "configcache"}


def test_a_linked_cache_folder_is_never_written_through(in_tmp: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache_dir().mkdir(parents=True)
    (cache_dir() / "config").symlink_to(elsewhere)
    (in_tmp / "gpulaunch.yaml").write_text("name: linked\n")
    for _ in range(2):  # validated both times: nothing was remembered
        loaded, validated = _load(in_tmp / "gpulaunch.yaml", write=True)
        assert validated and loaded.name == "linked"
    assert list(elsewhere.iterdir()) == []


def test_an_unwritable_cache_never_fails_the_command(in_tmp: Path) -> None:
    cache_dir().parent.mkdir(parents=True)
    cache_dir().write_text("a file where the folder should be")
    (in_tmp / "gpulaunch.yaml").write_text("name: unwritable\n")
    result = CliRunner().invoke(app, ["history"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_unreadable_sources_mean_no_cache(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zipped or pyc-only install has no source to hash: validate every time, never fail."""
    monkeypatch.setattr(configcache, "_CODE", ("no-such-module.py",))
    (in_tmp / "gpulaunch.yaml").write_text("name: zipped\n")
    for _ in range(2):
        assert _load(in_tmp / "gpulaunch.yaml", write=True)[1]
    assert not cache_dir().exists()


@pytest.mark.parametrize(
    "text",
    [
        "name: s\nlaunch: {env: {HF_TOKEN: hf_abc123secret}}\n",
        "name: s\nimage: {pip: {index_url: 'https://user:hf_abc123secret@pypi.example/simple'}}\n",
    ],
)
def test_a_config_holding_a_secret_is_never_cached(text: str, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text(text)
    assert CliRunner().invoke(app, ["history"], catch_exceptions=False).exit_code == 0
    assert _load(in_tmp / "gpulaunch.yaml", write=True)[1]
    assert not entry_path(in_tmp / "gpulaunch.yaml", ()).exists()
    stored = [p.read_bytes() for p in cache_dir().rglob("*") if p.is_file()]
    assert not any(b"hf_abc123secret" in data for data in stored)
