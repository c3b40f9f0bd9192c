"""Seams to cluster tools (kubectl, sbatch, squeue, sacct): the only place that runs them,
with a timeout on every call.

May import only the shared modules (config, yamlio, textcheck, fsio, masking, errors).
"""
