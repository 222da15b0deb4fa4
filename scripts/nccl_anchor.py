#!/usr/bin/env python3
"""NCCL, the anchor tpar's figures are judged against (through PyTorch, f32 sums).

  nccl_anchor.py sweep N LABEL     back-to-back in-place AllReduce per size, in the manner
                                   of nccl-tests' all_reduce_perf: time per call, algbw =
                                   bytes / time, busbw = algbw * 2(N-1)/N
  nccl_anchor.py chain N LABEL     tpar-bench --chain's question asked of NCCL: per step a
                                   small kernel on every GPU (reading --work bytes of
                                   weights, then rewriting the span), then the in-place
                                   AllReduce of the span, on one stream; STEPS steps
                                   enqueued, one synchronize. Per step: the time, the same
                                   chain without the AllReduce, and their difference (the
                                   boundary's cost). With --graph the STEPS steps are
                                   captured once in a CUDA graph and replayed, so the
                                   host's enqueue (PyTorch's eager loop: 53-90 us a step
                                   on four H100s) is out of the figure where the replay
                                   returns at once (with 58M of weights and P2P off, on
                                   two H100s, it held the host while the chain ran)

N is the number of GPUs (one process each); LABEL names the rows ("p2p-off", "nvlink").
Run it on the GPU machine, as tpar-bench runs, in the same run:

  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  NCCL_P2P_DISABLE=1 python3 scripts/nccl_anchor.py sweep 2 p2p-off   # staged through host memory, as tpar must
  python3 scripts/nccl_anchor.py sweep 2 nvlink                       # NCCL's default: for reference only
  python3 scripts/nccl_anchor.py chain 2 p2p-off --work 58M
  python3 scripts/nccl_anchor.py chain 2 p2p-off --work 58M --graph

Options: --sizes 4096,16384,... (bytes; the sweep's default 4K to 256M by 4, the chain's
4K,16K,64K), --steps S (chain, default 64), --work SIZE (chain, bytes of weights each
kernel reads, default 0), --runs R (chain, default 20), --graph (chain: replay a captured
CUDA graph; rows say mode=graph, else mode=eager). NCCL_BENCH_SIZES sets --sizes too.
Exit status: 0 success, 1 a failure (a wrong sum included), 2 a usage error.
"""
import argparse
import faulthandler
import os
import sys
import time


def parse_size(text):
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    value = int(t) * mult
    if value < 4 or value % 4:
        raise ValueError(f"{text}: sizes are whole f32 values, a multiple of 4 bytes")
    return value


def usage_error(parser, message):
    print(f"nccl_anchor.py: {message} (nccl_anchor.py --help)", file=sys.stderr)
    sys.exit(2)


def sweep(rank, n, label, sizes):
    import torch
    import torch.distributed as dist
    for nbytes in sizes:
        x = torch.empty(nbytes // 4, device="cuda")
        calls = 200 if nbytes <= (1 << 20) else 40 if nbytes <= (16 << 20) else 10
        x.fill_(float(rank + 1))
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        # The check: every rank's value summed, exactly (small integers).
        x.fill_(float(rank + 1))
        dist.all_reduce(x)
        torch.cuda.synchronize()
        ok = bool(torch.all(x == n * (n + 1) / 2).item())
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / calls
        worst = torch.tensor([seconds], device="cuda")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # the slowest rank's time is the call's
        seconds = worst.item()
        if rank == 0:
            algbw = nbytes / seconds / 1e9
            print(f"{label} n={n} bytes={nbytes:>10} time_us={seconds * 1e6:9.1f} algbw={algbw:7.2f} "
                  f"busbw={algbw * 2 * (n - 1) / n:7.2f} ok={ok}", flush=True)
        if not ok:
            raise RuntimeError(f"wrong sum at {nbytes} bytes")


def chain(rank, n, label, sizes, steps, work, runs, graph):
    import torch
    import torch.distributed as dist
    weights = torch.zeros(max(work // 4, 1), device="cuda")
    scale = 1.0 / n
    for nbytes in sizes:
        # A size that takes minutes is a hang: every thread's stack to stderr, then out.
        faulthandler.dump_traceback_later(60, exit=True)
        x = torch.ones(nbytes // 4, device="cuda")

        def body(reduce):
            for _ in range(steps):
                if work:
                    weights.sum()  # the step's read of its weights (a kernel of its own)
                x.mul_(scale)      # the span rewritten; the sum of the n equal shares is x again
                if reduce:
                    dist.all_reduce(x)

        graphs = {}
        if graph:
            # NCCL's communicator exists before capture (the warm-up's calls on a side
            # stream, as PyTorch asks), then each chain is captured once.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                body(True)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            for reduce in (True, False):
                g = torch.cuda.CUDAGraph()
                # thread_local: NCCL's watchdog thread may query its events meanwhile,
                # which a global capture would count as an error.
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    body(reduce)
                graphs[reduce] = g
            torch.cuda.synchronize()

        def run(reduce):
            torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            if graph:
                graphs[reduce].replay()
            else:
                body(reduce)
            enqueued = time.perf_counter()
            torch.cuda.synchronize()
            end = time.perf_counter()
            return (end - start) / steps, (enqueued - start) / steps

        def median_of(reduce):
            for _ in range(3):
                run(reduce)
            times = sorted(run(reduce) for _ in range(runs))
            return times[len(times) // 2]

        step, enqueue = median_of(True)
        # The check: after the runs x is ones again on every rank (each step scales the n
        # equal shares by 1/n and sums them), up to the rounding of 1/n. (The chain
        # without the AllReduce, next, only scales it.)
        ok = bool(torch.allclose(x, torch.ones_like(x), rtol=1e-3))
        alone, _ = median_of(False)
        worst = torch.tensor([step, alone], device="cuda")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        step, alone = worst.tolist()
        if rank == 0:
            print(f"{label} chain n={n} bytes={nbytes:>8} steps={steps} work={work} mode={'graph' if graph else 'eager'} "
                  f"step_us={step * 1e6:8.1f} no_allreduce_us={alone * 1e6:8.1f} boundary_us={(step - alone) * 1e6:8.1f} "
                  f"enqueue_us={enqueue * 1e6:8.1f} ok={ok}", flush=True)
        faulthandler.cancel_dump_traceback_later()
        if not ok:
            raise RuntimeError(f"chain at {nbytes} bytes: the span drifted from its value")


def worker(rank, args):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.n)
    try:
        if args.mode == "sweep":
            sweep(rank, args.n, args.label, args.sizes)
        else:
            chain(rank, args.n, args.label, args.sizes, args.steps, args.work, args.runs, args.graph)
    finally:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(prog="nccl_anchor.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("mode", choices=["sweep", "chain"])
    parser.add_argument("n", type=int, help="GPUs, one process each")
    parser.add_argument("label", help="what the rows are called (p2p-off, nvlink)")
    parser.add_argument("--sizes", help="bytes, comma-separated (K, M, G allowed)")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--work", default="0", help="chain: bytes of weights each step reads per GPU")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--port", type=int, default=29531)
    parser.add_argument("--graph", action="store_true", help="chain: capture the steps in a CUDA graph and replay it")
    try:
        args = parser.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    sizes_text = args.sizes or os.environ.get("NCCL_BENCH_SIZES")
    try:
        if sizes_text:
            args.sizes = [parse_size(s) for s in sizes_text.split(",") if s]
        elif args.mode == "sweep":
            args.sizes = [4096 << (2 * i) for i in range(9)]
        else:
            args.sizes = [4 << 10, 16 << 10, 64 << 10]
        args.work = 0 if args.work == "0" else parse_size(args.work)
    except ValueError as e:
        usage_error(parser, str(e))
    if args.n < 1:
        usage_error(parser, "N must be at least 1")
    if args.steps < 1 or args.runs < 1:
        usage_error(parser, "--steps and --runs take at least 1")
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"nccl_anchor.py: PyTorch is needed ({e})", file=sys.stderr)
        sys.exit(1)
    if torch.cuda.device_count() < args.n:
        print(f"nccl_anchor.py: {args.n} GPUs asked for, {torch.cuda.device_count()} visible", file=sys.stderr)
        sys.exit(1)
    try:
        mp.spawn(worker, args=(args,), nprocs=args.n)
    except Exception as e:  # a rank's failure (a wrong sum, NCCL's error)
        print(f"nccl_anchor.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
