"""``hetsched simulate --report``: one self-contained HTML file whose charts render in a real browser —
opened in headless Chromium (Debian's package, installed by ``scripts/provision-browser.sh``), which must
show every section's title and paint the plots (a screenshot that is far from blank)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.sim.report import TITLES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def simulate_report(tmp_path: Path) -> Path:
    report = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES / "scenarios/ascend-4.yaml"),
                                      str(EXAMPLES / "scenarios/fault-jobs.yaml"), "--faults",
                                      str(EXAMPLES / "scenarios/faults.yaml"), "--report", str(report), "-q"])
    assert result.exit_code == 0, result.output
    return report


def test_the_report_is_one_self_contained_file_with_every_section(tmp_path: Path) -> None:
    text = simulate_report(tmp_path).read_text()
    assert not re.search(r'(src|href)="(https?:|//|/)', text)  # nothing fetched from anywhere
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 5  # allocation, waits, shares, one pool heatmap, faults
    headings = re.findall(r"<h2>([^<]+)</h2>", text)
    assert headings == ["Inputs", "Summary", "Jobs", TITLES[0], TITLES[1], TITLES[2],
                        f"{TITLES[3]}: ascend (4 nodes)", TITLES[4]]
    # what the page is and what was run, not the progress bar's label
    assert re.search(r"<title>hetsched simulation report: ascend-4\.yaml</title>", text)
    inputs = dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", text[text.index('class="summary inputs"'):
                                                                               text.index("<h2>Summary")]))
    assert inputs["workloads"].endswith("fault-jobs.yaml") and inputs["faults"].endswith("faults.yaml")
    assert html.unescape(inputs["scheduler configuration"]) == "hetsched's default"
    assert inputs["ran until"] == "the last event"
    # one row per job, with when it came, ran and ended, and why
    jobs = text[text.index('<table class="summary jobs">'):text.index("</table>", text.index('class="summary jobs"'))]
    rows = [re.findall(r"<t[dh]>([^<]*)</t[dh]>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", jobs)]
    assert rows[0] == ["job", "queue", "phase", "submitted (s)", "started (s)", "ended (s)", "waited (s)", "pods",
                       "why"]
    by_job = {row[0]: row for row in rows[1:]}
    assert set(by_job) == {"default/elastic", "default/resilient", "default/serve"}
    assert by_job["default/serve"][2:7] == ["Completed", "0", "1", "5,101", "1"]
    assert by_job["default/elastic"][-1].startswith("restarted 1× after a fault")
    # the fault table, with what each fault and eviction cost; recoveries said to be recoveries
    faults = text[text.index('<table class="summary faults">'):]
    rows = re.findall(r"<tr>(.*?)</tr>", faults)
    cells = [re.findall(r"<t[dh]>([^<]*)</t[dh]>", row) for row in rows]
    assert cells[0][-1] == "chip-seconds lost"
    assert ["1,500", "ascend-03", "fault", "Drain", "default/serve", "0", "0", "7,196"] in cells
    assert ["900", "ascend-00:3", "recovery", "ChipRecovered", "—", "—", "—", "0"] in cells
    assert ["drain", "2", "1", "7,196"] in cells


def test_each_chart_says_its_title_once_and_no_legend_covers_its_data(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's <h2> is the chart's title (none repeated inside the plot), and every legend sits outside
    the plotting area — measured on the figures as matplotlib lays them out."""
    from hetsched.sim import report as module

    figures = []
    real = module._figure_png

    def keep(fig: object) -> str:
        fig.canvas.draw()  # type: ignore[attr-defined]
        figures.append([(ax.get_title(), ax.get_window_extent(), ax.get_legend()) for ax in fig.axes])  # type: ignore[attr-defined]
        return real(fig)

    monkeypatch.setattr(module, "_figure_png", keep)
    simulate_report(tmp_path)
    assert len(figures) == 5
    legends = 0
    for axes in figures:
        for title, box, legend in axes:
            assert title == ""
            if legend is not None:
                legends += 1
                assert not box.overlaps(legend.get_window_extent()), "a legend over the plotting area"
    assert legends >= 3  # allocation, waits, shares


def chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={cwd / 'profile'}", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/provision-browser.sh installs it)")
def test_the_charts_render_in_headless_chromium(tmp_path: Path) -> None:
    report = simulate_report(tmp_path)
    dom = chromium("--dump-dom", report.as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for title in TITLES:
        assert title in dom.stdout, title
    # the same page with its images taken out: what text and layout alone paint
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r'src="data:image/png;base64,[^"]+"', 'src=""', report.read_text()))
    shots = {}
    for name, page in (("report", report), ("bare", bare)):
        shot = tmp_path / f"{name}.png"
        run = chromium("--window-size=1200,3200", f"--screenshot={shot}", page.as_uri(), cwd=tmp_path)
        assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
        shots[name] = image.imread(str(shot))[..., :3]
    painted = {name: float((pixels < 0.95).any(axis=2).mean()) for name, pixels in shots.items()}
    # the charts, not the text and tables, fill the page (measured: 0.043 against 0.015; the charts ≈ 0.028)
    assert painted["report"] > 2 * painted["bare"] and painted["report"] - painted["bare"] > 0.015, painted
    pixels = shots["report"]
    colours = {tuple(c) for c in (pixels[::4, ::4].reshape(-1, 3) * 255).astype(np.uint8).tolist()}
    assert len(colours) > 200  # a heatmap's gradient and coloured lines, not a blank or monochrome page
    viridis = (pixels[..., 0] < 0.4) & (pixels[..., 1] > 0.3) & (pixels[..., 2] > 0.4)
    assert viridis.sum() > 2000  # the chip-occupancy heatmap is drawn


def test_a_run_with_budgets_has_a_budgets_section_with_every_period_against_its_budget(tmp_path: Path) -> None:
    """The budgets scenario (docs/queues.md): search's 16 chip-hours a day and ads' 8, per day of the run, the
    days over budget said in the table (ads runs 48 on idle capacity)."""
    from hetsched.sim.report import BUDGETS_TITLE

    report = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES / "scenarios/ascend-4.yaml"),
                                      str(EXAMPLES / "scenarios/budgets.yaml"), "--report", str(report), "-q"])
    assert result.exit_code == 0, result.output
    text = report.read_text()
    assert f"<h2>{BUDGETS_TITLE}</h2>" in text
    table = text[text.index('<table class="summary budgets">'):]
    table = table[:table.index("</table>")]
    rows = [re.findall(r"<t[dh]>([^<]*)</t[dh]>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]
    assert rows[0][:5] == ["queue", "resource", "period start", "hours used", "budget"]
    ads = [row for row in rows[1:] if row[0] == "ads" and row[2] == "1970-01-01T00:00:00Z"]
    assert ads == [["ads", "huawei.com/Ascend910", "1970-01-01T00:00:00Z", "48.00", "8", "+40.00"]]
    search = {row[2]: row[3] for row in rows[1:] if row[0] == "search"}
    assert search["1970-01-01T00:00:00Z"] == "16.00" and search["1970-01-02T00:00:00Z"] == "32.00"
