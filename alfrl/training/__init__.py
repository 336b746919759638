"""The training run: settings and presets, the loop that plays, scores and updates, and its curves.

Taught in notebook 05 (the full loop, checkpoints and resume), with notebook 07's other update rules and TRL
side by side. The top floor under the command line: it may import every other subpackage.

Modules, in the order the course teaches them:

- :mod:`alfrl.training.train_config` the training settings, presets and their checks
- :mod:`alfrl.training.train`        the training loop, dynamic sampling, checkpoints and resume
- :mod:`alfrl.training.train_eval`   evaluation on held-out games during training (``--eval-every``)
- :mod:`alfrl.training.plots`        a run's training curves (plots.png)
- :mod:`alfrl.training.trl_bridge`   the same method in TRL's GRPOTrainer, past one GPU (optional extra ``trl``)
"""
