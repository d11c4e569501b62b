// The session terminal inside the console: xterm.js and the terminal page's own client
// (/assets/terminal.js), loaded on first use only (the emulator is the console's largest part).
let loading = null;

function script(src) {
  return new Promise((resolve, reject) => {
    const el = document.createElement("script");
    el.src = src;
    el.onload = resolve;
    el.onerror = () => reject(new Error("the browser terminal is not built on this manager " +
      "(tools/build-web.sh); \"gpuslice session shell\" reaches the same shell"));
    document.head.append(el);
  });
}

function load() {
  if (!loading) {
    const css = document.createElement("link");
    css.rel = "stylesheet";
    css.href = "/assets/vendor/xterm.css";
    document.head.append(css);
    loading = script("/assets/vendor/xterm.js")
      .then(() => script("/assets/vendor/addon-fit.js"))
      .then(() => script("/assets/terminal.js"));
    loading.catch(() => { loading = null; });
  }
  return loading;
}

export async function openTerminal(element, sessionId, say) {
  await load();
  return window.gpusliceTerminal(element, sessionId, say);
}
