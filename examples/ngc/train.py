"""Single-GPU training loop: a tiny regression that runs on CUDA when present, else CPU.

Under `gpulaunch smoke` (GPULAUNCH_SMOKE=1) it trains GPULAUNCH_SMOKE_STEPS steps and skips
the convergence check: a smoke run proves that training starts, not that it converges.
"""

import os

import torch

SMOKE = os.environ.get("GPULAUNCH_SMOKE") == "1"
STEPS = int(os.environ.get("GPULAUNCH_SMOKE_STEPS", "2")) if SMOKE else 200


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(512, 16, device=device)
    true_w = torch.randn(16, 1, device=device)
    y = x @ true_w
    model = torch.nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    print(f"device={device} steps={STEPS} final_loss={loss.item():.6f}")
    if not SMOKE and loss.item() > 1e-3:
        raise SystemExit("did not converge")


if __name__ == "__main__":
    main()
