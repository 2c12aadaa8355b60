"""A browser test that gives up says what the page showed: the dialog in the way, the page's last
lines and a screenshot, not a bare TimeoutException."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from browser_support import wait_for

PAGE = ('<title>lab</title><div class="jp-Dialog">Select Kernel</div>'
        '<div class="jp-StatusBar-Widget">Python 3 (ipykernel) | Busy</div><p>last line</p>')


def test_giving_up_names_what_was_awaited_and_what_the_page_showed(browser):
    browser.get("data:text/html," + urllib.parse.quote(PAGE))
    with pytest.raises(AssertionError) as gave_up:
        wait_for(browser, "the kernel to be idle", lambda b: False, 0.5, lambda: "kernels: ['busy']")
    said = str(gave_up.value)
    assert said.startswith("waited 0.5 s for the kernel to be idle; saw:"), said
    for seen in ("page: 'lab'", ".jp-Dialog: ['Select Kernel']", "Python 3 (ipykernel) | Busy",
                 "'last line'", "kernels: ['busy']"):
        assert seen in said, said
    shot = Path(said.split("screenshot: ")[1].splitlines()[0])
    assert shot.read_bytes().startswith(b"\x89PNG")
    shot.unlink()


def test_waiting_returns_what_the_condition_found(browser):
    browser.get("data:text/html," + urllib.parse.quote(PAGE))
    assert wait_for(browser, "the title", lambda b: b.title, 5) == "lab"
