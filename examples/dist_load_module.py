#!/usr/bin/env python3
"""A tensor-parallel torch.nn.Module loaded on every rank of a group with
gpufile.safetensors.load_distributed (issue 37): the module is built on
the meta device (no memory), given real memory with to_empty(), and
filled with load_state_dict() from a checkpoint each byte of which was
read from storage by one rank only.

    PYTHONPATH=python GPUFILE_LIBRARY=build/libgpufile.so \\
        python3 examples/dist_load_module.py --ranks 2          # gloo, CPU
    torchrun --nproc-per-node 2 examples/dist_load_module.py --backend nccl

Without torchrun, the script starts --ranks copies of itself on this host
(gloo, CPU tensors). It writes a checkpoint of the whole model first (rank
0, once), then every rank loads its shard: the first Linear split by
output features (column parallel), the second by input features (row
parallel, its outputs summed by an all_reduce), the LayerNorm replicated.
Each rank checks the group's output against the whole model's.
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn

DIM, HIDDEN = 64, 256

# Column-parallel up projection, row-parallel down projection.
PLAN = {"*.up.weight": 0, "*.up.bias": 0, "*.down.weight": 1}


class Block(nn.Module):
    def __init__(self, world=1, device=None):
        super().__init__()
        self.norm = nn.LayerNorm(DIM, device=device)
        self.up = nn.Linear(DIM, HIDDEN // world, device=device)
        self.down = nn.Linear(HIDDEN // world, DIM, bias=False, device=device)

    def forward(self, x, group_sum=None):
        y = self.down(torch.relu(self.up(self.norm(x))))
        return group_sum(y) if group_sum else y


class Model(nn.Module):
    def __init__(self, world=1, device=None, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(world, device) for _ in range(layers))

    def forward(self, x, group_sum=None):
        for b in self.blocks:
            x = x + b(x, group_sum)
        return x


def rank_main(args):
    from gpufile.safetensors import load_distributed, load_file, save_file

    if args.rendezvous:
        dist.init_process_group(args.backend, init_method=args.rendezvous,
                                rank=args.rank, world_size=args.ranks)
    else:  # torchrun: env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
        dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    path = args.checkpoint
    if rank == 0 and not os.path.exists(path):
        torch.manual_seed(0)
        whole = Model()
        save_file({k: v.contiguous() for k, v in whole.state_dict().items()}, path)
    dist.barrier()

    # The module of this rank, without memory until to_empty().
    model = Model(world, device="meta")
    model.to_empty(device=device)
    sd = load_distributed(path, device=device, plan=PLAN)
    model.load_state_dict(sd)   # strict: every parameter, every shape
    s = sd.summary
    print("rank %d: %d tensors; read %d of the %d data bytes; received %d bytes by "
          "collectives; each byte read once: %s"
          % (rank, len(sd), s["ranks"][rank]["data_bytes_read"], s["data_bytes"],
             s["ranks"][rank]["collective_recv_bytes"], s["read_once"]))

    def group_sum(y):
        dist.all_reduce(y)
        return y

    torch.manual_seed(1)
    x = torch.randn(8, DIM).to(device)
    with torch.no_grad():
        got = model(x, group_sum)
        whole = Model().to(device)
        whole.load_state_dict(load_file(path, device=str(device)))
        want = whole(x)
    ok = torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    print("rank %d: output of the %d-way model %s the whole model's"
          % (rank, world, "matches" if ok else "DIFFERS FROM"))
    dist.destroy_process_group()
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--checkpoint", default="/tmp/gpufile-dist-example.safetensors")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rendezvous", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None or "RANK" in os.environ:
        return rank_main(args)
    rdv = "/tmp/gpufile-dist-example.%d.rdv" % os.getpid()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ranks",
                               str(args.ranks), "--backend", args.backend, "--checkpoint",
                               args.checkpoint, "--rank", str(r), "--rendezvous",
                               "file://" + rdv])
             for r in range(args.ranks)]
    rcs = [p.wait() for p in procs]
    if os.path.exists(rdv):
        os.unlink(rdv)
    return max(rcs)


if __name__ == "__main__":
    sys.exit(main())
