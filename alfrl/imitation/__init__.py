"""Learning from examples: the expert warm start, DAgger, and the update rules that learn from a group's
winners (RFT) or its pairs (DPO) instead of its advantages.

Taught in notebooks 02 (why imitating an expert is not enough, and how the warm start is made) and 07 (RFT and
DPO beside GRPO). Imports from :mod:`alfrl.base`, :mod:`alfrl.world`, :mod:`alfrl.agent` and :mod:`alfrl.rl`;
never from :mod:`alfrl.eval`, which stands beside it.

Modules, in the order the course teaches them:

- :mod:`alfrl.imitation.sft`         the expert warm start
- :mod:`alfrl.imitation.label_kinds` action kinds; DAgger labels weighted so each kind counts as in the walkthroughs
- :mod:`alfrl.imitation.dagger`      DAgger: the expert labels the states the policy reaches; fine-tune, round after round
- :mod:`alfrl.imitation.rft`         rejection-sampling fine-tuning: the winners of each group, with the warm start's loss
- :mod:`alfrl.imitation.dpo`         preference pairs from a group, and DPO against the starting adapter
"""
