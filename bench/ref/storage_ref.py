#!/usr/bin/env python3
"""Reference for the storage probe's read: a file read with O_DIRECT into
pinned host memory and copied to the GPU, two buffers taking turns (the
drive fills one while the other is copied), as a data loader without
GPUDirect Storage does and as the probe's posix mode does; and the same
reads alone (no copy), which is what dd iflag=direct measures.

Prints one JSON object: {"read_to_gpu": [B/s per pass], "read_only": [...],
"size_bytes": N, "chunk_bytes": N}. The file must exist, whole MiB long.

Usage: storage_ref.py FILE [--chunk BYTES] [--passes N] [--device N]
"""
import argparse
import json
import os
import sys
import time

import torch


def read_pass(fd, size, chunk, bufs, dev_buf, copy):
    stream = torch.cuda.Stream()
    done = [torch.cuda.Event(), torch.cuda.Event()]
    started = [False, False]
    start = time.perf_counter()
    k, off = 0, 0
    while off < size:
        i, n = k % 2, min(chunk, size - off)
        if started[i]:
            done[i].synchronize()
        view = memoryview(bufs[i][1]).cast("B")[:n]
        got = 0
        while got < n:
            r = os.preadv(fd, [view[got:]], off + got)
            if r <= 0:
                raise OSError(f"preadv at {off + got}: {r}")
            got += r
        if copy:
            with torch.cuda.stream(stream):
                dev_buf[:n].copy_(bufs[i][0][:n], non_blocking=True)
                done[i].record(stream)
            started[i] = True
        k, off = k + 1, off + n
    stream.synchronize()
    return size / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--chunk", type=int, default=64 << 20)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()
    size = os.path.getsize(a.file)
    torch.cuda.set_device(a.device)
    # Pinned host buffers (cudaHostAlloc: page aligned, as O_DIRECT needs).
    bufs = []
    for _ in range(2):
        t = torch.empty(a.chunk, dtype=torch.uint8, pin_memory=True)
        if t.data_ptr() % 4096:
            print(f"pinned buffer at {t.data_ptr():#x} is not page aligned", file=sys.stderr)
            return 1
        bufs.append((t, t.numpy()))
    dev_buf = torch.empty(a.chunk, dtype=torch.uint8, device=f"cuda:{a.device}")
    fd = os.open(a.file, os.O_RDONLY | os.O_DIRECT)
    try:
        read_pass(fd, size, a.chunk, bufs, dev_buf, True)  # warm-up
        to_gpu = [read_pass(fd, size, a.chunk, bufs, dev_buf, True) for _ in range(a.passes)]
        only = [read_pass(fd, size, a.chunk, bufs, dev_buf, False) for _ in range(a.passes)]
    finally:
        os.close(fd)
    json.dump({"read_to_gpu": to_gpu, "read_only": only, "size_bytes": size, "chunk_bytes": a.chunk}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
