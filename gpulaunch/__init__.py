"""gpulaunch: build and launch PyTorch training in checked GPU containers."""

__version__ = "0.1.0"
