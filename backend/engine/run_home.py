"""Where a run's folder is now, while its trainer writes into it.

A user may rename or move a run folder under a running trainer (a file manager's tidy-up: ``mv runs/R
runs/R-moved``). Every path the trainer wrote to was computed from the name it started with, and writes made their
missing parents, so it recreated ``runs/R/`` and went on there, out of sight (no config.yaml: no list showed it),
while ``R-moved`` read ``running`` and then ``failed``. The trainer now opens its folder once and keeps its identity
(device and inode); before it writes it asks ``RunHome.here()``:

* the same folder under the same name: that path, after one ``stat``;
* the same folder renamed inside the folder that held it (the runs folder): followed, the new path returned and
  the move recorded (``moves``): the run goes on where the user put it, still listed, cancellable, resumable;
* the same folder moved anywhere else on its disk: followed too, and ``left`` says so: the trainer stops at the
  next step with a checkpoint and its status written where the folder now is (nothing lists or cancels a run
  outside its runs folder);
* gone (deleted, or moved to another disk: a copy and a delete): ``RunFolderGone``; nothing is written, nothing
  recreated.

``anchor`` is a path that names the folder wherever it goes (``/proc/self/fd/N`` on Linux): the background
checkpoint writer and ``save_pretrained`` (which makes every missing parent) write through it, so a move in the
middle of a write neither breaks it nor recreates the old folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from backend.core.errors import DetourError

PROC_FD = Path("/proc/self/fd")


class RunFolderGone(DetourError):
    """The run folder a trainer writes into was deleted, or moved to another disk, while it trained."""


class RunHome:
    """A run folder held open by its identity, so its trainer follows it when it is renamed or moved."""

    def __init__(self, path: str | Path, on_move=None):
        """``on_move(old, new)``: told of each move as it is found (the trainer's log says it)."""
        self.path = Path(path).absolute()
        self.on_move = on_move
        self.started_as = self.path
        self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        st = os.fstat(self._fd)
        self.identity = (st.st_dev, st.st_ino)
        self.moves: list[tuple[Path, Path]] = []  # (from, to), oldest first

    @property
    def left(self) -> bool:
        """The folder was moved out of the folder it started in: the trainer stops (``stop_reason`` says why)."""
        return self.path.parent != self.started_as.parent

    def stop_reason(self) -> str | None:
        if not self.left:
            return None
        return (
            f"its folder was moved from {self.started_as} to {self.path}, out of {self.started_as.parent}; it "
            f"stopped with a checkpoint there: resume it with python -m backend train --run-dir {self.path} --resume"
        )

    def here(self) -> Path:
        """The folder's path now (see the module's docstring); ``RunFolderGone`` when it is nowhere."""
        if self._same(self.path):
            return self.path
        found = self._find()
        if found is None:
            raise RunFolderGone(
                f"run folder {self.path} was deleted or moved to another disk while its trainer wrote into it; "
                "nothing more was written (its old name was not recreated). If you moved it, resume it where it is "
                "now: python -m backend train --run-dir FOLDER --resume"
            )
        self.moves.append((self.path, found))
        if self.on_move is not None:
            self.on_move(self.path, found)
        self.path = found
        return found

    def anchor(self) -> Path:
        """A path that names this folder wherever it is moved on its disk (``/proc/self/fd/N``), or ``here()`` where
        the system has no such path."""
        if self._fd is not None and (link := PROC_FD / str(self._fd)).is_dir():
            return link
        return self.here()

    def real(self, text: str) -> str:
        """``text`` with the anchor's path written as the folder's real path (for messages)."""
        if self._fd is None:
            return text
        return text.replace(str(PROC_FD / str(self._fd)), str(self.path))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunHome:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _same(self, path: Path) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity

    def _find(self) -> Path | None:
        """Where the kernel says the open folder is (Linux); else a sibling of the old name with its identity."""
        if self._fd is not None:
            try:
                target = os.readlink(PROC_FD / str(self._fd))
            except OSError:
                target = None
            if target and not target.endswith(" (deleted)") and self._same(Path(target)):
                return Path(target)
        try:
            with os.scandir(self.path.parent) as entries:
                for e in entries:
                    st = e.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) == self.identity:
                        return Path(e.path)
        except OSError:
            pass
        return None
