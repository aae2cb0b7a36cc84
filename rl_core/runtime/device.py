"""The learner's device, its inference precision and its intra-op threads."""

from __future__ import annotations

import logging

import torch

from rl_core.runtime import distributed
from rl_core.runtime import transport as tp
from rl_core.config.sizing import usable_cores

log = logging.getLogger("learner")


def select_device(flags, world: distributed.WorldEnv | None = None) -> torch.device:
    """The learner's device: the GPU of this rank's LOCAL_RANK under torchrun, the (current) GPU, or the CPU.  A host
    with fewer GPUs than torchrun ranks ends the rank with one line, exit 2, before anything is written."""
    if not flags.disable_cuda and torch.cuda.is_available():
        if world is not None:
            gpu = distributed.local_gpu(world, torch.cuda.device_count())  # (UserError: more ranks than GPUs)
            torch.cuda.set_device(gpu)
            return torch.device("cuda", gpu)
        return torch.device("cuda")
    return torch.device("cpu")


def inference_precision(flags, device: torch.device) -> torch.dtype:
    """The dtype of --inference_precision; warns where bfloat16 would be emulated (slower)."""
    if flags.inference_precision == "float32":
        return torch.float32
    if device.type == "cpu":
        try:
            with open("/proc/cpuinfo") as f:
                cpu_flags = set(f.read().split())
        except OSError:
            cpu_flags = set()
        if not cpu_flags & {"avx512_bf16", "amx_bf16"}:
            log.warning(
                "--inference_precision=bfloat16: this CPU has no native bf16 (avx512_bf16 or amx_bf16), "
                "so inference may be slower than float32"
            )
    return torch.bfloat16


def auto_torch_threads(flags, server_cores: float = 1.0, lockstep_cores: bool = False) -> int:
    """Intra-op threads for the learner process: the cores the env servers leave.

    Each env server process on this machine (unix sockets) keeps ``server_cores`` of a core busy (the package's
    ``SERVER_CORES``; 1 by default); OpenMP threads competing with busy servers for cores spin and stall (on 2
    cores with one busy process, an AtariNet update took 0.43 s on 1 thread and 1.06 s on 2).  Procgen's servers
    idle while the CPU learner works: on 2 cores its run reached 1.3 times the steps/s on 2 threads
    (docs/experiments/throughput.md).  So do every package's under ``--deterministic``, whose one thread steps the
    servers, then infers and learns; where the package's model gains from threads there (its ``LOCKSTEP_CORES``:
    Atari's), the learner takes every core.  TCP servers run elsewhere.
    """
    cores = usable_cores()
    world = distributed.world_from_environ()
    if world is not None:  # the ranks on this host share its cores
        cores = max(1, cores // max(1, world.local_world_size))
    if lockstep_cores and flags.deterministic:
        return cores
    if tp.parse_address(flags.pipes_basename).kind == "unix":
        busy = round(flags.num_servers // flags.server_splits * server_cores)  # the server processes' cores
        return max(1, cores - busy)
    return cores


def set_torch_threads(flags, device: torch.device, server_cores: float = 1.0, lockstep_cores: bool = False) -> None:
    """--torch_threads (or ``auto_torch_threads``) for this process, and the device line of the log."""
    name = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    threads = flags.torch_threads or auto_torch_threads(flags, server_cores, lockstep_cores)
    torch.set_num_threads(threads)
    log.info("device: %s%s, %d torch intra-op thread%s", device, name, threads, "s" if threads != 1 else "")
