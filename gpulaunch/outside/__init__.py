"""Seams to outside systems other than the Docker engine: cluster tools (kubectl, sbatch,
squeue, sacct), package indexes (PyPI's JSON API) and pip's dry-run resolver. The only place
that runs or calls them, with a timeout on every call; tests fake these modules, e2e tests
use the real things.

May import only the shared modules (config, yamlio, textcheck, fsio, masking, errors).
"""
