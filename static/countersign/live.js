// The live socket: opens it, keeps it open, shows its state in the badge, and says what it hears as
// events on document, for the scripts that act on them (each names what it listens to):
//   cs:live-open       the socket (re)opened: what changed while it did not listen is fetched again
//   cs:live-event      a change, by id ({type, agent_id, run_id, tool_call_id, ...}): live-refetch.js
//                      refetches what shows it, live-notes.js says on a call what happened to it,
//                      signals.js notifies
//   cs:live-agents     the agents this reviewer may see changed
//   cs:live-chunk      a run's streamed output (live-output.js)
//   cs:live-presence   who else has a run's card open ({run_id, users}: live-presence.js)
// What the page tells the socket goes through window.csLive.send; csLive.LIVE selects the partials
// that refetch themselves (live-refetch.js).
//
// Markup (templates/base.html, approvals/templates):
//   body[data-live-url]          the socket to open (logged-in pages only)
//   #live-status, #live-sign-in  the badge (data-state: connecting|live|offline|signed-out) and, once
//                                signed out (the socket closed with 4401, or a refetch was sent to the
//                                login page), the way back; nothing reconnects then, and the page's
//                                buttons are disabled
//
// Not used: htmx's ws extension (vendored by django-htmx, CSP-safe) swaps server-rendered HTML where
// these events carry ids, and its socket can neither be closed on sign-out nor retried early when
// the network comes back.
(() => {
  "use strict";

  const url = document.body.getAttribute("data-live-url");
  const badge = document.getElementById("live-status");
  if (!url || !badge || !window.WebSocket || !window.htmx) return;

  const LIVE = "[data-live],[data-live-agent],[data-live-run]";
  const STATES = {
    connecting: ["Connecting…", "Opening the live connection"],
    live: ["Live", "Changes made elsewhere appear here as they happen"],
    offline: ["Reconnecting…", "Live updates are paused; retrying. The page refreshes itself once it is back."],
    "signed-out": ["Signed out", "Your session ended (logged out, expired or revoked): sign in again to see live changes"],
  };
  let socket = null;
  let attempts = 0;
  let retryTimer = null;

  const say = (name, detail) => document.dispatchEvent(new CustomEvent(name, { detail }));

  window.csLive = {
    LIVE,
    isOpen: () => socket?.readyState === WebSocket.OPEN,
    send(message) {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    },
  };

  function setState(state) {
    badge.hidden = false;
    badge.setAttribute("data-state", state);
    [badge.textContent, badge.title] = STATES[state];
  }

  function signedOut() {
    const ws = socket;
    socket = null; // its close event is then ignored: nothing reconnects
    if (ws) ws.close();
    window.clearTimeout(retryTimer);
    setState("signed-out");
    for (const button of document.querySelectorAll("#main button")) button.disabled = true;
    // Its link (href="": this page) goes through the login form (every page requires it) and back
    // here. Not built from location.pathname: on a page at //evil.example/... that is another site.
    document.getElementById("live-sign-in").hidden = false;
  }

  // The server sends an htmx request of an ended session to the login page (HX-Redirect). A refetch
  // nobody asked for must not leave the page (and what the reviewer was doing): say signed out.
  document.addEventListener("htmx:beforeOnLoad", (e) => {
    if (e.detail.requestConfig.elt.matches(LIVE) && e.detail.xhr.getResponseHeader("HX-Redirect")) {
      e.preventDefault();
      signedOut();
    }
  });

  function receive(message) {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    if (data.type === "event" && data.event) say("cs:live-event", data.event);
    else if (data.type === "presence" && data.run_id) say("cs:live-presence", data);
    else if (data.type === "chunk" && data.chunk) say("cs:live-chunk", data.chunk);
    else if (data.type === "agents") say("cs:live-agents");
  }

  function connect() {
    retryTimer = null;
    setState(attempts === 0 && !socket ? "connecting" : "offline");
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${url}`);
    socket = ws;
    ws.addEventListener("open", () => {
      attempts = 0;
      setState("live");
      say("cs:live-open");
    });
    ws.addEventListener("message", receive);
    ws.addEventListener("close", (e) => {
      if (socket !== ws) return;
      if (e.code === 4401) return signedOut(); // the session is gone: reconnecting would not help
      setState("offline");
      if (retryTimer !== null) return;
      attempts += 1;
      const delay = Math.min(15000, 500 * 2 ** (attempts - 1));
      retryTimer = window.setTimeout(connect, delay / 2 + Math.random() * (delay / 2));
    });
  }

  // Back online (network, or the tab woke up): try now rather than at the end of the backoff.
  function retryNow() {
    if (socket?.readyState !== WebSocket.CLOSED || retryTimer === null) return;
    window.clearTimeout(retryTimer);
    attempts = 0;
    connect();
  }
  window.addEventListener("online", retryNow);
  document.addEventListener("visibilitychange", () => document.visibilityState === "visible" && retryNow());

  connect();
})();
