"""mixer-lightning: MLP-Mixers, permuted-Kronecker Mixers and sparse-weight MLPs in PyTorch Lightning.

The parts, by role (imports point down this list, never up: docs/architecture.md; tests/test_layers.py):

- the command line: `cli` (the ``mixer`` entry point, Lightning's fit/validate/test/predict),
  `commands` (the project's own commands; ``mixer sweep``'s machinery in `commands.sweep`),
  `benchmarks` (behind ``mixer bench``);
- training (what a config names by class path): `callbacks`, `loggers`, `tasks` (LightningModules),
  `data` (the data module), `optim`;
- the science: `analysis` (spectra, CKA, few-shot, effective weights), `weights` (timm and JAX weights),
  `models` (plain nn.Modules), `width` (Ω and the widths, no torch);
- run safety: `safety` (what a file may import, atomic files, checked configs, run directories,
  checkpoints, SLURM preemption); `errors` (one-line errors), beneath everything.
"""

__version__ = "0.1.0"
