// Live updates: the API's session event stream (server-sent events, one per status change the
// caller may see) wakes a page at once; ``poll`` (a function saying whether polling is needed
// now) adds a refresh every 2 s for what no event announces (a waiting session's reason and
// queue position move as others start). Refreshes never overlap: one more runs after the last.

export function watch(refresh, { sessionId, poll } = {}) {
  let stopped = false;
  let timer = null;
  let running = false;
  let again = false;

  async function run() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await refresh();
    } catch (err) {
      console.warn("refresh failed", err);
    } finally {
      running = false;
      if (again && !stopped) {
        again = false;
        run();
      }
    }
  }
  function soon() {
    if (timer || stopped) return;
    timer = setTimeout(() => {
      timer = null;
      run();
    }, 50);
  }
  const url = "/api/v1/sessions/events" + (sessionId ? "?session_id=" + encodeURIComponent(sessionId) : "");
  const source = new EventSource(url);
  source.addEventListener("status", soon);
  const ticker = setInterval(() => {
    if (!document.hidden && poll && poll()) soon();
  }, 2000);
  return {
    now: run,
    stop() {
      stopped = true;
      source.close();
      clearTimeout(timer);
      clearInterval(ticker);
    },
  };
}
