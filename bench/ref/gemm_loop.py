#!/usr/bin/env python3
"""A bf16 GEMM loop that reports its throughput every second, for
bench/probe-cost.sh (what a training job loses while the exporter probes).

Usage: gemm_loop.py [--gpu 0] [--n 8192] [--batch 16] [--seconds 600] OUT.jsonl

C = A @ B with N x N bf16 matrices, back to back on one stream. Every batch
of --batch matmuls is timed with CUDA events and ended with a synchronize;
about once a second it appends one JSON line to OUT.jsonl:
  {"t0": epoch, "t1": epoch, "matmuls": k, "tflops": wall-clock TFLOP/s,
   "tflops_gpu": TFLOP/s by CUDA events}
tflops counts 2*N^3 flops per matmul over the wall time of the window, so
any GPU time taken by another process (a probe round) shows as a loss.
Runs until --seconds pass or it is killed.
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('out')
    ap.add_argument('--gpu', type=int, default=0)
    ap.add_argument('--n', type=int, default=8192)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--seconds', type=float, default=600)
    args = ap.parse_args()
    dev = torch.device('cuda', args.gpu)
    torch.cuda.set_device(dev)
    a = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(args.n, args.n, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * args.n ** 3
    for _ in range(3):  # cuBLAS heuristics and workspace
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    end = time.time() + args.seconds
    with open(args.out, 'a', buffering=1) as f:
        w0, k, gpu_s = time.time(), 0, 0.0
        while True:
            e0.record()
            for _ in range(args.batch):
                torch.matmul(a, b, out=c)
            e1.record()
            e1.synchronize()
            k += args.batch
            gpu_s += e0.elapsed_time(e1) / 1e3
            now = time.time()
            if now - w0 >= 1.0:
                f.write(json.dumps({'t0': w0, 't1': now, 'matmuls': k,
                                    'tflops': k * flops / (now - w0) / 1e12,
                                    'tflops_gpu': k * flops / gpu_s / 1e12}) + '\n')
                w0, k, gpu_s = now, 0, 0.0
                if now >= end:
                    break


if __name__ == '__main__':
    main()
