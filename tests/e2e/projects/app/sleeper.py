"""Say "ready", then sleep; on SIGTERM say so and exit 0 (or say so and go on: --ignore-term).

Under torchrun every rank prints its own lines (RANK is set there), each with one write()
so that the ranks' lines cannot interleave on the shared stdout.
"""

import os
import signal
import sys
import time

rank = os.environ.get("RANK", "0")


def say(text: str) -> None:
    sys.stdout.write(f"{text} rank {rank}\n")
    sys.stdout.flush()


def on_term(signum: int, _frame: object) -> None:
    say("got SIGTERM")
    sys.exit(0)


def on_term_ignored(signum: int, _frame: object) -> None:
    say("ignored SIGTERM")


if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, on_term_ignored)
else:
    signal.signal(signal.SIGTERM, on_term)
say("ready")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.5)
say("slept through")
