#!/usr/bin/env python3
"""Independent reference for `gpulink_exporter collectives`: the same NCCL
collectives through torch.distributed, one process per GPU, timed and
reported as nccl-tests times and reports them. For bench/collective-accuracy.sh
and bench/node-probe.sh.

Usage: nccl_ref.py [--gpus 0,1] [--size BYTES] [--small-size BYTES]
                   [--warmup N] [--iters N] [--samples N]
                   [--collectives all_reduce,all_gather,...]
                   [--rank-base R --world W --master ADDR:PORT]

Inside a node (the default) it spawns one process per GPU of --gpus (CUDA
ordinals in PCI bus order). For two "nodes" on one host, run it twice, each
with one GPU, --world 2, --rank-base 0 and 1 and the same --master.

Each collective at --size and --small-size (float32, nccl-tests' meaning of
size: the all-reduce buffer, the gathered buffer of an all-gather, the
scattered buffer of a reduce-scatter, each rank's whole send buffer of an
all-to-all, one send of a send/recv): --warmup untimed operations, then
--samples times: a CUDA event, --iters operations, an event; the time of one
operation is the slowest rank's elapsed / iters, and the result is the
median over samples. (nccl-tests times all of a process's GPUs together,
the slowest of them; across processes it averages by default, -a 1, and
-a 3 takes the slowest. This takes the slowest, as the exporter does
within a process and across two nodes.) rank_seconds is each rank's own
median, for telling a slow side from a slow operation. algbw =
size / time, busbw = algbw x nccl-tests' factor: all-reduce 2(n-1)/n,
all-gather, reduce-scatter and all-to-all (n-1)/n, send/recv 1. Send/recv
runs for each pair of ranks once, lower to higher.

GB/s is decimal (1e9). NCCL_NVLS_ENABLE=0 (and the other multicast
switches) are forced on in every process: multicast can put a shared host's
GPUs out of service. Prints one JSON object on stdout: {"ranks": n,
"results": [{collective, size_bytes, ranks, from_rank, to_rank, seconds,
alg_bytes_per_second, bus_bytes_per_second}]}, the field names of
probes.CollectiveResult.
"""
import argparse
import json
import os
import statistics
import sys

for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[k] = v

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


def bus_factor(c, n):
    if c == "all_reduce":
        return 2 * (n - 1) / n
    if c in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def op_for(c, size, n, rank, dev, pair=None):
    """A closure running one operation of c at size bytes."""
    elems = size // 4 // n * n  # a multiple of n floats, as the exporter rounds
    if c == "all_reduce":
        buf = torch.ones(elems, dtype=torch.float32, device=dev)
        return lambda: dist.all_reduce(buf)
    if c == "all_gather":
        out = torch.empty(elems, dtype=torch.float32, device=dev)
        inp = torch.ones(elems // n, dtype=torch.float32, device=dev)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if c == "reduce_scatter":
        inp = torch.ones(elems, dtype=torch.float32, device=dev)
        out = torch.empty(elems // n, dtype=torch.float32, device=dev)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if c == "all_to_all":
        inp = torch.ones(elems, dtype=torch.float32, device=dev)
        out = torch.empty(elems, dtype=torch.float32, device=dev)
        return lambda: dist.all_to_all_single(out, inp)
    src, dst = pair
    buf = torch.ones(size // 4, dtype=torch.float32, device=dev)
    if rank == src:
        return lambda: dist.send(buf, dst)
    if rank == dst:
        return lambda: dist.recv(buf, src)
    return None


def timed(fn, a, dev):
    """Seconds per operation: median over samples of the slowest rank."""
    for _ in range(a.warmup):
        if fn:
            fn()
    torch.cuda.synchronize(dev)
    samples = []
    for _ in range(a.samples):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier(device_ids=[dev.index])
        torch.cuda.synchronize(dev)
        start.record()
        for _ in range(a.iters):
            if fn:
                fn()
        stop.record()
        stop.synchronize()
        t = torch.tensor([start.elapsed_time(stop) / 1e3 / a.iters if fn else 0.0], device=dev)
        every = torch.zeros(a.world, device=dev)
        dist.all_gather_into_tensor(every, t)
        samples.append(every.tolist())
    slowest = [max(s) for s in samples]
    own = [statistics.median(s[r] for s in samples) for r in range(a.world)]
    return statistics.median(slowest), min(slowest), max(slowest), own


def worker(local, a, gpus, q):
    rank = a.rank_base + local
    dev = torch.device("cuda", gpus[local])
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method="tcp://" + a.master, rank=rank, world_size=a.world,
                            device_id=dev)
    n = a.world
    results = []
    for c in a.collectives:
        for size in (a.size, a.small_size):
            if c != "send_recv":
                t, lo, hi, own = timed(op_for(c, size, n, rank, dev), a, dev)
                results.append(result(c, size, n, t, lo, hi, own))
                continue
            for src in range(n):
                for dst in range(src + 1, n):
                    t, lo, hi, own = timed(op_for(c, size, n, rank, dev, (src, dst)), a, dev)
                    r = result(c, size, 2, t, lo, hi, own)
                    r.update(from_rank=src, to_rank=dst)
                    results.append(r)
    dist.destroy_process_group()
    if local == 0:
        q.put({"ranks": n, "rank_base": a.rank_base, "gpus": gpus, "results": results,
               "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version()))})


def result(c, size, n, t, lo, hi, own):
    alg = size / t
    return {"collective": c, "size_bytes": size, "ranks": n, "seconds": t, "sample_min": lo, "sample_max": hi,
            "alg_bytes_per_second": alg, "bus_bytes_per_second": alg * bus_factor(c, n), "rank_seconds": own}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", default=None, help="CUDA ordinals, default all")
    p.add_argument("--size", type=int, default=256 << 20)
    p.add_argument("--small-size", type=int, default=8 << 10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--collectives", default=",".join(COLLECTIVES))
    p.add_argument("--rank-base", type=int, default=0)
    p.add_argument("--world", type=int, default=0)
    p.add_argument("--master", default="127.0.0.1:29512")
    a = p.parse_args()
    gpus = [int(g) for g in a.gpus.split(",")] if a.gpus else list(range(torch.cuda.device_count()))
    a.collectives = [c for c in a.collectives.split(",") if c]
    for c in a.collectives:
        if c not in COLLECTIVES:
            sys.exit(f"--collectives: unknown {c!r}; known: {','.join(COLLECTIVES)}")
    a.world = a.world or len(gpus)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, a, gpus, q)) for i in range(len(gpus))]
    for pr in procs:
        pr.start()
    out = q.get(timeout=600)
    for pr in procs:
        pr.join()
        if pr.exitcode != 0:
            sys.exit(f"rank process exited {pr.exitcode}")
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
