"""`milestones.figure_problems`, which every milestone's plots and the demo's pass: it finds what
makes a figure hard to read in the book (text too small once scaled to the page, titles running
into each other, an axis's text over another panel, a legend over a curve, epochs ticked 1.5),
and the book shows a milestone's figure as wide as it assumes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import test_book

from tinyflo import milestones

built = test_book.built  # the book, built once per run and shared with test_book


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _six_panels(rows: int, cols: int, figsize: tuple[float, float], legend_size: float, layout: str = "constrained"):
    """Milestone 5's six panels of curves with legends, laid out `rows` x `cols`."""
    fig, axes = plt.subplots(rows, cols, figsize=figsize, layout=layout)
    steps = np.arange(300)
    for i, ax in enumerate(axes.flat):
        ax.plot(steps, np.exp(-steps / (50 + 20 * i)), label="+ AMP float16 + GradScaler")
        ax.set(xlabel="step", ylabel="training loss", title=f"panel {i}")
        ax.legend(fontsize=legend_size)
    return fig


def test_six_panels_drawn_for_a_wide_screen_are_too_small_in_the_book_and_two_a_row_are_not():
    wide = milestones.figure_problems(_six_panels(2, 3, (17, 9), 8, layout="tight"))
    assert len(wide) == 1 and "smaller than 9 px at 1000 px wide" in wide[0], wide
    assert "'+ AMP float16 + GradScaler' at 6." in wide[0], wide  # 8 points in 17 inches: 6.5 px
    assert milestones.figure_problems(_six_panels(3, 2, (12, 12.5), 9)) == []


def test_a_narrow_figure_is_shown_at_its_own_size_not_enlarged():
    """The book never enlarges a picture (max-width: 100%): a figure 5 inches wide is shown 600 px wide
    (120 dpi), so its 5-point text stays 8.3 px, though 1000 px would make it 14."""
    fig, ax = plt.subplots(figsize=(4.8, 3))
    ax.plot([1, 2, 3], [3, 1, 2])
    ax.set_title("small print", fontsize=5)
    assert milestones.figure_problems(fig) == ["1 texts smaller than 9 px at 1000 px wide, e.g. 'small print' at 8.3 px"]
    ax.set_title("small print", fontsize=6)
    assert milestones.figure_problems(fig) == []


def test_titles_that_run_into_each_other():
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    left.set_title("the best lines get 75%: one point is always wrong")
    right.set_title("all 226,981 thresholds on the grid: none reaches 100%")
    assert milestones.figure_problems(fig) == [
        "titles 'the best lines get 75%: one po' and 'all 226,981 thresholds on the ' run into each other"]
    right.set_title("all 226,981 thresholds\non the grid: none reaches 100%")
    left.set_title("the best lines get 75%:\none point is always wrong")
    assert milestones.figure_problems(fig) == []


def test_an_axis_label_drawn_over_the_next_panel():
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), gridspec_kw={"wspace": 0.05})
    right.set(ylabel="linear thresholds (log)", title="right")
    left.set(title="left")
    assert milestones.figure_problems(fig) == ["'linear thresholds (log)' of 'right' is drawn over 'left'"]
    fig.set_layout_engine("constrained")
    assert milestones.figure_problems(fig) == []


def test_a_legend_over_a_curve_between_two_of_its_points_or_over_a_dot():
    """A curve through the legend's box counts even where no point of it lies inside (a straight line
    of two points); the dots of a scatter are not joined: the legend may sit between them."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([0, 1], [0, 1], label="a straight line")
    ax.legend(loc="center")
    assert milestones.figure_problems(fig) == ["the legend of '' is drawn over 'a straight line'"]
    ax.get_legend().remove()
    ax.legend(loc="upper left")
    assert milestones.figure_problems(fig) == []

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([0, 1], [0, 1], label="XOR = 0")
    ax.scatter([0, 1], [1, 0], label="XOR = 1")
    ax.legend(loc="center")
    assert milestones.figure_problems(fig) == []
    ax.scatter([0.5], [0.5], label="in the middle")
    ax.legend(loc="center")
    assert milestones.figure_problems(fig) == ["the legend of '' is drawn over 'in the middle'"]


@pytest.mark.parametrize("epochs", [1, 2, 3, 5])
def test_an_epoch_axis_ticked_between_whole_epochs(epochs):
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, epochs + 1), np.linspace(1, 0.5, epochs), marker="o")
    ax.set(xlabel="epoch", ylabel="loss", title="loss per epoch")
    problems = milestones.figure_problems(fig)
    assert len(problems) == 1 and problems[0].startswith(
        "the 'epoch' axis of 'loss per epoch' counts in whole numbers but has ticks"), problems
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True, min_n_ticks=1))
    assert milestones.figure_problems(fig) == []


@pytest.mark.slow
def test_the_book_shows_a_milestones_figure_as_wide_as_figure_problems_assumes(browser, built):
    """At 1366 px, the commonest laptop width, the book gives a milestone's figure at least
    BOOK_FIGURE_PX: what figure_problems scales a figure to."""
    from selenium.webdriver.support.ui import WebDriverWait

    out = built[0]
    milestone = milestones.find_milestone("scale")
    browser.set_window_size(1366, 900)
    try:
        browser.get((out / "milestones" / f"{milestone.slug}.html").as_uri())
        image = browser.find_element("css selector", 'article img[src$="scale.png"]')
        WebDriverWait(browser, 20).until(lambda b: b.execute_script("return arguments[0].complete", image))
        shown, natural = browser.execute_script(
            "return [arguments[0].getBoundingClientRect().width, arguments[0].naturalWidth]", image)
        assert natural > milestones.BOOK_FIGURE_PX, "the recorded figure is saved wider than the book shows it"
        assert shown >= milestones.BOOK_FIGURE_PX, f"the book shows scale.png {shown:.0f} px wide at 1366 px"
    finally:
        browser.set_window_size(1400, 1000)


def test_a_figure_made_without_pyplot_is_looked_at_too():
    """The Monitor's curves are a bare matplotlib Figure, with no canvas of pyplot's."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.plot([1], [0.5], marker="o")
    ax.set(xlabel="epoch", title="loss", xlim=(0.5, 1.5))
    assert milestones.figure_problems(fig) == [
        "the 'epoch' axis of 'loss' counts in whole numbers but has ticks 0.6, 0.8, 1.2"]


def test_save_png_keeps_the_picture_in_a_third_of_the_bytes(tmp_path):
    """256 colours, at SAVE_DPI: a plot's lines, text and fills need no more, and the recorded pictures in
    the repository stay small."""
    from PIL import Image

    fig = _six_panels(1, 2, (9, 3.5), 9)
    path = milestones.save_png(fig, tmp_path / "scale.png")
    fig.savefig(tmp_path / "matplotlib.png", dpi=milestones.SAVE_DPI, bbox_inches="tight")
    with Image.open(path) as small, Image.open(tmp_path / "matplotlib.png") as full:
        assert small.mode == "P" and small.size == full.size, (small.mode, small.size, full.size)
        difference = np.abs(np.asarray(small.convert("RGB"), float) - np.asarray(full.convert("RGB"), float))
    assert difference.mean() < 1, "the same to the eye"
    assert path.stat().st_size < 0.5 * (tmp_path / "matplotlib.png").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matplotlib.png", "scale.png"], "no temporary file left"
