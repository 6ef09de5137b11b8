"""Detour Lab backend: training, data, analysis. Never imports gradio."""

__version__ = "0.1.0"
