"""Sending one event to one channel: a signed JSON webhook, a Slack-compatible webhook, or an
e-mail through the site's SMTP server. Network only, no database: ``delivery.py`` records the
``Outcome``.

Webhooks follow Standard Webhooks 1.0: headers ``webhook-id`` (the outbox id, the same on each
retry), ``webhook-timestamp`` (Unix seconds) and ``webhook-signature: v1,<base64 HMAC-SHA256
(key, "<id>.<timestamp>.<body>")>``, the key being the base64 after ``whsec_`` in the secret.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
import smtplib
import ssl
import time
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.utils import make_msgid, parseaddr
from typing import Any

import httpx

from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.notify import text
from gpuslice.manager.services.notify.guard import resolve
from gpuslice.manager.settings import NotifySettings

MAX_ANSWER = 1024  # bytes of a receiver's answer read (its status is what counts)
RETRY_STATUSES = frozenset({408, 425, 429})
MAX_RETRY_AFTER = 3600.0


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status: str  # "HTTP 200", "250 OK", "" when nothing answered
    error: str = ""
    retry: bool = False  # worth another try later
    retry_after: float | None = None  # the receiver's Retry-After, seconds
    gone: bool = False  # 410: the receiver says the channel is no more
    code: str = ""  # e.g. "private_target"


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


async def send(kind: str, target: str, secret: str | None, delivery_id: str,
               event: dict[str, Any], settings: NotifySettings) -> Outcome:
    """Send ``event`` over a channel; never raises for the receiver's or network's faults."""
    if kind == "email":
        return await asyncio.to_thread(_mail, settings, target, delivery_id, event)
    if kind == "slack":
        body = json.dumps({"text": text.slack(event)}).encode()
        headers = {"content-type": "application/json"}
    else:
        body = json.dumps(event, separators=(",", ":")).encode()
        stamp = int(time.time())
        headers = {"content-type": "application/json", "webhook-id": delivery_id,
                   "webhook-timestamp": str(stamp),
                   "webhook-signature": sign(secret or "", delivery_id, stamp, body)}
    return await _post(target, body, headers, settings)


async def _post(url: str, body: bytes, headers: dict[str, str],
                settings: NotifySettings) -> Outcome:
    try:
        target = await resolve(url, settings.allowed_targets)
    except InvalidRequest as exc:
        return Outcome(False, "", exc.message, code=exc.code)
    headers = {**headers, "host": target.host_header, "user-agent": "gpuslice-notify"}
    extensions = {"sni_hostname": target.host} if target.url.startswith("https") else {}
    try:
        # A fresh client per request: the connection goes to the address just checked.
        async with httpx.AsyncClient(follow_redirects=False, timeout=settings.timeout,
                                     trust_env=False) as client:
            request = client.build_request("POST", target.url, content=body, headers=headers,
                                           extensions=extensions)
            response = await client.send(request, stream=True)
            try:
                async for _ in response.aiter_bytes(MAX_ANSWER):
                    break  # the answer's first bytes are enough; the rest is not read
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        return Outcome(False, "", f"{type(exc).__name__}: {exc}"[:1024], retry=True)
    return _judged(response)


def _judged(response: httpx.Response) -> Outcome:
    code = response.status_code
    status = f"HTTP {code}"
    if 200 <= code < 300:
        return Outcome(True, status)
    if code == 410:
        return Outcome(False, status, "the receiver answered 410 Gone", gone=True)
    if code in RETRY_STATUSES or code >= 500:
        return Outcome(False, status, f"the receiver answered {code}", retry=True,
                       retry_after=_retry_after(response.headers.get("retry-after")))
    if 300 <= code < 400:
        return Outcome(False, status, f"the receiver answered {code} (redirects are not "
                       "followed: give the final URL)")
    return Outcome(False, status, f"the receiver answered {code}")


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the schedule's delay instead
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _mail(settings: NotifySettings, to: str, delivery_id: str,
          event: dict[str, Any]) -> Outcome:
    if not settings.smtp_host:
        return Outcome(False, "", "no SMTP server is set (notify.smtp_host)")
    message = EmailMessage()  # policy=SMTP via as_bytes below; CR/LF in a header raises
    message["From"] = settings.smtp_from
    message["To"] = to
    message["Subject"] = text.subject(event)
    message["Auto-Submitted"] = "auto-generated"
    message["Message-ID"] = make_msgid(idstring=delivery_id.replace("-", ""))
    message.set_content(text.body(event))
    try:
        return _smtp_exchange(settings, to, message)
    except (smtplib.SMTPException, OSError, ValueError) as exc:
        permanent = isinstance(exc, smtplib.SMTPRecipientsRefused) or (
            isinstance(exc, smtplib.SMTPResponseException) and 500 <= exc.smtp_code)
        status = (f"{exc.smtp_code} {exc.smtp_error!r}"
                  if isinstance(exc, smtplib.SMTPResponseException) else "")
        return Outcome(False, status[:200], f"{type(exc).__name__}: {exc}"[:1024],
                       retry=not permanent)


def _smtp_exchange(settings: NotifySettings, to: str, message: EmailMessage) -> Outcome:
    host = settings.smtp_host or ""
    with smtplib.SMTP(host, settings.smtp_port, timeout=settings.smtp_timeout) as smtp:
        smtp.ehlo()
        if settings.smtp_starttls:
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
        elif not _loopback(host):
            return Outcome(False, "", "notify.smtp_starttls is off and the SMTP server is not "
                           "on this host: the password and mails would cross the network "
                           "in clear")
        if settings.smtp_username:
            password = settings.smtp_password.get_secret_value() if settings.smtp_password \
                else ""
            smtp.login(settings.smtp_username, password)
        data = message.as_bytes(policy=policy.SMTP)
        smtp.mail(_address(settings.smtp_from))
        code, reply = smtp.rcpt(to)
        if code not in (250, 251):
            raise smtplib.SMTPRecipientsRefused({to: (code, reply)})
        code, reply = smtp.data(data)
        status = f"{code} {reply.decode(errors='replace')}"[:200]
        if code != 250:
            raise smtplib.SMTPDataError(code, reply)
        return Outcome(True, status)


def _address(value: str) -> str:
    return parseaddr(value)[1] or value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
