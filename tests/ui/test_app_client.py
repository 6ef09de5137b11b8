"""The app as a user's client sees it (gradio_client over HTTP, the app in its own process):
launch a tiny run, kill the app while it trains, start a new app, find the run still going, read its curves.
Also: uploads over the limit are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from app import launch_tab
from backend.engine import rundir
from backend.engine.config import default_config
from tests import local_servers

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def start_app(runs: Path, tmp: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """The app in its own process (``extra``: its flags; ``env``: added to this one's), logging under ``tmp``."""
    log = tmp / f"app-{len(list(tmp.glob('app-*.log')))}.log"
    return local_servers.start_app(runs, log, *extra, env={**os.environ, **(env or {})})


def wait_for(cond, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def plot_traces(value) -> list[dict]:
    """gr.Plot output as the client receives it -> the plotly traces."""
    plot = value.get("plot") if isinstance(value, dict) else value
    fig = json.loads(plot) if isinstance(plot, str) else plot
    return fig["data"]


def test_launch_restart_app_and_read_curves(tmp_path, isolated_runs_dir, tiny_modernbert_dir, monkeypatch):
    from gradio_client import Client, handle_file

    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    runs = isolated_runs_dir
    runs.mkdir(parents=True, exist_ok=True)
    app1, url1 = start_app(runs, tmp_path)
    try:
        client = Client(url1, verbose=False)
        cfg = default_config()
        cfg.update(name="live", recipe="clm_detour")
        cfg["model"]["name"] = str(tiny_modernbert_dir)
        cfg["train"].update(seq_len=64, batch_size=4)
        cfg["phases"]["main"]["tokens"] = 3072
        cfg["logging"].update(log_every=1, eval_every=4, eval_batches=2, checkpoint_every=100)
        values = launch_tab.config_to_values(cfg)
        out = client.predict(*values, api_name="/validate")
        assert "recipe: clm_detour" in out[0] and out[1].startswith("python -m backend train")
        bad = list(values)
        bad[launch_tab.KEYS.index("train.lr")] = "fast"
        out = client.predict(*bad, api_name="/validate")
        err = out[4 + launch_tab.KEYS.index("train.lr")]
        assert "expected a number" in (err["value"] if isinstance(err, dict) else err)
        out = client.predict(*values, api_name="/launch")
        name = out[-2]["value"] if isinstance(out[-2], dict) else out[-2]
        assert "queued live" in out[-1] and name == "live-2", out  # under Launch; the name moves on
        # the check that follows (the new name) speaks of the form only: it has no say over what was launched
        nxt = list(values)
        nxt[launch_tab.KEYS.index("name")] = "live-2"
        out = client.predict(*nxt, api_name="/validate")
        assert "✓ config valid" in out[3] and "queued" not in out[3], out[3]
        run = runs / "live"
        st = wait_for(
            lambda: (s := rundir.read_status(run)).get("state") == "running" and s.get("step") and s,
            90,
            "the run to train",
        )
        pid = st["pid"]
    finally:
        app1.send_signal(signal.SIGKILL)  # the app dies hard; the run must not notice
        app1.wait(timeout=30)
    assert rundir.pid_alive(pid), "the training process died with the app"

    app2, url2 = start_app(runs, tmp_path, "--max-upload", "2kb", env={"DETOUR_PASSWORD": "s3cret"})
    try:
        with pytest.raises(urllib.error.HTTPError, match="401"):  # password set: nothing without it
            urllib.request.urlopen(url2 + "config", timeout=10)
        client = Client(url2, verbose=False, auth=("detour", "s3cret"))
        table = client.predict(None, "live", "tokens_seen", api_name="/runs_refresh")[0]
        rows = table["data"] if isinstance(table, dict) else table
        assert rows[0][0] == "live" and rows[0][1] in ("running", "done")
        st = wait_for(
            lambda: (s := rundir.read_status(run)).get("state") in ("done", "failed") and s, 150, "the run to finish"
        )
        assert st["state"] == "done", (run / "train.log").read_text()[-2000:]
        f_train, f_eval, *_ = client.predict(["live"], "tokens_seen", api_name="/curves")
        tr = plot_traces(f_train)
        assert {t["name"] for t in tr} == {"live · main (clm)", "live · decay (mlm)"}
        assert len(tr[0]["x"]) >= 10 and all(isinstance(v, float) for v in tr[0]["y"])
        ev = plot_traces(f_eval)
        assert ev[0]["name"] == "live" and len(ev[0]["y"]) >= 2
        table = client.predict(None, "live", "tokens_seen", api_name="/runs_refresh")[0]
        rows = table["data"] if isinstance(table, dict) else table
        assert rows[0][1] == "done" and rows[0][5] == "100%"
        assert "run live: done" in client.predict("live", api_name="/log_tail")

        big = tmp_path / "big.txt"
        big.write_text("word " * 2000)  # 10 kB > 2 kB
        with pytest.raises(Exception, match="(?i)file size|too large|exceed|limit"):
            client.predict(handle_file(str(big)), api_name="/upload_corpus")
        small = tmp_path / "small.txt"
        small.write_text("a short corpus\n")
        _, msg = client.predict(handle_file(str(small)), api_name="/upload_corpus")
        assert "stored" in msg
    finally:
        app2.terminate()
        app2.wait(timeout=30)
