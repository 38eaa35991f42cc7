"""Sweeps over an experiment config (Hayase & Karakida 2024: Figs. 2, 4-6, S.1-S.3, S.6-S.8; Table 1's
learning-rate search): the ``mixer sweep`` command and its machinery. A sweep point runs the ``mixer``
command itself in-process (`mixer_lightning.run_mixer`), as its scripts do in a shell.

- `command`: ``mixer sweep`` itself (its ``--help``, arguments and sub-commands).
- `grid`: the grid points: a width grid at fixed Ω (channels, patch sizes, SW-MLP densities), at fixed
  width m (SW-MLP densities, Fig. 2; γ by eq. S.46, Fig. S.3), crossed with the generic config axes
  (``--grid``: `axes`), seeds.
- `runs`: one ready config per point and seed, the manifest and the scripts, and the one place that
  decides what a run still needs (skip, test, resume from its own last.ckpt, or fit).
- `report`: test error per point (mean ± std over seeds) as CSV and plots, grouped by the axes.
- `cka`: the CKA diagonals between a reference Mixer run and each SW-MLP run of a sweep (Fig. 2(a)).
- `curves`: training curves across seeds from the runs' logs (mean with a min–max band; Figs. S.6-S.8).
- `status`: where each run stands (tested, running, stopped, not started), its epochs and errors so far,
  and the time left at the pace its logs show.
"""
