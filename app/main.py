"""Builds the Detour Lab Blocks from the tab modules and launches it with safe defaults."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gradio as gr  # noqa: E402

from app import (  # noqa: E402
    analyze_tab,
    detour_tab,
    fill_mask_tab,
    launch_tab,
    ner_tab,
    reports_tab,
    runs_tab,
    sweeps_tab,
    tab_timers,
    uploads_dir,
)

DEFAULT_MAX_UPLOAD = 50 * 1024 * 1024
CSS = """
.field-error { color: #b91c1c; font-size: 0.85em; margin-top: -6px; }
.field-error p { color: #b91c1c; }
"""
# A typed value + Enter in a slider's number box ends the edit as leaving the box does (Gradio sends 'release' on
# blur, not on Enter), so the Detour tab's scrub snaps onto the saved model it shows.
JS = """() => {
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (e.key === "Enter" && t instanceof HTMLInputElement && t.type === "number" && t.closest(".snap-on-enter")) {
      t.blur();
    }
  }, true);
}"""
THEME = gr.themes.Soft(
    font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],  # no web fonts: no network at start
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"],
)


# Many users on one server. Each event has its own slots: light ones (fill-mask, NER tagging, the Runs tab's reads)
# up to 4 at once each; heavy ones share a group with limit 1: ``concurrency_id="analysis"`` (CKA, weight change,
# trajectories, the NER evaluation's fine-tuning) and ``"detour"`` (the Detour tab's model passes). So a CKA waits
# behind another CKA, never in front of a fill-mask; a waiting request sees its place in the output's progress
# ("queue: 2/3"). ``max_size``: past 200 waiting requests a new one is told the queue is full, instead of waiting
# without end. ``GRADIO_DEFAULT_CONCURRENCY_LIMIT`` is not read: these are set here on purpose.
QUEUE = {"default_concurrency_limit": 4, "max_size": 200, "status_update_rate": "auto"}
HEAVY = {
    "analysis": ("cka", "weight_change", "trajectory", "ner_evaluate"),
    "detour": ("detour_masks", "detour_surprise", "detour_scrub", "detour_trace"),
}

# (title, id, module): every tab module builds itself with ``build(ctx)`` inside its gr.Tab
TABS = (
    ("Launch", "launch", launch_tab),
    ("Runs", "runs", runs_tab),
    ("Sweeps", "sweeps", sweeps_tab),
    ("Analyze", "analyze", analyze_tab),
    ("Detour", "detour", detour_tab),
    ("Fill-mask", "fill-mask", fill_mask_tab),
    ("NER", "ner", ner_tab),
    ("Reports", "reports", reports_tab),
)


@dataclass
class AppContext:
    max_concurrent: int | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    app_lock: object = None  # the runs folder's .app.lock while this app serves it (backend.core.inference_lane)


def parse_size(value: str | int | None) -> int:
    """'50mb' / '2gb' / '500kb' / bytes -> bytes, at least one; else ValueError ('-5mb' and '0' were taken, and
    refused every upload; 'infmb' was an OverflowError at start)."""
    if value is None or value == "":
        return DEFAULT_MAX_UPLOAD
    if isinstance(value, int):
        size = value
    else:
        v = str(value).strip().lower()
        unit, mult = next(((u, m) for u, m in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024), ("b", 1))
                           if v.endswith(u)), ("", 1))  # fmt: skip
        number = float(v[: len(v) - len(unit)])
        if not math.isfinite(number):
            raise ValueError(f"not a finite size: {value!r}")
        size = int(number * mult)
    if size < 1:
        raise ValueError(f"not a positive size: {value!r}")
    return size


def warm_imports() -> None:
    """Import transformers' lazy classes once, up front: the first lazy import is not thread-safe and the app's
    handlers run in several threads."""
    import transformers

    for name in ("AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForMaskedLM", "AutoModelForTokenClassification"):
        getattr(transformers, name)


def build_app(ctx: AppContext | None = None) -> gr.Blocks:
    ctx = ctx or AppContext()
    with gr.Blocks(title="Detour Lab", analytics_enabled=False) as demo:
        gr.Markdown(
            "## Detour Lab — encoder continued pretraining with a causal-LM detour\n"
            "Launch CLM-detour and MLM runs, watch their curves, compare representations, probe the models."
        )
        tabs, gates = [], {}
        with gr.Tabs():
            for title, tab_id, tab in TABS:
                with gr.Tab(title, id=tab_id) as t:
                    built = tab.build(ctx) or {}
                tabs.append(t)
                if "timer" in built and "live" in built:  # a timer its tab's checkbox switches on and off
                    gates[built["timer"]._id] = built["live"]
        tab_timers.poll_only_the_open_tab(tabs, gates)
    return demo


def launch_kwargs(host: str, port: int | None, share: bool, ctx: AppContext, auth=None) -> dict:
    uploads = uploads_dir()
    uploads.mkdir(parents=True, exist_ok=True)
    return dict(
        server_name=host,
        server_port=port,
        share=share,
        auth=auth,
        max_file_size=ctx.max_upload_bytes,
        allowed_paths=[str(uploads)],
        show_error=True,
        theme=THEME,
        css=CSS,
        js=JS,
        footer_links=["api"],
        mcp_server=False,
        ssr_mode=False,
    )


def start(
    host: str = "127.0.0.1",
    port: int | None = None,
    share: bool = False,
    ctx: AppContext | None = None,
    auth=None,
    block: bool = True,
):
    """Recover the queue (queued runs with no worker get one), build and launch. Returns (demo, url)."""
    from backend.core import inference_lane
    from backend.core.paths import runs_dir

    ctx = ctx or AppContext()
    inference_lane.bound_threads()  # before any model runs: the app computes on DETOUR_APP_THREADS cores at most
    inference_lane.lower_session()  # the app's session at DETOUR_APP_SESSION_NICE (autogroup kernels)
    ctx.app_lock = inference_lane.hold_app_lock(runs_dir())  # the doctor finds this process through it
    warm_imports()
    runs_tab.ensure_worker_if_queued(ctx.max_concurrent)
    demo = build_app(ctx)
    demo.queue(**QUEUE)
    _, url, _ = demo.launch(prevent_thread_lock=not block, **launch_kwargs(host, port, share, ctx, auth))
    return demo, url
