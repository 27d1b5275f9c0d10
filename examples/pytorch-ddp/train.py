"""PyTorch DistributedDataParallel on CPU (gloo), run by clusterrun.

Everything the process group needs comes from clusterrun's environment: MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE. The script waits at a barrier before and after training, reports progress, and rank 0 writes the
final loss as the task's result. It fits a small linear model to synthetic data, so it needs no download.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import clusterrun  # noqa: E402  (the repo's single-file client)

STEPS = int(os.environ.get("STEPS", "50"))


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"rank {rank}/{world} on {os.environ['CLUSTERRUN_HOST']}, master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
          flush=True)
    clusterrun.barrier("before-init", timeout=120)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    torch.manual_seed(0)
    true_w = torch.tensor([[2.0, -3.0, 0.5]])
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    x = torch.randn(256, 3, generator=gen)
    y = x @ true_w.T + 0.01 * torch.randn(256, 1, generator=gen)

    model = nn.parallel.DistributedDataParallel(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    loss = None
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # gradients are all-reduced across ranks here
        opt.step()
        if step % 10 == 0:
            clusterrun.progress(step, STEPS, f"loss {loss.item():.4f}")
            print(f"rank {rank} step {step}: loss {loss.item():.5f}", flush=True)
        if clusterrun.should_stop():
            print(f"rank {rank}: stop requested, leaving early", flush=True)
            break

    # Every rank ends with the same weights: DDP keeps them in step.
    weights = [round(v, 4) for v in model.module.weight.detach().flatten().tolist()]
    clusterrun.barrier("after-training", timeout=120)
    dist.destroy_process_group()
    if rank == 0:
        with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
            json.dump({"final_loss": round(loss.item(), 6), "weights": weights, "world_size": world, "steps": STEPS}, f)
    print(f"rank {rank} done, weights {weights}", flush=True)


if __name__ == "__main__":
    main()
