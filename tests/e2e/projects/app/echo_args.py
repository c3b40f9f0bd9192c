"""Deterministic output from argv, cwd, uid and env: compares `run` with its --dry-run line."""

import os
import sys

print(f"args={sys.argv[1:]!r}")
print(f"cwd={os.getcwd()} uid={os.getuid()} gid={os.getgid()}")
for key in ("HOME", "PYTHONPATH", "PYTHONUNBUFFERED", "NVIDIA_VISIBLE_DEVICES"):
    print(f"{key}={os.environ.get(key)}")
print("echo_args: a line on stderr", file=sys.stderr)
