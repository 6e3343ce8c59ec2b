// The queue-health page (approvals/health.html) refetches its figures when a run event arrives
// (live.js's cs:live-event) and when the socket (re)opens, at most once every THROTTLE_MS: the first
// event of a burst refetches at once, the rest of the burst once at its end. Its figures are
// aggregates over every agent the reviewer sees: refetching them for each event of a burst of
// decisions would cost the server more than the page is worth.
//
// Markup: #health-figures[hx-trigger="cs:health-refresh"] (not data-live: live-refetch.js would
// refetch it for every event). <details> open before a refetch stay open after it (by id).
(() => {
  "use strict";

  const THROTTLE_MS = 5000;
  const ID = "health-figures";
  let last = -Infinity;
  let timer = null;
  let open = [];

  function refetch() {
    timer = null;
    last = Date.now();
    const el = document.getElementById(ID);
    if (el && window.htmx) window.htmx.trigger(el, "cs:health-refresh");
  }

  function soon() {
    if (timer === null) timer = window.setTimeout(refetch, Math.max(0, last + THROTTLE_MS - Date.now()));
  }

  document.addEventListener("cs:live-event", soon);
  document.addEventListener("cs:live-open", soon);

  document.addEventListener("htmx:beforeSwap", (e) => {
    if (e.detail.target.id !== ID) return;
    open = Array.from(e.detail.target.querySelectorAll("details[open][id]"), (d) => d.id);
  });
  document.addEventListener("htmx:afterSwap", () => {
    for (const id of open) document.getElementById(id)?.setAttribute("open", "");
    open = [];
  });
})();
