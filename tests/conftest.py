"""Shared fixtures: a fresh database per test (SQLite file, or GPUSLICE_TEST_PG PostgreSQL).

``database_url`` is empty; ``migrated_database_url`` is at the schema's head, copied from a
template migrated once per test process (a file copy on SQLite, ``CREATE DATABASE … TEMPLATE``
on PostgreSQL) instead of running every migration again for each test."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

PG_URL = os.environ.get("GPUSLICE_TEST_PG")
# Each test's wall and CPU time, where GPUSLICE_TEST_TIMES names a folder (tools/test-times.py).
# The identity providers' fixtures (tests/idp/fixtures.py): oidc_provider, ldap_directory.
pytest_plugins = ["tests.timings", "tests.idp.fixtures"]
# A hung test fails at pytest-timeout's limit (pyproject.toml) instead of holding CI until it
# is killed. A minute before that, every task of the test's event loop prints its stack: an
# idle loop's thread stack says nothing about which wait never ended.
TASKS_REPORT_S = 540


# Ctrl-C as a terminal gives it. A process started with SIGINT ignored (a background job of a
# non-interactive shell, as a CI runner may start `.ci/run`; bash cannot undo that) passes the
# ignore on through exec to every child: the CLI that a test presses Ctrl-C on would never see
# it (`logs -f`, `run`'s question, `--wait` hung until their bounds). Python's own handler here
# is reset to the default at each exec, so children start as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _print_tasks(signum: int, frame: object) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        print("hung test: no event loop is running", file=sys.stderr)
        return
    tasks = asyncio.all_tasks(loop)
    print(f"hung test: {len(tasks)} tasks", file=sys.stderr)
    for task in tasks:
        task.print_stack(file=sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    signal.signal(signal.SIGUSR1, _print_tasks)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(TASKS_REPORT_S, signal.pthread_kill, (main, signal.SIGUSR1))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# Test files that share one process under `--dist loadfile` (tools/test-passes.sh's docker
# lane), so they never run side by side: JupyterLab, MLflow and a browser are the heaviest
# starts of the suite, and two at once on a 2-core machine outlast their start timeouts.
SAME_PROCESS = {"tests/platform/test_console.py": "tests/platform/test_apps.py",
                "tests/platform/test_console_guide.py": "tests/platform/test_apps.py"}


# Test files whose tests share nothing but a file: each test goes to whichever process is free.
# The benchmarks' short runs, each a process of its own, took ~5 min one after another in one
# test process while the others had finished.
EACH_TEST_ALONE = {"tests/bench/test_bench.py"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadfile``, xdist's file scheduling with SAME_PROCESS's files joined
    (``--dist loadgroup`` would do it, but it renames nodeids in a way pytest 9.2 ignores)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            if path in EACH_TEST_ALONE:
                return nodeid
            return SAME_PROCESS.get(path, path)

    return SharedFiles(config, log)  # type: ignore[arg-type]


def _goto_again_on_network_changes() -> None:
    """Page.goto tried again (up to 3 times) when Chromium aborted it for a change of the
    machine's network interfaces (tests/browser.py says why); any other error as it was."""
    try:
        from playwright.async_api import Page as AsyncPage
        from playwright.sync_api import Page as SyncPage
    except ImportError:  # no browser tests here
        return
    from tests.browser import TRIES, network_changed

    sync_goto, async_goto = SyncPage.goto, AsyncPage.goto

    def goto(self: SyncPage, url: str, **kwargs: object) -> object:
        for attempt in range(TRIES):
            try:
                return sync_goto(self, url, **kwargs)  # type: ignore[arg-type]
            except Exception as err:
                if not network_changed(err) or attempt == TRIES - 1:
                    raise
        return None  # pragma: no cover - the loop returns or raises

    async def agoto(self: AsyncPage, url: str, **kwargs: object) -> object:
        for attempt in range(TRIES):
            try:
                return await async_goto(self, url, **kwargs)  # type: ignore[arg-type]
            except Exception as err:
                if not network_changed(err) or attempt == TRIES - 1:
                    raise
        return None  # pragma: no cover

    SyncPage.goto = goto  # type: ignore[assignment,method-assign]
    AsyncPage.goto = agoto  # type: ignore[assignment,method-assign]


_goto_again_on_network_changes()


def pg_url() -> str | None:
    """GPUSLICE_TEST_PG with the asyncpg driver (``postgresql://…`` is accepted too)."""
    if not PG_URL:
        return None
    url = make_url(PG_URL)
    return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


@asynccontextmanager
async def new_database(tmp_path: Path, name: str = "test") -> AsyncIterator[str]:
    """A new, empty database: an SQLite file in ``tmp_path``, or a database of its own on the
    server `GPUSLICE_TEST_PG` names (dropped afterwards)."""
    server = pg_url()
    if server is None:
        yield f"sqlite+aiosqlite:///{tmp_path / f'{name}.db'}"
        return
    async with new_pg_database(server) as url:
        yield url


@asynccontextmanager
async def new_pg_database(server: str) -> AsyncIterator[str]:
    """A database of its own on the PostgreSQL ``server`` (a URL), dropped afterwards."""
    url = await create_pg_database(server, f"gpuslice_test_{uuid.uuid4().hex[:16]}")
    try:
        yield url
    finally:
        await drop_pg_database(server, url)


async def create_pg_database(server: str, name: str) -> str:
    """Create database ``name`` on ``server``; its URL."""
    await _admin(server, f'CREATE DATABASE "{name}"')
    return make_url(server).set(database=name).render_as_string(hide_password=False)


async def drop_pg_database(server: str, url: str) -> None:
    await _admin(server, f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


async def _admin(server: str, statement: str) -> None:
    engine = create_async_engine(server, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture
async def database_url(tmp_path: Path) -> AsyncIterator[str]:
    """A new, empty database for this test only."""
    async with new_database(tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def _schema_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database at the schema's head, migrated once for this test process: the model that
    ``migrated_database_url`` copies (nothing connects to it afterwards, as PostgreSQL's
    ``TEMPLATE`` requires)."""
    server = pg_url()
    if server is None:
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('schema') / 'template.db'}"
    else:
        url = asyncio.run(create_pg_database(server, f"gpuslice_tpl_{uuid.uuid4().hex[:16]}"))
    try:
        asyncio.run(_migrate(url))
        yield url
    finally:
        if server is not None:
            asyncio.run(drop_pg_database(server, url))


async def _migrate(url: str) -> None:
    from gpuslice.manager.db import migrate
    from gpuslice.manager.db.engine import make_engine

    engine = make_engine(url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def migrated_database_url(tmp_path: Path, _schema_template: str) -> AsyncIterator[str]:
    """A new database at the schema's head (no rows: the manager makes its admin at start),
    for this test only."""
    server = pg_url()
    if server is None:
        copy = tmp_path / "test.db"
        shutil.copyfile(make_url(_schema_template).database or "", copy)
        yield f"sqlite+aiosqlite:///{copy}"
        return
    name = f"gpuslice_test_{uuid.uuid4().hex[:16]}"
    template = make_url(_schema_template).database
    await _admin(server, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        await drop_pg_database(server, url)


FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Iterator[None]:
    """A failed test shows what its browser showed: a screenshot of every page still open
    (the path in the report); ``FAILED`` in the item's stash for fixtures whose teardown does
    the same for Playwright's async API (tests/manager/conftest.py ``browser``)."""
    report = yield
    if report.failed:  # type: ignore[attr-defined]
        item.stash[FAILED] = True
        browser = _sync_browser(item)
        if browser is not None:
            shots = screenshots(browser, item.name)
            if shots:
                report.sections.append(  # type: ignore[attr-defined]
                    ("the browser's pages when it failed", "\n".join(shots)))
    return report  # type: ignore[return-value]


def screenshots(browser: object, name: str) -> list[str]:
    """A PNG of each page open in ``browser`` (Playwright's sync API), in the artifacts
    folder: their paths, or why one could not be taken."""
    from tests.browser import ARTIFACTS

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    said = []
    pages = [p for c in browser.contexts for p in c.pages]  # type: ignore[attr-defined]
    for number, page in enumerate(pages):
        path = ARTIFACTS / f"failed-{name}-{number}.png"[:200]
        try:
            page.screenshot(path=str(path))
            said.append(f"{page.url}: {path}")
        except Exception as err:  # a page that is closing: say so, keep the report
            said.append(f"{page.url}: no screenshot ({err})")
    return said


def _sync_browser(item: pytest.Item) -> Any:
    """The test's ``browser`` fixture when it is a Chromium of Playwright's sync API, else
    None (the manager's tests drive the async API: their fixture does its own)."""
    browser = getattr(item, "funcargs", {}).get("browser")
    return browser if browser is not None and "sync_api" in type(browser).__module__ else None


@pytest.fixture(autouse=True)
def _close_browser_contexts(request: pytest.FixtureRequest) -> Iterator[None]:
    """The pages a test opened in a module's Chromium (Playwright's sync API) are closed after
    it: a console page left open goes on polling and streaming from its platform for the rest
    of the module, on a machine the suite keeps busy."""
    yield
    browser = _sync_browser(request.node)
    if browser is None:
        return
    for context in list(browser.contexts):
        try:
            context.close()
        except Exception:  # the browser itself is closing: nothing left to close
            pass


@pytest.fixture(scope="session")
def sqlite_at_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite database file at the schema's head (no rows but what migrations add), made
    once per test process, whatever database the process's own tests use."""
    path = tmp_path_factory.mktemp("head") / "gpuslice.db"
    asyncio.run(_migrate(f"sqlite+aiosqlite:///{path}"))
    return path


def seed_database(data_dir: Path, template: Path) -> None:
    """Put ``template`` (``sqlite_at_head``) where a manager starting on ``data_dir`` looks for
    its database: it starts as on a new data directory, less running every migration again
    (~0.6 s of a core, for each of the many managers the tests start)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(template, data_dir / "gpuslice.db")
