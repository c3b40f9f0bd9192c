import cv2
import torch

print("cv2", cv2.__version__, "torch", torch.__version__)
