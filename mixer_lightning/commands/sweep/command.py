"""Sweep an experiment config (Hayase & Karakida 2024, Figs. 2, 4-6, S.1-S.3, S.6-S.8, Table 1's learning-rate
search): one ready config per grid point and seed, scripts that run them (plain shell and a SLURM array),
and reports of the finished runs (`mixer_lightning.commands.sweep`).

Width grids (the config's network picks them; App. C):
  Mixer, --omega Ω [--channels C,…]       S solved from (Ω, C, γ) per C (default: the paper's C and mirrors)
  Mixer, --omega Ω --patch_sizes P,…      C = in_chans·P² (Fig. 6, ImageNet)
  MLP-Mixer, --omega Ω --width m          γ = 2Ω/(m(C + m/C)) per C dividing m (eq. S.46, Fig. S.3)
  SW-MLP, --omega Ω [--densities p,…]     m = √(Ω/(γp)) per p (Fig. 5, Fig. S.1 left; default 1-p = 0.1 … 0.9)
  SW-MLP [--width m] [--densities p,…]    every p at one width (Fig. 2(a); default p = 2^-n, n = 0 … 10)
Generic axes (--grid KEY=V1,V2, repeatable) are crossed with the width grid (or stand alone); every
point runs once per seed. --cka_reference MIXER.yaml trains that Mixer once per seed as well, and the
report draws the average diagonal CKA between it and each SW-MLP against p (Fig. 2(a)).

Running: --emit DIR writes the configs and run_all.sh / slurm_array.sh; --run DIR also runs them here
(--parallel N: N at a time, each in its own process; PARALLEL=N bash DIR/run_all.sh does the same).
Both run each point through `mixer sweep point DIR NAME`, which skips a finished run, tests a fitted
one, resumes a killed one from its own checkpoints/last.ckpt (`mixer fit --ckpt_path last`) and fits
a new one: run the sweep (or the script, or the array) again after a kill and it continues.
$MIXER_ARGS adds flags to every fit and test.

Examples:
    mixer sweep --config configs/cifar10_fig5_s_mixer.yaml --omega 2**18 --seeds 0,1,2 --emit sweeps/fig5_c10
    mixer sweep --config configs/imagenet_fig6_mlp_mixer.yaml --omega 290217984 --gamma 4 \\
        --patch_sizes 7,8,14,16,28,32 --emit sweeps/fig6_in1k
    mixer sweep --config configs/cifar10_fig2_sw_mlp.yaml --width 4096 --cka_reference configs/cifar10_fig2_mixer.yaml \\
        --seeds 0,1,2 --run sweeps/fig2                                       Fig. 2(a), trained and drawn here
    mixer sweep --config MLP_MIXER.yaml --omega 2**20 --width 4096 --emit sweeps/s3         Fig. S.3 (eq. S.46)
    mixer sweep --config configs/cifar10_mixer_ss8.yaml --grid model.optimizer.lr=0.04,0.05,0.06 \\
        --seeds 0,1,2 --emit sweeps/table1_lr                                  Table 1's learning-rate search
    mixer sweep report sweeps/fig5_c10 sweeps/fig5_c10_rp sweeps/fig5_c10_sw   CSVs and plots
    mixer sweep curves sweeps/d7_normal sweeps/d7_rp --metric val/loss        loss curves across seeds (D.7)
    mixer sweep point sweeps/fig5_c10 C48_S83_seed2                           one run (what the scripts call)
    mixer sweep status sweeps/fig5_c10 sweeps/fig5_c10_rp     each run: tested, running, stopped …; time left
"""

from __future__ import annotations

import os
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import PositiveInt

from mixer_lightning.commands.sweep.curves import add_curves_arguments, run_curves
from mixer_lightning.commands.sweep.emit import LOGS, emit
from mixer_lightning.commands.sweep.manifest import read_manifest
from mixer_lightning.commands.sweep.report import add_report_arguments, report_directories, run_report
from mixer_lightning.commands.sweep.runs import extra_arguments, run_point
from mixer_lightning.commands.sweep.status import add_status_arguments, run_status_command
from mixer_lightning.errors import TrainingError, require


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--config", action="append", required=True, help="base config(s), composed in order")
    parser.add_argument("--omega", type=str, default=None, help="connections per layer Ω of a width grid, e.g. 2**18")
    parser.add_argument("--gamma", type=float, default=None, help="γ (default: the base config's; 1 for S-Mixers)")
    parser.add_argument("--width", type=str, default=None, help="fixed width m: a γ grid or a density grid")
    parser.add_argument("--channels", type=str, default=None, help="comma-separated C values (default: the paper's)")
    parser.add_argument("--patch_sizes", type=str, default=None, help="sweep P with C = in_chans·P² instead")
    parser.add_argument("--in_chans", type=PositiveInt, default=3, help="image channels, for C = in_chans·P²")
    parser.add_argument("--densities", type=str, default=None, help="SW-MLP densities p, e.g. 0.9,0.5 or 2**-6")
    parser.add_argument("--grid", type=str, action="append", help="a generic axis KEY=V1,V2,… (repeatable)")
    parser.add_argument("--cka_reference", type=str, action="append", help="Mixer config(s) to compare by CKA")
    parser.add_argument("--seeds", type=str, default="0", help="comma-separated seeds")
    parser.add_argument("--emit", type=str, default=None, help="write configs and scripts to this directory")
    parser.add_argument("--run", type=str, default=None, help="write them there and run them here")
    parser.add_argument("--parallel", type=PositiveInt, default=1, help="with --run: this many runs at a time")


def run(args: Namespace) -> None:
    require(bool(args.emit) != bool(args.run), "emit", "give exactly one of --emit DIR or --run DIR")
    require(args.parallel == 1 or bool(args.run), "parallel", "runs the points here, so it needs --run DIR")
    directory, field = (args.emit, "emit") if args.emit else (args.run, "run")
    extra = extra_arguments() if args.run else []  # a bad $MIXER_ARGS is an error before anything is written
    runs = emit(args, directory, field)
    if args.emit:
        print(f"{len(runs)} runs in {directory}/configs; run them with {directory}/run_all.sh or sbatch", end=" ")
        print(f"{directory}/slurm_array.sh, then: mixer sweep report {directory}")
        return
    if args.parallel > 1:
        from mixer_lightning.commands.sweep.parallel import run_points_in_parallel

        failed = run_points_in_parallel(directory, runs, args.parallel)
        if failed:
            logs = f"their logs are in {Path(directory, LOGS)}; run the same command again to continue them"
            raise TrainingError(
                f"sweep {directory}: {len(failed)} of {len(runs)} runs failed ({', '.join(failed)}); {logs}"
            )
    else:
        for entry in runs:
            run_point(entry, extra)
    report_directories([directory])
    print(f"sweep {directory}: {len(runs)} runs done; report: mixer sweep report {directory}")


def add_point_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("directory", help="the sweep directory")
    parser.add_argument("name", help="the run's name (e.g. C48_S83_seed2: its config's file name)")
    parser.add_argument(
        "--parallel", type=PositiveInt, default=1, help="runs side by side with N-1 others: its share of the CPUs"
    )


def run_point_command(args: Namespace) -> None:
    """Bring one run of a sweep to its end: skip it if tested, test it if fitted, resume it from its own
    checkpoints/last.ckpt if killed, else fit it; then test. What run_all.sh and slurm_array.sh call."""
    runs = {entry["name"]: entry for entry in read_manifest(args.directory, "directory")["runs"]}
    require(args.name in runs, "name", f"{args.name!r} is not a run of {args.directory!r}", f"e.g. {next(iter(runs))}")
    if args.parallel > 1:  # PARALLEL=N run_all.sh
        from mixer_lightning.commands.sweep.parallel import threads_per_run

        os.environ["OMP_NUM_THREADS"] = threads_per_run(args.parallel)
    run_point(runs[args.name])


SUBCOMMANDS = {
    "report": (add_report_arguments, run_report),
    "curves": (add_curves_arguments, run_curves),
    "point": (add_point_arguments, run_point_command),
    "status": (add_status_arguments, run_status_command),
}
