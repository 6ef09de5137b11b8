"""Leaves every other package may use: errors, where things live, atomic writes, process control, machine facts."""
