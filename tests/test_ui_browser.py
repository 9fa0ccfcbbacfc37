"""The operator's page in a real browser: `rewind up`, log in to Airflow, open "Rewind", act on the demo.

Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright; Playwright's own browser download
does not work here) against a real `make up` stack on a fresh REWIND_HOME:

1. log in through Airflow's login page (Simple auth manager: ``/auth/login``, which stores the JWT
   in the ``_token`` cookie);
2. open the Rewind page from the nav link "Rewind" (a plugin external view opens either in a new
   tab, in the same tab, or in an iframe under ``/plugin/<url_route>``; the test accepts each and
   prints which), then work on ``<airflow>/rewind/`` itself;
3. see the demo stream running, with a batch number the status file confirms and its lag;
4. take a savepoint from the page and see it appear in the page's savepoint list (and in S3);
5. open the replay form and find it pre-filled (stream ``demo``, dry run checked);
6. without the login cookie the page shows no stream;
7. test_make_up's checks of the newcomer's promises (``check_the_newcomers_promises``), on this
   same `rewind up`: one stack instead of two in CI.

Screenshots of every step go to ``test-artifacts/ui/`` in the repo (gitignored; the path is
printed); ``console.log`` there has the browser's console errors. Ctrl-C (SIGINT) then stops the
stack and every process it started must be gone, the browser's too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from harness.rewind_up import CHROMIUM, ROOT, RewindUp, check_the_newcomers_promises

from rewind.control.status import read_status

ARTIFACTS = ROOT / "test-artifacts" / "ui"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
STREAM = "demo"
ROW = f'[data-testid=stream-row][data-stream="{STREAM}"]'
NAV_MENUS = ("Browse", "Admin", "Plugins", "Docs", "User")  # where Airflow puts a categorised nav item


def _browser_or_skip() -> None:
    if not Path(CHROMIUM).exists():
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it")
        pytest.skip(message)


class Shots:
    """Numbered full-page screenshots in ``ARTIFACTS`` (emptied first, so they are this run's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.n = 0
        print(f"\nscreenshots: {root}", flush=True)

    def take(self, page: Any, name: str) -> Path:
        self.n += 1
        path = self.root / f"{self.n:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


def _batch_number(text: str) -> int | None:
    """The batch number in a cell's text: after the word "batch" if it is there, else the first number."""
    found = re.search(r"batch\D{0,3}?(\d+)", text, re.I) or re.search(r"\d+", text)
    return int(found.group(found.lastindex or 0)) if found else None


def _wait(what: str, check: Callable[[], Any], timeout: float, poll: float = 1.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the page re-rendering: keep polling
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout:.0f}s (last: {last!r})")
        time.sleep(poll)


# -- the steps -----------------------------------------------------------------------------------

def log_in(page: Any, url: str, user: str, password: str, shots: Shots) -> None:
    """Airflow's own login page (Simple auth manager): Username, Password, "Sign in"."""
    page.goto(url + "/")
    page.wait_for_url(re.compile(r"/auth/login"), timeout=60_000)  # the UI sends a visitor without a token there
    page.locator("input[name=username]").wait_for(timeout=60_000)
    shots.take(page, "login-page")
    page.locator("input[name=username]").fill(user)
    page.locator("input[name=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda u: "/auth/" not in u, timeout=60_000)
    cookies = {c["name"]: c for c in page.context.cookies(url)}
    assert "_token" in cookies, f"no _token cookie after the login; cookies: {sorted(cookies)}"
    # The Airflow home page: its nav is there once the UI has loaded the user's menu.
    page.get_by_role("link", name="Home").or_(page.get_by_label("Home")).first.wait_for(timeout=60_000)
    try:
        page.wait_for_load_state("networkidle", timeout=15_000)  # the home page's widgets, for the screenshot
    except Exception:  # noqa: BLE001 - a UI that keeps polling is still a logged-in UI
        pass
    shots.take(page, "airflow-home")


def find_nav_link(page: Any, shots: Shots) -> Any:
    """The nav entry "Rewind": top level, or inside one of Airflow's nav menus (opened to find it)."""
    def entry() -> Any:
        return (page.get_by_role("link", name="Rewind", exact=True)
                .or_(page.get_by_role("menuitem", name="Rewind", exact=True))
                .or_(page.get_by_role("button", name="Rewind", exact=True)))  # Airflow's <button href> (see below)

    top = entry()
    try:
        top.first.wait_for(state="visible", timeout=10_000)
        return top.first
    except Exception:  # noqa: BLE001 - not at the top level: look in the menus
        pass
    tried = []
    for menu in NAV_MENUS:
        button = page.get_by_role("button", name=menu, exact=True)
        if not button.count():
            continue
        tried.append(menu)
        button.first.click()
        try:
            entry().first.wait_for(state="visible", timeout=3_000)
            shots.take(page, f"nav-menu-{menu.lower()}")
            return entry().first
        except Exception:  # noqa: BLE001
            page.keyboard.press("Escape")
    shots.take(page, "nav-without-rewind")
    raise AssertionError(f'no nav entry "Rewind" in Airflow\'s nav (top level, nor in the menus {tried}): is '
                         f'the Rewind plugin loaded? see {shots.root}')


def open_rewind_from_nav(page: Any, url: str, shots: Shots) -> tuple[Any, str]:
    """Click "Rewind" in the nav and return (a page showing ``<airflow>/rewind/`` at top level, how it opened)."""
    link = find_nav_link(page, shots)
    href, target = link.get_attribute("href"), link.get_attribute("target")
    if target == "_blank":
        try:
            with page.context.expect_page(timeout=20_000) as popup_info:
                link.click()
        except Exception as exc:  # noqa: BLE001 - say what the user would see
            shots.take(page, "nav-click-opened-nothing")
            raise AssertionError(
                f'clicking the nav entry "Rewind" opened nothing: {link.evaluate("e => e.outerHTML")[:300]} '
                "(Airflow 3.3 renders a nav external view without url_route as a <button href target=_blank>, "
                "which a click does not follow; a url_route embeds the page instead)") from exc
        rewind = popup_info.value
        rewind.wait_for_load_state()
        how = f"a new tab (external view link {href!r}, target=_blank)"
    else:
        link.click()
        page.wait_for_url(re.compile(r"/(plugin|rewind)/"), timeout=30_000)
        rewind = page
        how = f"the same tab ({href!r})"
    if "/plugin/" in urlsplit(rewind.url).path:
        # An embedded external view: Airflow's page with the plugin's page in an iframe.
        frame_el = rewind.locator("iframe").first
        frame_el.wait_for(timeout=30_000)
        src = frame_el.get_attribute("src") or ""
        rewind.frame_locator("iframe").first.locator(ROW).wait_for(timeout=120_000)
        shots.take(rewind, "rewind-in-airflow-iframe")
        how = f"an iframe inside Airflow at {urlsplit(rewind.url).path} (src {src!r})"
        print(f"the nav link opened {how}; the rest runs on {url}/rewind/ itself", flush=True)
        rewind.goto(url + "/rewind/")
    else:
        print(f"the nav link opened {how}: {rewind.url}", flush=True)
    assert urlsplit(rewind.url).path.rstrip("/") == "/rewind", f"the Rewind page is at {url}/rewind/, not {rewind.url}"
    return rewind, how


def see_stream_running(page: Any, status_file: Path, min_batch: int, shots: Shots) -> int:
    """The demo's row says running, a batch number the status file confirms, and a lag."""
    row = page.locator(ROW)
    row.wait_for(timeout=120_000)
    state, last_batch, lag = (row.locator(f"[data-testid={t}]") for t in ("state", "last-batch", "lag"))

    seen: dict[str, Any] = {}

    def shown_batch() -> int | None:
        now = read_status(status_file)
        seen.update(state=state.inner_text(), last_batch=last_batch.inner_text(),
                    status_file_batch=(now.last_batch_id or 0) if now else None)
        if "running" not in seen["state"].lower():
            return None
        n = _batch_number(seen["last_batch"])
        return n if n is not None and min_batch <= n <= (seen["status_file_batch"] or 0) else None

    try:
        batch = _wait(f"the demo row running at a batch between {min_batch} and the status file's", shown_batch,
                      timeout=120)
    except AssertionError as exc:
        shots.take(page, "stream-not-shown")
        raise AssertionError(f"{exc}; the page showed {seen}") from None
    lag_text = lag.inner_text()
    assert re.search(r"\d", lag_text), f"the lag cell shows no number: {lag_text!r}"
    print(f"page: {STREAM} {state.inner_text()!r}, last batch {last_batch.inner_text()!r}, lag {lag_text!r}",
          flush=True)
    shots.take(page, "rewind-stream-running")
    return int(batch)


def savepoint_ids(page: Any) -> set[str]:
    """The demo stream's savepoints as its row lists them (the inventory's row lists its own: its hourly
    savepoint may land while the test clicks, as it did at 09:00 in a run of 2026-11-29)."""
    return {sid for sid in page.locator(ROW).locator("[data-testid=savepoint-row]").evaluate_all(
        "els => els.map(e => e.getAttribute('data-savepoint-id'))") if sid}


def take_savepoint(page: Any, shots: Shots) -> str:
    """Click the row's savepoint button; a new ``[data-testid=savepoint-row]`` must appear."""
    time.sleep(1)  # let the list render once after the row did
    before = savepoint_ids(page)
    message = page.locator("[data-testid=message]")
    page.locator(ROW).locator("[data-testid=take-savepoint]").click()
    shots.take(page, "savepoint-requested")

    def new_id() -> str | None:
        text = message.first.inner_text() if message.count() else ""
        if re.search(r"\b(error|failed|forbidden|unauthori[sz]ed|denied|refused)\b", text, re.I):
            shots.take(page, "savepoint-error")
            raise AssertionError(f"the page reports: {text!r}")
        fresh = sorted(savepoint_ids(page) - before)
        return fresh[-1] if fresh else None

    try:
        sid = _wait(f"a new savepoint row (had {sorted(before)})", new_id, timeout=300, poll=2)
    except AssertionError as exc:
        shots.take(page, "savepoint-not-listed")
        raise AssertionError(f"{exc}; the row said: {page.locator(ROW).inner_text()[:2000]!r}") from None
    row = page.locator(f'[data-testid=savepoint-row][data-savepoint-id="{sid}"]')
    row.scroll_into_view_if_needed()
    print(f"page: savepoint {sid} listed; message {message.first.inner_text() if message.count() else ''!r}",
          flush=True)
    shots.take(page, "savepoint-listed")
    return str(sid)


def check_replay_form(page: Any, shots: Shots) -> dict[str, Any]:
    """The replay form opens from the row, pre-filled: stream demo, from/to/mode set, dry run checked."""
    page.locator(ROW).locator("[data-testid=open-replay-form]").click()
    form = page.locator("form[data-testid=replay-form]")
    form.wait_for(state="visible", timeout=30_000)
    values: dict[str, Any] = {}
    for name in ("stream", "from", "to", "mode"):
        field = form.locator(f'[name="{name}"]')
        assert field.count(), f"the replay form has no field named {name!r}"
        values[name] = field.first.input_value()
    values["dry_run"] = form.locator('[name="dry_run"]').first.is_checked()
    shots.take(page, "replay-form")
    print(f"page: replay form pre-filled with {values}", flush=True)
    assert values["stream"] == STREAM, values
    assert values["dry_run"] is True, values
    for name in ("from", "to", "mode"):
        assert values[name].strip(), f"the replay form's {name!r} is not pre-filled: {values}"
    return values


def check_needs_login(browser: Any, url: str, shots: Shots) -> None:
    """A browser without the login cookie gets the login page or an API refusal, never the streams."""
    context = browser.new_context()
    try:
        page = context.new_page()
        refused: list[int] = []
        page.on("response", lambda r: refused.append(r.status) if r.status in (401, 403) else None)
        page.goto(url + "/rewind/")
        time.sleep(8)  # more than one refresh of the page
        shots.take(page, "rewind-without-login")
        on_login = "/auth/login" in page.url
        rows = page.locator("[data-testid=stream-row]").count()
        assert rows == 0, f"without a login the page still shows {rows} stream row(s)"
        assert on_login or refused, f"without a login: no redirect to the login page and no 401/403 ({page.url})"
    finally:
        context.close()


def savepoints_in_s3(home: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "AIRFLOW", "AWS_"))}
    env["REWIND_HOME"] = str(home)
    out = subprocess.run([str(Path(sys.executable).parent / "rewind"), "savepoint", "list", STREAM, "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return {s["savepoint_id"] for s in json.loads(out.stdout)["savepoints"]}


def _browser_processes() -> list[Any]:
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "chromium" in cmd or "playwright" in cmd:
            found.append(child)
    return found


def _keep_logs(home: Path, output: str, root: Path) -> None:
    """`rewind up`'s output and the tail of every log of the run, next to the screenshots (tmp dirs rotate)."""
    (root / "rewind-up.log").write_text(output)
    for log in sorted(home.rglob("*.log")):
        if not log.is_file() or "data" in log.relative_to(home).parts:  # SeaweedFS's leveldb files end in .log too
            continue
        dest = root / "logs" / log.relative_to(home)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "rb") as fh:
            fh.seek(max(0, log.stat().st_size - 200_000))
            dest.write_bytes(fh.read())


# -- the test ------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_operator_page_in_a_browser_on_make_up(tmp_path: Path) -> None:
    _browser_or_skip()
    from playwright.sync_api import sync_playwright

    t0 = time.monotonic()
    shots = Shots(ARTIFACTS)
    home = tmp_path / "home"
    up = RewindUp(home)
    status_file = home / "checkpoints" / f"{STREAM}.control" / f"{STREAM}.json"  # beside the checkpoint
    console: list[str] = []
    stream_pid = None
    pids: dict[str, int | None] = {}
    try:
        def login_line() -> Any:
            assert up.running(), "rewind up exited early:\n" + up.output[-4000:]
            return re.search(r"Airflow UI\s+(http://\S+)\s+user (\S+), password (\S+)", up.output)

        ui = _wait("the Airflow URL and login printed by `rewind up`", login_line, timeout=420)
        url, user, password = ui.group(1).rstrip("/"), ui.group(2), ui.group(3)
        print(f"rewind up: Airflow at {url} after {time.monotonic() - t0:.0f}s", flush=True)

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.set_default_timeout(30_000)
            page = context.new_page()
            context.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
            try:
                log_in(page, url, user, password, shots)

                def stream_running() -> Any:
                    assert up.running(), "rewind up exited early:\n" + up.output[-4000:]
                    st = read_status(status_file)
                    return st if st and st.state == "running" and (st.last_batch_id or 0) >= 2 and st.lag_at else None

                st = _wait("the demo stream running at batch >= 2 with a lag (status file)", stream_running,
                           timeout=600)
                stream_pid = st.pid
                rewind, how = open_rewind_from_nav(page, url, shots)
                batch = see_stream_running(rewind, status_file, min_batch=st.last_batch_id, shots=shots)
                sid = take_savepoint(rewind, shots)
                assert sid in savepoints_in_s3(home), f"savepoint {sid} is listed on the page but not in S3"
                check_replay_form(rewind, shots)
                check_needs_login(browser, url, shots)
                print(f"ok: nav opened {how}; batch {batch}; savepoint {sid}; {time.monotonic() - t0:.0f}s", flush=True)
                # test_make_up's checks, on this `rewind up` (it skips when Chromium is here)
                pids = check_the_newcomers_promises(up, time.monotonic() + 420)
                print(f"ok: the newcomer's promises hold (streams {pids}); {time.monotonic() - t0:.0f}s", flush=True)
            except BaseException:
                for p in context.pages:
                    try:
                        shots.take(p, "failure")
                    except Exception:  # noqa: BLE001 - the screenshot is a bonus
                        pass
                raise
            finally:
                (shots.root / "console.log").write_text("\n".join(console) + "\n")
                context.close()
                browser.close()
        assert not _browser_processes(), f"browser processes left: {_browser_processes()}"
    finally:
        try:
            up.interrupt()
        finally:
            _keep_logs(home, up.output, shots.root)
    last = read_status(status_file)
    up.assert_stopped_cleanly([stream_pid, last.pid if last else None, *pids.values()])
    print(f"stopped cleanly; {time.monotonic() - t0:.0f}s in all; screenshots in {shots.root}", flush=True)
