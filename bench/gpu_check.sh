#!/usr/bin/env bash
# GPU check for a lent GPU machine (prepared for one H200, no Docker engine: host mode,
# `gpulaunch run --no-container`). Under 8 minutes; installs nothing; prints one table and
# writes it to bench/results/gpu-<date>.md. Exits non-zero when any step failed or was skipped.
# Each step has its own timeout (40+15+60+4x50+40+40 s = 6.6 min at worst).
#
#   bench/gpu_check.sh            # needs: nvidia-smi, a Python with CUDA torch (PYTHON=...)
#   bench/gpu_check.sh --no-gpu   # dry mode: every GPU step reports "skipped: no GPU"
#
# GPU_CHECK_RESULTS overrides the folder of the table (default bench/results).
# PYTHON (default python3) runs gpulaunch (`python -m gpulaunch`; the repo is put on
# PYTHONPATH when it is not installed) and, in host mode, the ranks. With a Docker engine the
# container path would need an image with CUDA torch, which cannot be pulled here: the script
# says so and uses host mode.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
no_gpu=0
case "${1:-}" in
--no-gpu) no_gpu=1 ;;
"") ;;
*)
	echo "usage: $0 [--no-gpu]" >&2
	exit 2
	;;
esac

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null; then
	echo "gpu_check: error: $python not found (set PYTHON)" >&2
	exit 2
fi
python=$(command -v "$python")
# absolute, but not through links (a venv's python must keep its own path)
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
# host mode starts ranks with the Python that runs gpulaunch; torchrun and python on PATH too
PATH="$(dirname "$python"):$PATH"
export PATH
if ! "$python" -c 'import gpulaunch' 2>/dev/null; then
	export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$python" -c 'import gpulaunch, typer, pydantic, yaml, jinja2' 2>/dev/null; then
	echo "gpu_check: error: $python cannot import gpulaunch and its dependencies (typer, pydantic, yaml, jinja2)" >&2
	exit 2
fi

date_tag=$(date -u +%Y-%m-%d)
results_dir=${GPU_CHECK_RESULTS:-$repo/bench/results}
results="$results_dir/gpu-$date_tag.md"
if ((no_gpu)); then results="$results_dir/gpu-$date_tag-no-gpu.md"; fi
work=$(mktemp -d /tmp/glcheck-XXXXXX)
project="$work/project"
out="$work/out"
mkdir -p "$project" "$out"
trap 'rm -rf "$work"' EXIT

cp "$repo/bench/gpu_steps.py" "$project/gpu_steps.py"
cat >"$project/gpulaunch.yaml" <<'EOF'
version: 1
name: glcheck
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.4"
launch:
  gpus: all
EOF

# step NAME TIMEOUT CMD...: run in the project, keep output and exit status for gpu_table.py
step() {
	local name=$1 limit=$2
	shift 2
	echo "==> $name: $*"
	local rc=0
	(cd "$project" && timeout "$limit" "$@") >"$out/$name.out" 2>&1 || rc=$?
	echo "$rc" >"$out/$name.rc"
	if ((rc != 0)); then
		echo "    $name: FAILED (exit $rc)"
		tail -n 5 "$out/$name.out" | sed 's/^/    /'
	fi
}

skip() {
	echo "$2" >"$out/$1.skip"
	echo "==> $1: skipped: $2"
}

gpus=0
if ((no_gpu == 0)); then
	if ! command -v nvidia-smi >/dev/null; then
		echo "gpu_check: error: nvidia-smi not found; on a machine without a GPU use --no-gpu" >&2
		exit 1
	fi
	gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
	if ((gpus == 0)); then
		echo "gpu_check: error: nvidia-smi lists no GPU; use --no-gpu on a machine without one" >&2
		exit 1
	fi
	if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
		echo "gpu_check: error: $python has no CUDA torch (torch.cuda.is_available() is False)" >&2
		exit 1
	fi
	if ! "$python" -c 'import pynvml' 2>/dev/null; then
		echo "gpu_check: warning: pynvml is missing: discovery falls back to sysfs (that row fails)" >&2
	fi
fi

mode=(--no-container)
engine="none"
if command -v docker >/dev/null && timeout 5 docker info >/dev/null 2>&1; then
	engine="present (container path needs a CUDA torch image, none can be pulled here: host mode)"
fi

{
	echo "# GPU check $date_tag"
	echo
	echo "- host: $(hostname), $(nproc) CPUs, GPUs: $gpus, engine: $engine"
	echo "- python: $("$python" -c 'import sys; print(sys.version.split()[0])'), mode: host (--no-container)"
	if ((no_gpu)); then echo "- run with --no-gpu: GPU steps skipped"; fi
} >"$out/header.md"

gl=("$python" -m gpulaunch)
if ((no_gpu)); then
	for s in dryrun smi ranks train-fp32-bare train-bf16-bare train-fp32-gl train-bf16-gl autocast memory; do
		skip "$s" "no GPU"
	done
else
	step dryrun 40 "${gl[@]}" run gpu_steps.py rank --gpus all "${mode[@]}" --dry-run --json
	step smi 15 nvidia-smi --query-gpu=name,driver_version,compute_cap,pci.bus_id --format=csv,noheader
	step ranks 60 "${gl[@]}" run gpu_steps.py rank --gpus all "${mode[@]}"
	for p in fp32 bf16; do
		step "train-$p-bare" 50 "$python" gpu_steps.py train --precision "$p"
		step "train-$p-gl" 50 "${gl[@]}" run gpu_steps.py train --gpus 1 --precision "$p" "${mode[@]}"
	done
	step autocast 40 "${gl[@]}" run gpu_steps.py autocast --gpus 1 --precision bf16 "${mode[@]}"
	step memory 40 "${gl[@]}" run gpu_steps.py memory --gpus 1 --expandable-segments "${mode[@]}"
fi

echo
rc=0
(cd "$repo/bench" && "$python" gpu_table.py "$out" "$results") || rc=$?
echo "table written to $results"
exit "$rc"
