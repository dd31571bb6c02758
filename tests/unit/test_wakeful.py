"""cli/wakeful.py: a stream read on a thread so Ctrl-C ends ``status --watch`` at once, even
when the signal lands where no blocked read would notice it (the release tier's
test_ctrl_c_exits_130_like_the_wheel failed once that way: no Abort after 60 s)."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubectl_flux_plunger.cli.wakeful import wakeful
from testplane.signals import default_sigint

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


class Source:
    """An iterator fed by the test, that records on which thread it was closed."""

    def __init__(self) -> None:
        self.feed: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = threading.Event()
        self.closed_on: str | None = None

    def __iter__(self) -> Iterator[object]:
        return self

    def __next__(self) -> object:
        item = self.feed.get(timeout=30)
        if isinstance(item, BaseException):
            raise item
        if item is StopIteration:
            raise StopIteration
        return item

    def close(self) -> None:
        self.closed_on = threading.current_thread().name
        self.closed.set()


def test_items_come_in_order_and_the_stream_ends_when_the_source_does():
    src = Source()
    for item in (1, {"type": "ADDED"}, 3, StopIteration):
        src.feed.put(item)
    assert list(wakeful(src, tick=0.01)) == [1, {"type": "ADDED"}, 3]
    assert src.closed.wait(10) and src.closed_on == "wakeful-read"


def test_the_sources_exception_is_raised_to_the_caller_after_the_items_before_it():
    src = Source()
    src.feed.put("a")
    src.feed.put(LookupError("410 Gone"))
    got = []
    with pytest.raises(LookupError, match="410 Gone"):
        for item in wakeful(src, tick=0.01):
            got.append(item)
    assert got == ["a"]
    assert src.closed.wait(10)


def test_a_caller_that_stops_early_leaves_the_reader_to_close_the_source_after_its_next_item():
    src = Source()
    src.feed.put("first")
    stream = wakeful(src, tick=0.01)
    assert next(stream) == "first"
    stream.close()  # the caller broke out of its loop (an ERROR event: re-list)
    assert not src.closed.wait(0.2)  # the reader is still waiting for the next event
    src.feed.put("bookmark")
    assert src.closed.wait(10) and src.closed_on == "wakeful-read"


def test_the_reader_runs_at_most_depth_items_ahead_of_a_slow_caller_and_stops_with_it():
    src = Source()
    for i in range(50):
        src.feed.put(i)
    stream = wakeful(src, tick=0.01, depth=4)
    assert next(stream) == 0
    deadline = time.monotonic() + 30
    while src.feed.qsize() > 50 - 1 - 4 - 1:   # one taken, four queued, one in hand
        assert time.monotonic() < deadline, "the reader never filled its queue"
        time.sleep(0.005)
    assert src.feed.qsize() == 50 - 1 - 4 - 1    # and no further: it waits for the caller
    stream.close()
    assert src.closed.wait(10) and src.closed_on == "wakeful-read"
    assert src.feed.qsize() == 44                # it stopped without reading on


def test_a_quiet_stream_waits_for_its_item_however_long_it_takes():
    src = Source()
    stream = wakeful(src, tick=0.01)
    threading.Timer(0.2, src.feed.put, ("late",)).start()
    assert next(stream) == "late"  # many ticks passed without an item: none was invented


BLOCKED_READ = textwrap.dedent(
    """
    import signal, socket, sys
    sys.path.insert(0, sys.argv[1])
    from kubectl_flux_plunger.cli.wakeful import wakeful

    # a delivered SIGINT restarts a blocked read instead of interrupting it: what happens
    # when the signal lands between the interpreter's check and the read, made certain
    signal.siginterrupt(signal.SIGINT, False)
    quiet, _peer = socket.socketpair()

    def watch():
        print("reading", flush=True)
        yield quiet.recv(1)  # a watch with no event: nothing ever arrives

    try:
        for _ in wakeful(watch()):
            pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def wait_asleep(pid: int, deadline: float = 30.0) -> None:
    """Until every thread of ``pid`` sleeps in the kernel (state S in /proc)."""
    end = time.monotonic() + deadline
    tasks = Path(f"/proc/{pid}/task")
    while True:
        states = [(t / "stat").read_text().rpartition(")")[2].split()[0] for t in tasks.iterdir()]
        if states and all(s == "S" for s in states):
            return
        assert time.monotonic() < end, f"threads of {pid} never all asleep: {states}"
        time.sleep(0.01)


def test_sigint_ends_the_wait_even_when_the_blocked_read_would_never_notice_it():
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_READ, str(ROOT)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,  # a run started in the background has SIGINT ignored
    )
    try:
        assert proc.stdout.readline() == "reading\n"
        wait_asleep(proc.pid)  # the read has begun: a signal now can no longer precede it
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, out, err) == (130, "interrupted\n", "")
