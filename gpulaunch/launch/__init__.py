"""How a job starts: launch profiles and their data (NCCL presets, env-name rules,
precision), GPU/NUMA topology and the per-rank plan, the run flags, and the `run` use case
(`plan.py`: config + flags + profiles + topology -> one launch plan). `numa_bind.py` and
`pythonpath/gpulaunch_precision.py` are stdlib-only scripts mounted into the container.

May import `gpulaunch.image`, `gpulaunch.engine` and the shared top-level modules; never
`gpulaunch.cli`. Never prints or exits: warnings travel in the plan, errors are raised.
"""
