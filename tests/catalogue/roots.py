"""A fixture both catalogue modules use, imported by name (a second conftest.py would shadow the suite's
``conftest`` module): every catalogue test writes its sweeps, evaluations and reports under its own tmp dir, and
runs from there (a relative --out lands there too)."""

from __future__ import annotations

import pytest

from backend.core import paths


@pytest.fixture(autouse=True)
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    monkeypatch.setenv(paths.EVALS_ENV, str(tmp_path / "evals"))
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    monkeypatch.chdir(tmp_path)
