"""Run directories and their lifecycle, shared by both training loops.

Opening or resuming a run, confined and atomic files, trainer state without pickle, metric sinks,
progress bars and tables, plots, and the checks that decide whether a run's own config is trusted.
"""
