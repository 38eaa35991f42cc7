"""``mixer sweep`` (Hayase & Karakida 2024: Figs. 2, 4-6, S.1-S.3, S.6-S.8; Table 1's learning-rate search):
`command` (the command), `grid` and `axes` (the points), `emit` (configs, manifest, scripts), `runs` (what a
run still needs; each fit and test is a ``mixer`` process of its own), `parallel` (points
side by side), `report`, `plots` and `cka` (errors and CKA per point), `curves` (App. D.7), `status`."""
