"""Sweeps: a grid of matched runs over one or two config keys x seeds, queued, evaluated and reported with CIs."""
