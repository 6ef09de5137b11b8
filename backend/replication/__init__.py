"""The mini replication of the paper: plan, steps, verdicts, figures and the self-contained report."""
