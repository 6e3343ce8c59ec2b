// Presence: who else has a run's card open. The page tells the socket which cards it shows (on
// every (re)connect, and as cards arrive); the socket says who joins and leaves (cs:live-presence,
// live.js). Names as text, never HTML; nothing is stored.
//
// Markup: [data-presence-run=RUN_ID] (hidden while nobody else is there).
(() => {
  "use strict";

  if (!window.csLive) return;
  const all = (root, selector) => Array.from(root.querySelectorAll(selector));

  const present = new Map(); // run id -> the other reviewers with its card open
  const announced = new Set(); // run ids this socket said it shows

  function showPresence(el) {
    const users = present.get(el.getAttribute("data-presence-run")) || [];
    el.hidden = users.length === 0;
    el.textContent = users.length ? `Also open here: ${users.join(", ")}` : "";
  }

  function announcePresence() {
    for (const el of all(document, "[data-presence-run]")) {
      const run = el.getAttribute("data-presence-run");
      if (window.csLive.isOpen() && !announced.has(run)) {
        announced.add(run);
        window.csLive.send({ presence: run });
      }
      showPresence(el);
    }
  }
  // A refetched or new card: announce it, and show who is there at once.
  document.addEventListener("htmx:afterSettle", announcePresence);

  document.addEventListener("cs:live-presence", (e) => {
    const { run_id: run, users } = e.detail;
    present.set(run, Array.isArray(users) ? users.map(String) : []);
    all(document, `[data-presence-run='${CSS.escape(run)}']`).forEach(showPresence);
  });

  document.addEventListener("cs:live-open", () => {
    announced.clear();
    present.clear();
    announcePresence();
  });
  // The socket may have opened while this deferred script was still downloading (see live-output.js).
  if (window.csLive?.isOpen()) announcePresence();
})();
