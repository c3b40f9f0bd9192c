"""A training loop that survives preemption: save on SIGTERM, resume from the newest checkpoint.

The contract gpulaunch documents (README, "Preemption-safe runs"):
- checkpoints go to $GPULAUNCH_CHECKPOINT_DIR (launch.checkpoint_dir on the host, mounted at
  /checkpoints), written to a temp file and renamed, so a kill never leaves half a file;
- on SIGTERM (a spot/preemption notice, `gpulaunch stop`, Ctrl-C) finish the current step,
  save, and exit 143 within launch.stop_grace seconds (SIGKILL follows);
- at start, resume from the newest readable checkpoint.

The "model" here is a small dict saved as JSON so the example runs anywhere; a real job saves
`{"step": step, "model": model.state_dict(), "optim": optim.state_dict()}` with torch.save
the same way (temp file, then os.replace). Under torchrun only rank 0 writes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

CHECKPOINTS = Path(os.environ.get("GPULAUNCH_CHECKPOINT_DIR", "checkpoints"))
STEPS = int(os.environ.get("STEPS", "40"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.25"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "10"))
KEEP = 3
RANK = int(os.environ.get("RANK", "0"))

stop_requested = False


def on_sigterm(signum: int, _frame: object) -> None:
    global stop_requested
    stop_requested = True  # finish the step in hand, then save and leave


def newest_checkpoint() -> dict | None:
    for path in sorted(CHECKPOINTS.glob("step-*.json"), reverse=True):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a damaged file: fall back to the one before it
    return None


def save(state: dict) -> Path:
    if RANK != 0:
        return CHECKPOINTS
    CHECKPOINTS.mkdir(parents=True, exist_ok=True)
    target = CHECKPOINTS / f"step-{state['step']:08d}.json"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    for old in sorted(CHECKPOINTS.glob("step-*.json"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return target


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    state = newest_checkpoint()
    if state is None:
        state = {"step": 0, "weight": 0.0}
        print("starting at step 0", flush=True)
    else:
        print(f"resumed from step {state['step']}", flush=True)
    while state["step"] < STEPS:
        time.sleep(STEP_SECONDS)  # one training step
        state["step"] += 1
        state["weight"] = round(state["weight"] + 0.5, 3)
        print(f"step {state['step']}", flush=True)
        if stop_requested:
            path = save(state)
            print(f"SIGTERM: saved step {state['step']} to {path}", flush=True)
            return 143
        if state["step"] % SAVE_EVERY == 0:
            save(state)
    save(state)
    print(f"done at step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
