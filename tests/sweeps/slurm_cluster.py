"""A real one-node Slurm cluster for the tests: Debian's ``munged``, ``slurmctld`` and ``slurmd`` (22.05), each in
the foreground under this process, with their own key, sockets, ports, spool and logs in one temp folder. Nothing
touches /etc: every client command finds the cluster through ``SLURM_CONF``.

No cgroups in this container: ``proctrack/linuxproc`` (a job's processes are its tasks' process tree) and
``task/none``. No accounting storage either (``sacct`` needs slurmdbd + a database): finished jobs are read from
``squeue``, which keeps them ``MinJobAge`` seconds (10 minutes here).

``SlurmCluster.start()`` raises ``ClusterUnavailable`` with the reason (a package missing, a daemon that exits,
a node that never turns idle); the fixture turns that into a skip naming it, never a pass.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from conftest import free_port

NODE = "detour1"
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "scontrol")


class ClusterUnavailable(RuntimeError):
    pass


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


class SlurmCluster:
    def __init__(self, root: Path, cpus: int = 2, kill_wait_s: int = 30):
        self.root = Path(root)
        self.cpus = cpus
        self.kill_wait_s = kill_wait_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.env: dict[str, str] = {}

    # ------------------------------------------------------------------ setup
    def _write_conf(self) -> None:
        r = self.root
        host = socket.gethostname().split(".")[0]
        for d in ("state", "spool", "munge", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        ctld_port = free_port()
        slurmd_port = next(p for p in iter(free_port, None) if p != ctld_port)  # two picks can draw the same one
        self.conf.write_text(
            "\n".join(
                [
                    f"ClusterName=detour{os.getpid()}",
                    f"SlurmctldHost={host}(127.0.0.1)",
                    f"SlurmctldPort={ctld_port}",
                    f"SlurmdPort={slurmd_port}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={r / 'munge' / 'munge.socket'}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}",
                    f"SlurmctldPidFile={r / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'slurmd.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "ReturnToService=2",
                    f"KillWait={self.kill_wait_s}",
                    "MinJobAge=600",
                    "InactiveLimit=0",
                    "JobRequeue=1",
                    f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={self.cpus} RealMemory=1000 "
                    "State=UNKNOWN",
                    f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        # slurmd 22.05 loads a cgroup plugin even when no plugin uses cgroups ("disabled" came in 23.02): the v1
        # one only reads the mounts; nothing here creates a cgroup
        (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        # each daemon gets SIGTERM when this process ends, however it ends: a test run stopped by a timeout, ^C or
        # SIGKILL skips stop() and left the cluster running (its own session: nothing else reaches it)
        with_us = [_which("setpriv"), "--pdeathsig", "TERM"] if _which("setpriv") else []  # util-linux
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(
            [*with_us, *argv], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
            start_new_session=True,
        )  # fmt: skip

    def _log_tail(self, name: str, n: int = 6) -> str:
        lines: list[str] = []
        for p in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            if p.exists():
                lines += p.read_text(errors="replace").splitlines()
        return " | ".join(ln.strip() for ln in lines[-n:])

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with code {proc.returncode}: {self._log_tail(name)}")

    def start(self, timeout_s: float = 60) -> SlurmCluster:
        missing = [b for b in BINARIES if _which(b) is None]
        if missing:
            raise ClusterUnavailable(
                f"Slurm is not installed ({', '.join(missing)} missing; apt-get install slurmctld slurmd munge "
                "slurm-client)"
            )
        self._write_conf()
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        m = self.root / "munge"
        os.chmod(m, 0o700)
        key = m / "munge.key"
        r = subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterUnavailable(f"mungekey failed: {r.stderr.strip()}")
        os.chmod(key, 0o400)
        self._spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={m / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self._wait(lambda: (m / "munge.socket").exists(), timeout_s, "munged did not open its socket")
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.run("sinfo", "-h").returncode == 0, timeout_s, "slurmctld does not answer sinfo")
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait(lambda: self.node_state() == "idle", timeout_s, "the node never showed idle in sinfo")
        return self

    def _wait(self, ok, timeout_s: float, what: str) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                self._check_alive()
            except ClusterUnavailable:
                self.stop()  # the daemons that did start go too
                raise
            if ok():
                return
            time.sleep(0.3)
        tails = "; ".join(f"{n}: {self._log_tail(n, 3)}" for n in self.procs)
        self.stop()
        raise ClusterUnavailable(f"{what} within {timeout_s:.0f} s ({tails})")

    # ------------------------------------------------------------------ use
    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, text=True,
                              check=check, timeout=30)  # fmt: skip

    def node_state(self) -> str:
        r = self.run("sinfo", "-h", "-N", "-o", "%t")
        return r.stdout.strip() if r.returncode == 0 else ""

    def wait_idle(self, timeout_s: float = 60) -> None:
        """Between tests: every job gone, the node idle again."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            live = self.run("squeue", "-h", "-t", "PD,R,CG,CF,S,RQ,RS,SE", "-o", "%i").stdout.split()
            if not live and self.node_state() == "idle":
                return
            time.sleep(0.5)
        raise AssertionError(f"the cluster did not go idle: {self.run('squeue').stdout}")

    def stop(self) -> None:
        for r in self.run("squeue", "-h", "-o", "%i").stdout.split() if self.procs.get("slurmctld") else []:
            self.run("scancel", r)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
