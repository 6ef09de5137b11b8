"""The adversarial pass over what a user feeds in (``adversarial_cases.py``): every case is refused in one line
(exit 2, no traceback, no "internal error") or accepted as what it says, never turned into something else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend.__main__ import main

sys.path.insert(0, str(Path(__file__).parent))
from adversarial_cases import CASES, ENV_CASES  # noqa: E402


def outcome(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage error
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.err.strip()


def check(rc: int, err: str, want: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    if want == "ok":
        assert rc == 0, err
    else:
        assert rc == 2 and err.startswith("error:") and len(err.splitlines()) == 1, (rc, err)


@pytest.fixture(autouse=True)
def no_slurm_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-cluster.conf"))  # any Slurm here is not configured


@pytest.mark.parametrize("name", list(CASES))
def test_adversarial_case(name, tmp_path, capsys):
    make, want = CASES[name]
    (tmp_path / "in").mkdir()
    check(*outcome(make(tmp_path / "in"), capsys), want)


@pytest.mark.parametrize("name", list(ENV_CASES))
def test_adversarial_environment(name, tmp_path, capsys, monkeypatch):
    env, make, want = ENV_CASES[name]
    d = tmp_path / "in"
    d.mkdir()
    for k, v in env(d).items():
        monkeypatch.setenv(k, v)
    check(*outcome(make(d), capsys), want)
