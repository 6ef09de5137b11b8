"""A run's model card (``final/README.md``), every word from the run directory's own files: ``config.yaml`` (the
recipe, the base model, the corpus, what this machine resolved), ``data_info.json`` (the corpus fingerprint and
sizes), ``metrics.jsonl`` (each phase as it started, the held-out losses, the machine), ``status.json`` (tokens,
steps, wall time) and ``final/config.json``. The evaluations that measured the model are its ``model-index``,
kept when the card is written again."""

from __future__ import annotations

import json
import time
from pathlib import Path

from backend import objectives
from backend.cards import CARD, LIBRARY, TAG
from backend.cards.card_file import make_card, read_card, write_card
from backend.cards.lineage import UNKNOWN, base_of
from backend.cards.results import is_hub_dataset, section
from backend.core.process import FileLock
from backend.engine.model_files import human_count
from backend.engine.rundir import read_config, read_metrics, read_status, time_spent

NO_EVALUATION = (
    "None yet. `python -m backend evaluate --models RUN ...` (or `--suite`) adds its results here, with their "
    "intervals, when it finishes."
)


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "not recorded"
    s = int(round(s))
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s"


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, int | float) else "?"


def _loss(row: dict | None, key: str) -> str:
    v = (row or {}).get(key)
    return "–" if v is None else f"{v:.3f}"


def timeline(rows: list[dict], status: dict) -> list[dict]:
    """Each phase as the run recorded it when it started (a resume's repeat ignored): objective, attention,
    masking, its steps and tokens (to the next phase's start, the last to the run's end) and the held-out losses
    at its end."""
    starts = {}
    for r in rows:
        if r.get("type") == "phase" and r["phase"] not in starts:
            starts[r["phase"]] = r
    phases = sorted(starts.values(), key=lambda r: r["step"])
    end_step, end_tokens = status.get("step") or 0, status.get("tokens_seen") or 0
    evals = [r for r in rows if r.get("type") == "eval"]
    out = []
    for i, p in enumerate(phases):
        nxt = phases[i + 1] if i + 1 < len(phases) else None
        stop = nxt["step"] if nxt else end_step
        last = [e for e in evals if p["step"] < e["step"] <= stop]
        out.append({**p, "steps": stop - p["step"],
                    "tokens": (nxt["tokens_seen"] if nxt else end_tokens) - (p.get("tokens_seen") or 0),
                    "end_eval": last[-1] if last else None})  # fmt: skip
    return out


def _command(argv: list | None) -> str:
    """The launch command as typed: the interpreter's full path read as ``python``."""
    argv = [str(a) for a in argv or []]
    if argv and Path(argv[0]).name.startswith("python"):
        argv[0] = "python"
    return " ".join(argv) or "python -m backend train"


def _objective(p: dict) -> str:
    """A phase's objective as the registry words it with the settings the phase recorded ("CLM", "MLM 15%")."""
    try:
        spec = objectives.get(p["objective"])
    except KeyError:  # an objective this version no longer has: its name as recorded
        return str(p["objective"])
    given = {k: p[k] for k in objectives.setting_names() if p.get(k) is not None}
    try:
        return spec.text({**spec.defaults(), **given})
    except (KeyError, TypeError):  # a setting the row did not record
        return spec.title


def _detour(phases: list[dict]) -> bool:
    """A causal phase followed by a bidirectional one: the recipe this lab is named for."""
    kinds = [p.get("attention") for p in phases]
    return "causal" in kinds and "bidirectional" in kinds[kinds.index("causal") :]


def _facts(run_dir: Path) -> dict:
    cfg = read_config(run_dir)
    rows = read_metrics(run_dir)
    status = read_status(run_dir)
    info, model_cfg = {}, {}
    for name, target in (("data_info.json", info), ("final/config.json", model_cfg)):
        try:
            target.update(json.loads((run_dir / name).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            pass
    machine = next((r for r in reversed(rows) if r.get("type") == "machine"), {})
    evals = [r for r in rows if r.get("type") == "eval"]
    return {"cfg": cfg, "meta": cfg.get("_meta") or {}, "rows": rows, "status": status, "info": info,
            "model": model_cfg, "machine": machine, "first_eval": evals[0] if evals else None,
            "last_eval": evals[-1] if evals else None}  # fmt: skip


def _corpus(cfg: dict, info: dict) -> tuple[str, dict]:
    """(the corpus in words, its metadata entry): a hub dataset by its id, 'demo', or a file or folder by name."""
    spec = str(cfg["data"]["corpus"])
    name = spec if spec == "demo" or is_hub_dataset(spec) else Path(spec).name
    entry = {"name": name, "fingerprint": info.get("fingerprint")}
    for k in ("documents", "train_tokens", "heldout_tokens"):
        if info.get(k) is not None:
            entry[k] = info[k]
    what = "the bundled demo corpus" if spec == "demo" else ("hub dataset" if is_hub_dataset(spec) else "local")
    return f"`{name}` ({what})", entry


def build_run_card(run_dir: str | Path, results: list | None = None):
    """The card of the run's ``final/`` model: metadata (base_model, library, pipeline, tags, corpus and its
    fingerprint, licence, the ``results`` as model-index) and the body (what it is, the timeline, training facts,
    the evaluations, how to load it, how to reproduce it)."""
    from huggingface_hub import ModelCardData

    run_dir = Path(run_dir)
    f = _facts(run_dir)
    cfg, meta, st, m = f["cfg"], f["meta"], f["status"], f["machine"]
    base = base_of(cfg["model"]["name"])
    corpus_words, corpus = _corpus(cfg, f["info"])
    phases = timeline(f["rows"], st)
    model_type = f["model"].get("model_type") or "encoder"
    tags = [TAG, model_type, f"recipe-{cfg['recipe']}",
            "continued-pretraining" if base.name else "pretrained-from-scratch",
            *(["causal-lm-detour"] if _detour(phases) else [])]  # fmt: skip
    data = ModelCardData(
        base_model=base.name,
        library_name=LIBRARY,
        pipeline_tag="fill-mask",
        license=base.license,
        language=base.extra.get("language"),
        tags=tags,
        datasets=[cfg["data"]["corpus"]] if is_hub_dataset(cfg["data"]["corpus"]) else None,
        model_name=run_dir.name if results else None,
        eval_results=results or None,
        corpus=corpus,
        **{k: v for k, v in base.extra.items() if k in ("license_name", "license_link")},
    )
    prec = meta.get("precision") or {}
    t = cfg["train"]
    world = m.get("world") or 1
    hardware = ", ".join(x for x in (m.get("gpu"), m.get("cpu"), str(m.get("device") or "")) if x) or "not recorded"
    licence = base.license if base.license != UNKNOWN else f"unknown: {base.license_why}"
    if base.license != UNKNOWN:
        licence += f" ({base.license_why})"
    verb = f"continued from {base.where}" if base.name else base.where
    lines = [
        f"# {run_dir.name}",
        "",
        f"A masked-language encoder (`{model_type}`) {verb}, with the recipe `{cfg['recipe']}` of Detour Lab "
        f"(`python -m backend train`) on the corpus {corpus_words}.",
        "",
        "| | |",
        "|---|---|",
        f"| base model | {base.where} |",
        f"| corpus | {corpus_words}, fingerprint `{corpus.get('fingerprint') or 'not recorded'}`"
        + (
            f", {corpus['documents']:,} documents, {corpus.get('train_tokens', 0):,} training and "
            f"{corpus.get('heldout_tokens', 0):,} held-out tokens"
            if "documents" in corpus
            else ""
        )
        + " |",  # fmt: skip
        f"| parameters | {human_count(m.get('parameters'))} |",
        f"| trained | {st.get('tokens_seen') or 0:,} tokens in {st.get('step') or 0:,} optimizer steps "
        f"(sequences of {t['seq_len']} x batch {t['batch_size']} x grad_accum {t['grad_accum']} x {world} "
        f"process{'es' * (world > 1)}), peak lr {t['lr']:g} |",
        f"| precision | {prec.get('resolved') or t['precision']} ({prec.get('why') or 'as the config asked'}) |",
        f"| machine | {hardware}, {m.get('threads', '?')} thread(s) per process, host `{meta.get('host', '?')}` |",
        f"| wall time | {_fmt_s(time_spent(st))} ({_when(st.get('started_at'))} to {_when(st.get('finished_at'))}) |",
        f"| licence | {licence} |",
        "",
        "## Recipe timeline",
        "",
        "| phase | objective | attention | steps | tokens | held-out MLM loss at its end | "
        "held-out CLM loss at its end |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        end = p["end_eval"]
        lines.append(
            f"| {p['phase']} | {_objective(p)} | {p.get('attention', '?')} | {p['steps']:,} | "
            f"{p['tokens']:,} | {_loss(end, 'eval_mlm_loss')} | {_loss(end, 'eval_clm_loss')} |"
        )
    lines += [
        "",
        f"Held-out losses (MLM at 15% with fixed masks, comparable across recipes; next-token CLM): "
        f"{_loss(f['first_eval'], 'eval_mlm_loss')} / {_loss(f['first_eval'], 'eval_clm_loss')} at the start, "
        f"{_loss(f['last_eval'], 'eval_mlm_loss')} / {_loss(f['last_eval'], 'eval_clm_loss')} at the end.",
        "",
        *section(results, NO_EVALUATION),
        "## Use it",
        "",
        "```python",
        "from transformers import AutoModelForMaskedLM, AutoTokenizer",
        "",
        'MODEL = "path/to/this/folder"  # or its Hub repository id',
        "model = AutoModelForMaskedLM.from_pretrained(MODEL)",
        "tokenizer = AutoTokenizer.from_pretrained(MODEL)",
        "```",
        "",
        "## Reproduce",
        "",
        "The run's full config is its `config.yaml` (`training_config.yaml` in an export); it was launched with "
        f"`{_command(meta.get('command'))}`.",
    ]
    return make_card(data, "\n".join(lines))


def card_lock(run_dir: Path) -> FileLock:
    """One writer of a run's card at a time (two evaluations finishing together each add their results)."""
    return FileLock(Path(run_dir) / ".card.lock", f"run {Path(run_dir).name}'s card", wait=True)


def write_run_card(run_dir: str | Path, source: str | None = None, new: list | None = None) -> Path:
    """Write (or rewrite) ``final/README.md``: built again from the run's files, keeping the results the card
    already holds; ``source`` and ``new``: an evaluation's results replacing its earlier ones."""
    from backend.cards.results import merged

    run_dir = Path(run_dir)
    path = run_dir / "final" / CARD
    with card_lock(run_dir):
        old = read_card(path)
        results = list((old.data.eval_results if old is not None else None) or [])
        if source is not None:
            results = merged(results, source, new or [])
        return write_card(path, build_run_card(run_dir, results))
