"""Worked solutions of the notebooks' exercises: ``solutions/nbNN.py`` for notebook NN.
Try the exercise first; ``tests/test_exercises_nbNN.py`` checks these with the notebook's checks."""
