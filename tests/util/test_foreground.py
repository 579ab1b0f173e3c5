"""Background passes step aside while a person waits (`_util.foreground`)."""

from __future__ import annotations

import threading
from pathlib import Path

from sessiontree._util.foreground import Foreground, pause_point, stepping_aside
from sessiontree.search import ContentIndex, SessionSource
from tests.search.test_content_index import entry_line, write


def test_a_background_pass_waits_while_a_request_runs() -> None:
    foreground = Foreground(most_seconds=30)
    order: list[str] = []
    inside = threading.Event()

    def background() -> None:
        with stepping_aside(foreground):
            inside.set()
            pause_point()
            order.append("background went on")

    with foreground.working():
        thread = threading.Thread(target=background)
        thread.start()
        inside.wait(5)
        thread.join(0.3)  # it is waiting at its pause point
        order.append("request done")
    thread.join(5)
    assert order == ["request done", "background went on"]


def test_a_pause_lasts_a_while_at_most() -> None:
    foreground = Foreground(most_seconds=0.05)
    done = threading.Event()

    def background() -> None:
        with stepping_aside(foreground):
            pause_point()
        done.set()

    with foreground.working():  # a request that never ends: the pass goes on anyway
        threading.Thread(target=background).start()
        assert done.wait(10)
        assert foreground.busy


def test_a_pause_point_outside_stepping_aside_is_nothing() -> None:
    foreground = Foreground(most_seconds=30)
    with foreground.working():
        pause_point()  # returns at once: this thread is not stepping aside


class Counting(Foreground):
    def __init__(self) -> None:
        super().__init__()
        self.pauses = 0

    def pause(self) -> None:
        self.pauses += 1
        super().pause()


def test_the_content_index_steps_aside_as_it_reads(agent_dir: Path) -> None:
    store = agent_dir / "sessions" / "--p--"
    path = write(store / "a.jsonl", *[entry_line(n, f"needle {n}") for n in range(1, 20)])
    foreground = Counting()
    with ContentIndex.open(str(agent_dir)) as index, stepping_aside(foreground):
        assert index is not None
        assert index.refresh([SessionSource(path)]).entries_added == 19
    assert foreground.pauses >= 1
