"""Launch tab: a form over the experiment config; validation next to each field; live YAML and command preview;
save / load configs; Launch queues the run(s) through ``backend.runs.jobs.submit`` (the CLI's ``prepare_runs``)."""

from __future__ import annotations

import copy
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from app import check_corpus_spec, check_model_spec, check_path, md_escape, model_choices, uploads_dir, warn
from backend.core import strict_yaml
from backend.core.errors import ConfigError, DataError, DetourError
from backend.core.paths import runs_dir
from backend.engine import schema
from backend.engine.config import config_to_yaml, default_config, load_config
from backend.runs import jobs


@dataclass
class Field:
    key: str  # config key (dotted), or the pseudo key "seeds"
    label: str
    kind: str  # text | sci | int | optint | float | check | radio | multi | model | corpus | layers
    choices: list[str] = field(default_factory=list)
    info: str | None = None
    advanced: bool = False


def _field(k: schema.Key) -> Field:
    """A form field from the config schema: label, widget, choices and help all come from there."""
    if k.widget:
        kind = k.widget
    elif k.kind == "int":
        kind = "optint" if k.optional else "int"
    else:
        kind = {"str": "text", "float": "float", "bool": "check", "autobool": "radio", "choice": "radio",
                "layers": "layers", "trackers": "multi"}[k.kind]  # fmt: skip
    return Field(k.key, k.label, kind, list(k.form_choices or k.choices), _form_help(k), k.advanced)


def _form_help(k: schema.Key) -> str:
    """The key's help, limited to the choices the form offers (``recipe`` offers no ``pretrain``: that one needs a
    from-scratch architecture, a CLI config), in the form's order."""
    if not k.form_choices:
        return k.help
    parts = {p.split(" ", 1)[0]: p for p in k.help.split(" | ")}
    return " | ".join(parts.get(c, c) for c in k.form_choices)


SEEDS_FIELD = Field("seeds", "Seeds", "text", info="one run per seed: '0' or '0,1,2'")
SEEDS_FORM = 20  # the form place of the seeds field (not a config key: one run is made per seed)
FIELDS: list[Field] = [_field(k) for k in schema.form_keys() if k.form < SEEDS_FORM]
FIELDS += [SEEDS_FIELD] + [_field(k) for k in schema.form_keys() if k.form > SEEDS_FORM]
KEYS = [f.key for f in FIELDS]
FIELD_BY_KEY = {f.key: f for f in FIELDS}


# --- pure handlers (tested without a browser) ---------------------------------------------------


def _get(cfg: dict, key: str):
    node = cfg
    for p in key.split("."):
        node = node[p]
    return node


def _set(cfg: dict, key: str, value) -> None:
    parts = key.split(".")
    node = cfg
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value


def config_to_values(cfg: dict, seeds: str | None = None) -> list:
    """Config -> one value per FIELDS entry (what the form shows)."""
    out = []
    for f in FIELDS:
        if f.key == "seeds":
            out.append(seeds if seeds is not None else str(cfg["train"]["seed"]))
            continue
        listed = f.key.startswith("phases.") and isinstance(cfg["phases"], list)  # the timeline editor shows a list
        v = _get(default_config() if listed else cfg, f.key)
        if f.kind in ("text", "sci", "layers", "optint"):
            v = "" if v is None else (",".join(map(str, v)) if isinstance(v, list) else str(v))
        elif f.kind == "radio" and isinstance(v, bool):  # auto | true | false: the radio shows text
            v = str(v).lower()
        out.append(v)
    return out


def default_values() -> list:
    cfg = default_config()
    cfg["name"] = _free_name(cfg["name"])
    return config_to_values(cfg)


def proposed_name(name: str | None) -> str:
    """The name the form proposes when a page opens: the one it shows, or the next free one when runs took it."""
    name = (name or "").strip() or default_config()["name"]
    try:
        return _free_name(name)
    except (DetourError, OSError):  # a name that is no folder name: the form's check says why
        return name


def _free_name(name: str) -> str:
    from backend.engine.rundir import suggest_name

    root = runs_dir()
    if (root / name).exists() or (root / f"{name}-detour").exists():
        return suggest_name(name, root)
    return name


def _scalar(key: str, raw):
    """Text typed in a box -> a YAML scalar (``2e-4`` -> 0.0002), as ``--set`` does."""
    from backend.engine.config import parse_override

    return parse_override(f"{key}={raw}")[1]


def parse_seeds(raw) -> list[int]:
    text = str(raw if raw is not None else "").strip()
    if not text:
        return []
    if not re.fullmatch(r"\d+(\s*[, ]\s*\d+)*", text):
        raise ConfigError("seeds", raw, "expected whole numbers separated by commas, e.g. '0' or '0,1,2'")
    seeds = [int(s) for s in re.split(r"[,\s]+", text)]
    if len(set(seeds)) != len(seeds):
        raise ConfigError("seeds", raw, "each seed once")
    if len(seeds) > 8:
        raise ConfigError("seeds", raw, "at most 8 seeds per launch")
    return seeds


def values_to_config(values: list, base: dict | None = None) -> tuple[dict, list[int]]:
    """Form values over ``base`` (a loaded config: the keys the form does not show come from it; else the defaults)
    -> (validated config, seeds). Raises ConfigError / PathNotAllowed naming the field."""
    cfg = copy.deepcopy(base) if base else default_config()
    seeds: list[int] = []
    for f, v in zip(FIELDS, values, strict=True):
        if f.key == "seeds":
            seeds = parse_seeds(v)
            continue
        if f.key.startswith("phases.") and isinstance(cfg["phases"], list):
            continue  # the timeline editor's list is the recipe: the preset's phase fields are unused
        if f.kind == "sci":  # a number typed as text: 2e-4
            v = _scalar(f.key, v) if str(v or "").strip() else None
        elif f.kind == "text":  # an optional key left blank is null, as in the YAML: not '', a second "unset"
            v = (v or "").strip() or (None if schema.BY_KEY[f.key].optional else "")  # (seeds: read above)
        elif f.kind == "layers":
            v = (v or "").strip() or None
        elif f.kind in ("int", "optint"):
            if v is None or (isinstance(v, str) and not v.strip()):
                v = None
            else:
                v = _scalar(f.key, v) if isinstance(v, str) else v
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
        elif f.kind == "float" and isinstance(v, str):
            v = _scalar(f.key, v) if v.strip() else None
        elif f.kind == "multi":
            v = list(v or [])
        elif f.kind == "model":
            v = check_model_spec(v or "", "model.name")
        elif f.kind == "corpus":
            v = check_corpus_spec(v or "", "data.corpus")
        _set(cfg, f.key, v)
    if seeds:
        cfg["train"]["seed"] = seeds[0]
    cfg = load_config(cfg)
    return cfg, seeds


def error_key(exc: Exception) -> str | None:
    """Which form field an error belongs to."""
    key = getattr(exc, "key", None)
    if key:
        if key in FIELD_BY_KEY:
            return key
        for k in KEYS:  # phases.main.freeze -> its layers field, train.betas -> none
            if key.startswith(k) or k.startswith(key + "."):
                return k
        return None
    msg = str(exc)
    if msg.startswith("data.corpus") or "corpus" in msg.split(":")[0]:
        return "data.corpus"
    if msg.startswith(("model '", "model:")):
        return "model.name"
    return None


def preflight(cfg: dict) -> list[str]:
    """Model-level checks that need no data and no network (model resolves, freeze ranges fit the model, seq_len fits
    its positions). Returns preflight's warnings (e.g. a rotary model beyond the length it was trained on)."""
    from backend.engine.models import resolve_model
    from backend.runs.preflight import check

    if cfg["model"]["name"] != "from_scratch" and resolve_model(cfg["model"]["name"]).kind == "hub":
        return []  # checked at launch: no network while typing
    return list(check(cfg, check_data=False).get("warnings", []))


_CORPUS_CHECKS: dict[tuple, str | None] = {}  # corpus_key -> the problem found (None: fine)
CHECKING_CORPUS = "checking corpus…"


def corpus_key(cfg: dict) -> tuple | None:
    """What the corpus check depends on: the local corpus (its files' sizes and times) and the settings that read
    it. None for what is not checked as you choose it: the bundled demo text and hub datasets (read at launch)."""
    d = cfg["data"]
    p = Path(str(d["corpus"]))
    if d["corpus"] == "demo" or not p.exists():
        return None
    files = sorted(q for q in p.rglob("*") if q.is_file())[:1000] if p.is_dir() else [p]
    sig = tuple((str(q), q.stat().st_size, q.stat().st_mtime_ns) for q in files)
    m, t = cfg["model"], cfg["train"]
    return (str(p), sig, d["text_column"], d["max_documents"], d["heldout_file"], d["heldout_fraction"],
            t["seq_len"], t["batch_size"], m["tokenizer"] or m["name"])  # fmt: skip


def check_corpus(cfg: dict) -> str | None:
    """Read the corpus as a launch would (``preflight.check_corpus``): the problem as a message, or None. Kept per
    ``corpus_key``: the form's next checks look it up instead of reading the corpus again."""
    from backend.runs.preflight import check_corpus as read_corpus

    key = corpus_key(cfg)
    if key is None:
        return None
    if key not in _CORPUS_CHECKS:
        try:
            read_corpus(cfg)
            _CORPUS_CHECKS[key] = None
        except (DetourError, OSError, ValueError) as exc:  # the tokenizer's own problems are Launch's to report
            _CORPUS_CHECKS[key] = str(exc) if str(exc).startswith("data.") else None
    return _CORPUS_CHECKS[key]


def corpus_pending(cfg: dict | None) -> bool:
    """True when the corpus of ``cfg`` still has to be read (``check_corpus``)."""
    key = corpus_key(cfg) if cfg else None
    return key is not None and key not in _CORPUS_CHECKS


def validate_form(values: list, deep: bool = True, base: dict | None = None, corpus: str = "cached") -> dict:
    """-> {"ok", "cfg", "seeds", "yaml", "python", "accelerate", "errors": {key: message}, "message",
    "corpus_pending"}.

    ``deep``: also what launching would refuse (a run name already taken, model-level checks, the corpus's
    content). ``corpus``: "cached" uses a check already made (a corpus not read yet is ``corpus_pending`` and the
    message says "checking corpus…": the form reads it in the background), "check" reads it now (Launch).
    ``base``: the loaded config whose keys the form does not show (``values_to_config``)."""
    out = {
        "ok": False,
        "cfg": None,
        "seeds": [],
        "yaml": "",
        "python": "",
        "accelerate": "",
        "errors": {},
        "message": "",
        "corpus_pending": False,
    }
    warnings: list[str] = []
    try:
        cfg, seeds = values_to_config(values, base)
        if deep:
            jobs.check_names_free(cfg, runs_dir(), seeds or None)  # the check Launch would make, as you type
            warnings = preflight(cfg)
            if corpus == "check" or not corpus_pending(cfg):
                problem = check_corpus(cfg)
                if problem:
                    raise DataError(problem)
            else:
                out["corpus_pending"] = True
    except (DetourError, ValueError) as exc:
        key = error_key(exc)
        msg = str(exc)
        out["errors"] = {key: msg} if key else {}
        out["message"] = warn(msg)
        return out
    prev = jobs.command_preview(cfg)
    seed_note = f"  # x seeds {','.join(map(str, seeds))}" if len(seeds) > 1 else ""
    out.update(
        ok=True,
        cfg=cfg,
        seeds=seeds,
        yaml=config_to_yaml(cfg),
        python=prev["python"] + seed_note,
        accelerate=prev["accelerate"] + seed_note,
        message="✓ config valid"
        + (f" · {CHECKING_CORPUS}" if out["corpus_pending"] else "")
        + _kept_note(cfg)
        + _estimate_note(cfg)
        + "".join(f"\n\n⚠ warning: {md_escape(w)}" for w in warnings),
    )
    return out


def _estimate_note(cfg: dict) -> str:
    """' · ~12m00s at this machine's last measured rate (...)' (the doctor's ETA before launch), or nothing."""
    from backend.runs.doctor import estimate_for_config

    try:
        est = estimate_for_config(cfg)
    except Exception:  # an estimate never stands in the way of a valid config
        return ""
    return f" · {est}" if est else ""


STALE = "# ⚠ stale until the ⚠ field is fixed\n"
PREVIEW = ("yaml", "python", "accelerate")


def keep_last_preview(res: dict, last: dict | None) -> dict:
    """An invalid form keeps the last valid preview, marked stale, instead of emptying the CLI, accelerate and YAML
    boxes; a valid one is its own preview."""
    if res["ok"] or not last or not last.get("yaml"):
        return res
    return {**res, **{k: STALE + last[k] for k in PREVIEW}}


TARGETS = {"This machine (queue)": "queue", "Slurm cluster (sbatch)": "slurm"}


def launch(
    values: list,
    max_concurrent: int | None = None,
    base: dict | None = None,
    last: dict | None = None,
    target: str = "queue",
) -> dict:
    """Validate, then queue through ``backend.runs.jobs.submit`` (prepare_runs + detached worker), or with target
    ``slurm`` hand each run to Slurm (``backend.sweeps.cluster.submit_config``, what ``train --executor slurm``
    calls; the form's Slurm fields are its settings). Refused, it keeps ``last`` (the last valid preview) marked
    stale, as a field's change does (``keep_last_preview``)."""
    res = validate_form(values, base=base, corpus="check")
    if not res["ok"]:
        return {**keep_last_preview(res, last), "runs": []}
    target = TARGETS.get(target, target)
    try:
        if target == "slurm":
            from backend.sweeps.cluster import submit_config

            done = submit_config(res["cfg"], root=runs_dir(), seeds=res["seeds"] or None)
            dirs = [d for d, _ in done]
            names = ", ".join(f"{d.name} (Slurm job {j})" for d, j in done)
        else:
            dirs = jobs.submit(res["cfg"], root=runs_dir(), seeds=res["seeds"] or None, max_concurrent=max_concurrent)
            names = ", ".join(d.name for d in dirs)
    except (DetourError, OSError) as exc:  # a read-only or full runs folder too: one line (warn), not a raw error
        key = error_key(exc)
        return {**res, "ok": False, "runs": [], "errors": {key: str(exc)} if key else {}, "message": warn(exc)}
    return {**res, "runs": dirs, "message": f"✓ queued {names}: follow it in the Runs tab"}


def save_config(values: list, base: dict | None = None, overwrite: bool = False) -> tuple[Path | None, str]:
    """Save the form as ``<uploads>/configs/<run name>.yaml``. A saved config of that name is replaced only with
    ``overwrite``; otherwise the message says so and names a free one."""
    res = validate_form(values, deep=False, base=base)
    if not res["ok"]:
        return None, res["message"]
    d = uploads_dir() / "configs"
    d.mkdir(parents=True, exist_ok=True)
    name = res["cfg"]["name"]
    path = d / f"{name}.yaml"
    if path.exists() and not overwrite:
        free = next(f"{name}-{i}" for i in range(2, 10_000) if not (d / f"{name}-{i}.yaml").exists())
        return None, warn(
            f"a saved config named '{name}' already exists: not saved. Tick 'Replace a saved config of the same "
            f"name' to replace it, or change the run name (e.g. '{free}')"
        )
    from backend.core.atomic import write_text

    write_text(path, res["yaml"])
    return path, f"saved config '{md_escape(name)}'" + (" (replaced the one of that name)" if overwrite else "")


def saved_configs() -> list[tuple[str, str]]:
    """The saved configs as (name, path) dropdown choices, newest first: the list shows names, loading gets the
    path. Read again on every call (page load, tab select, a save)."""
    d = uploads_dir() / "configs"
    files = sorted(d.glob("*.yaml"), key=lambda p: p.stat().st_mtime, reverse=True) if d.exists() else []
    return [(p.stem, str(p)) for p in files]


def load_config_file(path: str | None) -> tuple[list | None, str, dict | None]:
    """A YAML file (upload or saved) -> (form values, message, the whole config). The form shows its keys; the
    others (``logging.keep_checkpoints``, ``model.from_scratch``, ...) are kept in the returned config, which the
    form's values go over at launch (they used to fall back to the defaults: a silently different run)."""
    if not path:
        return None, "choose a config file", None
    try:
        p = Path(path)
        if not _is_gradio_upload(p):
            p = check_path(path, "config")
        raw = strict_yaml.load(p.read_text(encoding="utf-8")) or {}  # bounded: a "billion laughs" is refused
        if not isinstance(raw, dict):
            raise ConfigError("config", path, "the top level must be a mapping")
        raw = copy.deepcopy(raw)
        raw.pop("_meta", None)
        cfg = load_config(raw)
    except (DetourError, OSError, yaml.YAMLError) as exc:
        return None, warn(exc), None
    return config_to_values(cfg), f"loaded {Path(path).name}" + _kept_note(cfg), cfg


def _kept_note(cfg: dict) -> str:
    kept = hidden_settings(cfg)
    if not kept:
        return ""
    shown = ", ".join(_setting_text(k, cfg["phases"] if k == "phases" else v) for k, v in kept.items())
    return f" (with {len(kept)} setting(s) of the loaded config the form does not show: {shown})"


def _setting_text(key: str, value) -> str:
    """A kept setting as the status line shows it: a phase list as the timeline it is, a value as YAML writes it
    (never a Python dict or list)."""
    if key == "phases" and isinstance(value, list):
        names = " → ".join(f"{p.get('name') or p.get('objective', '?')}" for p in value if isinstance(p, dict))
        return f"a timeline of {len(value)} phases ({md_escape(names)}: see the Timeline accordion)"
    if isinstance(value, str):  # flattened already (a list shows as YAML would write it)
        return f"`{key}={value}`"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return f"`{key}={text}`"


def hidden_settings(cfg: dict) -> dict:
    """The keys of ``cfg`` that differ from the defaults and have no field in the form."""
    from backend.engine.trackers import flatten

    default = flatten(default_config())
    return {k: v for k, v in flatten(cfg).items() if k not in FIELD_BY_KEY and default.get(k) != v}


def _is_gradio_upload(p: Path) -> bool:
    """Files Gradio received from the browser live in its cache folder."""
    import os
    import tempfile

    cache = Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()
    return p.resolve().is_relative_to(cache)


def store_upload(path: str | None, max_bytes: int) -> tuple[str | None, str]:
    """Copy an uploaded corpus into the uploads folder (it must outlive Gradio's cache). -> (new path, message)."""
    if not path:
        return None, ""
    src = Path(path)
    size = src.stat().st_size
    if size > max_bytes:
        return None, f"⚠ upload refused: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.0f} MB limit"
    if src.suffix.lower() not in (".txt", ".jsonl", ".json", ".csv", ".parquet"):
        return None, f"⚠ upload refused: '{src.suffix}' files are not a corpus (.txt, .jsonl, .csv, .parquet)"
    dst_dir = uploads_dir() / "corpora"
    dst_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", src.name)
    dst = dst_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}"
    shutil.copyfile(src, dst)
    return str(dst), f"stored {dst.name} ({size / 1e3:.0f} kB)"


# --- UI -----------------------------------------------------------------------------------------


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    values = default_values()
    first = validate_form(values, deep=False)
    comps: dict[str, gr.components.Component] = {}
    errs: dict[str, gr.components.Component] = {}

    def make(f: Field, v):
        if f.kind == "check":
            c = gr.Checkbox(value=bool(v), label=f.label, info=f.info)
        elif f.kind == "radio":
            c = gr.Radio(choices=f.choices, value=v, label=f.label, info=f.info)
        elif f.kind == "multi":
            c = gr.Dropdown(choices=f.choices, value=list(v or []), multiselect=True, label=f.label, info=f.info)
        elif f.kind == "model":
            c = gr.Dropdown(choices=model_choices(), value=v, label=f.label, info=f.info, allow_custom_value=True)
        elif f.kind == "corpus":
            c = gr.Dropdown(choices=["demo"], value=v, label=f.label, info=f.info, allow_custom_value=True)
        elif f.kind == "int":
            c = gr.Number(value=v, label=f.label, info=f.info, precision=0)
        elif f.kind == "float":
            c = gr.Number(value=v, label=f.label, info=f.info, step=0.01)
        else:
            c = gr.Textbox(value=v, label=f.label, info=f.info, max_lines=1)
        comps[f.key] = c
        errs[f.key] = gr.Markdown("", visible=False, elem_classes=["field-error"], container=True)

    vals = dict(zip(KEYS, values, strict=True))
    upload = upload_msg = None
    with gr.Row():
        with gr.Column(scale=3):
            gr.Markdown("### Experiment")
            groups = [
                ("Run", ["name", "recipe", "seeds", "train.precision", "logging.report_to"]),
                ("Model and data", ["model.name", "model.trust_remote_code", "data.corpus"]),
                (
                    "Phase budgets and masking",
                    [
                        "phases.main.tokens",
                        "phases.warmup.tokens",
                        "phases.decay.fraction",
                        "phases.main.mlm_probability",
                        "phases.decay.mlm_probability",
                        "train.total_tokens",
                    ],
                ),
                ("Optimisation", ["train.lr", "train.warmup_tokens", "train.batch_size", "train.seq_len"]),
                (
                    "Freeze",
                    [
                        "phases.main.freeze.layers",
                        "phases.main.freeze.embeddings",
                        "phases.decay.freeze.layers",
                        "phases.decay.freeze.embeddings",
                    ],
                ),
            ]
            placed = {k for _, ks in groups for k in ks}
            rest = [f.key for f in FIELDS if not f.advanced and f.key not in placed]
            groups += [("More", rest)] if rest else []  # a key added to the schema's form shows up even here
            for title, keys in groups:
                with gr.Group():
                    gr.Markdown(f"**{title}**")
                    with gr.Row(equal_height=True):  # cells stretch to the row's tallest: no ragged grey gaps
                        for k in keys:
                            with gr.Column(min_width=200):
                                make(FIELD_BY_KEY[k], vals[k])
                                if k == "data.corpus":  # the upload sits under the corpus it fills in
                                    upload = gr.File(
                                        label=f"…or upload a corpus (≤ {ctx.max_upload_bytes // 2**20} MB)",
                                        file_types=[".txt", ".jsonl", ".csv", ".parquet"],
                                        height=140,
                                        elem_id="corpus-upload",
                                    )
                                    upload_msg = gr.Markdown("")
            with gr.Accordion("Advanced", open=False):
                with gr.Row(equal_height=True):
                    for f in FIELDS:
                        if f.advanced:
                            with gr.Column(min_width=200):
                                make(f, vals[f.key])
            with gr.Row():
                target = gr.Radio(list(TARGETS), value=next(iter(TARGETS)), label="Run on", elem_id="launch-target",
                                  info="Slurm: one sbatch job per run, with the Advanced Slurm settings")  # fmt: skip
                launch_btn = gr.Button("Launch", variant="primary", elem_id="launch-btn")
                save_btn = gr.Button("Save config")
                overwrite = gr.Checkbox(False, label="Replace a saved config of the same name", elem_id="save-replace")
            # what the last launch did, apart from the form's check: a check answering after a launch (one still
            # pending when Launch was pressed, or the corpus read) rewrites the check's status, never this
            launched = gr.Markdown("", elem_id="launch-result")
            status = gr.Markdown(first["message"], elem_id="launch-status")
            saved_file = gr.File(label="Saved config", visible=False, interactive=False)
            with gr.Accordion("Load a config", open=False):
                with gr.Row():
                    load_saved = gr.Dropdown(
                        choices=saved_configs(), label="Saved configs", allow_custom_value=True, elem_id="saved-configs"
                    )
                    load_upload = gr.File(
                        label="…or upload a YAML", file_types=[".yaml", ".yml"], height=140, elem_id="config-upload"
                    )
        with gr.Column(scale=2) as right:
            gr.Markdown("### Preview")
            py_cmd = gr.Code(
                first["python"], label="CLI command", language="shell", lines=2, interactive=False, elem_id="cmd-python"
            )
            acc_cmd = gr.Code(
                first["accelerate"], label="accelerate launch form", language="shell", lines=2, interactive=False
            )
            yaml_box = gr.Code(
                first["yaml"], label="config.yaml", language="yaml", lines=24, interactive=False, elem_id="yaml-preview"
            )

    inputs = [comps[k] for k in KEYS]
    err_outputs = [errs[k] for k in KEYS]
    last_ok = gr.State({k: first[k] for k in PREVIEW})  # what the preview shows while a field is invalid
    base = gr.State(None)  # a loaded config: the keys the form does not show come from it

    def render(res: dict) -> list:
        ups = []
        for k in KEYS:
            m = res["errors"].get(k)
            ups.append(gr.update(value=warn(m) if m else "", visible=bool(m)))
        return [res["yaml"], res["python"], res["accelerate"], res["message"], *ups]

    def on_change(*vals):
        *vals, last, loaded = vals
        res = validate_form(list(vals), base=loaded)
        return [*render(keep_last_preview(res, last)), {k: res[k] for k in PREVIEW} if res["ok"] else last]

    preview_outputs = [yaml_box, py_cmd, acc_cmd, status, *err_outputs]
    # .change, not .input: a value set without typing (a paste, a loaded config, an upload, a script) is checked too
    validate_kw = dict(
        inputs=[*inputs, last_ok, base],
        outputs=[*preview_outputs, last_ok],
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="validate",
    )
    checked = gr.on([c.change for c in inputs], on_change, trigger_mode="always_last", api_name="validate",
                    **validate_kw)  # fmt: skip

    def on_corpus(*vals):
        """After a check that left the corpus pending ("checking corpus…"): read it, then show the form's check
        again, with any problem under the Corpus field. Nothing to do otherwise."""
        *form_vals, _, loaded = vals
        try:
            cfg, _ = values_to_config(list(form_vals), loaded)
        except (DetourError, ValueError):
            return [gr.skip()] * len(validate_kw["outputs"])
        if not corpus_pending(cfg):
            return [gr.skip()] * len(validate_kw["outputs"])
        check_corpus(cfg)
        return on_change(*vals)

    checked.then(on_corpus, **{**validate_kw, "concurrency_id": "corpus"})
    with right:  # the timeline (editor and drawing) under the preview
        from app import timeline_editor

        timeline = timeline_editor.build_launch(inputs, values, base, values_to_config, comps["recipe"],
                                                revalidate=(on_change, validate_kw),
                                                total=comps["train.total_tokens"])  # fmt: skip

    def on_launch(*vals):
        """Queued: the result under Launch, and the name moves on to a free one (its check redraws the preview).
        Refused: the form's errors under their fields, and the reason under Launch too."""
        *vals, loaded, last, where = vals
        res = launch(list(vals), ctx.max_concurrent, base=loaded, last=last, target=where)
        if res.get("runs"):
            preview = [gr.skip()] * len(preview_outputs)
            return [*preview, gr.update(value=_free_name(res["cfg"]["name"])), res["message"]]
        return [*render(res), gr.update(), res["message"]]

    launch_btn.click(
        on_launch,
        inputs=[*inputs, base, last_ok, target],
        outputs=[*preview_outputs, comps["name"], launched],
        concurrency_limit=1,
        api_name="launch",
    )

    def on_save(*vals):
        *vals, loaded, replace = vals
        path, msg = save_config(list(vals), base=loaded, overwrite=bool(replace))
        return (
            gr.update(value=str(path) if path else None, visible=bool(path)),
            msg,
            gr.update(choices=saved_configs()),
            False if path else gr.skip(),  # a replace is asked for once: the next save of that name asks again
        )

    save_btn.click(
        on_save,
        inputs=[*inputs, base, overwrite],
        outputs=[saved_file, status, load_saved, overwrite],
        api_name="save_config",
    )
    keep_fresh(lambda: gr.update(choices=saved_configs()), [load_saved])  # a config saved since the page was built
    # the form was built with the app: a page opened after runs were made proposes a name still free
    from gradio.context import Context

    if Context.root_block is not None:
        Context.root_block.load(proposed_name, inputs=[comps["name"]], outputs=[comps["name"]], queue=False,
                                show_progress="hidden", api_name="proposed_name")  # fmt: skip
    load_saved.focus(lambda: gr.update(choices=saved_configs()), outputs=[load_saved], queue=False,
                     api_visibility="private")  # fmt: skip

    def on_load(path):
        vals_, msg, cfg = load_config_file(path)
        if vals_ is None:
            return [*[gr.update() for _ in KEYS], msg, gr.update()]
        return [*vals_, msg, cfg]

    # the fields' .change events validate what a load or an upload fills in (over the loaded config)
    load_saved.input(on_load, inputs=[load_saved], outputs=[*inputs, status, base], api_name="load_saved_config")
    load_upload.upload(on_load, inputs=[load_upload], outputs=[*inputs, status, base], api_name="load_config")

    def on_upload(path):
        new, msg = store_upload(path, ctx.max_upload_bytes)
        return (gr.update(value=new, choices=["demo", new]) if new else gr.update()), msg

    upload.upload(on_upload, inputs=[upload], outputs=[comps["data.corpus"], upload_msg], api_name="upload_corpus")

    def refresh_models():
        return gr.update(choices=model_choices())

    comps["model.name"].focus(refresh_models, outputs=[comps["model.name"]], queue=False, api_visibility="private")
    return {
        "inputs": comps,
        "errors": errs,
        "status": status,
        "launched": launched,
        "yaml": yaml_box,
        "python": py_cmd,
        "launch": launch_btn,
        "load": on_change,
        "timeline": timeline,
    }
