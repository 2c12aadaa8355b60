"""Waiting in a browser test for what is true in every supported version, and saying what was seen.

A test that waits on a browser gives up with the page's own state: what it waited for, the page's
title and address, any dialog, the last lines of its text, and where a screenshot of it was saved.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

SELECTORS_SEEN = (".jp-Dialog", ".Toastify__toast", ".jp-StatusBar-Widget", ".jp-OutputArea-output")


def page_state(browser: Any, extra: Callable[[], str] | None = None) -> str:
    """What the browser shows now, in a few lines (never raises: it is called while failing)."""
    from selenium.webdriver.common.by import By

    lines = []
    try:
        lines.append(f"page: {browser.title!r} at {browser.current_url}")
        for selector in SELECTORS_SEEN:
            texts = [e.text.strip() for e in browser.find_elements(By.CSS_SELECTOR, selector)]
            texts = [t.replace("\n", " | ") for t in texts if t]
            if texts:
                lines.append(f"{selector}: {texts[:5]}")
        body = browser.find_element(By.TAG_NAME, "body").text.strip().splitlines()
        lines.append(f"last lines of the page's text: {body[-8:]}")
        shot = tempfile.NamedTemporaryFile(prefix="tinyflo-browser-", suffix=".png", delete=False).name
        browser.save_screenshot(shot)
        lines.append(f"screenshot: {shot}")
    except Exception as err:  # the state is a help, not the failure
        lines.append(f"(could not read more of the page: {type(err).__name__}: {err})")
    if extra is not None:
        try:
            lines.append(extra())
        except Exception as err:
            lines.append(f"(could not read more: {type(err).__name__}: {err})")
    return "\n".join(lines)


def wait_for(browser: Any, what: str, condition: Callable[[Any], Any], seconds: float,
             extra: Callable[[], str] | None = None) -> Any:
    """condition's first true value within `seconds`, or an AssertionError saying what was seen."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, seconds, poll_frequency=0.25).until(condition)
    except TimeoutException:
        raise AssertionError(f"waited {seconds:g} s for {what}; saw:\n{page_state(browser, extra)}") from None
