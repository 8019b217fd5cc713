#!/usr/bin/env python3
"""Move a known number of bytes over one link with PyTorch, for checking the
exporter's byte counters and under-load link state against it.

Usage: load.py h2d|d2h|p2p SECONDS [MiB]
Prints one JSON line: mode, bytes moved, seconds, GB/s (1e9).
h2d/d2h use pinned host memory on GPU 0; p2p copies GPU 0 -> GPU 1.
"""
import json
import sys
import time

import torch

mode, seconds = sys.argv[1], float(sys.argv[2])
mib = int(sys.argv[3]) if len(sys.argv) > 3 else 256
n = mib << 20
if mode == 'h2d':
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device='cuda:0')
elif mode == 'd2h':
    src = torch.empty(n, dtype=torch.uint8, device='cuda:0')
    dst = torch.empty(n, dtype=torch.uint8, pin_memory=True)
elif mode == 'p2p':
    src = torch.empty(n, dtype=torch.uint8, device='cuda:0')
    dst = torch.empty(n, dtype=torch.uint8, device='cuda:1')
else:
    sys.exit('mode must be h2d, d2h or p2p')
src.random_(0, 255) if src.is_cuda else src.copy_(torch.randint(0, 255, (n,), dtype=torch.uint8))
stream = torch.cuda.Stream(device=0)
torch.cuda.synchronize()
copies = 0
start = time.perf_counter()
with torch.cuda.stream(stream):
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        copies += 8
        stream.synchronize()
took = time.perf_counter() - start
print(json.dumps({'mode': mode, 'bytes': copies * n, 'seconds': took, 'gbps': copies * n / took / 1e9}))
