"""Many users on one app: 20 concurrent clients against the app as on a lab server (password on), one run training.

    python bench/bench_app_load.py [--clients 20] [--rounds 3] [--duration 240] [--baseline 30] [--out DIR]

The app runs in its own process on 127.0.0.1 only (loopback), with ``DETOUR_PASSWORD`` set, a temporary runs folder
and a temporary evaluations folder. Before it starts, a tiny NER model is fine-tuned there (``python -m backend
evaluate``, 1 epoch, 16 sentences: latency, not quality, is measured) so that NER tagging has a model. Through the
app's Launch action one run trains (the detached worker, as for a user); its tokens/s is measured over ``--baseline``
seconds with no client, then during the load. Each client opens the app as a browser does (log in, the
page, its config and the Runs tab's first poll: ``open_app``), then, over Gradio's REST API, does
``--rounds`` rounds of: fill-mask, NER tagging, listing runs (the Runs tab's refresh), reading the run's curves.
Bounded twice: the rounds, and ``--duration`` seconds after which no client starts another action; a request waits
at most ``PATIENCE`` seconds. The run is cancelled at the end and the app stopped.

Writes bench/results/app_load-<clients>.json and .md (``--out`` for another folder): p50/p95/max latency per
action, the errors (each one named), the training's tokens/s alone (the app idle) and under the load and their
ratio, the CPU time the app process took, the machine (CPU model, cores, speed flags), the load average at start
and end and the app's inference settings (``DETOUR_APP_THREADS``, ``DETOUR_APP_NICE``,
``DETOUR_APP_SESSION_NICE``). Its figures mean something only on a quiet machine: the table says "not quiet" when
the load average at start was above a tenth of the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import RESULTS, cpu_name, cpu_speed_flags, save, start_app, stats  # noqa: E402

USER, PASSWORD = "detour", "bench-load-password"
FILL_TEXT = "The patient was treated with [MASK] for the infection."
NER_TEXT = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."
ACTIONS = ("fill_mask", "ner_tag", "list_runs", "curves")
QUIET_LOAD_PER_CORE = 0.1  # a load average above this share of the cores at start: the figures are not a quiet run's
# HTTP clients' defaults are about 5 s for a login or a config read; a browser waits far longer. With 20 clients opening
# the app at the same moment on 2 busy cores, 19 of 20 logins took more than 5 s (first run of this benchmark), so a
# request may take up to this long before it counts as an error; the latencies say how long it really took.
PATIENCE = 120.0


def tiny_model(tmp: Path) -> str:
    """A tiny random ModernBERT with the bundled tokenizer: the same small model for fill-mask, NER and the run."""
    from tests.conftest import TINY_MODERNBERT, save_tiny_model

    return str(save_tiny_model(tmp / "tiny-model", {**TINY_MODERNBERT, "hidden_size": 128, "num_hidden_layers": 4}))


def fine_tune_ner(model: str, evals: Path, env: dict) -> None:
    subprocess.run(
        [sys.executable, "-m", "backend", "evaluate", "--models", model, "--task", "ner", "--seeds", "1",
         "--epochs", "1", "--max-train-examples", "16", "--max-eval-examples", "16", "--out", str(evals / "bench")],
        cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def tokens_rate(runs: Path, name: str, seconds: float) -> float:
    """The run's tokens/s over ``seconds``, from what the trainer records (status.json's tokens_seen)."""
    from backend.engine.rundir import read_status

    t0, n0 = time.time(), read_status(runs / name).get("tokens_seen", 0)
    time.sleep(seconds)
    t1, n1 = time.time(), read_status(runs / name).get("tokens_seen", 0)
    return (n1 - n0) / (t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the four actions per client")
    ap.add_argument("--duration", type=float, default=240.0, help="no action starts after this many seconds")
    ap.add_argument("--baseline", type=float, default=30.0, help="seconds of training measured with no client")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for the results (default bench/results)")
    args = ap.parse_args()
    own_session()

    from gradio_client import Client

    from app import launch_tab
    from backend.core.inference_lane import lower_session
    from backend.engine.config import default_config
    from backend.engine.rundir import read_status
    from backend.runs import jobs

    tmp = Path(tempfile.mkdtemp(prefix="bench-app-load-"))
    runs, evals = tmp / "runs", tmp / "evals"
    runs.mkdir()
    env = dict(os.environ, DETOUR_RUNS_DIR=str(runs), DETOUR_EVALS_DIR=str(evals), DETOUR_ALLOWED_ROOTS=str(tmp),
               DETOUR_UPLOADS_DIR=str(tmp / "uploads"), DETOUR_CACHE_DIR=str(tmp / "cache"),
               DETOUR_PASSWORD=PASSWORD, GRADIO_ANALYTICS_ENABLED="False")  # fmt: skip
    os.environ.update({k: env[k] for k in ("DETOUR_RUNS_DIR", "DETOUR_EVALS_DIR", "DETOUR_ALLOWED_ROOTS")})
    model = tiny_model(tmp)
    fine_tune_ner(model, evals, env)
    app, url = start_app(runs, env, tmp / "app.log")
    result: dict = {"clients": args.clients, "rounds": args.rounds, "duration_limit_s": args.duration,
                    "model": "tiny random ModernBERT (hidden 128, 4 layers), bundled tokenizer",
                    "python": platform.python_version(), "cpus": os.cpu_count(), "password": "on",
                    "host": "127.0.0.1", "load_average_at_start": os.getloadavg(), "app_inference": app_settings(),
                    "sched_autogroup": autogroup(),
                    "trainer_wait_policy": {**os.environ, **jobs.sharing_env()}.get("OMP_WAIT_POLICY")}  # fmt: skip
    name = "bench-run"
    try:
        c0 = Client(url, auth=(USER, PASSWORD), verbose=False)
        c0.predict(FILL_TEXT, 5, model, None, None, None, False, False, False, False, api_name="/fill_mask")
        c0.predict(NER_TEXT, None, None, None, None, api_name="/ner_tag")  # both models loaded once, not measured
        cfg = default_config()
        cfg.update(name=name, recipe="clm_detour")
        cfg["model"]["name"] = model
        cfg["train"].update(seq_len=64, batch_size=8, precision="fp32")
        cfg["phases"]["main"]["tokens"] = 50_000_000  # far more than the benchmark lasts; cancelled at the end
        cfg["logging"].update(log_every=1, eval_every=50, eval_batches=2, checkpoint_every=100_000)
        launched = c0.predict(*launch_tab.config_to_values(cfg), api_name="/launch")
        if not any(isinstance(o, str) and f"queued {name}" in o for o in launched):  # one of its outputs says so
            raise SystemExit(f"the Launch action did not queue the run; it answered {launched!r}")
        deadline = time.time() + 180
        while (read_status(runs / name).get("tokens_seen") or 0) == 0 and time.time() < deadline:
            time.sleep(0.5)
        result["training_tokens_per_s_without_load"] = tokens_rate(runs, name, args.baseline)

        lat: dict[str, list[float]] = {a: [] for a in ("open_app", *ACTIONS)}
        errors: list[str] = []
        lock = threading.Lock()
        stop_at = time.time() + args.duration

        def call(user: User, action: str) -> None:
            if action == "fill_mask":
                user.predict("fill_mask", FILL_TEXT, 5, model, None, None, None, False, False, False, False)
            elif action == "ner_tag":
                out = user.predict("ner_tag", NER_TEXT, None, None, None, None)
                if "entities" not in str(out[-1]):
                    raise RuntimeError(f"ner_tag answered {out[-1]!r}")
            elif action == "list_runs":
                out = user.predict("runs_refresh", None, name, "tokens_seen")
                if name not in str(out[0]):
                    raise RuntimeError("the runs table does not list the training run")
            else:
                user.predict("curves", [name], "tokens_seen")

        def session(i: int) -> None:
            t = time.perf_counter()
            try:
                client = User(url)
                client.open_page(name)
            except Exception as exc:
                with lock:
                    errors.append(f"client {i}: open: {type(exc).__name__}: {exc}")
                return
            with lock:
                lat["open_app"].append(time.perf_counter() - t)
            for _ in range(args.rounds):
                for action in ACTIONS:
                    if time.time() > stop_at:
                        return
                    t = time.perf_counter()
                    try:
                        call(client, action)
                    except Exception as exc:
                        with lock:
                            errors.append(f"client {i} {action}: {type(exc).__name__}: {exc}")
                        continue
                    with lock:
                        lat[action].append(time.perf_counter() - t)

        # the clients stand for users on other machines: here they share the cores, so they yield to the app and
        # the run (the app and its trainer were started before, in sessions of their own: they keep their priority),
        # and their CPU is counted. Where the kernel groups by session, a thread's nice orders it only within its
        # session: the benchmark leads its own session (``main`` re-executes itself under setsid) and lowers it.
        os.nice(19 - os.nice(0))
        result["clients_session_nice"] = lower_session(19)
        st0 = read_status(runs / name)
        app_cpu0, clients_cpu0 = cpu_seconds(app.pid), cpu_seconds(os.getpid())
        t_load = time.time()
        threads = [threading.Thread(target=session, args=(i,)) for i in range(args.clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.time() - t_load
        st1 = read_status(runs / name)
        result["app_cpu_cores_during_load"] = (cpu_seconds(app.pid) - app_cpu0) / elapsed
        result["clients_cpu_cores_during_load"] = (cpu_seconds(os.getpid()) - clients_cpu0) / elapsed
        result["load_seconds"] = elapsed
        result["latency"] = {a: stats(v) for a, v in lat.items()}
        result["calls"] = sum(len(v) for v in lat.values())
        result["errors"] = errors
        result["training_tokens_per_s_with_load"] = (st1.get("tokens_seen", 0) - st0.get("tokens_seen", 0)) / elapsed
        result["run_state_after_load"] = st1.get("state")
        result["load_average_at_end"] = os.getloadavg()
        c0.predict(name, api_name="/cancel")
    finally:
        try:
            jobs.cancel(runs / name)
        except Exception:
            pass
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()

    table = render(result, args)
    save(f"app_load-{args.clients}", result, table, results=args.out)
    return 0 if not result["errors"] else 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its threads so far."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def app_settings() -> dict:
    """The app's inference settings as the app will read them (``backend.core.inference_lane``)."""
    from backend.core.inference_lane import settings

    return settings()


class User:
    """One user: a logged-in HTTP session that opens the app as a browser does and calls its named events over
    Gradio's REST API (``POST /gradio_api/call/NAME``, then the event's stream). Light on the benchmark's side, unlike
    gradio_client, whose own work on 2 shared cores was counted as the app's latency."""

    def __init__(self, url: str) -> None:
        import httpx

        # an idle connection is dropped before the server's keep-alive (uvicorn: 5 s) closes it: a request sent on a
        # connection the server is closing fails with "Server disconnected", which a browser retries unseen
        self.http = httpx.Client(base_url=url, timeout=PATIENCE, limits=httpx.Limits(keepalive_expiry=2.0))
        self.session = secrets.token_hex(6)  # one per page, as a browser's: the app builds a session's state once

    def open_page(self, run: str) -> None:
        """What a browser asks when it opens the app: log in, the page, its config, then the Runs tab's first poll
        (the first event of a page: the app builds the page's session state for it)."""
        self.http.post("login", data={"username": USER, "password": PASSWORD}).raise_for_status()
        for path in ("", "config"):
            self.http.get(path).raise_for_status()
        self.predict("runs_poll", None, run, "tokens_seen")

    def predict(self, api_name: str, *data) -> list:
        r = self.http.post(f"gradio_api/call/{api_name}", json={"data": list(data), "session_hash": self.session})
        r.raise_for_status()
        stream = self.http.get(f"gradio_api/call/{api_name}/{r.json()['event_id']}")
        stream.raise_for_status()
        event, payload = None, None
        for line in stream.text.splitlines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                payload = line.split(":", 1)[1].strip()
                break
        if event != "complete" or payload is None:
            raise RuntimeError(f"{api_name}: {event or 'no event'}: {payload}")
        return json.loads(payload)


def own_session() -> None:
    """Re-execute under ``setsid`` unless this process leads its session (a shell's job never does), so that the
    clients can yield as a session; without the ``setsid`` tool the benchmark runs as it is and says so."""
    import shutil

    if os.getsid(0) == os.getpid() or os.environ.get("BENCH_APP_LOAD_SETSID") or not shutil.which("setsid"):
        return
    os.environ["BENCH_APP_LOAD_SETSID"] = "1"
    os.execvp("setsid", ["setsid", "--wait", sys.executable, *sys.argv])


def autogroup() -> str:
    """Whether the kernel groups processes by session: then nice values order threads only within one session."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "n/a"


def render(result: dict, args) -> str:
    """The Markdown table: the command, the machine and its load, the latencies, the training rates."""
    cpus, load0, load1 = result["cpus"], result["load_average_at_start"], result["load_average_at_end"]
    quiet = load0[0] <= QUIET_LOAD_PER_CORE * cpus
    solo, loaded = result["training_tokens_per_s_without_load"], result["training_tokens_per_s_with_load"]
    lane = result["app_inference"]
    rows = [
        f"| {a} | {s['n']} | {s['p50_ms']:.0f} | {s['p95_ms']:.0f} | {s['max_ms']:.0f} |"
        for a, s in result["latency"].items()
        if s.get("n")
    ]
    loads = lambda la: "/".join(f"{x:.2f}" for x in la)  # noqa: E731
    return "\n".join(
        [
            f"App under load: {args.clients} concurrent clients (password on, 127.0.0.1), one run training. "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}. Command: `python bench/bench_app_load.py --clients {args.clients} "
            f"--rounds {args.rounds} --duration {args.duration:g} --baseline {args.baseline:g}`",
            "",
            f"Machine: {cpu_name()}, {cpus} cores, flags {' '.join(cpu_speed_flags()) or 'none'}; load average "
            f"(1/5/15 min) {loads(load0)} at start, {loads(load1)} at end"
            + ("" if quiet else " -- **not quiet: other work shared the cores**"),
            f"App inference: {lane['threads']} torch thread(s) at nice {lane['nice']} (DETOUR_APP_THREADS, "
            f"DETOUR_APP_NICE); the app's session at nice {lane.get('session_nice', lane['nice'])} "
            f"(DETOUR_APP_SESSION_NICE); kernel session autogroup {result['sched_autogroup']}; queued trainers wait "
            f"with OMP_WAIT_POLICY={result.get('trainer_wait_policy', '-')}",
            "",
            "| action | calls | p50 ms | p95 ms | max ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"errors: {len(result['errors'])}" + "".join(f"\n- {e}" for e in result["errors"][:20]),
            "",
            "| training tokens/s alone (app idle) | under the load | ratio | app CPU (cores) | clients' CPU (cores) |",
            "|---|---|---|---|---|",
            f"| {solo:.0f} | {loaded:.0f} | {loaded / solo if solo else 0:.2f} | "
            f"{result['app_cpu_cores_during_load']:.2f} | {result['clients_cpu_cores_during_load']:.2f} |",
            "",
            "The clients run in the benchmark's own process on the same cores, at nice 19 in a session at nice "
            f"{result.get('clients_session_nice')} (on a lab server they are the users' browsers, elsewhere); the CPU "
            "columns are averages over the load.",
            "",
            f"{result['load_seconds']:.0f} s of load; the run's state after it: {result['run_state_after_load']}",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
