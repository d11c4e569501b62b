"""`--time` and `--begin` through the CLI against a real manager: what it sends, what `session
list` and `session show` then say."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from .conftest import IMAGE, Manager


def test_a_time_limit_and_a_start_are_sent_and_shown(manager: Manager) -> None:
    done = manager.cli("session", "create", "--image", IMAGE, "--cpu", "0.25", "--mem", "64m",
                       "--name", "later", "--time", "1:30:00", "--begin", "+2h", "--json")
    assert done.returncode == 0, done.stderr
    [made] = json.loads(done.stdout)
    assert made["time_limit"] == 5400 and made["env"]["GPUSLICE_TIME_LIMIT"] == "5400"
    begin = datetime.fromisoformat(made["begin_at"])
    assert timedelta(hours=1, minutes=59) < begin - datetime.now().astimezone() <= timedelta(
        hours=2)
    local = begin.astimezone()

    listing = manager.cli("session", "list").stdout
    line = next(row for row in listing.splitlines() if "later" in row)
    assert f"starts {local:%H:%M}" in line or f"starts {local:%Y-%m-%d %H:%M}" in line, listing
    shown = manager.cli("session", "show", "later").stdout
    assert "time limit  1h30m" in shown, shown
    assert f"begins      {local:%Y-%m-%d %H:%M}" in shown, shown
