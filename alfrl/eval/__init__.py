"""Measuring a policy: success on held-out games with intervals and paired tests, and how the lost ones fail.

Taught in notebook 06 (and notebook 05 for wins at each visit of a practised game). Imports from
:mod:`alfrl.base`, :mod:`alfrl.world`, :mod:`alfrl.agent` and :mod:`alfrl.rl`; never from
:mod:`alfrl.imitation`, which stands beside it.

Modules, in the order the course teaches them:

- :mod:`alfrl.eval.evaluate`    success per split and task type
- :mod:`alfrl.eval.eval_stats`  summaries, the Wilson interval and the paired sign test
- :mod:`alfrl.eval.eval_report` comparison tables and figures of evaluated checkpoints
- :mod:`alfrl.eval.failures`    how a lost episode fails: wrong object, loop, out of steps
- :mod:`alfrl.eval.practice`    difficulty profiles, a practice pool with matched controls, wins at each visit
- :mod:`alfrl.eval.scale`       the scale run read back: its pre-registered panel, paired tests, learning curve, costs
"""
