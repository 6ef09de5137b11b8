"""The steps of a replication plan: what each one does (split the corpus, prepare and train the five encoders,
measure weight change and CKA, fine-tune on NER, write the report) and ``build_plan``, which orders them with the
settings each output depends on. Running them, resuming and recording markers is ``backend.replication.replicate``.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.core import atomic
from backend.core.errors import ConfigError
from backend.replication.corpus import split_corpus
from backend.replication.plan import (
    LABELS,
    RUNS,
    VERSION,
    ReplicationCancelled,
    ReplicationError,
    run_names,
    train_configs,
)


@dataclass
class Step:
    name: str
    title: str
    fn: Callable[[Context], dict | None]
    key: dict
    deps: list[str] = field(default_factory=list)
    strict: bool = False  # a changed key is an error (training): otherwise the step is recomputed


@dataclass
class Context:
    out: Path
    settings: dict
    command: list[str] | None
    log: Callable[[str], None]

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    @property
    def runs_root(self) -> Path:
        return self.out / "runs"

    def run_dir(self, key: str) -> Path:
        return self.runs_root / run_names()[key]


def step_data(ctx: Context) -> dict:
    d = ctx.settings["data"]
    info = split_corpus(
        ctx.settings["corpus"], ctx.data_dir, d["heldout_fraction"], d["cka_min_words"], d["split_seed"]
    )
    ctx.log(
        f"data: {info['units']} {info['unit']}, {info['heldout_units']} held out; {info['train_words']:,} training "
        f"words, {info['cka_paragraphs']} held-out paragraphs for CKA"
    )
    return info


def step_prepare(ctx: Context) -> dict:
    from backend.runs.train import prepare_runs

    names = run_names()
    existing = [n for n in names.values() if (ctx.runs_root / n).exists()]
    if existing:
        raise ReplicationError(
            f"{ctx.runs_root} already holds {', '.join(existing)} but no record that they were prepared here; "
            f"delete {ctx.out} (or use another --out) to start over"
        )
    made = []
    for cfg in train_configs(ctx.settings, ctx.data_dir):
        made += [p.name for p in prepare_runs(cfg, root=ctx.runs_root, command=ctx.command)]
    ctx.log(f"prepared {len(made)} runs under {ctx.runs_root}: {', '.join(made)}")
    return {"runs": made}


def _train_one(ctx: Context, key: str) -> dict:
    from backend.engine.rundir import list_checkpoints, read_status
    from backend.runs.train import train_run

    run_dir = ctx.run_dir(key)
    if not (run_dir / "config.yaml").exists():
        raise ReplicationError(f"{run_dir} is missing: delete {ctx.out / 'steps' / 'prepare.json'} to prepare it again")
    st = read_status(run_dir)
    if st.get("state") == "done" and (run_dir / "final" / "config.json").exists():
        ctx.log(f"{run_dir.name}: already trained")
        return {"run": run_dir.name, "trained_now": False}
    resume = bool(list_checkpoints(run_dir))
    ctx.log(f"{run_dir.name}: training{' (resuming from its last checkpoint)' if resume else ''}")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        st = train_run(run_dir, resume=resume)
    finally:  # train_run installs its own stop-at-next-step handlers; put ours back
        # A stop asked after the run's last step check is swallowed by its handler: read it from there.
        flag = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        stop_asked = getattr(flag, "signal", None)
        for s, h in handlers.items():
            signal.signal(s, h)
    if st.get("state") == "cancelled":
        raise ReplicationCancelled(f"{run_dir.name} stopped at a checkpoint")
    if st.get("state") != "done":
        raise ReplicationError(
            f"{run_dir.name}: training {st.get('state')}: {st.get('error')} (log: {run_dir}/train.log)"
        )
    stale = ctx.out / "ner" / "models" / key  # fine-tunes of an older model with this name are no longer valid
    if stale.exists():
        shutil.rmtree(stale)
    out = {"run": run_dir.name, "trained_now": True, "tokens": st.get("tokens_seen"), "steps": st.get("step")}
    return {**out, "stop_requested": stop_asked} if stop_asked else out


def _models_for_eval(ctx: Context) -> tuple[list[str], list[str]]:
    keys = list(ctx.settings["eval"]["models"])
    specs = [ctx.settings["model"] if k == "base" else str(ctx.run_dir(k) / "final") for k in keys]
    return keys, specs


def step_ner(ctx: Context) -> dict:
    from backend.evaluation.runner import evaluate_models

    e = ctx.settings["eval"]
    keys, specs = _models_for_eval(ctx)
    hp = {k: e[k] for k in ("epochs", "lr", "batch_size", "max_len", "max_train_examples", "max_eval_examples")}
    ctx.log(f"NER: {len(keys)} models x {e['seeds']} seeds on {ctx.settings['ner_data']} ({hp})")
    try:
        res = evaluate_models(
            specs,
            task="ner",
            data=ctx.settings["ner_data"],
            seeds=list(range(e["seeds"])),
            out_dir=ctx.out / "ner",
            labels=keys,
            keep_models=False,
            precision=ctx.settings["train"]["precision"],  # the replication's one precision setting
            **hp,
        )
    except ConfigError as exc:
        if exc.key == "out":
            raise ReplicationError(
                f"NER: {ctx.out / 'ner'} holds fine-tunes made with other settings; delete that folder to "
                "evaluate again with the new ones"
            ) from exc
        raise
    if res["status"] != "complete":
        fails = res.get("failures", [])
        first = fails[0] if fails else {}
        raise ReplicationError(
            f"NER: {len(fails)} fine-tune(s) failed (first: {first.get('model')} seed {first.get('seed')}: "
            f"{first.get('error')}); see {ctx.out / 'ner' / 'results.md'}; rerun to retry them"
        )
    return {"status": res["status"], "runs": sum(len(m["runs"]) for m in res["models"])}


def _end_main_model(run_dir: Path) -> str | None:
    from backend.engine.rundir import checkpoint_state, list_checkpoints

    for ck in list_checkpoints(run_dir):
        try:
            if checkpoint_state(ck).get("tag") == "end-main" and (ck / "model" / "config.json").exists():
                return str(ck / "model")
        except (OSError, ValueError):
            continue
    return None


def step_cka(ctx: Context) -> dict:
    from backend.analysis.api import cka_between

    c = ctx.settings["cka"]
    texts = str(ctx.data_dir / "cka_texts.txt")
    kw = dict(n_texts=c["n_texts"], max_len=c["max_len"], batch_size=c["batch_size"], seeds=c["seeds"])
    kw["measure"] = c.get("measure", "debiased")  # cka.measure=linear: the paper's biased CKA
    final = {k: str(ctx.run_dir(k) / "final") for k in RUNS}
    out: dict = {"texts": texts, "settings": c}
    ctx.log("CKA: detour vs MLM with the seed-noise control (MLM 2nd seed vs MLM)")
    out["detour_vs_mlm"] = cka_between(
        final["detour"], final["mlm"], texts, control=(final["mlm"], final["mlm_s2"]), **kw
    )
    ctx.log("CKA: control matrix, freeze runs vs MLM")
    out["control"] = cka_between(final["mlm_s2"], final["mlm"], texts, **kw)
    out["freeze_low_vs_mlm"] = cka_between(final["freeze_low"], final["mlm"], texts, **kw)
    out["freeze_mid_vs_mlm"] = cka_between(final["freeze_mid"], final["mlm"], texts, **kw)
    a, b = _end_main_model(ctx.run_dir("detour")), _end_main_model(ctx.run_dir("mlm"))
    if a and b:  # before the decay: does the divergence survive the return to MLM?
        ctx.log("CKA: detour vs MLM at the end of the main phase (before the decay)")
        out["end_main_detour_vs_mlm"] = cka_between(a, b, texts, **kw)
    atomic.write_json(ctx.out / "analysis" / "cka.json", out)
    return {"file": "analysis/cka.json"}


def step_weights(ctx: Context) -> dict:
    from backend.analysis.api import weight_change_between

    final = {k: str(ctx.run_dir(k) / "final") for k in RUNS}
    out = {"from_base": {k: weight_change_between(ctx.settings["model"], final[k]) for k in RUNS}}
    out["detour_vs_mlm"] = weight_change_between(final["mlm"], final["detour"])
    out["control"] = weight_change_between(final["mlm"], final["mlm_s2"])
    atomic.write_json(ctx.out / "analysis" / "weights.json", out)
    return {"file": "analysis/weights.json"}


def step_report(ctx: Context) -> dict:
    from backend.replication.report import build_report  # plotly, loaded only when a report is written

    rep = build_report(ctx.out, log=ctx.log)
    return {"files": rep.get("files", {}), "verdicts": {f["id"]: f["verdict"] for f in rep.get("findings", [])}}


def build_plan(settings: dict) -> list[Step]:
    """The ordered steps (named as ``plan.STEP_NAMES``); each key holds exactly the settings its output depends on."""
    data_key = {"corpus": settings["corpus"], **settings["data"]}
    train_key = {
        "data": data_key,
        "model": settings["model"],
        "train": settings["train"],
        "logging": settings["logging"],
        "layers": settings["layers"],
    }
    train_steps = [f"train-{k}" for k in RUNS]
    steps = [
        Step("data", "Split the corpus (held-out documents for CKA and eval loss)", step_data, data_key),
        Step("prepare", "Create the five run directories", step_prepare, train_key, ["data"], strict=True),
    ]
    for k in RUNS:
        steps.append(
            Step(
                f"train-{k}", f"Train {LABELS[k]}", lambda ctx, _k=k: _train_one(ctx, _k), train_key, ["prepare"], True
            )
        )
    steps += [
        Step("weights", "Weight change per layer", step_weights, train_key, train_steps),
        Step(
            "cka",
            "CKA divergence per layer with the seed-noise control",
            step_cka,
            {"train": train_key, "cka": settings["cka"]},
            train_steps,
        ),
        Step(
            "ner",
            "Fine-tune and evaluate every encoder on NER",
            step_ner,
            {"train": train_key, "eval": settings["eval"], "ner_data": settings["ner_data"]},
            train_steps,
        ),
        Step(
            "report",
            "Write report.json, report.html and the figures",
            step_report,
            {"settings": settings, "report_version": VERSION},
        ),
    ]
    return steps
