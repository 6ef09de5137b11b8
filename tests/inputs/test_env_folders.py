"""The DETOUR_* folders as a user may set them by mistake: empty (``DETOUR_RUNS_DIR=''`` trained a whole run into
the working directory), relative (each process resolved it against its own working directory), or a file where a
root folder belongs (the refusal named a --out nobody gave); and the app's login with a blank user."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backend.__main__ import main
from backend.core import paths

FOLDERS = [(paths.RUNS_ENV, paths.runs_dir, "runs"), (paths.SWEEPS_ENV, paths.sweeps_dir, "sweeps"),
           (paths.EVALS_ENV, paths.evals_dir, "evals"), (paths.REPORTS_ENV, paths.reports_dir, "reports"),
           (paths.UPLOADS_ENV, paths.uploads_dir, "uploads")]  # fmt: skip


@pytest.mark.parametrize("env, root, default", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_an_empty_folder_variable_means_the_default_said_once(env, root, default, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(paths, "_SAID", set())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env, "")
    assert root() == paths.REPO_ROOT / default and root() == paths.REPO_ROOT / default  # not the working directory
    err = capsys.readouterr().err
    assert err.count(f"note: {env} is set but empty: using the default {paths.REPO_ROOT / default}") == 1, err
    assert os.environ[env] == str(paths.REPO_ROOT / default)  # the processes it starts read the same folder


def test_a_relative_folder_variable_is_made_absolute_once_for_every_process(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(paths, "_SAID", set())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(paths.RUNS_ENV, "my-runs")
    assert paths.runs_dir() == tmp_path / "my-runs"
    assert "DETOUR_RUNS_DIR=my-runs is a relative path" in capsys.readouterr().err
    child = subprocess.run([sys.executable, "-c", "from backend.core.paths import runs_dir; print(runs_dir())"],
                           cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert child.stdout.strip() == str(tmp_path / "my-runs") and "note:" not in child.stderr  # not REPO_ROOT/my-runs


def test_the_cache_and_shared_data_variables_follow_the_same_rule(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(paths, "_SAID", set())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(paths.CACHE_ENV, "")
    monkeypatch.setenv(paths.SHARED_ENV, "")
    assert paths.cache_dir() == (paths.Path.home() / ".cache" / "detour-lab").resolve()
    assert paths.shared_data_dir() == (paths.REPO_ROOT.parent / "shared" / "data").resolve()  # was '.'
    err = capsys.readouterr().err
    assert "DETOUR_CACHE_DIR is set but empty" in err and "DETOUR_SHARED_DATA is set but empty" in err


def test_a_root_folder_that_is_a_file_is_said_by_its_variable_not_as_a_flag_never_given(monkeypatch, capsys, tmp_path):
    f = tmp_path / "sweeps-file"
    f.write_text("mine\n")
    monkeypatch.setenv(paths.SWEEPS_ENV, str(f))
    capsys.readouterr()
    assert main(["sweep", "--set", "recipe=mlm", "--grid", "train.lr=1e-4,2e-4"]) == 2
    err = capsys.readouterr().err
    assert f"DETOUR_SWEEPS_DIR={f} is a file" in err and "--out" not in err and f.read_text() == "mine\n"


@pytest.mark.parametrize("user", ["", " "])
def test_a_blank_user_with_a_password_is_refused_at_start(user):
    """Off loopback with a strong password and DETOUR_USER='': the app started and nobody could log in (422)."""
    env = {**os.environ, "DETOUR_PASSWORD": "correct horse battery", "DETOUR_USER": user}
    proc = subprocess.run([sys.executable, "-m", "app", "--host", "0.0.0.0", "--port", "1"], cwd=paths.REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: DETOUR_USER is set but blank"), proc.stderr
