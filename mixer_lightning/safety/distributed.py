"""How a distributed run's processes end: the process group of a run that ended well is destroyed on
every process, by `mixer fit|validate|test|predict` (`mixer_lightning.cli.lightning.run`) and by
`mixer cka --strategy ddp` alike."""

from __future__ import annotations


def end_process_group() -> None:
    """Destroy the process group of a DDP run that ended well, on every process. Lightning registers
    that at exit for NCCL only (``_init_dist_connection``); a CPU (gloo) group left alive is torn down
    with the interpreter, whose destruction of gloo's still-joinable worker threads aborts a process
    now and then with "terminate called without an active exception" (pytorch#65513). Not after a
    failure, where other processes may still wait in a collective."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
