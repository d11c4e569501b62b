"""`gpuslice login URL --sso --device`: a code to approve in any browser signed in to the
manager (its /device page), for a machine without one (over SSH)."""

from __future__ import annotations

import getpass
import socket
import time

from gpuslice.cli.output import CliError, console
from gpuslice.client import Client, ClientConfig, save_config
from gpuslice.client.errors import ApiError


def device_login(url: str) -> None:
    """Ask for a code, print it, poll until it is approved, denied or expired; keep the token."""
    with Client(url) as client:
        code = client.device_start(socket.gethostname(), getpass.getuser())
        minutes = code.expires_in // 60
        console.print(f"open {code.verification_uri} and enter {code.user_code} (valid "
                      f"{minutes} min)\nor open {code.verification_uri_complete}", markup=False)
        interval = code.interval
        deadline = time.monotonic() + code.expires_in
        while True:
            time.sleep(interval)
            try:
                token = client.device_token(code.device_code)
                break
            except ApiError as err:
                if err.code == "authorization_pending" and time.monotonic() < deadline:
                    continue
                if err.code == "slow_down":
                    interval += 5
                    continue
                if err.code == "access_denied":
                    raise CliError("the sign-in was denied in the browser", 1) from None
                if err.code in ("expired_token", "authorization_pending"):
                    raise CliError("the code expired; run gpuslice login again", 1) from None
                raise
        client.token = token.access_token
        me = client.me()
    path = save_config(ClientConfig(url=url.rstrip("/"), token=token.access_token))
    console.print(f"logged in to {url} as {me.username} ({me.role.value}) until "
                  f"{token.expires_at[:16].replace('T', ' ')} UTC; token in {path}",
                  markup=False)
