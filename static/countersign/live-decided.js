// A call decided elsewhere (a `call-decided` live event, live.js) is said at once on the call,
// whatever its card's refetch waits for (the reviewer typing in it, the pointer on it): who decided,
// and its buttons disabled. What the reviewer typed stays.
//
// Markup: .run-card[data-run-id] > ... .call[data-call-id]; the note is p.decided-note.
(() => {
  "use strict";

  if (!window.csLive) return;
  const all = (root, selector) => Array.from(root.querySelectorAll(selector));

  const DECIDED = { approve: "Approved", decline: "Declined", resume: "Answered" };
  // An expiry is nobody's decision: said apart from a reviewer's "no".
  const EXPIRED_NOTE = "Expired: nobody answered before its deadline. Nothing you do here decides it again.";

  function markDecided(event) {
    const card = document.querySelector(`.run-card[data-run-id='${CSS.escape(event.run_id)}']`);
    const call = card?.querySelector(`.call[data-call-id='${CSS.escape(event.tool_call_id)}']`);
    if (!call || card.querySelector(".htmx-request") || call.querySelector(".decided-note")) return;
    let verb = DECIDED[event.action] || "Decided";
    if (event.edited) verb = "Approved with edits";
    const note = document.createElement("p");
    note.className = "decided-note";
    note.setAttribute("role", "status");
    if (event.action === "expire") {
      note.append(EXPIRED_NOTE);
      call.prepend(note);
      for (const button of all(call, "button")) button.disabled = true;
      return;
    }
    const when = Object.assign(document.createElement("time"), { textContent: "just now" });
    when.dateTime = new Date().toISOString();
    when.setAttribute("data-relative", "");
    note.append(`${verb} by ${event.actor || "another reviewer"} `, when, ". Nothing you do here decides it again.");
    call.prepend(note);
    for (const button of all(call, "button")) button.disabled = true;
  }

  document.addEventListener("cs:live-event", (e) => {
    if (e.detail.type === "call-decided" && e.detail.tool_call_id) markDecided(e.detail);
  });
})();
