"""Hold a GPU the way a training process does, for the placement check.

Usage: python3 hold.py GPU [PINNED_MIB]

Takes a CUDA context and 1 GiB of device memory on GPU, pins and touches
PINNED_MIB of host memory (default 512), runs a few CPU threads briefly so
every thread has a real last CPU, prints "ready <pid>" and sleeps until
killed. It changes no GPU setting.
"""
import os
import sys
import threading
import time

import torch

gpu = int(sys.argv[1])
pinned_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 512
torch.cuda.set_device(gpu)
dev = torch.empty(1 << 28, dtype=torch.float32, device=f"cuda:{gpu}")
host = torch.empty(pinned_mib << 18, dtype=torch.float32, pin_memory=True)
host.fill_(1.0)
dev[: host.numel()].copy_(host, non_blocking=True)
torch.cuda.synchronize()


def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass


threads = [threading.Thread(target=spin, args=(1.0,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(1)
