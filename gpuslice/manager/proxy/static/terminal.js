// The browser terminal of a gpuslice session: xterm.js on the session's terminal WebSocket
// (/api/v1/sessions/<id>/terminal, authenticated by the login cookie). Binary messages are the
// shell's bytes both ways; text messages are {"op": "resize"} up, "attached" and "exit" down.
// A dropped connection reconnects to the same shell (the agent keeps it a minute) by its id,
// which the tab keeps in sessionStorage, so a reload finds the same shell too.
// The web console opens the same terminal in its session page: gpusliceTerminal(element,
// session id, say) returns { focus(), close() }.
"use strict";
window.gpusliceTerminal = function (element, session, say) {
  const kept = "gpuslice-terminal-" + session;
  const term = new Terminal({ cursorBlink: true, scrollback: 10000, convertEol: false });
  const fit = new FitAddon.FitAddon();
  const encoder = new TextEncoder();
  let socket = null;
  let ended = false;
  let closed = false;
  let attached = false; // once a shell was there, a lost connection is tried again
  let retryUntil = 0;

  term.loadAddon(fit);
  term.open(element);
  fit.fit();
  term.focus();

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const id = sessionStorage.getItem(kept);
    const url = scheme + "//" + location.host + "/api/v1/sessions/" + session +
      "/terminal?rows=" + term.rows + "&cols=" + term.cols + (id ? "&terminal=" + id : "");
    socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    socket.onopen = function () {
      attached = true;
      retryUntil = 0;
      say("connected");
    };
    socket.onmessage = function (event) {
      if (typeof event.data !== "string") {
        term.write(new Uint8Array(event.data));
        return;
      }
      const message = JSON.parse(event.data);
      if (message.op === "attached") {
        sessionStorage.setItem(kept, message.terminal);
        say(message.resumed ? "reconnected to the same shell" : "connected");
      } else if (message.op === "exit") {
        ended = true;
        sessionStorage.removeItem(kept);
        term.write("\r\n[the shell exited with code " + message.code + "; reload for a new one]\r\n");
        say("ended");
      }
    };
    socket.onclose = function (event) {
      if (ended || closed) {
        return;
      }
      if (!attached) {
        say("could not open the terminal (is the session running, and are you logged in?)");
        return;
      }
      if (retryUntil === 0) {
        retryUntil = Date.now() + 55000; // the agent keeps the shell 60 s
      }
      if (Date.now() < retryUntil) {
        say("connection lost; reconnecting...");
        setTimeout(connect, 1000);
      } else {
        say("closed (" + (event.reason || event.code) + "); reload to reconnect");
      }
    };
  }

  term.onData(function (data) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(encoder.encode(data));
    }
  });
  term.onResize(function (size) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ op: "resize", rows: size.rows, cols: size.cols }));
    }
  });
  function refit() {
    fit.fit();
  }
  window.addEventListener("resize", refit);
  connect();
  return {
    focus: function () {
      term.focus();
    },
    close: function () {
      closed = true;
      window.removeEventListener("resize", refit);
      if (socket) {
        socket.close();
      }
      term.dispose();
    },
  };
};

if (document.body.dataset.session) { // the terminal's own page
  const status = document.getElementById("status");
  window.gpusliceTerminal(document.getElementById("terminal"), document.body.dataset.session,
    function (text) {
      status.textContent = text;
    });
}
