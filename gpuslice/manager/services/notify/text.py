"""What people read: e-mail subjects and bodies, Slack lines. Session names are the user's
text: Slack's control characters are escaped (a session named ``<!channel>`` pings nobody)
and line breaks never reach a mail header."""

from __future__ import annotations

from typing import Any

from gpuslice.common.durations import format_duration

_WHAT = {
    "session.started": "started",
    "session.finished": "finished",
    "session.failed": "failed",
    "session.preempted": "was preempted",
    "session.cancelled": "was cancelled",
    "session.time_limit_warning": "is near its time limit",
    "session.idle_warning": "will be reclaimed soon",
    "session.pending_long": "is still waiting",
    "notify.test": "test notification",
    "notify.channel_disabled": "a notification channel was disabled",
}
_ICON = {"session.finished": ":white_check_mark:", "session.failed": ":x:",
         "session.started": ":rocket:", "session.preempted": ":warning:",
         "session.cancelled": ":no_entry:", "session.time_limit_warning": ":hourglass:",
         "session.idle_warning": ":zzz:",
         "session.pending_long": ":hourglass_flowing_sand:"}


def headline(event: dict[str, Any]) -> str:
    """``train-42 finished after 2h 13m``: one line, no control characters."""
    kind = event["type"]
    session = event.get("session")
    if session is None:
        return _WHAT.get(kind, kind) + (f": {event['data']['message']}"
                                        if event.get("data", {}).get("message") else "")
    line = f"{session['name']} {_WHAT.get(kind, kind)}"
    data = event.get("data", {})
    if kind in ("session.finished", "session.failed") and data.get("runtime_s") is not None:
        line += f" after {format_duration(int(data['runtime_s']))}"
    if kind == "session.started" and data.get("waited_s") is not None:
        line += f" after waiting {format_duration(int(data['waited_s']))}"
    if kind == "session.pending_long" and data.get("position") is not None:
        line += f" (position {data['position']})"
    return one_line(line)


def subject(event: dict[str, Any]) -> str:
    return one_line(f"[gpuslice] {headline(event)}")[:200]


def body(event: dict[str, Any]) -> str:
    lines = [headline(event), ""]
    session = event.get("session")
    if session:
        lines += [f"Session: {one_line(session['name'])} ({session['id']})",
                  f"Owner: {session.get('owner') or '-'}",
                  f"Project: {session.get('project') or '-'}",
                  f"Status: {session['status']}: {one_line(session.get('reason') or '')}"]
        for key, value in event.get("data", {}).items():
            lines.append(f"{key}: {one_line(str(value))}")
        if session.get("url"):
            lines += ["", f"Open it: {session['url']}"]
    elif event.get("data", {}).get("message"):
        lines.append(one_line(event["data"]["message"]))
    lines += ["", "-- ", "gpuslice notifications: `gpuslice notify list` shows your channels."]
    return "\n".join(lines) + "\n"


def slack(event: dict[str, Any]) -> str:
    session = event.get("session")
    line = escape(headline(event))
    if session:
        name = escape(one_line(session["name"]))
        line = f"{_ICON.get(event['type'], ':bell:')} *{name}*" + escape(
            headline(event)[len(one_line(session["name"])):])
        if session.get("project"):
            line += f" · project {escape(session['project'])}"
        if event.get("data", {}).get("reason"):
            line += f" · {escape(one_line(str(event['data']['reason'])))}"
        if session.get("url"):
            line += f" · <{session['url']}|open>"
    return line


def escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def one_line(value: str) -> str:
    """Control characters (CR, LF, ...) as spaces: a header or a line stays one line."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in value)
