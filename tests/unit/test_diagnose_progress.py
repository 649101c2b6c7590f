"""`kvpilot diagnose` says how a wait goes on stderr, on a terminal only; the report on stdout stays clean."""

from __future__ import annotations

import io

from kvpilot.commands.diagnose import _Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_one_line_on_a_terminal_and_erases_it():
    tty = _Terminal()
    progress = _Progress(tty)
    assert progress.enabled
    progress.say("scraping http://h/metrics: 1 of 61 scrapes, 300 s left")
    progress.say("scraping http://h/metrics: 2 of 61 scrapes, 295 s left")
    progress.clear()
    assert tty.getvalue() == (
        "\r\x1b[Kscraping http://h/metrics: 1 of 61 scrapes, 300 s left"
        "\r\x1b[Kscraping http://h/metrics: 2 of 61 scrapes, 295 s left"
        "\r\x1b[K"
    )


def test_no_progress_when_stderr_is_not_a_terminal():
    assert not _Progress(io.StringIO()).enabled
