"""Open a Snakemake HTML report in headless Chromium and check it as a person sees it.

    python3 tests/browser_check.py results/report.html --screenshots results/report-screenshots

Chromium is driven through the Chrome DevTools Protocol over ``--remote-debugging-pipe``: JSON
messages ending in a NUL byte, commands on the child's file descriptor 3, replies and events on 4,
so no websocket library is needed. The check loads the report, then clicks through it the way a
reader would: the landing page, Statistics, every result category (and subcategory) in the menu,
and the view button of every result, with a screenshot of each view. It fails, naming the view, on
any console error, uncaught exception or error log entry, on a view whose content area (or, for a
section's list of results, menu) is blank, on an image that does not decode, and on a table (on the
landing page or in an HTML result) without data rows. It knows nothing about membench's categories:
whatever the workflow marks as a report output is checked.

The report is a single-page React app (Snakemake 9): the page defines the globals ``categories``
({category: {subcategory: [result path]}}), ``results`` ({path: {mime_type, data_uri, ...}}) and
``app`` (the root component, whose ``state`` says which result the content area shows). An HTML
result is shown in an iframe whose source is a ``data:`` URI; its document is reached through an
isolated world created in that frame.

Lives beside ``faults.py`` as test harness code: CI runs it as a script on the default run's report,
and ``tests/test_browser_check.py`` imports it. It needs the standard library, numpy and matplotlib.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import io
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_to_bytes

import numpy as np
from matplotlib.image import imread

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--hide-scrollbars",
)
VIEWPORT_PX = (1400, 900)
# An area of a screenshot with fewer distinct colours than this is blank (one background colour,
# perhaps a border); rendered text alone gives dozens through anti-aliasing, a plot hundreds.
MIN_DISTINCT_COLOURS = 8
# How long a blank view may take to paint before it counts as blank.
BLANK_PATIENCE_S = 3.0
# Child descriptors Chromium reads commands from and writes replies to with --remote-debugging-pipe.
_CHILD_COMMAND_FD, _CHILD_REPLY_FD = 3, 4


class BrowserError(RuntimeError):
    """Chromium could not be started, died, or did not answer in time."""


class CheckFailed(RuntimeError):
    """The report failed a check; the message names the section and what failed."""


# ---- message framing -------------------------------------------------------------------------


def encode_message(message: dict) -> bytes:
    """One CDP message as sent over the pipe: compact JSON, UTF-8, ending in a NUL byte."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\0"


class MessageReader:
    """Splits the reply stream into messages; a message may arrive over several reads."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[dict]:
        """Messages completed by ``chunk``, in order; an incomplete tail waits for the next chunk."""
        *complete, self._pending = (self._pending + chunk).split(b"\0")
        messages = []
        for raw in complete:
            try:
                messages.append(json.loads(raw))
            except ValueError as exc:
                raise BrowserError(
                    f"Chromium sent a message that is not JSON ({exc}): {raw[:200]!r}"
                ) from exc
        return messages


# ---- blankness ---------------------------------------------------------------------------------


def decode_png(png: bytes) -> np.ndarray:
    """A PNG as an array of shape (height, width, channels), values in [0, 1]."""
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG (bad signature)")
    return imread(io.BytesIO(png), format="png")


def distinct_colours(pixels: np.ndarray) -> int:
    """Number of distinct pixel values in a (height, width, channels) or (height, width) array."""
    if pixels.size == 0:
        return 0
    if pixels.dtype.kind == "f":
        pixels = np.rint(pixels * 255)
    channels = pixels.reshape(pixels.shape[0] * pixels.shape[1], -1).astype(np.int64)
    # One integer per pixel (8 bits a channel): np.unique over a flat array is fast.
    packed = np.zeros(len(channels), dtype=np.int64)
    for channel in channels.T:
        packed = (packed << 8) | channel
    return len(np.unique(packed))


def blank_problem(
    png: bytes, clip: tuple[int, int, int, int] | None = None, min_colours: int = MIN_DISTINCT_COLOURS
) -> str | None:
    """Why the screenshot (or its ``clip`` = x, y, width, height in pixels) is blank, or None:
    "blank: ..." or "empty (zero size)"."""
    pixels = decode_png(png)
    if clip is not None:
        x, y, width, height = clip
        pixels = pixels[max(y, 0) : max(y + height, 0), max(x, 0) : max(x + width, 0)]
    if pixels.size == 0:
        return "empty (zero size)"
    colours = distinct_colours(pixels)
    if colours < min_colours:
        return f"blank: {colours} distinct colour(s), fewer than {min_colours}"
    return None


# ---- Chromium over the DevTools pipe -----------------------------------------------------------


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium binary: ``explicit`` if given, else the first of CHROMIUM_NAMES on PATH."""
    if explicit:
        return shutil.which(explicit)
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


class Chromium:
    """A headless Chromium and one page in it, driven over the DevTools pipe."""

    def __init__(self, binary: str, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.events: list[dict] = []
        self._next_id = 0
        self._reader = MessageReader()
        self._received: deque[dict] = deque()
        self._profile = tempfile.TemporaryDirectory(prefix="browser-check-")
        self._stderr = open(Path(self._profile.name) / "chromium.log", "w+b")
        # Pipe ends are moved above the child's 3 and 4, so that placing them there cannot
        # overwrite one with the other.
        command_read, self._command_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        child_command = fcntl.fcntl(command_read, fcntl.F_DUPFD, 10)
        child_reply = fcntl.fcntl(reply_write, fcntl.F_DUPFD, 10)
        os.close(command_read)
        os.close(reply_write)

        def place_pipes() -> None:
            os.dup2(child_command, _CHILD_COMMAND_FD)
            os.dup2(child_reply, _CHILD_REPLY_FD)

        width, height = VIEWPORT_PX
        args = [
            binary,
            *CHROMIUM_FLAGS,
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                pass_fds=(_CHILD_COMMAND_FD, _CHILD_REPLY_FD),
                preexec_fn=place_pipes,
            )
        except OSError as exc:
            self._close_files()
            raise BrowserError(f"cannot start {binary}: {exc}") from exc
        finally:
            os.close(child_command)
            os.close(child_reply)
        self.session_id: str | None = None

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def __enter__(self) -> Chromium:
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            self.session_id = self.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
            )["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
            width, height = VIEWPORT_PX
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self.running:
            try:
                os.write(self._command_write, encode_message({"id": 0, "method": "Browser.close"}))
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._close_files()

    def _close_files(self) -> None:
        for fd in (self._command_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()
        self._profile.cleanup()

    def _log_tail(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def call(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        """Send one command and return its result; events that arrive meanwhile go to ``events``."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session_id:
            message["sessionId"] = self.session_id
        try:
            os.write(self._command_write, encode_message(message))
        except BrokenPipeError as exc:
            raise self._exited(f"before {method}") from exc
        deadline = time.monotonic() + self.timeout_s
        while True:
            while not self._received:  # a read may end inside a message
                self._received.extend(self._read(deadline, method))
            # One message at a time: a read may bring the reply and, after it, events to keep.
            reply = self._received.popleft()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method} failed: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def drain(self, wait_s: float = 0.0) -> None:
        """Move the events that have arrived, or arrive within ``wait_s``, to ``events``."""
        deadline = time.monotonic() + wait_s
        while select.select([self._reply_read], [], [], max(deadline - time.monotonic(), 0))[0]:
            chunk = os.read(self._reply_read, 1 << 20)
            if not chunk:
                break
            self._received.extend(self._reader.feed(chunk))
        while self._received:
            message = self._received.popleft()
            if "method" in message:
                self.events.append(message)

    def _read(self, deadline: float, waiting_for: str) -> list[dict]:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([self._reply_read], [], [], remaining)[0]:
            raise BrowserError(f"Chromium did not answer {waiting_for} within {self.timeout_s:g} s")
        chunk = os.read(self._reply_read, 1 << 20)
        if not chunk:
            raise self._exited(f"while answering {waiting_for}")
        return self._reader.feed(chunk)

    def _exited(self, when: str) -> BrowserError:
        """The error for a Chromium that closed its pipe, with its exit code and last log lines."""
        try:
            code = self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = "none: still running"
        log = self._log_tail().strip()
        return BrowserError(
            f"Chromium exited (code {code}) {when}" + (f"; its log ends:\n{log}" if log else "")
        )

    def evaluate(self, expression: str, context_id: int | None = None, await_promise: bool = False):
        """The value of a JavaScript expression in the page (or the given execution context)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        if context_id is not None:
            params["contextId"] = context_id
        result = self.call("Runtime.evaluate", params)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"evaluating {expression[:80]!r} raised: {text}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str):
        """Poll ``expression`` until it is truthy (for up to ``timeout_s``); its value, or BrowserError
        naming ``what``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {self.timeout_s:g} s waiting for {what}")
            time.sleep(0.05)

    def settle(self) -> None:
        """Let React commit and the browser paint: two animation frames."""
        self.evaluate(
            "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))",
            await_promise=True,
        )

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])


# ---- what the page reported -------------------------------------------------------------------


def console_errors(events: list[dict]) -> list[str]:
    """The errors among CDP events: console.error calls, uncaught exceptions, error log entries."""
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(
                str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])
            )
            errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            errors.append(f"uncaught exception: {text}".splitlines()[0])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            where = f" ({entry['url']})" if entry.get("url") and not entry["url"].startswith("data:") else ""
            errors.append(f"{entry.get('source', 'log')} error: {entry.get('text', '')}{where}")
    return errors


def data_uri_text(uri: str) -> str:
    """The text a ``data:`` URI carries (base64 or percent-encoded)."""
    header, _, payload = uri.partition(",")
    raw = base64.b64decode(payload) if header.endswith(";base64") else unquote_to_bytes(payload)
    return raw.decode("utf-8", errors="replace")


# ---- walking through the report ----------------------------------------------------------------


@dataclass
class Summary:
    """What the walk saw: result sections, results viewed and offered as downloads, row counts of
    each displayed table, screenshots, and failures ("<view>: <what failed>")."""

    sections: list[str] = field(default_factory=list)
    viewed: int = 0
    downloads: int = 0
    tables: list[tuple[str, list[int]]] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


_BOX = "(box => [box.x, box.y, box.width, box.height].map(Math.round))"
_AREA_RECT = {
    "content": f"{_BOX}(document.querySelector('#app > div').lastElementChild.getBoundingClientRect())",
    "menu": f"{_BOX}(document.querySelector('#app nav').getBoundingClientRect())",
}
_RESULT_ROWS = """Array.from(document.querySelectorAll('nav table tbody tr')).map(row => {
    const view = row.querySelector('td:last-child a');
    return {label: Array.from(row.cells).slice(0, -1).map(cell => cell.textContent)
                   .filter(Boolean).join(' / '),
            download: view ? view.getAttribute('download') : null,
            href: view ? view.getAttribute('href').slice(0, 64) : null};
})"""
_CONTENT_IFRAME = "document.querySelector('#app > div').lastElementChild.querySelector('iframe')"
# Rows of each table under ``document`` (a document or an element); null for a table not displayed
# (a hidden tab, a closed <details>).
_TABLE_ROWS = """Array.from(document.querySelectorAll('table')).map(table =>
    table.getClientRects().length > 0 ? table.querySelectorAll('tr').length : null)"""


class ReportWalk:
    """Clicks through one loaded report, checking each view; failures accumulate in ``summary``."""

    def __init__(self, browser: Chromium, screenshots: Path) -> None:
        self.browser = browser
        self.screenshots = screenshots
        self.summary = Summary()
        self._events_seen = 0

    def run(self) -> Summary:
        self.step("landing page", self.landing)
        self.step("Statistics", self.statistics)
        categories = self.browser.evaluate("Object.keys(categories).sort((a, b) => a.localeCompare(b))")
        for category in categories:
            self.step(
                category, lambda category=category: self.category(category, single=len(categories) == 1)
            )
        return self.summary

    def step(self, section: str, action) -> None:
        """Run one part of the walk; a browser error or a page error fails it, naming ``section``."""
        try:
            action()
        except (BrowserError, CheckFailed) as exc:
            if not self.browser.running:
                raise
            self.fail(section, str(exc))
        self.collect_errors(section)

    def fail(self, section: str, problem: str) -> None:
        self.summary.failures.append(f"{section}: {problem}")

    def collect_errors(self, section: str) -> None:
        self.browser.drain()
        events = self.browser.events[self._events_seen :]
        self._events_seen = len(self.browser.events)
        for error in console_errors(events):
            self.fail(section, error)

    def landing(self) -> None:
        """The page the report opens on: its text (the workflow description, where a summary table
        may be included as HTML) and the job graph or metadata beside it."""
        self.browser.settle()
        self.capture("landing page")
        rows = self.browser.evaluate(
            f"(document => {_TABLE_ROWS})(document.querySelector('#app > div').lastElementChild)"
        )
        self.check_tables("landing page", rows)

    def statistics(self) -> None:
        """Snakemake's own page of job runtimes and timeline (two Vega plots)."""
        self.click_menu_item("Statistics")
        self.browser.wait_for(
            "document.querySelector('#runtimes svg, #runtimes canvas') !== null", "the runtime plot"
        )
        self.capture("Statistics")

    def category(self, category: str, single: bool) -> None:
        self.browser.evaluate('app.setView({navbarMode: "menu"})')
        self.browser.settle()
        self.click_menu_item("Results" if single else category)
        subcategories = self.browser.evaluate(
            f"Object.keys(categories[{json.dumps(category)}]).sort((a, b) => a.localeCompare(b))"
        )
        if len(subcategories) == 1:
            self.results(category)
            return
        for subcategory in subcategories:
            section = f"{category} / {subcategory}"
            self.step(
                section,
                lambda subcategory=subcategory, section=section: self.subcategory(
                    category, subcategory, section
                ),
            )

    def subcategory(self, category: str, subcategory: str, section: str) -> None:
        self.browser.evaluate(f"app.showCategory({json.dumps(category)})")
        self.browser.settle()
        self.click_menu_item(subcategory)
        self.results(section)

    def click_menu_item(self, label: str) -> None:
        clicked = self.browser.evaluate(f"""(label => {{
            const item = Array.from(document.querySelectorAll('nav ul > li > a'))
                .find(link => link.textContent.trim() === label);
            if (item) item.click();
            return Boolean(item);
        }})({json.dumps(label)})""")
        if not clicked:
            raise CheckFailed(f"the menu has no entry {label!r}")
        self.browser.settle()

    def results(self, section: str) -> None:
        self.browser.wait_for(
            "document.querySelector('nav table tbody tr') !== null", f"the results of {section}"
        )
        self.summary.sections.append(section)
        self.capture(section, area="menu")
        rows = self.browser.evaluate(_RESULT_ROWS)
        if not rows:
            raise CheckFailed("the section lists no results")
        for index, row in enumerate(rows):
            label = f"{section}: {row['label']}"
            if row["download"] is not None:
                self.summary.downloads += 1
                if not (row["href"] or "").startswith("data:"):
                    self.fail(label, f"the download link is not an embedded file: {row['href']!r}")
                continue
            self.step(label, lambda index=index, label=label: self.view_result(index, label))

    def view_result(self, index: int, label: str) -> None:
        before = self.browser.evaluate("app.state.renderTrigger ?? null")
        self.browser.evaluate(
            f"document.querySelectorAll('nav table tbody tr')[{index}]"
            ".querySelector('td:last-child a').click()"
        )
        self.browser.wait_for(f"app.state.renderTrigger !== {json.dumps(before)}", f"{label} to be shown")
        self.browser.settle()
        content, path = self.browser.evaluate("[app.state.content, app.state.resultPath]")
        self.summary.viewed += 1
        if content == "img":
            decoded = self.browser.wait_for(
                "(() => { const image = document.querySelector('#app > div').lastElementChild"
                ".querySelector('img');"
                " return image && image.complete ? [image.naturalWidth, image.naturalHeight] : null; })()",
                f"the image of {label} to load",
            )
            if min(decoded) == 0:
                raise CheckFailed(f"the image {path} does not decode")
        elif content == "html":
            self.check_html_tables(label, path)
        self.capture(label)

    def check_html_tables(self, label: str, path: str) -> None:
        context = self.iframe_context(label)
        rows = self.browser.evaluate(_TABLE_ROWS, context_id=context)
        source = data_uri_text(self.browser.evaluate(f"results[{json.dumps(path)}].data_uri"))
        if not rows and re.search(r"<table\b", source, re.IGNORECASE):
            raise CheckFailed(f"{path} has a <table> in its source but no table in its displayed document")
        self.check_tables(label, rows, f" of {path}")

    def check_tables(self, label: str, rows: list[int | None], where: str = "") -> None:
        """Each displayed table (``rows``: its row count, None when not displayed) needs a data row,
        and a page with tables needs one displayed."""
        if not rows:
            return
        shown = [count for count in rows if count is not None]
        if not shown:
            self.fail(label, f"none of the {len(rows)} table(s){where} is displayed")
            return
        self.summary.tables.append((label, shown))
        for number, count in enumerate(rows, start=1):
            if count is not None and count <= 1:
                self.fail(label, f"table {number}{where} renders {count} row(s): no data rows")

    def iframe_context(self, label: str) -> int:
        """An execution context in the loaded document of the iframe the content area shows."""
        deadline = time.monotonic() + self.browser.timeout_s
        while time.monotonic() < deadline:
            iframe = self.browser.call("Runtime.evaluate", {"expression": _CONTENT_IFRAME})["result"]
            if "objectId" in iframe:
                try:
                    node = self.browser.call("DOM.describeNode", {"objectId": iframe["objectId"]})["node"]
                    world = self.browser.call(
                        "Page.createIsolatedWorld", {"frameId": node["frameId"], "worldName": "browser-check"}
                    )
                    context_id = world["executionContextId"]
                    if self.browser.evaluate(
                        "location.protocol === 'data:' && document.readyState === 'complete'",
                        context_id=context_id,
                    ):
                        return context_id
                except BrowserError:
                    pass  # the frame navigated away from the document the world was made in: look again
            time.sleep(0.05)
        raise CheckFailed(f"the HTML document of {label} did not load in its frame")

    def capture(self, label: str, area: str = "content") -> None:
        """Screenshot the page; a blank ``area`` ("content": the result shown; "menu": the navigation)
        fails ``label``. Entering a section leaves the previous result in the content area, so a
        section's own screenshot is judged by its menu. Some views paint after a promise (Vega's
        graph, an iframe's document), so a blank area is looked at again for a few seconds."""
        deadline = time.monotonic() + BLANK_PATIENCE_S
        while True:
            png = self.browser.screenshot()
            problem = blank_problem(png, clip=tuple(self.browser.evaluate(_AREA_RECT[area])))
            if problem is None or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")[:80]
        name = f"{len(self.summary.screenshots):02d}-{slug}.png"
        target = self.screenshots / name
        target.write_bytes(png)
        self.summary.screenshots.append(target)
        if problem:
            self.fail(label, f"the {area} area is {problem} (screenshot {target})")


_SCREENSHOT_NAME = re.compile(r"\d{2,}-[A-Za-z0-9._-]*\.png")


def prepare_screenshots(directory: Path) -> None:
    """Create ``directory``, or empty it of a previous check's screenshots; refuse one holding other files."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = list(directory.iterdir())
    foreign = [
        entry.name for entry in entries if not (_SCREENSHOT_NAME.fullmatch(entry.name) and entry.is_file())
    ]
    if foreign:
        raise CheckFailed(
            f"{directory} holds files this check did not write ({', '.join(sorted(foreign)[:3])}); "
            "give an empty or new directory for the screenshots"
        )
    for entry in entries:
        entry.unlink()


def check_report(report: Path, screenshots: Path, chromium: str, timeout_s: float = 60.0) -> Summary:
    """Load ``report`` in headless Chromium and walk through it; screenshots go to ``screenshots``."""
    prepare_screenshots(screenshots)
    with Chromium(chromium, timeout_s) as browser:
        browser.call("Page.navigate", {"url": report.resolve().as_uri()})
        walk = ReportWalk(browser, screenshots)
        try:
            browser.wait_for(
                "document.readyState === 'complete' && typeof app !== 'undefined'"
                " && document.querySelector('nav ul > li > a') !== null",
                "the report to render",
            )
        except BrowserError as exc:
            walk.fail("loading the report", str(exc))
            return walk.summary
        finally:
            walk.collect_errors("loading the report")
        return walk.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="browser_check", description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the Snakemake HTML report (snakemake --report X.html)")
    parser.add_argument("--screenshots", type=Path, required=True, help="directory for the screenshots")
    parser.add_argument(
        "--chromium", help=f"the browser binary (default: the first of {', '.join(CHROMIUM_NAMES)})"
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="longest wait for one browser answer or for a view to appear (seconds)",
    )
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"browser check: error: {args.report}: no such report file", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print(
            f"browser check: error: no Chromium found ({args.chromium or ', '.join(CHROMIUM_NAMES)})",
            file=sys.stderr,
        )
        return 2
    start = time.monotonic()
    try:
        summary = check_report(args.report, args.screenshots, chromium, args.timeout_s)
    except CheckFailed as exc:
        print(f"browser check: error: {exc}", file=sys.stderr)
        return 2
    except BrowserError as exc:
        print(f"browser check: FAILED: {args.report}: {exc}", file=sys.stderr)
        return 1
    for label, rows in summary.tables:
        print(f"browser check: table {label}: {len(rows)} table(s), rows {', '.join(map(str, rows))}")
    if summary.screenshots:
        print(
            f"browser check: visited the landing page, Statistics and {len(summary.sections)} "
            "result section(s) "
            f"({', '.join(summary.sections)}); {summary.viewed} result(s) viewed, "
            f"{summary.downloads} download "
            f"link(s), {len(summary.tables)} view(s) with tables; {len(summary.screenshots)} "
            "screenshot(s) in "
            f"{args.screenshots} ({time.monotonic() - start:.1f} s)"
        )
    else:
        print(
            "browser check: the report did not render, so nothing was visited "
            f"({time.monotonic() - start:.1f} s)"
        )
    if summary.failures:
        for failure in summary.failures:
            print(f"browser check: FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"browser check: {args.report} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
