"""Print the environment as KEY=VALUE lines (the GPU tests read NVIDIA_VISIBLE_DEVICES)."""

import os

for key, value in sorted(os.environ.items()):
    print(f"{key}={value}")
