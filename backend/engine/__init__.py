"""The engine under every recipe: config schema and validation, corpus data, models, precision, run directories
and checkpoints."""
