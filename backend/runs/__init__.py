"""Runs: preflight checks, preparing run directories, training one, and the detached queue worker."""
