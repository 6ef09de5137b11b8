"""Shared fixtures: tiny random models built with the bundled tokenizer, isolated runs dir."""

from __future__ import annotations

import os
from pathlib import Path

# One thread, in this process and in every process a test starts (trainers, the app, launchers) unless the test or
# the caller sets its own: the tests train tiny models, where a second thread adds synchronisation, not speed.
# Measured on this 2-core machine (tests/detour/test_freeze_and_optimizer.py + test_objective_training.py): 34 s of
# CPU and 107 s wall with torch's default two threads, 18 s and 65 s with one. Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from backend.core.paths import (  # noqa: E402
    BUNDLED_TOKENIZER_DIR,
    CACHE_ENV,
    EVALS_ENV,
    EXPORTS_ENV,
    REPORTS_ENV,
    RUNS_ENV,
    SWEEPS_ENV,
    UPLOADS_ENV,
    shared_data,
)
from tests import footprint  # noqa: E402

# Every root folder the code writes (runs, reports, evaluations, uploads, sweeps, the cache of token stores and
# measured rates) points into one temporary folder for the whole session, before any test or fixture runs: a module
# or session fixture runs before the per-test fixtures below, and a process a test starts inherits this environment.
# The per-test fixtures narrow each root to the test's own folder. ``footprint`` fails the session if the user's
# cache folder or the checkout changed anyway.
# A process a test starts (an xdist worker, a script that imports this file) inherits the roots already chosen for it.
USER_CACHE = footprint.user_cache(os.environ.get(CACHE_ENV))
SESSION_ROOT = None
if footprint.SESSION_ENV not in os.environ:
    SESSION_ROOT = footprint.session_root()
    os.environ[footprint.SESSION_ENV] = str(SESSION_ROOT)
    for _env, _name in ((RUNS_ENV, "runs"), (REPORTS_ENV, "reports"), (EVALS_ENV, "evals"),
                        (UPLOADS_ENV, "uploads"), (SWEEPS_ENV, "sweeps"), (CACHE_ENV, "cache")):  # fmt: skip
        os.environ[_env] = str(SESSION_ROOT / _name)
from backend.engine.models import build_from_scratch  # noqa: E402
from tests.local_servers import free_port  # noqa: E402, F401 - the tests import it from here

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # also where something imported torch before this file

TINY_WIDTHS = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, max_position_embeddings=256)
TINY_MODERNBERT = dict(
    TINY_WIDTHS,
    model_type="modernbert",
    num_hidden_layers=4,
    local_attention=16,  # window of 16: sequences of 64 are well beyond it
    global_attn_every_n_layers=2,
)
TINY_BERT = dict(TINY_WIDTHS, model_type="bert", num_hidden_layers=3)


# The longest modules, started first. CI runs two pytest-xdist workers that take whole modules (``--dist loadscope
# --no-loadscope-reorder``: a module's fixtures are built once, and the Slurm module's one cluster serves all its
# tests) in collection order: the long ones first, then the many short ones fill in, so both workers end together
# rather than one waiting out the other's last long module.
LONGEST_FIRST = (
    "sweeps/test_slurm.py",
    "runs/test_compile.py",
    "runs/test_accelerate_launch.py",
    "ui/test_browser.py",
    "ui/test_browser_path.py",
    "sweeps/test_sweep_e2e.py",
    "ui/test_sweeps_browser.py",
    "bench/test_bench_gpu_smoke.py",
    "replication/test_study_stop.py",
    "bench/test_bench_plan_time_smoke.py",
    "replication/test_crossover.py",
    "bench/test_bench_app_load_smoke.py",
)


def pytest_sessionstart(session) -> None:
    footprint.start(session.config, USER_CACHE)


def pytest_sessionfinish(session, exitstatus) -> None:
    footprint.finish(session, USER_CACHE, SESSION_ROOT)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {f"tests/{name}": i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def bundled_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BUNDLED_TOKENIZER_DIR)


def save_tiny_model(out_dir: Path, arch: dict, seed: int = 0, attn_implementation: str = "sdpa") -> Path:
    """Build a tiny random MLM model with the bundled tokenizer and save it HF-style (safetensors)."""
    torch.manual_seed(seed)
    tok = bundled_tokenizer()
    model = build_from_scratch(arch, tok, attn_implementation=attn_implementation)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tiny_modernbert_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_modernbert"), TINY_MODERNBERT)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_bert"), TINY_BERT)


@pytest.fixture(scope="session")
def released_cache(tmp_path_factory) -> Path:
    """A Hugging Face cache holding the released-style models of ``tests/released_models.py`` (a WordPiece BERT, a
    SentencePiece/Unigram CamemBERT, a byte-level RoBERTa, two NER taggers), laid out as the hub client lays out a
    download; built once per test run (per worker). Tests read it, never write into it."""
    from tests.released_models import build_cache

    cache = tmp_path_factory.mktemp("hf-released")
    build_cache(cache)
    return cache


@pytest.fixture
def released_hub(released_cache, monkeypatch) -> Path:
    """``released_cache`` as this test's Hugging Face cache, offline: its models resolve by hub id."""
    monkeypatch.setenv("HF_HUB_CACHE", str(released_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return released_cache


@pytest.fixture(autouse=True)
def isolated_runs_dir(tmp_path, monkeypatch) -> Path:
    """Every test writes runs under its own tmp dir, never into the repo."""
    d = tmp_path / "runs"
    monkeypatch.setenv("DETOUR_RUNS_DIR", str(d))
    return d


@pytest.fixture(autouse=True)
def isolated_output_dirs(tmp_path, monkeypatch) -> None:
    """Reports, evaluations, uploads and sweeps under the test's tmp dir too: a test that writes one without asking
    for its own folder (the suite panel's did) would otherwise write into the checkout and fail the next run."""
    for env, name in (
        (REPORTS_ENV, "reports"),
        (EVALS_ENV, "evals"),
        (UPLOADS_ENV, "uploads"),
        (SWEEPS_ENV, "sweeps"),
        (EXPORTS_ENV, "exports"),
    ):
        monkeypatch.setenv(env, str(tmp_path / name))


@pytest.fixture(autouse=True)
def isolated_cache_dir(tmp_path, monkeypatch) -> Path:
    """Token stores (and any other cache) under the test's tmp dir, never in ~/.cache."""
    d = tmp_path / "cache"
    monkeypatch.setenv("DETOUR_CACHE_DIR", str(d))
    return d


def _mount(target: Path, size: str, readonly: bool = False) -> None:
    import subprocess

    target.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path):
    """``small_fs(name, size)``: a real tmpfs of ``size`` under tmp_path (a disk that fills up, or is read-only),
    unmounted after the test; the test skips, saying why, where this process may not mount."""
    import subprocess

    mounted: list[Path] = []

    def make(name: str, size: str = "4m", readonly: bool = False) -> Path:
        target = tmp_path / name
        _mount(target, size, readonly)
        mounted.append(target)
        return target

    yield make
    for m in reversed(mounted):
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


@pytest.fixture
def one_torch_thread():
    """Tiny models on a shared 2-core machine: one thread is ~10x faster than two contending ones."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def require_shared(name: str) -> Path:
    p = shared_data(name)
    if p is None:
        pytest.skip(f"../shared/data/{name} is absent (set DETOUR_SHARED_DATA to its parent to run this test)")
    return p


def tiny_train_cfg(model_dir: Path, name: str = "t", **sets) -> dict:
    """A config that trains a tiny model for a handful of steps on the bundled demo corpus."""
    from backend.engine.config import load_config

    base = {
        "name": name,
        "model.name": str(model_dir),
        "data.corpus": "demo",
        "data.heldout_fraction": 0.1,
        "train.seq_len": 64,
        "train.batch_size": 4,
        "train.lr": 1e-3,
        "train.precision": "fp32",  # the same arithmetic on every machine (auto would pick bf16 on some CPUs)
        "phases.main.steps": 8,
        "phases.decay.steps": 4,
        "logging.log_every": 1,
        "logging.eval_every": 4,
        "logging.eval_batches": 2,
        "logging.checkpoint_every": 4,
        "logging.keep_checkpoints": 10,
    }
    base.update({k.replace("__", "."): v for k, v in sets.items()})
    return load_config(None, [f"{k}={v}" for k, v in base.items()])


def measured_rate(n_params: int, precision: str, device: str, objective: str, tokens_per_s: float,
                  seq_len: int | None = None, batch_size: int | None = None, threads: int = 1,
                  load: float | None = 0.5) -> dict:  # fmt: skip
    """One training-rate measurement in this test's rate book, with the fields the training loop records (a calm
    machine unless ``load`` says otherwise)."""
    from backend.engine import rates

    return rates.record("train", n_params=n_params, size=rates.size_key(n_params), precision=precision, device=device,
                        objective=objective, seq_len=seq_len, batch_size=batch_size, world=1, threads=threads,
                        steps=100, seconds=10.0, tokens_per_s=tokens_per_s, load=load)  # fmt: skip


def train_rows(run: Path) -> dict[int, dict]:
    """A run's training rows (metrics.jsonl) by step."""
    from backend.engine.rundir import read_metrics

    return {r["step"]: r for r in read_metrics(run) if r["type"] == "train"}


def resume_from_first_checkpoint(run: Path, want: dict[int, dict]) -> dict[int, dict]:
    """Cut a finished tiny ``run`` back to its first checkpoint (step 4: the later ones and the final model gone),
    resume it, and check that every step's loss is that of ``want`` (the uninterrupted run's rows); its rows."""
    import shutil

    from backend.runs.train import train_run

    for ck in sorted((run / "checkpoints").glob("step-*"))[1:]:
        shutil.rmtree(ck)
    shutil.rmtree(run / "final")
    assert train_run(run, resume=True)["state"] == "done"
    assert "from step-00000004" in (run / "train.log").read_text()
    got = train_rows(run)
    assert sorted(got) == sorted(want)
    for s in want:
        assert got[s]["loss"] == pytest.approx(want[s]["loss"], abs=1e-5), s
    return got


def tiny_config_file(path: Path, model_dir: Path, name: str) -> Path:
    """A config YAML as a user uploads one (the Sweeps tab's form reads it): a tiny clm_detour run, 256 tokens of
    CLM and one MLM step."""
    import yaml

    cfg = {
        "name": name,
        "model": {"name": str(model_dir)},
        "data": {"corpus": "demo", "heldout_fraction": 0.1},
        "train": {"seq_len": 64, "batch_size": 4, "precision": "fp32"},
        "recipe": "clm_detour",
        "phases": {"main": {"tokens": 256}, "decay": {"steps": 1}},
        "logging": {"eval_every": 4, "eval_batches": 1},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def backend_cli(*args: str, timeout: float = 300):
    """``python -m backend ARGS`` in a fresh process, as a user types it: its CompletedProcess (text output)."""
    import subprocess
    import sys

    from backend.core.paths import REPO_ROOT

    return subprocess.run([sys.executable, "-m", "backend", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def torchrun_train(run_dir: Path, port: int, nproc: int = 2, timeout: int = 600, resume: bool = False):
    """``python -m backend train --run-dir RUN [--resume]`` under torchrun with ``nproc`` CPU processes (gloo)."""
    import os
    import shutil
    import subprocess
    import sys

    from backend.core.paths import REPO_ROOT

    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    argv = [*launcher, "--nproc_per_node", str(nproc), "--master_port", str(port)]
    argv += ["-m", "backend", "train", "--run-dir", str(run_dir), *(["--resume"] if resume else [])]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        import psutil

        stacks = _stacks_of(proc.pid)  # where each process waits, before they are killed
        tree = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
        for p in tree:  # torchrun and every process under it: they hold the pipes open
            try:
                p.kill()
            except psutil.Error:
                pass
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"torchrun did not finish in {timeout} s; its processes' stacks:\n{stacks}\n"
                             f"stdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}") from None  # fmt: skip
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _stacks_of(pid: int) -> str:
    """py-spy dumps of a hung process tree (where it is installed), so a rare hang says where it waits."""
    import shutil
    import subprocess

    import psutil

    spy = shutil.which("py-spy")
    if not spy:
        return "(py-spy is not installed: no stacks)"
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return "(the process is gone)"
    dumps = []
    for p in procs:
        try:
            r = subprocess.run([spy, "dump", "--pid", str(p.pid)], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            dumps.append(f"--- pid {p.pid}: py-spy did not answer in 30 s")
            continue
        dumps.append(f"--- pid {p.pid}: {' '.join(p.cmdline()[:4])}\n{r.stdout or r.stderr}")
    return "\n".join(dumps)


@pytest.fixture(scope="session")
def detour_run_dir(tmp_path_factory, tiny_modernbert_dir) -> Path:
    """A finished tiny clm_detour run with saved models in both phases: steps 2 and 4 (end-main) under CLM, 6 and 8
    (end-decay, = final) under the MLM decay. Trained once per session, in its own runs folder and cache."""
    from backend.runs.train import prepare_runs, train_run

    root = tmp_path_factory.mktemp("detour_runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DETOUR_CACHE_DIR", str(root / ".cache"))
        mp.setenv("DETOUR_RUNS_DIR", str(root))
        sets = {"phases.main.steps": 4, "phases.decay.steps": 4, "logging.checkpoint_every": 2}
        (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "scrub", recipe="clm_detour", **sets), root=root)
        assert train_run(run)["state"] == "done"
    return run


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real one-node Slurm cluster (munged, slurmctld, slurmd with 2 CPUs: tests/sweeps/slurm_cluster.py) for the
    session; its ``slurm.conf`` is in ``SLURM_CONF`` meanwhile. Skips naming why where it cannot start."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "sweeps"))
    from slurm_cluster import ClusterUnavailable, SlurmCluster

    if os.geteuid() != 0:
        pytest.skip("the test Slurm cluster runs its daemons as root (SlurmUser=root); this user is not root")
    try:
        cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    except ClusterUnavailable as exc:
        pytest.skip(f"no Slurm cluster: {exc}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)  # every sbatch/squeue/scancel of the code under test finds it
    try:
        yield cluster
    finally:
        cluster.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
