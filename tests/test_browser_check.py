"""The report checker: message framing, blankness and error collection always; the whole check on a
tiny Snakemake report in headless Chromium where a Chromium binary is installed."""

import base64
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import browser_check
import numpy as np
import pytest
from browser_check import (
    BrowserError,
    MessageReader,
    blank_problem,
    console_errors,
    data_uri_text,
    distinct_colours,
    encode_message,
)
from matplotlib import pyplot


def png_of(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    pyplot.imsave(buffer, pixels, format="png")
    return buffer.getvalue()


def plot_png(title: str) -> bytes:
    figure, axes = pyplot.subplots(figsize=(3, 2), dpi=80)
    axes.plot([0, 1, 2], [1, 3, 2])
    axes.set_title(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    pyplot.close(figure)
    return buffer.getvalue()


# ---- framing ---------------------------------------------------------------------------------------


def test_a_message_is_compact_json_ending_in_one_nul():
    encoded = encode_message({"id": 1, "method": "Page.enable", "params": {}})
    assert encoded == b'{"id":1,"method":"Page.enable","params":{}}\0'


def test_reader_joins_messages_split_across_reads_and_splits_joined_ones():
    # Chromium writes UTF-8 as it is, not as \u escapes.
    stream = '{"id":1,"result":{"text":"größe"}}\0{"method":"Log.entryAdded"}\0'.encode()
    reader = MessageReader()
    cut = stream.index("ö".encode()) + 1  # inside a multi-byte character
    assert reader.feed(stream[:cut]) == []
    assert reader.feed(stream[cut:]) == [{"id": 1, "result": {"text": "größe"}}, {"method": "Log.entryAdded"}]
    assert reader.feed(b"") == []


def test_reader_byte_by_byte_gives_the_same_messages():
    messages = [{"id": n, "result": {"value": "x" * n}} for n in range(5)]
    reader = MessageReader()
    received = []
    for byte in b"".join(map(encode_message, messages)):
        received += reader.feed(bytes([byte]))
    assert received == messages


def test_reader_rejects_a_message_that_is_not_json():
    with pytest.raises(BrowserError, match="not JSON"):
        MessageReader().feed(b'{"id": 1,\0')


# ---- blankness -------------------------------------------------------------------------------------


def test_distinct_colours_counts_pixel_values_not_channel_values():
    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    pixels[0, 0] = (255, 0, 0)
    pixels[1, 1] = (0, 255, 0)
    pixels[2, 2] = (0, 255, 0)
    assert distinct_colours(pixels) == 3
    assert distinct_colours(np.zeros((0, 0, 3))) == 0


def test_a_white_screenshot_is_blank_and_a_plot_is_not():
    white = png_of(np.full((60, 80, 3), 255, dtype=np.uint8))
    assert "blank: 1 distinct colour(s)" in blank_problem(white)
    assert blank_problem(plot_png("peak (MiB)")) is None


def test_only_the_clipped_content_area_counts():
    pixels = np.full((100, 200, 3), 255, dtype=np.uint8)
    pixels[:, :50] = np.random.default_rng(0).integers(0, 256, size=(100, 50, 3))  # a busy menu on the left
    screenshot = png_of(pixels)
    assert blank_problem(screenshot) is None
    assert "blank" in blank_problem(screenshot, clip=(50, 0, 150, 100))
    assert "zero size" in blank_problem(screenshot, clip=(300, 0, 10, 10))


def test_blankness_refuses_what_is_not_a_png():
    with pytest.raises(ValueError, match="not a PNG"):
        blank_problem(b"GIF89a....")


# ---- what the page reported ------------------------------------------------------------------------


def test_console_errors_picks_errors_and_names_them():
    events = [
        {"method": "Runtime.consoleAPICalled", "params": {"type": "log", "args": [{"value": "fine"}]}},
        {"method": "Runtime.consoleAPICalled", "params": {"type": "error", "args": [{"value": "no rows"}]}},
        {
            "method": "Runtime.exceptionThrown",
            "params": {
                "exceptionDetails": {
                    "text": "Uncaught",
                    "exception": {"description": "TypeError: x is undefined\n    at <anonymous>:1:1"},
                }
            },
        },
        {"method": "Log.entryAdded", "params": {"entry": {"level": "warning", "text": "deprecated"}}},
        {
            "method": "Log.entryAdded",
            "params": {
                "entry": {
                    "level": "error",
                    "source": "network",
                    "text": "Failed to load",
                    "url": "file:///x.png",
                }
            },
        },
        {"method": "Page.loadEventFired", "params": {}},
    ]
    assert console_errors(events) == [
        "console.error: no rows",
        "uncaught exception: TypeError: x is undefined",
        "network error: Failed to load (file:///x.png)",
    ]


def test_data_uri_text_reads_base64_and_percent_encoding():
    html = "<table><tr><td>ä</td></tr></table>"
    assert (
        data_uri_text("data:text/html;charset=utf8;base64," + base64.b64encode(html.encode()).decode())
        == html
    )
    assert data_uri_text("data:text/html,%3Ctable%3E") == "<table>"


def test_screenshots_directory_with_other_files_is_refused_untouched(tmp_path):
    (tmp_path / "00-landing_page.png").write_bytes(b"old")
    (tmp_path / "report.html").write_text("keep me")
    with pytest.raises(browser_check.CheckFailed, match="report.html"):
        browser_check.prepare_screenshots(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["00-landing_page.png", "report.html"]
    (tmp_path / "report.html").unlink()
    browser_check.prepare_screenshots(tmp_path)
    assert list(tmp_path.iterdir()) == []


FAKE_BROWSER = textwrap.dedent("""\
    #!{python}
    # Answers each command on descriptor 3 on descriptor 4, in one write with an event after the
    # reply, in two pieces split inside a message.
    import json, os
    pending = b""
    while True:
        chunk = os.read(3, 65536)
        if not chunk:
            break
        *commands, pending = (pending + chunk).split(b"\\0")
        for raw in commands:
            command = json.loads(raw)
            if command["method"] == "Browser.close":
                raise SystemExit(0)
            echo = [command["method"], command.get("sessionId")]
            result = {{"targetId": "page", "sessionId": "one", "echo": echo}}
            reply = json.dumps({{"id": command["id"], "result": result}}).encode()
            entry = {{"level": "error", "text": command["method"]}}
            event = json.dumps({{"method": "Log.entryAdded", "params": {{"entry": entry}}}}).encode()
            stream = reply + b"\\0" + event + b"\\0"
            os.write(4, stream[:5])
            os.write(4, stream[5:])
""")


def test_the_pipe_carries_commands_replies_and_events_in_order(tmp_path):
    fake = tmp_path / "fake-browser"
    fake.write_text(FAKE_BROWSER.format(python=sys.executable))
    fake.chmod(0o755)
    with browser_check.Chromium(str(fake), timeout_s=30) as browser:
        assert browser.call("Page.captureScreenshot")["echo"] == ["Page.captureScreenshot", "one"]
        browser.drain(wait_s=2)
    # Every event sent after a reply was kept, in order: the setup commands', then the screenshot's.
    assert console_errors(browser.events)[-2:] == [
        "log error: Emulation.setDeviceMetricsOverride",
        "log error: Page.captureScreenshot",
    ]


def test_a_missing_report_or_browser_is_a_one_line_error(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert browser_check.main([str(report), "--screenshots", str(tmp_path / "shots")]) == 2
    assert f"{report}: no such report file" in capsys.readouterr().err
    report.write_text("<html></html>")
    assert (
        browser_check.main(
            [str(report), "--screenshots", str(tmp_path / "shots"), "--chromium", "no-such-browser-here"]
        )
        == 2
    )
    assert "no Chromium found (no-such-browser-here)" in capsys.readouterr().err


def test_a_browser_that_exits_at_once_fails_the_check_saying_so(tmp_path, capsys):
    report = tmp_path / "report.html"
    report.write_text("<html></html>")
    assert (
        browser_check.main([str(report), "--screenshots", str(tmp_path / "shots"), "--chromium", "false"])
        == 1
    )
    assert "Chromium exited (code 1)" in capsys.readouterr().err


# ---- the whole check in Chromium -------------------------------------------------------------------

TABLE_HTML = (
    "<!doctype html><html><head><meta charset='utf-8'><title>summary</title></head><body>"
    "<table><thead><tr><th>method</th><th>peak (MiB)</th></tr></thead>"
    "<tbody><tr><td>a</td><td>1.5</td></tr><tr><td>b</td><td>0.5</td></tr></tbody></table></body></html>"
)
WORKFLOW_RST = textwrap.dedent("""\
    A tiny workflow, with its headline table on the landing page.

    ======  ==========
    method  peak (MiB)
    ======  ==========
    a       1.5
    b       0.5
    ======  ==========
""")
SNAKEFILE = textwrap.dedent("""\
    report: "workflow.rst"

    rule all:
        input: "out/summary.html", "out/data.csv", "out/plot.png", "out/detail.png"

    rule summary:
        input: "source/summary.html"
        output: report("out/summary.html", category="Summary")
        shell: "cp {input:q} {output:q}"

    rule data:
        input: "source/data.csv"
        output: report("out/data.csv", category="Summary")
        shell: "cp {input:q} {output:q}"

    rule plot:
        input: "source/plot.png"
        output: report("out/plot.png", category="Plots", subcategory="first")
        shell: "cp {input:q} {output:q}"

    rule detail:
        input: "source/detail.png"
        output: report("out/detail.png", category="Plots", subcategory="second")
        shell: "cp {input:q} {output:q}"
""")


@pytest.fixture(scope="module")
def chromium():
    binary = browser_check.find_chromium()
    if binary is None:
        pytest.skip("no Chromium binary on PATH (Debian: apt-get install chromium)")
    return binary


@pytest.fixture(scope="module")
def tiny_report(chromium, tmp_path_factory) -> Path:
    """A Snakemake report with a table on its landing page, an HTML table, a CSV and two figures in
    two subcategories."""
    workdir = tmp_path_factory.mktemp("tiny_report")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    (workdir / "workflow.rst").write_text(WORKFLOW_RST)
    (workdir / "source").mkdir()
    (workdir / "source" / "summary.html").write_text(TABLE_HTML)
    (workdir / "source" / "data.csv").write_text("method,peak_mib\na,1.5\nb,0.5\n")
    (workdir / "source" / "plot.png").write_bytes(plot_png("peak (MiB)"))
    (workdir / "source" / "detail.png").write_bytes(plot_png("time (s)"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for args in (["--cores", "1"], ["--report", "report.html"]):
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", *args],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
    return workdir / "report.html"


def broken_copy(report: Path, tmp_path: Path, replacements: dict[bytes, bytes]) -> Path:
    """A copy of ``report`` in which each embedded file (key) is replaced by its value."""
    text = report.read_text()
    for old, new in replacements.items():
        old_base64, new_base64 = (base64.b64encode(content).decode() for content in (old, new))
        assert text.count(old_base64) == 1
        text = text.replace(old_base64, new_base64)
    copy = tmp_path / "broken.html"
    copy.write_text(text)
    return copy


def run_check(report: Path, tmp_path: Path, chromium: str, capsys) -> tuple[int, str, str]:
    status = browser_check.main(
        [str(report), "--screenshots", str(tmp_path / "shots"), "--chromium", chromium]
    )
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.chromium
def test_a_good_report_passes_with_every_section_viewed(tiny_report, tmp_path, chromium, capsys):
    status, out, err = run_check(tiny_report, tmp_path, chromium, capsys)
    assert status == 0, out + err
    assert (
        "visited the landing page, Statistics and 3 result section(s) "
        "(Plots / first, Plots / second, Summary)"
    ) in out
    assert "3 result(s) viewed, 1 download link(s)" in out
    assert "table landing page: 1 table(s), rows 3" in out
    assert "table Summary: out/summary.html: 1 table(s), rows 3" in out
    shots = sorted(path.name for path in (tmp_path / "shots").iterdir())
    assert shots[:2] == ["00-landing_page.png", "01-Statistics.png"] and len(shots) == 8
    assert all(blank_problem(path.read_bytes()) is None for path in (tmp_path / "shots").iterdir())


@pytest.mark.chromium
def test_a_script_error_in_the_report_fails_it(tiny_report, tmp_path, chromium, capsys):
    page, end = tiny_report.read_text().rsplit("</body>", 1)
    broken = tmp_path / "broken.html"
    broken.write_text(page + "<script>summaryRows.render()</script></body>" + end)
    status, _, err = run_check(broken, tmp_path, chromium, capsys)
    assert status == 1
    assert "FAILED: loading the report: uncaught exception: ReferenceError: summaryRows is not defined" in err


@pytest.mark.chromium
def test_a_broken_report_fails_naming_each_section_and_what_failed(tiny_report, tmp_path, chromium, capsys):
    header_only = TABLE_HTML.replace("<tr><td>a</td><td>1.5</td></tr><tr><td>b</td><td>0.5</td></tr>", "")
    noisy = header_only.replace("</body>", "<script>console.error('summary data missing')</script></body>")
    detail = (tiny_report.parent / "source" / "detail.png").read_bytes()
    white = png_of(np.full((300, 400, 3), 255, dtype=np.uint8))
    broken = broken_copy(tiny_report, tmp_path, {TABLE_HTML.encode(): noisy.encode(), detail: white})
    status, out, err = run_check(broken, tmp_path, chromium, capsys)
    assert status == 1
    failures = [line for line in err.splitlines() if line.startswith("browser check: FAILED: ")]
    assert len(failures) == 3, err
    assert "FAILED: Plots / second: out/detail.png: the content area is blank: 1 distinct colour(s)" in err
    assert (
        "FAILED: Summary: out/summary.html: table 1 of out/summary.html renders 1 row(s): no data rows" in err
    )
    assert "FAILED: Summary: out/summary.html: console.error: summary data missing" in err
    assert "3 result section(s)" in out  # one failure does not end the walk
