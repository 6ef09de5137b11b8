"""A finished model out of the lab: ``python -m backend export NAME --out DIR [--push-to-hub REPO]`` and the Runs
tab's Export button, one function.

``NAME`` is a finished run (by name, ``SWEEP/RUN`` or its folder: its sealed ``final/``) or a kept fine-tuned model
(``OUT/models/<label>/seed-<s>``). The export is a self-contained folder that ``AutoModelForMaskedLM`` (or
``AutoModelForTokenClassification`` / ``...ForSequenceClassification``) loads and ``huggingface_hub.ModelCard``
parses: config, weights, tokenizer, the README.md card written again from the evidence now (a run's config as
``training_config.yaml``, a fine-tuned model's ``label_map.json``; not the lab's seal, nor anything that names this
disk's paths). A run's seal is checked first and each copied weight file against it.

Nothing is written over or half-written: every check (the model, ``--out``: new or empty, not inside another
artifact; for a push the repository id, a network that is not switched off and a token) comes before the first
write; the folder is staged beside ``--out`` and renamed into place whole; the push is one commit
(``HfApi.upload_folder``), so the Hub gets all of it or nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from backend.cards import CARD
from backend.core.catalogue import check_new_folder, run_owning
from backend.core.errors import ExportError, ModelSpecError
from backend.core.paths import exports_dir, runs_dir
from backend.engine.checkpoint import file_sha256

SEAL = ("manifest.json", "COMPLETE")  # the lab's own seal: an export carries the model, not how this disk checks it
FINETUNE_KEEP_OUT = ("metrics.json",)  # it names this disk's paths; the card carries what it says


@dataclass
class Exportable:
    """What ``NAME`` names: ``kind`` run | finetuned, ``folder`` the model files, ``run`` the run folder (runs)."""

    kind: str
    name: str
    folder: Path
    run: Path | None = None

    @property
    def auto_class(self) -> str:
        if self.kind == "run":
            return "AutoModelForMaskedLM"
        task = json.loads((self.folder / "label_map.json").read_text(encoding="utf-8")).get("task")
        return "AutoModelForTokenClassification" if task == "ner" else "AutoModelForSequenceClassification"


def find_exportable(name: str) -> Exportable:
    """``name`` -> a finished run or a kept fine-tuned model; ExportError (one line) for anything else."""
    from backend.engine.model_ref import resolve_model

    name = str(name or "").strip()
    if not name:
        raise ExportError("export: give a run (its name or folder) or a fine-tuned model folder")
    p = Path(name).expanduser()
    if p.is_dir() and (p / "metrics.json").is_file() and (p / "label_map.json").is_file():
        return _finetuned(name, p.absolute())
    if p.is_dir() and (run := run_owning(p)) is not None and p.absolute() in (run, run / "final"):
        return _finished_run(run.name, run)
    try:
        ref = resolve_model(name)
    except ModelSpecError as exc:
        raise ExportError(f"export: {exc}") from None
    if ref.run is None:
        raise ExportError(
            f"export '{name}': is {'a bundled' if ref.kind == 'bundled' else 'a ' + ref.kind} model, not one this "
            "lab made; export takes a finished run (its final/ model) or a kept fine-tuned model folder "
            "(OUT/models/<label>/seed-<s>)"
        )
    return _finished_run(name, Path(ref.run))


def _finished_run(name: str, run: Path) -> Exportable:
    from backend.engine import model_files
    from backend.engine.rundir import read_status

    final = run / "final"
    if not (final / "config.json").is_file():
        state = read_status(run).get("state", "unknown")
        raise ExportError(f"export '{name}': the run has no final model yet ({state}); a run is exported once done")
    try:
        model_files.check(final, name)  # the weights whole and the seal true, before anything is copied
    except ModelSpecError as exc:
        raise ExportError(f"export '{name}': {exc}") from None
    return Exportable("run", name, final, run)


def _finetuned(name: str, folder: Path) -> Exportable:
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportError(f"export '{name}': unreadable metrics.json ({exc})") from None
    if metrics.get("status") != "ok" or not (folder / "config.json").is_file():
        raise ExportError(f"export '{name}': holds no fine-tuned model (its evaluation ran with --no-keep-models, "
                          "or the fine-tune did not finish)")  # fmt: skip
    return Exportable("finetuned", name, folder)


def hub_refusal(repo: str) -> str | None:
    """Why ``repo`` cannot be pushed to from here, before anything is written (None: try)."""
    from huggingface_hub import constants, get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from backend.engine.hub_cache import offline

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        return f"--push-to-hub '{repo}': not a repository id (org/name): {' '.join(str(exc).split())[:160]}"
    if "/" not in repo:
        return f"--push-to-hub '{repo}': name the owner too (your-name/{repo})"
    if offline() or constants.is_offline_mode():
        return ("the Hub is switched off here (HF_HUB_OFFLINE is set): nothing was exported or pushed; push from a "
                "machine with a network, or export with --out alone and upload the folder later")  # fmt: skip
    if not get_token():
        return "no Hugging Face token (run `hf auth login`, or set HF_TOKEN): nothing was exported or pushed"
    return None


def default_out(name: str) -> Path:
    """Where the app exports a run: ``<exports>/<name>``, or ``-2``, ``-3`` ... when that is taken."""
    from backend.core.catalogue import first_free

    return first_free(exports_dir() / Path(name).name)


def export_model(name: str, out: str | Path | None = None, push_to_hub: str | None = None,
                 private: bool = False, log=print) -> dict:  # fmt: skip
    """Export ``name`` into ``out`` (and/or push it to ``push_to_hub``). Returns ``{out, files, card, auto_class,
    repo, url}``; ExportError (one line) before anything is written when it cannot."""
    if out is None and not push_to_hub:
        raise ExportError("export: give --out DIR (a new folder), --push-to-hub REPO, or both")
    target = check_new_folder(out, "export") if out is not None else None  # before any model is read
    item = find_exportable(name)
    if push_to_hub and (why := hub_refusal(push_to_hub)):
        raise ExportError(why)
    _card(item)  # written again from the evidence now (a run's card beside its seal)
    stage_root = target.parent if target is not None else Path(tempfile.mkdtemp(prefix="detour-export-"))
    stage = stage_root / f".{(target or stage_root).name}.export-{os.getpid()}"
    made = next((d for d in (*reversed(stage_root.parents), stage_root) if not d.exists()), None)
    try:
        stage_root.mkdir(parents=True, exist_ok=True)
        files = _copy(item, stage)
        _check_loadable(stage, item)
        if target is not None:
            if target.exists():
                target.rmdir()  # empty: checked above
            stage.rename(target)
            stage = target
        url = _push(stage, push_to_hub, private, item, log, kept=target is not None) if push_to_hub else None
    finally:
        if stage != target:
            shutil.rmtree(stage, ignore_errors=True)
        if target is None:
            shutil.rmtree(stage_root, ignore_errors=True)
        elif made is not None and not target.exists():  # the folders made for an export that did not happen
            shutil.rmtree(made, ignore_errors=True)
    return {"out": str(target) if target else None, "files": files, "card": str(target / CARD) if target else None,
            "auto_class": item.auto_class, "repo": push_to_hub, "url": url}  # fmt: skip


def _card(item: Exportable) -> None:
    from backend.cards.finetuned_card import write_finetuned_card
    from backend.cards.run_card import write_run_card

    try:
        if item.kind == "run":
            write_run_card(item.run)
        elif not (item.folder / CARD).is_file():  # a model kept before cards: its card from its own records
            metrics = json.loads((item.folder / "metrics.json").read_text(encoding="utf-8"))
            label_map = json.loads((item.folder / "label_map.json").read_text(encoding="utf-8"))
            write_finetuned_card(item.folder, metrics, label_map, metrics.get("evaluation") or "evaluation")
    except (OSError, ValueError, KeyError) as exc:
        raise ExportError(
            f"export '{item.name}': its model card cannot be written ({exc}); nothing was exported"
        ) from None


def _copy(item: Exportable, stage: Path) -> list[str]:
    """The model's files into ``stage``; a run's weights checked against its seal once copied."""
    stage.mkdir(parents=True)
    skip = SEAL if item.kind == "run" else (*SEAL, *FINETUNE_KEEP_OUT)
    for f in sorted(item.folder.iterdir()):
        if f.is_file() and not f.is_symlink() and f.name not in skip and not f.name.startswith("."):
            shutil.copyfile(f, stage / f.name)  # with this user's usual permissions, not a private temp file's
    if item.kind == "run":
        manifest = json.loads((item.folder / SEAL[0]).read_text(encoding="utf-8"))
        for rel, meta in manifest.items():
            if rel.endswith(".safetensors") and file_sha256(stage / rel) != meta["sha256"]:  # the copy, read back
                raise ExportError(f"export '{item.name}': the copy of {rel} differs from the sealed file; nothing "
                                  "was exported")  # fmt: skip
        shutil.copyfile(item.run / "config.yaml", stage / "training_config.yaml")
    return sorted(p.name for p in stage.iterdir())


def _check_loadable(folder: Path, item: Exportable) -> None:
    """The folder holds what a loader reads (its config parses) and a card ``ModelCard.load`` parses."""
    from huggingface_hub import ModelCard
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(folder)
        ModelCard.load(folder / CARD)
    except (OSError, ValueError) as exc:
        raise ExportError(
            f"export '{item.name}': the exported folder does not load ({exc}); nothing was exported"
        ) from None


def _push(folder: Path, repo: str, private: bool, item: Exportable, log, kept: bool) -> str:
    """One commit of the whole folder; a failure is one line saying what the Hub holds."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo, private=private, exist_ok=True)
        info = api.upload_folder(repo_id=repo, folder_path=folder, commit_message=f"Detour Lab: export {item.name}")
    except Exception as exc:  # noqa: BLE001 - a network, an authorisation or a validation error: one line
        why = " ".join(str(exc).split())[:240] or type(exc).__name__
        whole = f"; the export in {folder} is whole" if kept else ""
        raise ExportError(f"push to {repo} failed ({type(exc).__name__}: {why}): no commit of this model was made "
                          f"there{whole}") from None  # fmt: skip
    log(f"pushed to {repo}: {getattr(info, 'commit_url', '')}")
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/{repo}")


def exportable_runs() -> list[str]:
    """The runs of the runs folder that can be exported now (done, with a final model)."""
    from backend.engine.rundir import list_runs

    return [r.name for r in list_runs(runs_dir()) if r.state == "done" and (r.path / "final" / "config.json").is_file()]
