"""Report who we are and, given a path, write a file there (under /workspace)."""

import os
import sys
from pathlib import Path

print(f"hello uid={os.getuid()} gid={os.getgid()}", flush=True)
if len(sys.argv) > 1:
    target = Path(sys.argv[1])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("written by the job\n")
    print(f"wrote {target.resolve()}", flush=True)
