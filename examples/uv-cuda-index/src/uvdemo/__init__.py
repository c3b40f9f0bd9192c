def main() -> None:
    import torch

    print("uvdemo on", torch.__version__)
