// What happened to a call while it is on the screen, said at once on it in one line, whatever its
// card's refetch waits for (the reviewer typing in it, the pointer on it): who decided it ("Declined
// by alice 3 s ago", "Deadline passed: declined"), its deadline moving, a colleague claiming it
// ("alice is on this call"). A decided call's buttons are disabled; what the reviewer typed stays.
//
// A card open when its call was decided elsewhere (a row open, or focus in it) stays where it is
// with its line (data-kept: live-refetch.js puts it back after each refetch, and carries the lines
// of the cards it refetches), until the reviewer moves on: the list loaded some other way (filters,
// another page, the page itself), j/k moving past it (keys.js's cs:keys-moved), or its row closed.
//
// The words come from the server (body[data-live-words], agents_runtime/store.py): none is
// spelled here.
//
// Markup: .run-card[data-run-id] > ... .call[data-call-id]; the line is p.live-note
// (p.live-note.decided-note once the call is decided); body[data-username] is the reviewer.
(() => {
  "use strict";

  const source = document.body.getAttribute("data-live-words");
  if (!window.csLive || !source) return;
  const WORDS = JSON.parse(source);
  const me = document.body.getAttribute("data-username");
  const fill = (text, values) => text.replace(/\{(\w+)\}/g, (whole, key) => values[key] ?? whole);

  function callOf(event) {
    const card = document.querySelector(`.run-card[data-run-id='${CSS.escape(event.run_id)}']`);
    const call = card?.querySelector(`.call[data-call-id='${CSS.escape(event.tool_call_id)}']`);
    return call ? { card, call } : null;
  }

  // One line per call: the latest thing that happened to it.
  function say(call, text, { ago = true, decided = false } = {}) {
    let note = call.querySelector(":scope > .live-note");
    if (!note) {
      note = document.createElement("p");
      note.className = "live-note";
      note.setAttribute("role", "status");
      call.prepend(note);
    }
    note.classList.toggle("decided-note", decided);
    note.replaceChildren(text);
    if (ago) {
      const when = Object.assign(document.createElement("time"), { textContent: "0 s ago" });
      when.dateTime = new Date().toISOString();
      when.setAttribute("data-ago", "");
      note.append(" ", when);
    }
  }

  const isOpen = (card) => card.querySelector("details.call-row[open]") !== null || card.contains(document.activeElement);

  function decided(event, card, call) {
    // This page's own decision is on its way: its answer says what happened.
    if (card.querySelector(".htmx-request") || call.querySelector(".decided-note")) return;
    if (event.action === "expire") {
      // What the deadline did, as the server recorded it (the rules may overrule what the tool asked
      // for: a risky value, an answer nobody gave); never guessed from the card.
      const line = WORDS.deadline_passed[event.expired_as] || WORDS.deadline_passed_unknown;
      say(call, line, { ago: false, decided: true });
    } else {
      const verdict = event.action === "approve" && event.edited ? "approve_edited" : event.action;
      const actor = event.actor || WORDS.someone;
      say(call, fill(WORDS.decided, { verdict: WORDS.verdicts[verdict] || event.action, actor }), { decided: true });
    }
    for (const button of call.querySelectorAll("button")) button.disabled = true;
    if (isOpen(card)) card.setAttribute("data-kept", "");
  }

  // Someone else's claim: said on the row, and the card stops offering "I'm on it" (its refetch may
  // wait for the pointer to leave: the card under it is not replaced).
  function claimed(event, call) {
    if (!event.actor || event.actor === me || call.querySelector(".decided-note")) return;
    const released = event.op === "release";
    say(call, fill(released ? WORDS.released : WORDS.claimed, { actor: event.actor }));
    const line = call.querySelector(".claim-line");
    if (!line || released) return;
    line.querySelector(".claim-form")?.remove();
    let claim = line.querySelector(".claim");
    if (!claim) {
      claim = document.createElement("p");
      claim.className = "claim";
      line.prepend(claim);
    }
    claim.setAttribute("data-claimed-by", event.actor);
    claim.replaceChildren(fill(WORDS.claimed, { actor: event.actor }));
  }

  // --- Moving on: a kept card goes ------------------------------------------------------------

  const decidedAll = (card) =>
    Array.from(card.querySelectorAll(".call[id]")).every((c) => c.querySelector(":scope > .decided-note"));

  // Gone from the page once every call on it is decided (the list no longer has the run: a refetch
  // would not bring it back); a card with calls still waiting only stops being kept.
  function dismiss(card) {
    card.removeAttribute("data-kept");
    if (!decidedAll(card)) return;
    if (card.contains(document.activeElement)) {
      // Focus stays in the list, before where the card was: j goes on to the call after it.
      const list = card.closest("[id]:not(.run-card)") ?? document.body;
      const before = Array.from(list.querySelectorAll(".call[id]")).filter(
        (c) => !card.contains(c) && c.compareDocumentPosition(card) & Node.DOCUMENT_POSITION_FOLLOWING,
      ).pop();
      const target = before ?? list;
      if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
      target.focus({ preventScroll: true });
    }
    card.remove();
  }

  const between = (el, a, b) => {
    const after = (x, y) => Boolean(y.compareDocumentPosition(x) & Node.DOCUMENT_POSITION_FOLLOWING);
    return (after(el, a) && after(b, el)) || (after(el, b) && after(a, el));
  };

  // j/k moved from one call to another: the kept cards it left or passed go.
  document.addEventListener("cs:keys-moved", (e) => {
    const { from, to } = e.detail;
    const left = from.closest(".run-card");
    const passed = Array.from(document.querySelectorAll(".run-card[data-kept]")).filter(
      (card) => !card.contains(to) && (card === left || between(card, from, to)),
    );
    passed.forEach(dismiss); // (read first: a card gone has no place in the page to compare)
  });

  // The reviewer closed the row of a call decided elsewhere. (toggle does not bubble: captured.)
  document.addEventListener(
    "toggle",
    (e) => {
      const row = e.target;
      if (!(row instanceof HTMLDetailsElement) || row.open || !row.matches(".call-row")) return;
      const card = row.closest(".run-card[data-kept]");
      if (card && row.parentElement.querySelector(":scope > .decided-note")) dismiss(card);
    },
    true,
  );

  document.addEventListener("cs:live-event", (e) => {
    const event = e.detail;
    const found = event.tool_call_id && callOf(event);
    if (!found) return;
    const { card, call } = found;
    if (event.type === "call-decided") decided(event, card, call);
    else if (event.type === "call-claimed") claimed(event, call);
    else if (event.type === "deadline-extended") say(call, fill(WORDS.extended, { actor: event.actor || WORDS.someone }));
    else if (event.type === "call-escalated") say(call, WORDS.deadline_passed.escalate, { ago: false });
  });
})();
