import torch

print("poetrydemo on", torch.__version__)
