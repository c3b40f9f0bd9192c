"""Evaluate the outputs bench/gpu_check.sh collected and write its one table.

    python gpu_table.py WORKDIR OUTPUT.md

WORKDIR holds, per step, `<step>.out` (stdout+stderr) and `<step>.rc` (exit status), or
`<step>.skip` (the reason it did not run). Every row is ok, FAIL, skipped or pending; the exit
status is 0 only when every row is ok (a pending doctor line excepted), so a skipped step
(--no-gpu) makes the check fail loudly instead of passing by omission.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_steps import parse_lines

BF16_OVER_FP32 = 2.0  # goal: bf16 at least 2x fp32 on matmul-heavy steps
LAUNCHER_MIN = 0.95  # launched / bare throughput: launcher overhead about 0


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | FAIL | skipped | pending
    detail: str


class Outputs:
    def __init__(self, work: Path) -> None:
        self.work = work

    def skipped(self, step: str) -> str | None:
        path = self.work / f"{step}.skip"
        return path.read_text().strip() if path.exists() else None

    def ran(self, step: str) -> tuple[int, str] | None:
        out, rc = self.work / f"{step}.out", self.work / f"{step}.rc"
        if not rc.exists():
            return None
        text = out.read_text(errors="replace") if out.exists() else ""
        return int(rc.read_text().strip() or "1"), text


def _tail(text: str, limit: int = 160) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "(no output)"
    return last[-limit:]


def _json_doc(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc = json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _missing(outputs: Outputs, name: str, *steps: str) -> Check | None:
    """skipped / not run / failed status for steps that a check needs, else None."""
    for step in steps:
        reason = outputs.skipped(step)
        if reason is not None:
            return Check(name, "skipped", reason)
        result = outputs.ran(step)
        if result is None:
            return Check(name, "FAIL", f"step {step} did not run")
        if result[0] != 0:
            return Check(name, "FAIL", f"{step} exited {result[0]}: {_tail(result[1])}")
    return None


def check_discovery(outputs: Outputs) -> Check:
    name = "NVML discovery + NUMA plan (run --dry-run --json)"
    if (bad := _missing(outputs, name, "dryrun")) is not None:
        return bad
    doc = _json_doc(outputs.ran("dryrun")[1])  # type: ignore[index]
    if doc is None:
        return Check(name, "FAIL", "no JSON plan in the dry-run output")
    gpu = doc.get("gpu_check") or {}
    detail = str(gpu.get("detail", ""))
    plan = doc.get("numa_plan") or []
    ranks = "; ".join(
        f"rank {r.get('rank')}: {r.get('gpu')} node {r.get('numa_node')} "
        f"cpus {len(r.get('cpus') or [])}"
        for r in plan
    )
    if not gpu.get("validated") or "nvml" not in detail.lower():
        return Check(name, "FAIL", f"GPUs not validated by NVML: {detail}")
    return Check(name, "ok", f"{detail}; {ranks or 'no NUMA binding'}")


def check_driver(outputs: Outputs) -> Check:
    name = "driver / arch check (dry-run gpu_check, nvidia-smi)"
    if (bad := _missing(outputs, name, "dryrun", "smi")) is not None:
        return bad
    smi = outputs.ran("smi")[1].strip().splitlines()  # type: ignore[index]
    doc = _json_doc(outputs.ran("dryrun")[1]) or {}  # type: ignore[index]
    refused = [w for w in doc.get("warnings", []) if "driver" in str(w).lower()]
    if refused:
        return Check(name, "FAIL", "; ".join(map(str, refused)))
    return Check(name, "ok", f"accepted; nvidia-smi: {' | '.join(smi[:2])}")


def check_ranks(outputs: Outputs) -> Check:
    name = "one process per GPU, device + affinity as planned"
    if (bad := _missing(outputs, name, "dryrun", "ranks")) is not None:
        return bad
    doc = _json_doc(outputs.ran("dryrun")[1]) or {}  # type: ignore[index]
    records = [r for r in parse_lines(outputs.ran("ranks")[1]) if r["step"] == "rank"]  # type: ignore[index]
    return evaluate_ranks(name, doc, records)


def evaluate_ranks(name: str, doc: dict[str, Any], records: list[dict[str, Any]]) -> Check:
    nproc = int((doc.get("run") or {}).get("nproc") or 0)
    if len(records) != nproc or nproc == 0:
        return Check(name, "FAIL", f"{len(records)} rank(s) reported, plan has {nproc}")
    if sorted(r["local_rank"] for r in records) != list(range(nproc)):
        return Check(name, "FAIL", "local ranks are not 0..n-1")
    if len({r["pci_bus_id"] for r in records}) != nproc:
        return Check(name, "FAIL", "two ranks share a GPU")
    plan = {p["rank"]: set(p.get("cpus") or []) for p in doc.get("numa_plan") or []}
    parts = []
    for rec in sorted(records, key=lambda r: r["local_rank"]):
        planned = plan.get(rec["local_rank"])
        affinity = set(rec["affinity"])
        if planned and not affinity <= planned:
            return Check(
                name, "FAIL", f"rank {rec['local_rank']}: affinity {sorted(affinity)} not planned"
            )
        parts.append(
            f"rank {rec['local_rank']}: cuda:{rec['device']} {rec['name']} {rec['pci_bus_id']} "
            f"CVD={rec['cuda_visible_devices']} cpus={len(affinity)}"
        )
    return Check(name, "ok", "; ".join(parts))


def check_train(outputs: Outputs) -> Check:
    name = f"bf16 vs fp32 train step, launched vs bare (bf16 >= {BF16_OVER_FP32:g}x fp32)"
    steps = ("train-fp32-bare", "train-bf16-bare", "train-fp32-gl", "train-bf16-gl")
    if (bad := _missing(outputs, name, *steps)) is not None:
        return bad
    tf: dict[str, float] = {}
    for step in steps:
        recs = [r for r in parse_lines(outputs.ran(step)[1]) if r["step"] == "train"]  # type: ignore[index]
        if len(recs) != 1:
            return Check(name, "FAIL", f"{step}: {len(recs)} train records")
        tf[step] = float(recs[0]["tflops"])
    return evaluate_train(name, tf)


def evaluate_train(name: str, tf: dict[str, float]) -> Check:
    speedup = tf["train-bf16-bare"] / tf["train-fp32-bare"]
    over = {p: tf[f"train-{p}-gl"] / tf[f"train-{p}-bare"] for p in ("fp32", "bf16")}
    detail = (
        f"TFLOPS fp32 bare {tf['train-fp32-bare']:.1f} / gpulaunch {tf['train-fp32-gl']:.1f}, "
        f"bf16 bare {tf['train-bf16-bare']:.1f} / gpulaunch {tf['train-bf16-gl']:.1f}; "
        f"bf16/fp32 {speedup:.2f}x; launched/bare fp32 {over['fp32']:.2f} bf16 {over['bf16']:.2f}"
    )
    ok = speedup >= BF16_OVER_FP32 and min(over.values()) >= LAUNCHER_MIN
    return Check(name, "ok" if ok else "FAIL", detail)


def check_record(outputs: Outputs, name: str, step: str, field: str, want: Any) -> Check:
    if (bad := _missing(outputs, name, step)) is not None:
        return bad
    recs = [r for r in parse_lines(outputs.ran(step)[1]) if r["step"] == step]  # type: ignore[index]
    if not recs:
        return Check(name, "FAIL", "no record printed")
    got = recs[0].get(field)
    shown = {k: v for k, v in recs[0].items() if k != "step"}
    return Check(name, "ok" if got == want else "FAIL", json.dumps(shown, sort_keys=True))


def checks(work: Path) -> list[Check]:
    outputs = Outputs(work)
    return [
        check_discovery(outputs),
        check_driver(outputs),
        Check("gpulaunch doctor", "pending", "no doctor command yet"),
        check_ranks(outputs),
        check_train(outputs),
        check_record(
            outputs,
            "--precision bf16: autocast gives bf16 on the GPU",
            "autocast",
            "dtype",
            "bfloat16",
        ),
        check_record(
            outputs, "--expandable-segments in the CUDA allocator settings", "memory", "ok", True
        ),
    ]


def markdown(rows: list[Check], header: str) -> str:
    lines = [header, "", "| check | result | detail |", "|---|---|---|"]
    for row in rows:
        detail = row.detail.replace("|", "\\|").replace("\n", " ")
        shown = row.status if row.status != "skipped" else f"skipped: {detail}"
        lines.append(f"| {row.name} | {shown} | {detail} |")
    return "\n".join(lines) + "\n"


def exit_code(rows: list[Check]) -> int:
    return 0 if all(r.status in ("ok", "pending") for r in rows) else 1


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: gpu_table.py WORKDIR OUTPUT.md", file=sys.stderr)
        return 2
    work, output = Path(argv[1]), Path(argv[2])
    header_file = work / "header.md"
    header = header_file.read_text().strip() if header_file.exists() else "# GPU check"
    rows = checks(work)
    text = markdown(rows, header)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    sys.stdout.write(text)
    for row in rows:
        if row.status == "skipped":
            print(f"{row.name}: skipped: {row.detail}")
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
