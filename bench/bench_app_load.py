"""Many users on one app as on a lab server (password on), one run training: back to back, or a classroom.

    python bench/bench_app_load.py [--scenario back-to-back classroom] [--clients 20] [--rounds 3] [--duration 240]
                                   [--baseline 30] [--pause 8] [--open-within 5] [--seed 0] [--out DIR]

The app runs in its own process on 127.0.0.1 only (loopback), with ``DETOUR_PASSWORD`` set, a temporary runs folder
and a temporary evaluations folder. Before it starts, a tiny NER model is fine-tuned there (``python -m backend
evaluate``, 1 epoch, 16 sentences: latency, not quality, is measured) so that NER tagging has a model. Through the
app's Launch action one run trains (the detached worker, as for a user). Then each scenario in turn
(``bench/app_scenarios.py``): the run's tokens/s is measured over ``--baseline`` seconds with no user, then
``--clients`` users work: each opens the app as a browser does (log in, the page, the events its config sends on
load: ``bench/app_users.py``) and then
- back-to-back: ``--rounds`` rounds of fill-mask, NER tagging, the runs list (the Runs tab's Refresh) and the run's
  curves, no pause between them, all users opening at the same moment;
- classroom: the users open the app within ``--open-within`` seconds of each other, then work at a person's pace: a
  pause of ``--pause`` seconds on average before each action (the Fill-mask tab, a fill-mask, the NER tab, a tagging,
  the Runs tab, whose timer polls while it is read, its Refresh, the curves), ``--rounds`` times.
Bounded twice: the rounds, and ``--duration`` seconds after which no user starts another action; a request waits at
most ``PATIENCE`` seconds. The run is cancelled at the end and the app stopped.

Writes bench/results/app_load-<clients>.json and .md (back-to-back) and app_load-classroom-<clients>.json and .md
(``--out`` for another folder): p50/p95/max latency per action, the errors (each one named), the training's tokens/s
alone (the app idle) and under the load and their ratio, the CPU time the app process took, the page's size and its
load events, the machine (CPU model, cores, speed flags), the load average at start and end, the scenario's settings,
the command and the app's inference settings (``DETOUR_APP_THREADS``, ``DETOUR_APP_NICE``,
``DETOUR_APP_SESSION_NICE``). Its figures mean something only on a quiet machine: the table says "not quiet" when the
load average at start was above a tenth of the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from app_scenarios import FILL_TEXT, NER_TEXT, PASSWORD, SCENARIOS, USER, Load, run_users  # noqa: E402
from app_users import Page  # noqa: E402
from common import RESULTS, cpu_name, cpu_speed_flags, save, start_app, stats  # noqa: E402

QUIET_LOAD_PER_CORE = 0.1  # a load average above this share of the cores at start: the figures are not a quiet run's
# HTTP clients' defaults are about 5 s for a login or a config read; a browser waits far longer. With 20 clients opening
# the app at the same moment on 2 busy cores, 19 of 20 logins took more than 5 s (first run of this benchmark), so a
# request may take up to this long before it counts as an error; the latencies say how long it really took.
PATIENCE = 120.0
RUN = "bench-run"


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


def tokens_seen(runs: Path) -> int:
    from backend.engine.rundir import read_status

    return read_status(runs / RUN).get("tokens_seen") or 0


def tokens_rate(runs: Path, seconds: float) -> float:
    """The run's tokens/s over ``seconds``, from what the trainer records (status.json's tokens_seen)."""
    t0, n0 = time.time(), tokens_seen(runs)
    time.sleep(seconds)
    return (tokens_seen(runs) - n0) / (time.time() - t0)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS),
                    help="which loads, one after the other on the same app and run (default: both)")  # fmt: skip
    ap.add_argument("--clients", type=int, default=20, help="users at once")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the scenario's actions per user")
    ap.add_argument("--duration", type=float, default=240.0, help="no action starts after this many seconds")
    ap.add_argument("--baseline", type=float, default=30.0, help="seconds of training measured with no user")
    ap.add_argument("--pause", type=float, default=8.0, help="classroom: mean seconds a user reads before an action")
    ap.add_argument("--open-within", type=float, default=5.0, help="classroom: the users open the app within this")
    ap.add_argument("--seed", type=int, default=0, help="classroom: the users' opening moments and pauses")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for the results (default bench/results)")
    return ap.parse_args(argv)


def command(scenario: str, args) -> str:
    cmd = (f"python bench/bench_app_load.py --scenario {scenario} --clients {args.clients} --rounds {args.rounds} "
           f"--duration {args.duration:g} --baseline {args.baseline:g}")  # fmt: skip
    if scenario == "classroom":
        cmd += f" --pause {args.pause:g} --open-within {args.open_within:g} --seed {args.seed}"
    return cmd


def main(argv=None) -> int:
    args = parse_args(argv)
    own_session()

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
    common = {"clients": args.clients, "rounds": args.rounds, "duration_limit_s": args.duration,
              "model": "tiny random ModernBERT (hidden 128, 4 layers), bundled tokenizer",
              "python": platform.python_version(), "cpus": os.cpu_count(), "password": "on", "host": "127.0.0.1",
              "app_inference": app_settings(), "sched_autogroup": autogroup(),
              "trainer_wait_policy": {**os.environ, **jobs.sharing_env()}.get("OMP_WAIT_POLICY")}  # fmt: skip
    failed = False
    try:
        opened = asyncio.run(prepare(url, model, default_config(), launch_tab.config_to_values, runs))
        common.update(opened)
        # the users stand for people on other machines: here they share the cores, so they yield to the app and the
        # run (the app and its trainer were started before, in sessions of their own: they keep their priority), and
        # their CPU is counted. Where the kernel groups by session, a thread's nice orders it only within its session:
        # the benchmark leads its own session (``main`` re-executes itself under setsid) and lowers it.
        os.nice(19 - os.nice(0))
        common["clients_session_nice"] = lower_session(19)
        for scenario in args.scenario:
            result = {"scenario": scenario, "command": command(scenario, args), **common}
            if scenario == "classroom":
                result.update(pause_s=args.pause, open_within_s=args.open_within, seed=args.seed)
            measure(scenario, result, args, url, model, runs, app.pid)
            result["run_state_after_load"] = read_status(runs / RUN).get("state")
            name = f"app_load-{args.clients}" if scenario == "back-to-back" else f"app_load-{scenario}-{args.clients}"
            save(name, result, render(result), results=args.out)
            failed |= bool(result["errors"])
    finally:
        try:
            jobs.cancel(runs / RUN)
        except Exception:
            pass
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
    return 1 if failed else 0


async def prepare(url: str, model: str, cfg: dict, to_values, runs: Path) -> dict:
    """Load both models once (not measured), launch the run through the Launch action and wait for its first
    tokens; returns what one page's opening weighs."""
    page = Page(url, USER, PASSWORD, PATIENCE)
    try:
        events = await page.open()
        await page.call("fill_mask", FILL_TEXT, 5, model, None, None, None, False, False, False, False)
        await page.call("ner_tag", NER_TEXT, None, None, None, None)
        cfg.update(name=RUN, recipe="clm_detour")
        cfg["model"]["name"] = model
        cfg["train"].update(seq_len=64, batch_size=8, precision="fp32")
        cfg["phases"]["main"]["tokens"] = 50_000_000  # far more than the benchmark lasts; cancelled at the end
        cfg["logging"].update(log_every=1, eval_every=50, eval_batches=2, checkpoint_every=100_000)
        launched = await page.call("launch", *to_values(cfg), rest_as_shown=True)  # its target: as shown
        said = [o.get("value") if isinstance(o, dict) else o for o in launched]
        if not any(isinstance(o, str) and f"queued {RUN}" in o for o in said):  # one of its outputs says so
            raise SystemExit(f"the Launch action did not queue the run; it answered {launched!r}")
    finally:
        await page.close()
    deadline = time.time() + 180
    while tokens_seen(runs) == 0 and time.time() < deadline:
        await asyncio.sleep(0.5)
    return {"page_bytes": page.page_bytes, "page_load_events": events}


def measure(scenario: str, result: dict, args, url: str, model: str, runs: Path, app_pid: int) -> None:
    """The run alone, then ``scenario``'s users: latencies, errors, the run's rate under them, who took the CPU."""
    result["load_average_at_start"] = os.getloadavg()
    result["training_tokens_per_s_without_load"] = tokens_rate(runs, args.baseline)
    load = Load(url, model, RUN, args.rounds, time.monotonic() + args.duration, PATIENCE, args.pause,
                args.open_within, args.seed)  # fmt: skip
    n0, app_cpu0, clients_cpu0, t0 = tokens_seen(runs), cpu_seconds(app_pid), cpu_seconds(os.getpid()), time.time()
    asyncio.run(run_users(scenario, load, args.clients))
    elapsed = time.time() - t0
    result["app_cpu_cores_during_load"] = (cpu_seconds(app_pid) - app_cpu0) / elapsed
    result["clients_cpu_cores_during_load"] = (cpu_seconds(os.getpid()) - clients_cpu0) / elapsed
    result["training_tokens_per_s_with_load"] = (tokens_seen(runs) - n0) / elapsed
    result["load_seconds"] = elapsed
    result["latency"] = {a: stats(v) for a, v in load.lat.items()}
    result["calls"] = sum(len(v) for v in load.lat.values())
    result["errors"] = load.errors
    result["load_average_at_end"] = os.getloadavg()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its threads so far."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def app_settings() -> dict:
    """The app's inference settings as the app will read them (``backend.core.inference_lane``)."""
    from backend.core.inference_lane import settings

    return settings()


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


def render(result: dict) -> str:
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
    if result["scenario"] == "classroom":
        what = (
            f"a classroom: {result['clients']} users opening the app within {result['open_within_s']:g} s, then "
            f"working at a person's pace (a pause of {result['pause_s']:g} s on average before each action)"
        )
    else:
        what = f"back to back: {result['clients']} users opening the app at once, then making requests with no pause"
    return "\n".join(
        [
            f"App under load, {what}; password on, 127.0.0.1, one run training. {time.strftime('%Y-%m-%d %H:%M %Z')}. "
            f"Command: `{result['command']}`",
            "",
            f"Machine: {cpu_name()}, {cpus} cores, flags {' '.join(cpu_speed_flags()) or 'none'}; load average "
            f"(1/5/15 min) {loads(load0)} at start, {loads(load1)} at end"
            + ("" if quiet else " -- **not quiet: other work shared the cores**"),
            f"App inference: {lane['threads']} torch thread(s) at nice {lane['nice']} (DETOUR_APP_THREADS, "
            f"DETOUR_APP_NICE); the app's session at nice {lane.get('session_nice', lane['nice'])} "
            f"(DETOUR_APP_SESSION_NICE); kernel session autogroup {result['sched_autogroup']}; queued trainers wait "
            f"with OMP_WAIT_POLICY={result.get('trainer_wait_policy', '-')}",
            f"Opening the app: log in, the page ({result['page_bytes'] / 1024:.0f} KB, its config inside) and the "
            f"{result['page_load_events']} events it sends on load",
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
            "The users run in the benchmark's own process on the same cores, at nice 19 in a session at nice "
            f"{result.get('clients_session_nice')} (on a lab server they are the users' browsers, elsewhere); the CPU "
            "columns are averages over the load. show_tab: a tab picked (its select events); runs_poll: the Runs "
            "tab's timer while a user reads it.",
            "",
            f"{result['load_seconds']:.0f} s of load; the run's state after it: {result['run_state_after_load']}",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
