"""The mutation harness's runs in a test session (tools/support/mutate.py --suite emu --set S --json), in the
background.

The harness keeps two cores busy (its --jobs) most of a set's run, but not at its ends (the unmodified tree's
build, the last plants beside a longer suite); most other tests keep one. Run one after the other, the harness's
runs and the rest of the suite take turns with the machine, and a 2-core machine idles a core for half the suite.
So once the session's tests are chosen, conftest.py starts the plant sets they ask for (tests marked
`mutation(set)`) here, RUNNERS sets at a time in threads of their own, and moves those tests to the end of the session;
each then reads its set's run with result(set), waiting for it if it has not finished. stop() ends what is still
running when the session ends.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 2400  # one set's run, all its plants
RUNNERS = 2  # sets run at once: one set's ends leave a core to the other


class _Run:
    def __init__(self):
        self.done = threading.Event()
        self.proc: subprocess.CompletedProcess | None = None
        self.error: BaseException | None = None


_runs: dict[str, _Run] = {}
_lock = threading.Lock()
_live: set[subprocess.Popen] = set()  # the harness processes running now
_stopped = threading.Event()


def _argv(plant_set: str) -> list[str]:
    return [sys.executable, "-m", "tools.support.mutate", "--suite", "emu", "--set", plant_set, "--json"]


def _harness(plant_set: str) -> subprocess.CompletedProcess:
    """One run of the harness, in a process group of its own, so that stop() ends its children too."""
    argv = _argv(plant_set)
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    with _lock:
        _live.add(p)
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(p)
        out, err = p.communicate()
        raise subprocess.TimeoutExpired(argv, TIMEOUT_S, out, err)
    finally:
        with _lock:
            _live.discard(p)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _work(todo: list[str]) -> None:
    while True:
        with _lock:
            if not todo:
                return
            plant_set = todo.pop(0)
        run = _runs[plant_set]
        try:
            if _stopped.is_set():
                raise RuntimeError("the session ended before this set's run")
            run.proc = _harness(plant_set)
        except BaseException as e:  # noqa: BLE001 - the waiting test reports it
            run.error = e
        finally:
            run.done.set()


def start(sets: list[str]) -> None:
    """Run these plant sets, in this order, RUNNERS at a time in background threads (each at most once a
    session)."""
    with _lock:
        order = [s for s in dict.fromkeys(sets) if s not in _runs]
        for s in order:
            _runs[s] = _Run()
    for i in range(min(RUNNERS, len(order))):
        threading.Thread(target=_work, args=(order,), name=f"mutation-runs-{i}", daemon=True).start()


def result(plant_set: str) -> subprocess.CompletedProcess:
    """The set's harness run: the one started in the background, waited for; or, for a set nothing started, one
    run now."""
    with _lock:
        run = _runs.get(plant_set)
    if run is None:
        return _harness(plant_set)
    run.done.wait()
    if run.error is not None:
        raise run.error
    return run.proc


def results(plant_set: str) -> tuple[dict, list[dict], subprocess.CompletedProcess]:
    """The set's run read: the unplanted run's entry, the plants' entries, and the run itself (its exit status)."""
    p = result(plant_set)
    if "]" not in p.stdout:  # the unplanted suite failed, so the harness wrote no results
        raise AssertionError(p.stdout[-3000:] + p.stderr[-3000:])
    doc = json.loads(p.stdout[:p.stdout.rindex("]") + 1])
    return doc[0], doc[1:], p


def stop() -> None:
    """End the runs still going (a session that stopped early, or never asked for them) and start no more."""
    _stopped.set()
    with _lock:
        live = list(_live)
    for p in live:
        _kill(p)
