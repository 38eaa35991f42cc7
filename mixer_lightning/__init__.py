"""mixer-lightning: MLP-Mixers, permuted-Kronecker Mixers and sparse-weight MLPs in PyTorch Lightning.

Layout: `models` (plain nn.Modules), `data` (ImageDataModule), `tasks` (LightningModules), `cli`
(the `mixer` command), `lightning_cli` (its Lightning subcommands), `commands` (its project
subcommands), `analysis`, `benchmarks`, `width`.
"""

__version__ = "0.1.0"
