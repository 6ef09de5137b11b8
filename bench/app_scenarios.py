"""What the load benchmark's users do (``bench/bench_app_load.py``), each user a ``Page`` (``bench/app_users.py``).

- **back-to-back**: every user opens the app at the same moment, then makes ``rounds`` x (fill-mask, NER tagging, the
  runs list, the curves) with no pause: a harder load than people reading their pages.
- **classroom**: a class opening the link the teacher gave: each user opens the app at a random moment within
  ``open_within`` seconds, then works at a person's pace, a pause (``pause`` seconds on average, from half to one and
  a half of it) before each action: the Fill-mask tab and a fill-mask, the NER tab and a tagging, the Runs tab (its
  timer polls while the user reads it), its Refresh, the curves of the run. Tabs are picked as a browser picks them
  (their select events), so a tab's first showing is measured too.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

from app_users import Page

USER, PASSWORD = "detour", "bench-load-password"
FILL_TEXT = "The patient was treated with [MASK] for the infection."
NER_TEXT = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."
SCENARIOS = ("back-to-back", "classroom")
# the actions measured, in the tables' order: opening the app (log in, the page, its load events), then each action
ACTIONS = ("open_app", "show_tab", "fill_mask", "ner_tag", "list_runs", "curves", "runs_poll")


@dataclass
class Load:
    """One scenario's users against one app: what they call, until when, and what they measured."""

    url: str
    model: str
    run: str
    rounds: int
    stop_at: float  # time.monotonic() after which no user starts an action
    patience: float
    pause: float = 0.0
    open_within: float = 0.0
    seed: int = 0
    lat: dict[str, list[float]] = field(default_factory=lambda: {a: [] for a in ACTIONS})
    errors: list[str] = field(default_factory=list)

    async def timed(self, user: int, action: str, step: Awaitable) -> bool:
        """Run one action, keep its latency or name its error; False once the scenario's time is up."""
        if time.monotonic() > self.stop_at:
            step.close()  # never awaited: no warning, no request
            return False
        t = time.perf_counter()
        try:
            await step
        except Exception as exc:
            self.errors.append(f"user {user} {action}: {type(exc).__name__}: {exc}")
            return action != "open_app"  # a page that did not open does nothing more
        self.lat[action].append(time.perf_counter() - t)
        return True

    def page(self) -> Page:
        return Page(self.url, USER, PASSWORD, self.patience)


async def fill_mask(page: Page, load: Load) -> None:
    await page.call("fill_mask", FILL_TEXT, 5, load.model, None, None, None, False, False, False, False)


async def ner_tag(page: Page, load: Load) -> None:
    out = await page.call("ner_tag", NER_TEXT, None, None, None, None)
    if "entities" not in str(out[-1]):
        raise RuntimeError(f"ner_tag answered {out[-1]!r}")


async def list_runs(page: Page, load: Load) -> None:
    out = await page.call("runs_refresh", None, load.run, "tokens_seen")
    if load.run not in str(out[0]):
        raise RuntimeError("the runs table does not list the training run")


async def curves(page: Page, load: Load) -> None:
    await page.call("curves", [load.run], "tokens_seen")


async def back_to_back(load: Load, user: int) -> None:
    page = load.page()
    try:
        if not await load.timed(user, "open_app", page.open()):
            return
        for _ in range(load.rounds):
            for action, step in (("fill_mask", fill_mask), ("ner_tag", ner_tag), ("list_runs", list_runs),
                                 ("curves", curves)):  # fmt: skip
                if not await load.timed(user, action, step(page, load)):
                    return
    finally:
        await page.close()


async def classroom(load: Load, user: int) -> None:
    rng = random.Random(f"{load.seed}-{user}")  # the same pauses for the same user on every run

    def think() -> float:
        return load.pause * rng.uniform(0.5, 1.5)

    await asyncio.sleep(rng.uniform(0, load.open_within))
    page = load.page()
    try:
        if not await load.timed(user, "open_app", page.open()):
            return
        for _ in range(load.rounds):
            steps = [
                ("show_tab", lambda: page.select_tab("fill-mask")),
                ("fill_mask", lambda: fill_mask(page, load)),
                ("show_tab", lambda: page.select_tab("ner")),
                ("ner_tag", lambda: ner_tag(page, load)),
                ("show_tab", lambda: page.select_tab("runs")),
                ("list_runs", lambda: list_runs(page, load)),
                ("curves", lambda: curves(page, load)),
            ]
            for action, step in steps:
                ticks = await page.stay(page.open_tab, think())  # reading the page before the next action
                load.lat["runs_poll"] += ticks
                if not await load.timed(user, action, step()):
                    return
    finally:
        await page.close()


async def run_users(scenario: str, load: Load, users: int) -> None:
    """All ``users`` of ``scenario`` at once, until each is done or the time is up."""
    script = back_to_back if scenario == "back-to-back" else classroom
    await asyncio.gather(*(script(load, i) for i in range(users)))
