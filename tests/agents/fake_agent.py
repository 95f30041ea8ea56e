"""A stand-in agent process for the ``command`` agent tests: ``fake_agent.py MODE [ARGS...]``.

Run with ``sys.executable -u``. Modes:

- ``lines N DELAY``: print ``line 1`` … ``line N`` with DELAY seconds between them; exit 0.
- ``echo``: read all of stdin (to EOF), print ``got: <stdin>``; exit 0.
- ``env``: print TURNQUEUE_SESSION_ID, TURNQUEUE_TURN_ID and TURNQUEUE_TEST_MARK, one a line.
- ``hang``: print ``ready``, then sleep; default signal handling.
- ``ignore-int``: ignore SIGINT (printing ``ignored SIGINT``); print ``ready``; sleep.
- ``ignore-int-term``: ignore SIGINT and SIGTERM likewise; only SIGKILL stops it.
- ``fail CODE``: write 10 000 bytes of filler then ``final words`` to stderr; exit CODE.
- ``grandchild [escape]``: start a sleeping grandchild that holds stdout open, print
  ``grandchild <pid>``, exit 0 (the grandchild would outlive it). With ``escape`` the grandchild
  is put in a session of its own, beyond the reach of a process-group kill.
- ``helper``: start a sleeping helper (same group, not holding stdout), print ``helper <pid>``,
  sleep; default signal handling.
- ``long-line N``: print one line of N ``x`` characters.
- ``no-stdin``: print ``bye`` and exit 0 without reading stdin.
- ``partial``: print ``no newline at end`` without a trailing newline.
- ``gate PATH``: print ``line 1``; once the file PATH exists (polled, up to 60 s) print ``line 2``
  and ``line 3``; exit 0. The test creates PATH when its subscriber listens.
- ``prompt``: read the prompt from stdin and run it as ``MODE [ARGS...]`` (split on whitespace).
  One server command, a different behaviour per message (tests/agents/test_command_served.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _sleep_forever() -> None:
    while True:
        time.sleep(60)


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    if mode == "prompt":
        return main(sys.stdin.read().split() or ["<empty prompt>"])
    if mode == "gate":
        print("line 1", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(args[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        print("line 2", flush=True)
        print("line 3", flush=True)
        return 0
    if mode == "lines":
        count, delay = int(args[0]), float(args[1])
        for i in range(1, count + 1):
            print(f"line {i}", flush=True)
            if i < count:
                time.sleep(delay)
        return 0
    if mode == "echo":
        print(f"got: {sys.stdin.read()}", flush=True)
        return 0
    if mode == "env":
        for key in ("TURNQUEUE_SESSION_ID", "TURNQUEUE_TURN_ID", "TURNQUEUE_TEST_MARK"):
            print(os.environ.get(key, "<unset>"), flush=True)
        return 0
    if mode in ("hang", "ignore-int", "ignore-int-term"):
        if mode != "hang":
            signal.signal(signal.SIGINT, lambda s, f: print("ignored SIGINT", flush=True))
        if mode == "ignore-int-term":
            signal.signal(signal.SIGTERM, lambda s, f: print("ignored SIGTERM", flush=True))
        print("ready", flush=True)
        _sleep_forever()
    if mode == "fail":
        sys.stderr.write("x" * 10_000 + "\nfinal words\n")
        sys.stderr.flush()
        return int(args[0])
    if mode == "grandchild":
        # It inherits stdout, so the turn's stdout reaches EOF only once the grandchild is gone.
        # With "escape" it also leaves the process group (setsid), out of the agent's reach.
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            stdin=subprocess.DEVNULL,
            start_new_session=bool(args and args[0] == "escape"),
        )
        print(f"grandchild {child.pid}", flush=True)
        return 0
    if mode == "helper":
        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        print(f"helper {helper.pid}", flush=True)
        _sleep_forever()
    if mode == "long-line":
        print("x" * int(args[0]), flush=True)
        return 0
    if mode == "no-stdin":
        print("bye", flush=True)
        return 0
    if mode == "partial":
        print("no newline at end", end="", flush=True)
        return 0
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
