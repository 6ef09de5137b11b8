"""``python -m app``: the Detour Lab browser app.

Safe defaults: binds 127.0.0.1 (``--host`` to change), no public link unless ``--share``, a password from
``DETOUR_PASSWORD`` (user ``detour`` or ``DETOUR_USER``; required for any host but this machine's and for
``--share``), uploads capped (``--max-upload``), analytics off, no network calls at start. Beside a training run
on the same cores, the app's model inference yields: ``DETOUR_APP_THREADS`` torch threads (default 1) at nice
``DETOUR_APP_NICE`` (default 10), see ``backend.core.inference_lane``.
"""

from __future__ import annotations

import os
import sys

# Before gradio is imported anywhere: no analytics, no version check, no hub telemetry.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """The app's flags (the guide's CLI reference is generated from this parser)."""
    p = argparse.ArgumentParser(
        prog="python -m app",
        description="Detour Lab browser app",
        epilog="beside a training run on the same cores the app's model inference yields: DETOUR_APP_THREADS torch "
        "threads (default 1) at nice DETOUR_APP_NICE (default 10); an app that leads its session (setsid) gives it the "
        "nice DETOUR_APP_SESSION_NICE (default 0; raise it to favour the runs over the users)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=None, help="port (default: 7860 or the next free one)")
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    p.add_argument("--runs-dir", default=None, help="runs folder (default: DETOUR_RUNS_DIR or ./runs)")
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="training jobs at once (default: DETOUR_MAX_CONCURRENT or 1); others queue",
    )
    p.add_argument(
        "--max-upload",
        default=os.environ.get("DETOUR_MAX_UPLOAD", "50mb"),
        help="largest accepted upload, e.g. 50mb (default: DETOUR_MAX_UPLOAD or 50mb)",
    )
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def public_without_password(host: str, share: bool, auth) -> str | None:
    """Why this launch is refused, or None. The app starts trainings and reads files under its roots: reachable from
    other machines (a lab server's ``--host 0.0.0.0``, a public ``--share`` link) it needs a password."""
    if auth or (host in LOOPBACK and not share):
        return None
    where = (
        "a public gradio.live link (--share)" if share else f"--host {host} makes the app reachable from other machines"
    )
    return (
        f"{where} without a password: set DETOUR_PASSWORD (user DETOUR_USER, default 'detour') first, "
        "or serve on 127.0.0.1 only"
    )


MIN_PASSWORD = 8


def weak_password(user: str, password: str) -> str | None:
    """Why ``password`` cannot guard a reachable app, or None. A one-space or four-letter password passed the
    presence check and let anyone who guessed it start trainings on a lab server."""
    if not password.strip():
        return "DETOUR_PASSWORD is blank"
    if len(password) < MIN_PASSWORD:
        return f"DETOUR_PASSWORD has {len(password)} characters; use at least {MIN_PASSWORD}"
    if len(set(password)) == 1:
        return "DETOUR_PASSWORD is one character repeated"
    if password.strip().lower() == user.strip().lower():
        return "DETOUR_PASSWORD is the user name"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.runs_dir:
        os.environ["DETOUR_RUNS_DIR"] = str(Path(args.runs_dir).resolve())
    password = os.environ.get("DETOUR_PASSWORD")
    auth = (os.environ.get("DETOUR_USER", "detour"), password) if password else None
    if auth and not auth[0].strip():  # the app started and nobody could log in (every attempt answered 422)
        print("error: DETOUR_USER is set but blank, so nobody could log in; set a user name, or unset it for the "
              "default 'detour'", file=sys.stderr)  # fmt: skip
        return 2
    if refusal := public_without_password(args.host, args.share, auth):
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    reachable = args.share or args.host not in LOOPBACK
    if auth and reachable and (weak := weak_password(*auth)):
        print(
            f"error: {weak}: the app is reachable from other machines (--host {args.host}"
            f"{', --share' if args.share else ''}); set a stronger one, or serve on 127.0.0.1 only",
            file=sys.stderr,
        )
        return 2
    if args.max_concurrent is not None and args.max_concurrent < 1:
        print("error: --max-concurrent must be >= 1", file=sys.stderr)
        return 2
    from backend.core import inference_lane
    from backend.core.errors import DetourError

    try:
        inference_lane.settings()  # DETOUR_APP_THREADS / DETOUR_APP_NICE: one line, not a traceback later
    except DetourError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from app.main import AppContext, parse_size, start  # gradio and the tabs: after the quick refusals

    try:
        max_upload = parse_size(args.max_upload)
    except ValueError:
        said = "--max-upload" if args.max_upload != os.environ.get("DETOUR_MAX_UPLOAD") else "DETOUR_MAX_UPLOAD"
        print(f"error: {said} {args.max_upload!r}: expected a positive size like 50mb", file=sys.stderr)
        return 2
    ctx = AppContext(max_concurrent=args.max_concurrent, max_upload_bytes=max_upload)
    start(args.host, args.port, args.share, ctx, auth=auth, block=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
