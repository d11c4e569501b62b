"""The messages of a stream link between the manager and an agent (see ``StreamAsk``).

A link is a WebSocket the agent dials back to the manager; it carries one stream at a time.
JSON text frames are control messages (these models, told apart by ``op``); binary frames are
the stream's bytes: an HTTP body, terminal input and output. Once a WebSocket stream is open,
every frame is the app's own message, passed on as it came (text as text, binary as binary),
and the link ends with the stream.

    manager → agent                        agent → manager
    OpenHttp, [body frames, End]           HttpHead, body frames, End
    OpenWebSocket, messages                WebSocketOpened, messages
    OpenTerminal, input frames, Resize     TerminalAttached, output frames, TerminalExit
    OpenTcp, bytes, [End]                  TcpOpened, bytes, [End]
    OpenSsh, client bytes                  SshOpened, server bytes (an ``sshd -i``'s stdio)
                                           Failed (in place of the first answer)

A TCP stream (port forwarding) carries a connection to a port of the session's container: binary
frames are its bytes, :class:`End` is one side's half-close; the link ends once both sides
ended, or either closes it.

An HTTP link goes back to the manager's pool after a complete exchange; the others close
with their stream. The same messages (``op``) speak terminal to browsers and the CLI.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gpuslice.common.schemas.agents import AppLaunch, AppStatus

Header = tuple[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=65536)]]
TERMINAL_ID = r"^[A-Za-z0-9_-]{8,64}$"
#: Headers of one connection, not of the exchange (RFC 9110 7.6.1), and the WebSocket
#: handshake's: never passed from one hop to the next.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "sec-websocket-key",
    "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-accept",
    "sec-websocket-protocol",
})


def without_hop_by_hop(headers: list[Header]) -> list[Header]:
    """``headers`` less the hop-by-hop ones, and less those the ``Connection`` header names."""
    named = {
        token.strip().lower() for name, value in headers if name.lower() == "connection"
        for token in value.split(",")
    }
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and k.lower() not in named]


class OpenHttp(BaseModel):
    """One HTTP request for an app; its body (when ``body``) follows as binary frames, then
    :class:`End`. The answer: :class:`HttpHead`, the body as binary frames, :class:`End`; or,
    when its Content-Length is at most ``whole``, all in one binary message (the
    :class:`HttpHead` JSON, a newline, the body): one frame instead of three for a small
    answer. An agent that does not know ``whole`` streams every answer, which is still right."""

    op: Literal["http"] = "http"
    app: AppLaunch
    method: str = Field(pattern=r"^[A-Z]{1,16}$")
    target: str = Field(max_length=65536, description="Path and query, as the app sees them.")
    headers: list[Header] = Field(default_factory=list, max_length=256)
    body: bool = False
    whole: int = Field(default=0, ge=0, le=1 << 20,
                       description="Answers up to this many bytes may come in one message.")


class OpenWebSocket(BaseModel):
    """A WebSocket to an app: the agent answers :class:`WebSocketOpened` once the app
    accepted, then relays message by message."""

    op: Literal["websocket"] = "websocket"
    app: AppLaunch
    target: str = Field(max_length=65536)
    headers: list[Header] = Field(default_factory=list, max_length=256)
    subprotocols: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list, max_length=32
    )


class OpenTerminal(BaseModel):
    """A terminal: a new shell, or ``terminal`` again (its recent output replayed) while it is
    kept after its last stream dropped (``keep_ms``)."""

    op: Literal["terminal"] = "terminal"
    terminal: str | None = Field(default=None, pattern=TERMINAL_ID)
    rows: int = Field(default=24, ge=1, le=1000)
    cols: int = Field(default=80, ge=1, le=1000)
    keep_ms: int = Field(default=60_000, ge=0, le=86_400_000)


class OpenTcp(BaseModel):
    """A TCP connection to ``port`` at the session container's address (port forwarding):
    the agent answers :class:`TcpOpened` once connected, then bytes pass both ways."""

    op: Literal["tcp"] = "tcp"
    port: int = Field(ge=1, le=65535)
class OpenSsh(BaseModel):
    """An SSH connection: the agent runs ``sshd -i`` in the session as its user, with these
    public keys (its owner's) the only ones it accepts, and answers :class:`SshOpened`; then
    binary frames are the SSH protocol's bytes both ways until either side closes."""

    op: Literal["ssh"] = "ssh"
    keys: list[Annotated[str, Field(max_length=16384)]] = Field(max_length=256)
    image: str = Field(default="", max_length=512, description="For the message when the "
                       "image has no SSH server.")


class SshOpened(BaseModel):
    op: Literal["ssh-opened"] = "ssh-opened"
    user: str = Field(max_length=256, description="The session's user, the one to log in as.")


class Resize(BaseModel):
    op: Literal["resize"] = "resize"
    rows: int = Field(ge=1, le=1000)
    cols: int = Field(ge=1, le=1000)


class End(BaseModel):
    """The end of an HTTP body, either way."""

    op: Literal["end"] = "end"


class HttpHead(BaseModel):
    op: Literal["head"] = "head"
    status: int = Field(ge=100, le=599)
    headers: list[Header] = Field(default_factory=list, max_length=1024)


class WebSocketOpened(BaseModel):
    op: Literal["opened"] = "opened"
    subprotocol: str | None = Field(default=None, max_length=256)


class TerminalAttached(BaseModel):
    op: Literal["attached"] = "attached"
    terminal: str = Field(pattern=TERMINAL_ID)
    resumed: bool = Field(description="The same shell as before, its recent output replayed.")


class TcpOpened(BaseModel):
    op: Literal["tcp-opened"] = "tcp-opened"
    port: int = Field(ge=1, le=65535)


class TerminalExit(BaseModel):
    op: Literal["exit"] = "exit"
    code: int = Field(ge=-(2**31), le=2**31 - 1)


class Failed(BaseModel):
    """Why a stream could not be served. ``status`` is the HTTP status a user should see;
    ``app`` is the app's state when it failed to start (exit code, last lines)."""

    op: Literal["failed"] = "failed"
    status: int = Field(default=502, ge=400, le=599)
    code: str = Field(max_length=64)
    message: str = Field(max_length=4000)
    app: AppStatus | None = None


LinkOpen = Annotated[OpenHttp | OpenWebSocket | OpenTerminal | OpenTcp | OpenSsh,
                     Field(discriminator="op")]
AgentReply = Annotated[
    HttpHead | End | WebSocketOpened | TerminalAttached | TerminalExit | TcpOpened | SshOpened
    | Failed,
    Field(discriminator="op"),
]
ManagerControl = Annotated[End | Resize, Field(discriminator="op")]
