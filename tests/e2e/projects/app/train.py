"""The project's "source": tests edit this file to prove a code change only re-runs the COPY."""

print("train: version 1")
