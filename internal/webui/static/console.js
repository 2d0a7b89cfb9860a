// The console page (issue 21): noVNC for VNC, xterm.js for terminals, both
// talking to vmgate's console WebSocket only (vmgate relays to PVE).
import RFB from "/vendor/novnc-1.7.0/core/rfb.js";
import { Terminal } from "/vendor/xterm-6.0.0/xterm.mjs";
import { FitAddon } from "/vendor/xterm-addon-fit-0.11.0/addon-fit.mjs";

const el = document.getElementById("console");
const status = document.getElementById("console-status");
const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + el.dataset.url;

// xterm.js makes <style> elements for its measurements and colours: each gets
// the page's nonce, the only way a style not from a file is allowed here.
const nonce = el.dataset.nonce;
const createElement = Document.prototype.createElement;
Document.prototype.createElement = function (name, options) {
  const e = createElement.call(this, name, options);
  if (String(name).toLowerCase() === "style") {
    e.nonce = nonce;
  }
  return e;
};

function say(text) {
  status.textContent = text;
}

function ended(reason) {
  const why = {
    idle: "it sat idle too long", max_length: "it lasted as long as a console may",
    session_ended: "your session ended", grant_lost: "you may no longer act on this guest",
    shutdown: "vmgate is stopping",
  }[reason];
  say(why ? "The console ended: " + why + "." : "The console is closed.");
}

document.getElementById("console-full").addEventListener("click", () => {
  el.requestFullscreen().catch(() => say("Full screen is not available here."));
});

if (el.dataset.type === "vnc") {
  const rfb = new RFB(el, url, { wsProtocols: ["binary"] });
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => say("Connected."));
  rfb.addEventListener("disconnect", (e) => say(e.detail.clean ? "The console is closed." : "The connection to the console was lost."));
  document.getElementById("console-cad").addEventListener("click", () => rfb.sendCtrlAltDel());
  const scale = document.getElementById("console-scale");
  scale.addEventListener("click", () => {
    rfb.scaleViewport = !rfb.scaleViewport;
    scale.setAttribute("aria-pressed", String(rfb.scaleViewport));
  });
  document.getElementById("console-paste").addEventListener("click", () => {
    const input = document.getElementById("console-paste-text");
    // Typed key by key: the guest's console takes keys, not a clipboard.
    for (const ch of input.value) {
      const code = ch.codePointAt(0);
      if (ch === "\n") {
        rfb.sendKey(0xff0d, "Enter");
      } else if (code >= 0x20 && code <= 0xff) {
        rfb.sendKey(code);
      } else if (code > 0xff) {
        rfb.sendKey(0x01000000 | code);
      }
    }
    input.value = "";
    rfb.focus();
  });
  window.vmgateConsole = rfb;
} else {
  const term = new Terminal({ convertEol: false, cursorBlink: true });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  if (term.textarea) {
    term.textarea.name = "console-input"; // a form field names itself
  }
  fit.fit();
  const ws = new WebSocket(url, ["binary"]);
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  const send = (s) => { if (ws.readyState === WebSocket.OPEN) ws.send(s); };
  const resize = () => send("1:" + term.cols + ":" + term.rows + ":");
  ws.addEventListener("open", () => {
    say("Connected.");
    resize();
    term.focus();
  });
  ws.addEventListener("message", (e) => {
    term.write(typeof e.data === "string" ? e.data : new Uint8Array(e.data));
  });
  ws.addEventListener("close", (e) => ended(e.code === 4000 ? e.reason : ""));
  term.onData((d) => send("0:" + enc.encode(d).length + ":" + d));
  term.onResize(resize);
  window.addEventListener("resize", () => fit.fit());
  setInterval(() => send("2"), 30000);
  window.vmgateConsole = term;
}
