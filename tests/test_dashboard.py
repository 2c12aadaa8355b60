"""The live dashboard: a real Trainer run on the digits, watched in headless Chromium mid-run and after a late join."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

import tinyflo
from tinyflo import datasets
from tinyflo.core.data import DataLoader
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import AdamW
from tinyflo.core.training import Callback, Monitor, Trainer
from tinyflo.dashboard import Dashboard

EPOCHS = 4


def _plotted(browser, chart: str, series: str) -> list[list[float]]:
    """The [x, y] points the page plotted for one series of one chart ([] while it has none)."""
    return browser.execute_script(
        "const c = window.tinyflo && window.tinyflo.charts[arguments[0]];"
        "return c && c.series[arguments[1]] ? c.series[arguments[1]] : [];", chart, series)


def _wait_for(browser, chart: str, series: str, count: int) -> list[list[float]]:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 20).until(lambda b: len(_plotted(b, chart, series)) >= count)
    return _plotted(browser, chart, series)


class _LookMidRun(Callback):
    """After epoch 2, open the page while training is still going, and note what it plotted."""

    def __init__(self, browser, monitor: Monitor) -> None:
        self.browser, self.monitor, self.seen = browser, monitor, {}

    def on_epoch_end(self, trainer: Trainer) -> None:
        if trainer.epoch != 2:
            return
        self.browser.get(self.monitor.dashboard.url)
        self.seen["train_loss"] = _wait_for(self.browser, "loss per epoch", "train_loss", 2)
        self.seen["loss"] = _wait_for(self.browser, "loss per log interval", "loss", len(self.monitor.steps))
        self.seen["status"] = self.browser.find_element("id", "status").text


def test_dashboard_streams_a_run_to_a_page_mid_run_and_to_one_that_joins_late(browser, tmp_path):
    tinyflo.manual_seed(0)
    loader = DataLoader(datasets.digits(train=True, flatten=True), batch_size=64, shuffle=True, seed=0)
    val = DataLoader(datasets.digits(train=False, flatten=True), batch_size=512)
    model = Sequential(Linear(64, 32), ReLU(), Linear(32, 10))

    def loss_fn(out, y):  # a custom metric, logged from the loss function: summed on the device, read per epoch
        loss = cross_entropy(out, y)
        trainer.log("top_logit", out.max(axis=1).mean())
        return loss

    trainer = Trainer(model, AdamW(model.parameters(), lr=1e-2), loss_fn, log_every=5, verbosity="quiet")
    monitor = Monitor(out_dir=tmp_path, live=False, dashboard=True)
    look = _LookMidRun(browser, monitor)
    try:
        history = trainer.fit(loader, val, epochs=EPOCHS, callbacks=[monitor, look])

        # mid-run: the first two epochs and every log interval so far, exactly as trained
        assert [y for _, y in look.seen["train_loss"]] == pytest.approx(history["train_loss"][:2], rel=1e-6)
        assert [x for x, _ in look.seen["train_loss"]] == [1, 2]
        assert len(look.seen["loss"]) >= 2 * len(loader) // 5 and look.seen["status"] == "live"

        # the same page went on receiving: every epoch, the logged metric and the resources
        assert [y for _, y in _wait_for(browser, "loss per epoch", "val_loss", EPOCHS)] == pytest.approx(
            history["val_loss"], rel=1e-6)
        assert [y for _, y in _wait_for(browser, "top_logit per epoch", "top_logit", EPOCHS)] == pytest.approx(
            history["top_logit"], rel=1e-6)
        assert _wait_for(browser, "CPU % of the machine per epoch", "sys_cpu_pct", 1), (
            "an epoch of a few ms may be too short to time")
        assert [y for _, y in _wait_for(browser, "top_logit per epoch", "val_top_logit", EPOCHS)] == pytest.approx(
            history["val_top_logit"], rel=1e-6), "a logged metric and its validation value share a chart"
        scale = browser.execute_script("const c = window.tinyflo.charts['CPU % of the machine per epoch'];"
                                       "return [c.floor, c.ceiling];")
        assert scale == [0, 100], "a share of the machine is drawn from 0 to 100"

        # a page that joins after the run gets the whole history first
        browser.get(monitor.dashboard.url)
        plotted = _wait_for(browser, "loss per epoch", "train_loss", EPOCHS)
        assert [y for _, y in plotted] == pytest.approx(history["train_loss"], rel=1e-6)
        steps = _wait_for(browser, "loss per log interval", "loss", len(monitor.steps))
        assert [x for x, _ in steps] == [row["step"] for row in monitor.steps]
        assert [y for _, y in steps] == pytest.approx([row["loss"] for row in monitor.steps], rel=1e-6)
        shown = browser.find_element("css selector", 'td[data-key="top_logit"]').text
        assert float(shown) == pytest.approx(history["top_logit"][-1], rel=1e-3), "the latest values, as text"
        assert browser.find_element("css selector", 'td[data-key="epoch"]').text == str(EPOCHS), "a count, whole"
        heads = {e.get_attribute("title"): e.text for e in browser.find_elements("css selector", "#latest th")}
        assert heads["sys_ram_gb"] == "machine, used (RAM GB)" and heads["lr"] == "learning rate, group 0", heads
        rate = browser.find_element("css selector", 'td[data-key="lr"]').text
        assert float(rate) == pytest.approx(history["lr"][-1], rel=1e-2) and "00e" not in rate, rate
        memory = _wait_for(browser, "memory GB per epoch", "proc_ram_gb", EPOCHS)
        assert [y for _, y in memory] == pytest.approx(history["proc_ram_gb"], rel=1e-6)
        # every chart keeps its legend above the curves, in rows that fit, and its ticks inside the canvas
        layouts = browser.execute_script(
            "return Object.fromEntries(Object.entries(window.tinyflo.charts).map(([t, c]) => [t, c.layout]));")
        assert len(layouts) >= 8 and all(layouts.values()), layouts
        for title, layout in layouts.items():
            plot, width = layout["plot"], layout["width"]
            assert all(entry["y"] < plot["top"] for entry in layout["legend"]), (title, layout)
            assert all(entry["x"] + entry["width"] <= width for entry in layout["legend"]), (title, layout)
            assert all(0 <= tick["x"] and tick["x"] + tick["width"] <= width for tick in layout["ticks"]), (title, layout)
            assert all(0 <= tick["x"] and tick["x"] + tick["width"] < plot["left"] for tick in layout["yticks"]), (
                title, layout)
        assert [entry["name"] for entry in layouts["memory GB per epoch"]["legend"]][:2] == ["sys_ram_gb", "proc_ram_gb"]

        assert browser.find_element("id", "status").text == f"training ended after epoch {EPOCHS} (step {trainer.step})"

        # the logged metric also reached the files
        assert "top_logit" in (tmp_path / "history.csv").read_text().splitlines()[0].split(",")
        assert "top_logit=" in (tmp_path / "training.log").read_text()
    finally:
        monitor.close()
    browser.refresh()
    assert "ERR_CONNECTION_REFUSED" in browser.page_source or "tinyflo" not in browser.title, "closed"


def test_dashboard_replays_history_to_a_late_stream_and_ends_it_on_close():
    board = Dashboard()
    board.publish("epoch", {"epoch": 1, "train_loss": 0.5, "val_loss": float("nan")})
    board.publish("step", {"step": 10, "loss": 0.7})
    lines: list[str] = []

    def read() -> None:
        with urllib.request.urlopen(board.url + "events", timeout=10) as response:
            for raw in response:
                lines.append(raw.decode().rstrip("\n"))
                if lines[-1] == "event: closed":
                    return

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(200):  # until the page has the replay: the next event then goes over the live stream
        if sum(line.startswith("data: ") for line in lines) == 2:
            break
        threading.Event().wait(0.05)
    board.publish("epoch", {"epoch": 2, "train_loss": 0.25})
    request = urllib.request.Request(board.url + "events", headers={"Last-Event-ID": "1"})
    with urllib.request.urlopen(request, timeout=10) as again:  # a page that reconnects gets what it missed
        assert [again.readline().decode().strip() for _ in range(3)] == [
            "id: 2", "event: epoch", 'data: {"epoch": 2, "train_loss": 0.25}']
    threading.Event().wait(0.3)
    board.close()
    reader.join(10)
    assert not reader.is_alive(), "closing the dashboard ends every stream"
    events = [(kind[len("event: "):], json.loads(data[len("data: "):]))
              for kind, data in zip(lines, lines[1:]) if kind.startswith("event: ") and kind != "event: closed"]
    assert events == [("epoch", {"epoch": 1, "train_loss": 0.5, "val_loss": None}), ("step", {"step": 10, "loss": 0.7}),
                      ("epoch", {"epoch": 2, "train_loss": 0.25})], "the history first, then what came, NaN as null"
    board.close()  # twice is fine


def test_dashboard_serves_its_page_and_script_and_refuses_a_bad_port():
    board = Dashboard(title="digits")
    try:
        page = urllib.request.urlopen(board.url, timeout=10).read().decode()
        script = urllib.request.urlopen(board.url + "dashboard.js", timeout=10).read().decode()
        assert "<title>digits</title>" in page and '<script src="dashboard.js">' in page and "http" not in page
        assert "EventSource" in script and "window.tinyflo" in script
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(board.url + "elsewhere", timeout=10)
    finally:
        board.close()
    with pytest.raises(ValueError, match=r"Dashboard: port must be an integer in 0\.\.65535 .*; got 70000"):
        Dashboard(port=70000)


def _layout(browser, chart: str, points: int) -> dict:
    """Where the page drew one chart's parts, once it has plotted `points` points of its first series."""
    from selenium.webdriver.support.ui import WebDriverWait

    script = ("const c = window.tinyflo && window.tinyflo.charts[arguments[0]];"  # drawn since its last point
              "return c && c.layout && !c.dirty && Object.values(c.series)[0].length >= arguments[1] ? c.layout : null;")
    return WebDriverWait(browser, 20).until(lambda b: b.execute_script(script, chart, points))


def test_dashboard_ticks_one_epoch_under_its_point_and_keeps_a_narrow_chart_readable(browser):
    """After one epoch the epoch axis has one tick, '1', under the point (not 0 and 2 around it), and the
    axis name moves aside for it; in a narrow window the legend wraps into rows above the plot; the y
    ticks of a small rate are short and end before the plot begins."""
    names = {"sys_ram_gb": "machine, used (RAM GB)", "proc_ram_gb": "this process (RAM GB)",
             "gpu_mem_gb": "GPU memory, this process (GB)"}
    board = Dashboard(labels=names)
    browser.set_window_size(520, 900)
    try:
        board.publish("epoch", {"epoch": 1, "step": 12, "train_loss": 0.9, "val_loss": 1.1, "lr": 3e-3,
                                "sys_ram_gb": 3.1, "proc_ram_gb": 0.4, "gpu_mem_gb": 0.2})
        browser.get(board.url)
        one = _layout(browser, "loss per epoch", 1)
        (tick,) = one["ticks"]
        plot = one["plot"]
        assert tick["text"] == "1", one
        assert tick["x"] + tick["width"] / 2 == pytest.approx((plot["left"] + plot["right"]) / 2, abs=1), one
        axis = one["axis"]
        assert axis["x"] > tick["x"] + tick["width"] and axis["x"] + axis["width"] <= one["width"], one

        memory = _layout(browser, "memory GB per epoch", 1)
        rows = sorted({entry["y"] for entry in memory["legend"]})
        assert memory["width"] < 500 and len(rows) >= 2, memory  # three long names do not fit one row
        assert all(entry["y"] < memory["plot"]["top"] for entry in memory["legend"]), memory
        assert all(entry["x"] + entry["width"] <= memory["width"] for entry in memory["legend"]), memory

        board.publish("epoch", {"epoch": 2, "step": 24, "train_loss": 0.6, "val_loss": 0.8, "lr": 4.69e-6})
        two = _layout(browser, "loss per epoch", 2)
        assert [t["text"] for t in two["ticks"]] == ["1", "2"], two
        first, last = two["ticks"]
        assert first["x"] == pytest.approx(two["plot"]["left"] + two["inset"]) and two["inset"] >= 3, (
            "the first epoch's point and tick a little inside the frame, not on it", two)
        assert last["x"] + last["width"] <= two["width"], two
        middle = two["axis"]["x"] + two["axis"]["width"] / 2
        assert middle == pytest.approx((two["plot"]["left"] + two["plot"]["right"]) / 2, abs=1), two
        # a rate that fell to 4.69e-6 is ticked in powers of ten, and its ticks end left of the plot
        rate = _layout(browser, "learning rate per epoch", 2)
        assert [t["text"] for t in rate["yticks"]] == ["4.69e-6", "0.0015", "0.003"], rate
        assert all(0 <= t["x"] and t["x"] + t["width"] < rate["plot"]["left"] for t in rate["yticks"]), rate
    finally:
        board.close()
        browser.set_window_size(1400, 1000)
