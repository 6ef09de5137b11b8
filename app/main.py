"""Builds the Detour Lab Blocks from the tab modules and launches it with safe defaults."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# Gradio's queue rebuilt a pandas table of its last 10,000 events after every queued event (for a /monitoring page
# this app turns off: ``enable_monitoring=False``): 20-80 ms of the app's CPU on each fill-mask and NER answer, growing
# with the events served. One record kept, the summary never recomputed (read by Gradio when its queue is made).
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "1")
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(2**62))

import gradio as gr  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app import (  # noqa: E402
    analyze_tab,
    detour_tab,
    fill_mask_tab,
    launch_tab,
    ner_tab,
    reports_tab,
    runs_tab,
    served,
    session_state,
    shared_page,
    sweeps_tab,
    tab_timers,
    uploads_dir,
)

DEFAULT_MAX_UPLOAD = 50 * 1024 * 1024
# The Runs table's run names stay in view when a narrow page scrolls it sideways (``runs_tab.WIDTHS``).
CSS = """
.field-error { color: #b91c1c; font-size: 0.85em; margin-top: -6px; }
.field-error p { color: #b91c1c; }
#runs-table .first-column { position: sticky; left: 0; z-index: 2; background: inherit; }
"""
# Keys the page handles itself (capture phase, before Gradio's own handlers):
# - a typed value + Enter in a slider's number box (``.snap-on-enter``) ends the edit as leaving the box does (Gradio
#   sends 'release' on blur, not on Enter), so the Detour tab's scrub snaps onto the saved model it shows;
# - the arrow, Page and Home/End keys on a slider of ``.step-to-ticks`` go from one saved model to the next (the
#   positions listed in the hidden box ``#<slider id>-ticks``): a slider step fell between two saved models;
# - Enter in a picker of ``.typed-picker`` (the model and corpus pickers) keeps the text typed, as leaving the box
#   does, unless an option was picked with the arrow keys: Gradio took the first option its filter showed, so
#   "detour" + Enter chose detour-tiny-en, and an emptied slot + Enter the first model of the list.
JS = """() => {
  const arrowed = new WeakSet();
  const ticksOf = (slider) => {
    const box = document.querySelector(`#${slider.id}-ticks textarea, #${slider.id}-ticks input`);
    return (box ? box.value : "").split(",").filter((t) => t.trim() !== "").map(Number).sort((a, b) => a - b);
  };
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (!(t instanceof HTMLInputElement)) return;
    if (e.key === "Enter" && t.type === "number" && t.closest(".snap-on-enter")) {
      t.blur();
      return;
    }
    const slider = t.type === "range" ? t.closest(".step-to-ticks") : null;
    if (slider) {
      const ticks = ticksOf(slider), v = Number(t.value);
      const up = ["ArrowRight", "ArrowUp", "PageUp"].includes(e.key);
      const down = ["ArrowLeft", "ArrowDown", "PageDown"].includes(e.key);
      if (!ticks.length || !(up || down)) return;
      e.preventDefault();
      e.stopImmediatePropagation();
      const next = up ? ticks.find((x) => x > v) : [...ticks].reverse().find((x) => x < v);
      if (next === undefined) return;
      t.value = String(next);
      t.dispatchEvent(new Event("input", { bubbles: true }));
      return;
    }
    if (t.getAttribute("role") !== "combobox" || !t.closest(".typed-picker")) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      arrowed.add(t);
    } else if (e.key === "Enter" && !arrowed.has(t)) {
      e.preventDefault();
      e.stopImmediatePropagation();
      t.blur();
    }
  }, true);
  for (const type of ["input", "focusin"]) {
    document.addEventListener(type, (e) => arrowed.delete(e.target), true);
  }
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
        enable_monitoring=False,
        app_kwargs={"middleware": [Middleware(shared_page.SharedPage)]},  # the page made once, sent compressed
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
    return serve(build_app(ctx), host, port, share, ctx, auth, block)


def serve(demo: gr.Blocks, host: str, port: int | None, share: bool, ctx: AppContext, auth=None, block: bool = True):
    """Queue and launch ``demo``; each page's session then shares the components' configs until it changes one
    (``app.session_state``). Returns (demo, url)."""
    demo.queue(**QUEUE)
    # _frontend=False: Gradio's own check gives up after one 3-second timeout and refuses to start on a busy machine
    _, url, _ = demo.launch(prevent_thread_lock=True, _frontend=False, **launch_kwargs(host, port, share, ctx, auth))
    served.wait_until_served(demo.local_url)
    session_state.share_default_configs(demo.server_app.state_holder)
    if block:
        demo.block_thread()
    return demo, url
