"""Write a file under /workspace (the bind-mounted project) and report who we are."""

import os
import sys
from pathlib import Path

target = Path(sys.argv[1])
target.parent.mkdir(parents=True, exist_ok=True)
target.write_text("written by the job\n")
print(f"container uid={os.getuid()} gid={os.getgid()} wrote {target.resolve()}", flush=True)
