"""The ground floor: what every part of the course stands on, and nothing of the course itself.

Used from notebook 00 on (paths), and by notebooks 05 and 06 (run folders, checkpoints, settings checks, curves).
Imports nothing from the other subpackages.

Modules, in the order the course meets them:

- :mod:`alfrl.base.paths`      where the data lives: data/packs (in git), data/games (expanded), the shipped adapters
- :mod:`alfrl.base.checks`     one checker for every config's field types and ranges
- :mod:`alfrl.base.cli`        dataclass configs as ``python -m alfrl`` flags
- :mod:`alfrl.base.rundir`     one policy for output folders (train, eval, dagger, sft): overwrite, resume, refuse
- :mod:`alfrl.base.checkpoint` checkpoints (adapter, Adam, RNG states) and JSONL records that survive a kill
- :mod:`alfrl.base.tracking`   experiment tracking (``--log``): TensorBoard, W&B, SwanLab beside metrics.jsonl
"""
