"""Apps in sessions through the manager's proxy, as people use them: `gpuslice up`, real
containers, real JupyterLab, MLflow and TensorBoard, the CLI and the SDK.

One `gpuslice up` serves the whole module (starting it and the apps is the slow part); each
test makes the sessions it needs.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import InvalidStatus

from gpuslice.client import Client
from gpuslice.client.terminal import Terminal
from tests.browser import post_login
from tests.platform import app_image, origins
from tests.platform.conftest import GPUSLICE, Platform, run_up
from tests.waits import scaled, wait_for

# JupyterLab, MLflow and a browser: in the docker lane this module shares a process with the
# other one that starts them (tests/conftest.py SAME_PROCESS), never side by side
pytestmark = pytest.mark.docker

NOTEBOOK = "gpuslice/notebook:4.2.5"
MLFLOW = "gpuslice/mlflow:3.5.1"


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def plat(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("apps"))


def needs_image(tag: str) -> None:
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    if found.returncode:
        pytest.skip(f"{tag} is not built (scripts/build-images.sh builds it)")


@pytest.fixture(autouse=True)
def destroy_after(plat: Platform) -> Iterator[None]:
    """The node's CPU is small: each test's sessions go when it ends."""
    yield
    listed = json.loads(plat.ok("session", "list", "--json", "--all", "--all-pages"))
    names = [s["name"] for s in listed["items"]
             if s["status"] not in ("TERMINATED", "ERROR", "CANCELLED")]
    if names:
        plat.cli("session", "destroy", *names)


def get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, timeout=scaled(60), **kw)  # generous: CI machines can be busy


def post(url: str, **kw: Any) -> httpx.Response:
    return httpx.post(url, timeout=scaled(60), **kw)


def admin(plat: Platform) -> Client:
    return plat.client()


def ws_url(plat: Platform, path: str) -> str:
    return "ws" + plat.url.removeprefix("http") + path


def upgrade_status(url: str, headers: dict[str, str]) -> int:
    """The HTTP status a WebSocket upgrade gets (101 when it opens)."""
    try:
        with ws_client.connect(url, additional_headers=headers, open_timeout=60):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


class Output:
    """A terminal's output as it comes, read up to what a test waits for."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.text = b""
        self.mark = 0  # where the next wait starts looking

    def until(self, wanted: bytes | re.Pattern[bytes], timeout: float = 30.0) -> bytes:
        """The output from the last wait's match up to ``wanted`` (a pattern: the echo of a
        typed command does not match what only its output prints)."""
        pattern = wanted if isinstance(wanted, re.Pattern) else re.compile(re.escape(wanted))
        deadline = time.monotonic() + scaled(timeout)
        while (match := pattern.search(self.text, self.mark)) is None:
            assert time.monotonic() < deadline, f"no {wanted!r} in {self.text[-2000:]!r}"
            data = self.term.read(timeout=1.0)
            assert data is not None, f"the terminal ended: {self.text[-2000:]!r}"
            self.text += data
        seen, self.mark = self.text[self.mark:match.end()], match.end()
        return seen


# ------------------------------------------------------------------ JupyterLab


def test_jupyter_runs_code_through_the_proxy_with_a_browser_login(plat: Platform) -> None:
    needs_image(NOTEBOOK)
    sid = plat.session("nb", NOTEBOOK, "--cpu", "0.5", "--mem", "1g")
    url = plat.ok("app", "open", "nb", "jupyter", "--no-browser").strip()
    assert url == origins.url(plat, sid, "jupyter")  # its own origin
    _, cookie = plat.login("admin", plat.admin_password())
    browser = {"Cookie": f"gpuslice_app={origins.enter(plat, sid, 'jupyter', cookie)}",
               "Origin": url.rstrip("/")}
    lab = origins.request(plat, "GET", sid, "jupyter", "/lab", headers=browser)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    kernel = origins.request(plat, "POST", sid, "jupyter", "/api/kernels",
                             json={"name": "python3"}, headers=browser)
    assert kernel.status_code == 201, kernel.text
    channels = f"/api/kernels/{kernel.json()['id']}/channels"
    with origins.websocket(plat, sid, "jupyter", channels, browser) as ws:
        assert execute(ws, "1+1") == "2"
        big = execute(ws, "'x' * (5 * 1024 * 1024)")  # one 5 MiB output message
        assert len(big) == 5 * 1024 * 1024 + 2  # the repr's quotes


def execute(ws: ws_client.ClientConnection, code: str) -> str:
    """Run ``code`` on a kernel's channels; its result's text."""
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False},
    }))
    while True:
        message = json.loads(ws.recv(timeout=scaled(60)))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "execute_result":
            return str(message["content"]["data"]["text/plain"])
        if message["msg_type"] == "error":
            raise AssertionError(message["content"])


# ------------------------------------------------------------------ the terminal


def test_terminal_runs_a_shell_that_survives_a_reconnect(plat: Platform) -> None:
    needs_image(NOTEBOOK)
    sid = plat.session("shell", NOTEBOOK, "--gpu", "0.5", "--cpu", "0.5", "--mem", "1g")
    client = admin(plat)
    with client.terminal(sid, rows=30, cols=100) as term:
        out = Output(term)
        out.until(b"$ ")
        term.write("echo hel''lo; echo 你好$((40+2))\n".encode())
        out.until(b"hello")
        out.until("你好42".encode())  # only the shell's output: its input was 你好$((40+2))
        term.resize(40, 132)
        term.write(b"stty size; printf 'pid=%s.\\n' $$\n")
        seen = out.until(re.compile(rb"pid=(\d+)\."))
        assert b"40 132" in seen
        pid = re.findall(rb"pid=(\d+)\.", seen)[-1]
        term.write(b"nvidia-smi; python --version\n")
        seen = out.until(re.compile(rb"Python 3\.\d+"))
        assert b"2048 MiB" in seen and b"Simulated GPU" in seen and b"Mock GPU (8 GiB)" in seen
        first = term.id
    # the connection dropped: within the minute the same shell is there, its output replayed
    with client.terminal(sid, terminal=first) as again:
        assert again.resumed and again.id == first
        out = Output(again)
        replay = out.until(re.compile(rb"Python 3\.\d+"))
        assert b"pid=" + pid + b"." in replay
        again.write(b"printf 'pid=%s.\\n' $$; exit 7\n")
        out.until(b"pid=" + pid + b".\r\n")
        while again.read(timeout=5) is not None:
            pass
        assert again.exit_code == 7


def command_lines(plat: Platform, session: str) -> list[str]:
    """The command lines of the processes running in the session now."""
    listing = plat.cli("session", "exec", session, "--", "sh", "-c",
                       "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
    return [line.strip() for line in listing.stdout.splitlines()]


def test_session_shell_is_interactive_and_returns_the_exit_status(plat: Platform) -> None:
    needs_image(NOTEBOOK)
    plat.session("cli-shell", NOTEBOOK, "--cpu", "0.5", "--mem", "1g")
    main, child = pty.openpty()
    shell = subprocess.Popen([GPUSLICE, "session", "shell", "cli-shell"], stdin=child,
                             stdout=child, stderr=child, env=plat.env, start_new_session=True)
    os.close(child)
    try:
        expect(main, b"$ ")
        os.write(main, b"sleep 300\n")
        # Ctrl-C once the sleep runs (sent sooner, it would only clear the shell's line)
        wait_for(lambda: "sleep 300" in command_lines(plat, "cli-shell"), 60,
                 "the shell's sleep 300 running")
        os.write(main, b"\x03")  # Ctrl-C, in raw mode: the remote TTY interrupts the sleep
        os.write(main, b"echo status=$?\n")
        expect(main, b"status=130")
        os.write(main, b"exit 3\n")
        assert shell.wait(30) == 3
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(main)


def test_keys_typed_while_the_shell_connects_reach_the_shell(plat: Platform,
                                                              base_image: str) -> None:
    plat.session("typeahead", base_image, "--cpu", "0.5", "--mem", "256m")
    main, child = pty.openpty()
    shell = subprocess.Popen([GPUSLICE, "session", "shell", "typeahead"], stdin=child,
                             stdout=child, stderr=child, env=plat.env, start_new_session=True)
    os.close(child)
    try:
        # typed at once, as a person does after pressing Enter: long before the shell is there
        os.write(main, b"echo typed-$((40+2))-ahead\n")
        expect(main, b"typed-42-ahead")  # the shell's output, not the echo of the keys
        os.write(main, b"exit 5\n")
        assert shell.wait(scaled(30)) == 5
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(main)


def expect(fd: int, wanted: bytes, timeout: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + scaled(timeout)
    while wanted not in seen:
        assert time.monotonic() < deadline, f"no {wanted!r} in {seen[-1000:]!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            seen += os.read(fd, 65536)
    return seen


# ------------------------------------------------------------------ MLflow and TensorBoard

TENSORBOARD_RUN = """
import os
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(os.path.expanduser("~/runs/first-run"))
writer.flush()
writer.close()
"""


def test_mlflow_lists_a_run_logged_in_the_session_and_tensorboard_lists_runs(
    plat: Platform,
) -> None:
    needs_image(MLFLOW)
    sid = plat.session("track", MLFLOW, "--cpu", "0.5", "--mem", "1500m")
    client = admin(plat)
    trained = client.exec(sid, ["python3", "/opt/gpuslice/examples/mlflow/train_diabetes.py",
                                "0.1", "0.5"], timeout=600)  # exec's largest
    assert trained.exit_code == 0, trained.stderr
    run_id = trained.stdout.split("run ")[-1].split()[0]
    assert client.start_app(sid, "mlflow").url == origins.url(plat, sid, "mlflow")
    auth = {"Authorization": f"Bearer {client.token}"}
    experiments = origins.request(plat, "POST", sid, "mlflow",
                                  "/ajax-api/2.0/mlflow/experiments/search",
                                  json={"max_results": 10}, headers=auth)
    assert experiments.status_code == 200, experiments.text
    [diabetes] = [e for e in experiments.json()["experiments"] if e["name"] == "diabetes"]
    runs = origins.request(plat, "POST", sid, "mlflow", "/ajax-api/2.0/mlflow/runs/search",
                           json={"experiment_ids": [diabetes["experiment_id"]]}, headers=auth)
    assert runs.status_code == 200, runs.text
    [run] = [r for r in runs.json()["runs"] if r["info"]["run_id"] == run_id]
    assert {m["key"] for m in run["data"]["metrics"]} >= {"rmse", "mae", "r2"}
    ui = origins.request(plat, "GET", sid, "mlflow", "/", headers=auth)
    assert ui.status_code == 200 and "MLflow" in ui.text  # at its origin's root

    assert client.exec(sid, ["python3", "-c", TENSORBOARD_RUN]).exit_code == 0
    assert client.start_app(sid, "tensorboard").url == origins.url(plat, sid, "tensorboard")
    listed = origins.request(plat, "GET", sid, "tensorboard", "/data/runs", headers=auth)
    assert listed.status_code == 200 and listed.json() == ["first-run"], listed.text


# ------------------------------------------------------------------ who reaches an app


def test_only_the_owner_reaches_an_app_over_http_and_websocket(
    plat: Platform, apps_image: str
) -> None:
    sid = plat.session("mine", apps_image, "--cpu", "0.1", "--mem", "128m")
    term_ws = ws_url(plat, f"/api/v1/sessions/{sid}/terminal")
    token, cookie = plat.login("admin", plat.admin_password())
    owner = {"Authorization": f"Bearer {token}"}

    def get_app(headers: dict[str, str] | None = None, who: str = sid) -> httpx.Response:
        return origins.request(plat, "GET", who, "echo", "/small", headers=headers)

    def upgrade_app(headers: dict[str, str]) -> int:
        try:
            with origins.websocket(plat, sid, "echo", "/ws", headers):
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    assert get_app(owner).text == "ok"
    assert get_app().status_code == 401  # anonymous
    # a browser not yet in: to the manager's origin, which hands the login over
    assert get_app({"Accept": "text/html"}).headers["location"] == \
        f"http://localhost:{plat.port}/s/{sid}/echo/small"
    assert get(f"{plat.url}/s/{sid}/echo/small", headers={"Accept": "text/html"}).headers[
        "location"].startswith(f"/login?next=/s/{sid}/echo/small")
    assert upgrade_app({}) == 401
    assert upgrade_status(term_ws, {}) == 401
    # the manager's login cookie is no key to an app's origin
    assert get_app({"Cookie": f"gpuslice_login={cookie}"}).status_code == 401

    plat.ok("admin", "user", "create", "bob", "--password", "bob-password")
    bob, _ = plat.login("bob", "bob-password")
    other = {"Authorization": f"Bearer {bob}"}
    assert get_app(other).status_code == 404  # as if it did not exist
    assert upgrade_app(other) == 404
    assert upgrade_status(term_ws, other) == 404

    expired, _ = plat.login("bob", "bob-password")
    expire_login(plat, expired)
    gone = {"Authorization": f"Bearer {expired}"}
    assert get_app(gone).status_code == 401
    assert upgrade_status(term_ws, gone) == 401

    app_cookie = {"Cookie": f"gpuslice_app={origins.enter(plat, sid, 'echo', cookie)}"}
    foreign = app_cookie | {"Origin": "http://evil.example"}
    assert origins.request(plat, "POST", sid, "echo", "/echo", content=b"hi",
                           headers=foreign).status_code == 403
    assert upgrade_app(foreign) == 403
    assert upgrade_status(term_ws, {"Cookie": f"gpuslice_login={cookie}",
                                    "Origin": "http://evil.example"}) == 403
    same = app_cookie | {"Origin": f"http://{origins.host(plat, sid, 'echo')}"}
    assert origins.request(plat, "POST", sid, "echo", "/echo", content=b"hi",
                           headers=same).text == "hi"
    assert upgrade_status(term_ws, {"Cookie": f"gpuslice_login={cookie}",
                                    "Origin": plat.url}) == 101
    # the app origin's cookie opens neither the manager's API nor bob's nor another app
    assert get(f"{plat.url}/api/v1/sessions", headers=app_cookie).status_code == 401
    assert origins.request(plat, "GET", sid, "8000", "/", headers=same).status_code == 401

    # a session of bob's: the admin sees it, but may not open its apps (apps.admin_access)
    bobs = Client(plat.url, bob).create_sessions(image=apps_image, cpu="0.1", mem="128m")[0]
    Client(plat.url, bob).wait(bobs.id, {"RUNNING"}, timeout=scaled(120))
    refused = get_app(owner, bobs.id)
    assert refused.status_code == 403 and "apps.admin_access" in refused.json()["message"]
    assert get_app(app_cookie, bobs.id).status_code == 401


def expire_login(plat: Platform, token: str) -> None:
    """Make a login token expired, as time would."""
    import hashlib
    import sqlite3

    with sqlite3.connect(plat.data_dir / "gpuslice.db") as db:
        db.execute("UPDATE api_tokens SET expires_at = '2001-01-01 00:00:00.000000' "
                   "WHERE token_hash = ?", (hashlib.sha256(token.encode()).hexdigest(),))


def test_the_app_never_sees_our_cookie_or_authorization(plat: Platform, apps_image: str) -> None:
    sid = plat.session("echo", apps_image, "--cpu", "0.1", "--mem", "128m")
    token, cookie = plat.login("admin", plat.admin_password())
    app_cookie = origins.enter(plat, sid, "echo", cookie)

    def at(method: str, path: str, headers: dict[str, str], **kw: Any) -> httpx.Response:
        return origins.request(plat, method, sid, "echo", path, headers=headers, **kw)

    for how in ({"Authorization": f"Bearer {token}", "Cookie": "theirs=1"},
                {"Cookie": f"theirs=1; gpuslice_app={app_cookie}; gpuslice_login={cookie}"}):
        seen = dict(at("GET", "/headers", how).json())
        assert "Authorization" not in seen and token not in json.dumps(seen)
        assert seen["Cookie"] == "theirs=1" and cookie not in json.dumps(seen)
        assert app_cookie not in json.dumps(seen)
        assert seen["Host"] == f"localhost:{app_image.ECHO_PORT}"
        assert "X-Forwarded-Prefix" not in seen

    browser = {"Cookie": f"gpuslice_app={app_cookie}"}
    redirect = at("GET", "/cookie", browser)
    assert redirect.status_code == 302 and redirect.headers["location"] == "/small"
    [set_cookie] = redirect.headers.get_list("set-cookie")  # the app's "gpuslice_login": gone
    assert set_cookie == "app_session=abc; Path=/"  # host-only: this origin alone

    body = os.urandom(3 * 1024 * 1024)
    origin = {"Origin": f"http://{origins.host(plat, sid, 'echo')}"}
    assert at("POST", "/echo", browser | origin, content=body).content == body
    download = at("GET", f"/bytes?n={20 * 1024 * 1024}", browser)
    assert len(download.content) == 20 * 1024 * 1024


def test_apps_start_on_first_open_with_a_visible_state(plat: Platform, apps_image: str) -> None:
    plat.session("states", apps_image, "--cpu", "0.1", "--mem", "128m")
    listed = {a["name"]: a for a in json.loads(plat.ok("app", "list", "states", "--json"))}
    assert listed["terminal"]["state"] == "ready"
    assert {listed[n]["state"] for n in ("echo", "slow", "broken")} == {"stopped"}

    started = time.monotonic()
    plat.ok("app", "open", "states", "slow", "--no-browser")  # not a failure before its timeout
    assert time.monotonic() - started >= 4

    broken = plat.cli("app", "open", "states", "broken", "--no-browser")
    assert broken.returncode != 0
    assert "broken failed to start (exit code 3)" in broken.stderr
    assert "oops: no config here" in broken.stderr and "reading the config" in broken.stderr
    listed = {a["name"]: a for a in json.loads(plat.ok("app", "list", "states", "--json"))}
    assert (listed["slow"]["state"], listed["broken"]["state"]) == ("ready", "failed")
    assert listed["broken"]["exit_code"] == 3 and "oops" in listed["broken"]["logs"]

    listed = plat.ok("app", "list", "states")
    assert "failed" in listed and "ready" in listed


def test_no_app_port_is_published_on_the_node(plat: Platform, apps_image: str) -> None:
    sid = plat.session("ports", apps_image, "--cpu", "0.1", "--mem", "128m")
    admin(plat).start_app(sid, "echo")
    app_ports = {app_image.ECHO_PORT, 8888, 5000, 6006}
    listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    for line in listening:
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        if int(port) in app_ports:
            assert address in ("127.0.0.1", "[::1]"), f"an app port is published: {line}"
    container = subprocess.run(["docker", "inspect", f"gpuslice-{sid}"], capture_output=True,
                               text=True, check=True).stdout
    assert not json.loads(container)[0]["HostConfig"].get("PortBindings")


def test_apps_asked_for_at_creation_start_with_the_session(plat: Platform,
                                                           apps_image: str) -> None:
    plat.session("eager", apps_image, "--cpu", "0.1", "--mem", "128m", "--app", "echo")
    deadline = time.monotonic() + scaled(60)
    while True:
        listed = {a["name"]: a for a in json.loads(plat.ok("app", "list", "eager", "--json"))}
        if listed["echo"]["state"] == "ready":
            break
        assert time.monotonic() < deadline, listed["echo"]
        time.sleep(0.5)
    unknown = plat.cli("session", "create", "--image", apps_image, "--app", "nope")
    assert unknown.returncode == 2 and "it can start: echo, slow, broken" in unknown.stderr


# ------------------------------------------------------------------ in a real browser

BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")


def test_a_browser_logs_in_and_uses_the_terminal_and_jupyterlab(plat: Platform) -> None:
    needs_image(NOTEBOOK)
    executable = next((b for b in BROWSERS if os.path.exists(b)), None)
    sync_api = pytest.importorskip("playwright.sync_api")
    if executable is None:
        pytest.skip("no Chromium (tools/host-setup.sh --browser installs it)")
    sid = plat.session("web", NOTEBOOK, "--gpu", "0.5", "--cpu", "0.5", "--mem", "1g")
    with sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page()
        # What the page saw, for a failure's message: its console, its WebSockets.
        page.on("console", lambda m: TRACE.append(f"console {m.type}: {m.text}"))
        page.on("websocket", _trace_socket)
        page.goto(f"{plat.url}/s/{sid}/terminal/")
        assert "/login?next=" in page.url  # not logged in yet
        post_login(page, "admin", plat.admin_password())
        page.wait_for_url(f"**/s/{sid}/terminal/")
        shown(page, "#status", "connected")
        page.keyboard.type("echo hello$((40+2)); nvidia-smi\n")
        shown(page, ".xterm-rows", "hello42")
        shown(page, ".xterm-rows", "2048 MiB")
        page.reload()
        shown(page, "#status", "reconnected to the same shell")

        page.goto(f"{plat.url}/s/{sid}/jupyter/lab")  # started on first open
        page.wait_for_selector(".jp-LauncherCard[data-category='Notebook']", timeout=120_000)
        assert page.url.startswith(origins.url(plat, sid, "jupyter")), page.url
        page.click(".jp-LauncherCard[data-category='Notebook']")
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
        shown(page, "#jp-main-statusbar", "Idle", 60)  # the kernel is up
        page.click(".jp-Notebook .jp-Cell .cm-content")
        page.keyboard.type("6 * 7")
        page.keyboard.press("Shift+Enter")
        shown(page, ".jp-OutputArea-output", "42", 60)
        browser.close()


TRACE: list[str] = []


def _trace_socket(ws: Any) -> None:
    TRACE.append(f"websocket {ws.url}")
    ws.on("close", lambda _: TRACE.append(f"websocket closed {ws.url}"))
    ws.on("socketerror", lambda error: TRACE.append(f"websocket error {error}"))


def shown(page: Any, selector: str, text: str, timeout: float = 30.0) -> None:
    """Wait until ``text`` shows in ``selector`` (polled from here: the pages' CSP forbids the
    browser-side evaluation wait_for_function uses)."""
    deadline = time.monotonic() + scaled(timeout)
    seen = "(not on the page)"
    while True:
        try:
            seen = page.inner_text(selector, timeout=scaled(1000))
            if text in seen:
                return
        except Exception:  # not on the page yet
            pass
        assert time.monotonic() < deadline, (
            f"no {text!r} in {selector}; it shows {seen[-500:]!r}; the page saw "
            + ("; ".join(TRACE[-20:]) or "no console message and no WebSocket"))
        time.sleep(0.3)
