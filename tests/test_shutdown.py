"""Stopping on SIGTERM (``cli.shutdown``), in a child process of its own: the stop's steps share one
deadline, and a step that never returns (a request to an API server that stopped answering) is ended by
the watchdog with status 1 and a message, so a component is gone within its bound whatever it was doing.
The bound itself, for each real component against a real API server, is in tests/test_kubernetes.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import logging, sys, time
    from hetsched.cli.shutdown import GRACE, Shutdown
    logging.basicConfig(level=logging.INFO)
    shutdown = Shutdown()
    print("before", shutdown.remaining() == GRACE, flush=True)
    sys.stdin.readline()  # the test sends SIGTERM now
    shutdown.wait()
    print("after", shutdown.remaining() <= GRACE, flush=True)
    if sys.argv[1] == "stuck":
        time.sleep(3600)  # a stop step that never returns
    logging.getLogger("hetsched").info("stopped")  # flushed by exit, which skips the interpreter's teardown
    print("stopped")
    shutdown.exit(0)
""")


def run(mode: str) -> tuple[int, str, str]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline() == "before True\n"  # nothing signalled: a stop for another reason
        child.send_signal(signal.SIGTERM)
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, out, err


def test_a_graceful_stop_keeps_within_the_deadline_and_exits_0() -> None:
    code, out, err = run("graceful")
    assert (code, out) == (0, "after True\nstopped\n"), err
    assert "INFO:hetsched:stopped" in err and "still stopping" not in err


def test_a_stop_step_that_never_returns_is_ended_by_the_watchdog() -> None:
    code, out, err = run("stuck")
    assert code == 1 and "stopped" not in out, (code, out, err)
    assert "still stopping 1.7 s after the signal" in err
