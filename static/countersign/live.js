// Live updates: the socket says what changed, by id (an agent, a run); each element that shows it
// refetches itself over HTTP through htmx, keeping its page's filters and pagination.
//
// Markup (templates/base.html, approvals/templates):
//   body[data-live-url]          the socket to open (logged-in pages only)
//   #live-status, #live-sign-in  the badge (data-state: connecting|live|offline|signed-out) and, once
//                                signed out (the socket closed with 4401, or a refetch was sent to the
//                                login page), the way back; nothing reconnects then
//   [id][hx-trigger="cs:refresh"][data-live="all" | data-live-agent=ID | data-live-run=ID]
//                                refetched when an event names it, and on every (re)connect
//   ol[data-live-output=RUN_ID]  the run's streamed output (its [hidden] section shows on the first)
//   .new-pill, .gone-note        (hidden) a list's count of the runs held back; a card's note while
//                                it is held as it was (.is-gone)
//   .call[data-call-id]          a call; a `call-decided` event from elsewhere puts a .decided-note
//                                (who, when) in it at once and disables its buttons
//   .call-body[data-body-key]    a call's body; .call-body-lazy: not fetched yet (a folded row)
//   [data-presence-run=RUN_ID]   (hidden) who else has this run's card open; the page tells the
//                                socket which cards it shows, the socket says who joins and leaves
//
// A refetch never gets in the reviewer's way. It waits (data-stale) while a request from inside the
// partial is in flight (a decision, whose answer swaps into its card) and while a field in it has
// focus. A card showing the outcome of a decision taken here stays until its run moves on, and so
// does a form the reviewer started or that came back with errors; <details> stay open. Nothing at or
// above the pointer or focus moves, and no card there changes the calls it shows (a click decides the
// call it was aimed at): new runs wait behind the pill, and a card there decided elsewhere stays,
// .is-gone, until the reviewer moves on. Signed out, the page's buttons are disabled.
//
// Not used from htmx: hx-preserve keeps an element whole, buttons that must change included; hx-sync
// queues on the element an outerHTML swap replaces, dropping the queue (hence `refetching`);
// hx-trigger's `throttle:` drops the end of a burst and `delay:` waits as long as events keep coming,
// where schedule's fixed window does neither. The ws extension (vendored by django-htmx, CSP-safe)
// swaps server-rendered HTML where these events carry ids, and its socket can neither be closed on
// sign-out nor retried early when the network comes back.
(() => {
  "use strict";

  const url = document.body.getAttribute("data-live-url");
  const badge = document.getElementById("live-status");
  if (!url || !badge || !window.WebSocket || !window.htmx) return;

  const LIVE = "[data-live],[data-live-agent],[data-live-run]";
  const CARD = ".run-card[id]";
  const COALESCE_MS = 40;
  const STATES = {
    connecting: ["Connecting…", "Opening the live connection"],
    live: ["Live", "Changes made elsewhere appear here as they happen"],
    offline: ["Reconnecting…", "Live updates are paused; retrying. The page refreshes itself once it is back."],
    "signed-out": ["Signed out", "Your session ended (logged out, expired or revoked): sign in again to see live changes"],
  };
  const byId = (id) => document.getElementById(id);
  const all = (root, selector) => Array.from(root.querySelectorAll(selector));
  let socket = null;
  let attempts = 0;
  let retryTimer = null;

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
    for (const button of all(document, "#main button")) button.disabled = true;
    // Reloading this page goes through the login form (every page requires it) and back here.
    const link = byId("live-sign-in");
    link.href = location.pathname + location.search;
    link.hidden = false;
  }

  // The server sends an htmx request of an ended session to the login page (HX-Redirect). A refetch
  // nobody asked for must not leave the page (and what the reviewer was doing): say signed out.
  document.addEventListener("htmx:beforeOnLoad", (e) => {
    if (e.detail.requestConfig.elt.matches(LIVE) && e.detail.xhr.getResponseHeader("HX-Redirect")) {
      e.preventDefault();
      signedOut();
    }
  });

  // --- Where the reviewer is ---------------------------------------------------------------------

  let pointer = null; // viewport coordinates; null until it moves on this page, or once it has left
  let looking = null; // a pending look at what was held back while the pointer was there

  function track(e) {
    if (e.type !== "pointerout") pointer = { x: e.clientX, y: e.clientY };
    else if (!e.relatedTarget) pointer = null; // left the window (or a touch ended)
    if (looking === null && document.querySelector("[data-stale]")) {
      looking = window.setTimeout(() => {
        looking = null;
        flushStale();
      }, 150);
    }
  }
  for (const type of ["pointermove", "pointerover", "pointerout"]) {
    document.addEventListener(type, track, { passive: true });
  }

  // How far down a partial the reviewer is: the pointer's height when it rests on the partial, and
  // the bottom of what has focus in it (-Infinity: neither). What starts at or above must not move.
  function holdLine(live) {
    const under = pointer && document.elementFromPoint(pointer.x, pointer.y);
    const active = document.activeElement;
    const line = under && live.contains(under) ? pointer.y : -Infinity;
    return active && live.contains(active) ? Math.max(line, active.getBoundingClientRect().bottom) : line;
  }

  const above = (el, line) => el.getBoundingClientRect().top <= line;

  // A decision from inside the partial is on its way (htmx marks its form), or the reviewer types.
  function busy(live) {
    const active = document.activeElement;
    const typing = live.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return typing || live.querySelector(".htmx-request") !== null;
  }

  // --- Refetching ----------------------------------------------------------------------------------

  const timers = {}; // partial id -> the refetch pending for this burst of events
  const refetching = {}; // partial id -> true while its refetch is on its way; "again": asked meanwhile

  function schedule(el) {
    const id = el.id;
    timers[id] ??= window.setTimeout(() => {
      delete timers[id];
      refresh(byId(id)); // (the partial may have been swapped meanwhile)
    }, COALESCE_MS);
  }

  function refresh(el) {
    if (!el) return;
    if (busy(el)) {
      el.setAttribute("data-stale", "");
    } else if (refetching[el.id]) {
      refetching[el.id] = "again"; // (htmx would queue it on the element its answer replaces)
    } else if (el.classList.contains("htmx-added")) {
      schedule(el); // just swapped in: htmx listens for cs:refresh on it once it has settled
    } else {
      el.removeAttribute("data-stale");
      window.htmx.trigger(el, "cs:refresh");
    }
  }

  // What waited, unless a card held as it was (.is-gone) is still where the reviewer is.
  function flushStale() {
    for (const el of all(document, "[data-stale]")) {
      const line = holdLine(el);
      if (!all(el, ".is-gone").some((card) => above(card, line))) refresh(el);
    }
  }

  document.addEventListener("htmx:beforeRequest", (e) => {
    if (e.detail.elt.matches(LIVE)) refetching[e.detail.elt.id] = true;
  });

  document.addEventListener("htmx:afterRequest", (e) => {
    const elt = e.detail.requestConfig.elt; // (detail.elt: where the event fired, once elt is gone)
    if (!elt.matches(LIVE)) {
      window.setTimeout(flushStale, 0); // a decision's answer is in: catch up on what waited for it
      return;
    }
    const again = refetching[elt.id] === "again";
    delete refetching[elt.id];
    if (again) schedule(elt);
  });

  document.addEventListener("focusout", () => window.setTimeout(flushStale, 0)); // once focus settled

  // Forms the reviewer has started to fill in survive refetches (see keep).
  document.addEventListener("input", (e) => e.target.closest("form")?.setAttribute("data-dirty", ""));
  document.addEventListener("submit", (e) => e.target.removeAttribute("data-dirty"));

  // --- Keeping what the reviewer is looking at across a refetch ----------------------------------

  const swaps = new WeakMap(); // xhr -> where the reviewer was in the partial it replaces
  const held = new Set(); // ids of the new cards held back behind the pill
  let revealing = false; // the pill was clicked: the next refetch shows them

  document.addEventListener("htmx:beforeSwap", (e) => {
    const old = e.detail.target;
    if (!e.detail.shouldSwap || e.detail.requestConfig.elt !== old || !old.matches(LIVE)) return;
    if (busy(old)) {
      // A decision started (or the reviewer clicked into a field) while this refetch was on its way.
      e.detail.shouldSwap = false;
      old.setAttribute("data-stale", "");
      return;
    }
    const line = holdLine(old);
    const first = old.querySelector(CARD + ", .empty");
    const cards = all(old, CARD);
    swaps.set(e.detail.xhr, {
      id: old.id,
      // New runs would go in above the reviewer (newest first), or some already wait: hold them back.
      hold: !revealing && (held.size > 0 || (first !== null && above(first, line))),
      reveal: revealing,
      focused: old.contains(document.activeElement) ? document.activeElement : null,
      order: cards.map((card) => card.id),
      // At or above the reviewer: these must not move, nor change the calls they show.
      cards: cards.map((card) => ({ node: card, pinned: above(card, line) })),
    });
    revealing = false;
  });

  document.addEventListener("htmx:afterSwap", (e) => {
    const saved = swaps.get(e.detail.xhr);
    if (!saved) {
      // A list swapped some other way (filters, another page) shows all there is.
      if (e.target.querySelector?.(".new-pill")) held.clear();
      return;
    }
    swaps.delete(e.detail.xhr);
    const fresh = byId(saved.id);
    if (!fresh) return;
    keep(fresh, saved);
    holdNew(fresh, saved);
    if (fresh.querySelector(".is-gone")) fresh.setAttribute("data-stale", ""); // look again later
    // Focus was on something kept (the outcome a decision just focused, say): put it back.
    if (saved.focused?.isConnected) saved.focused.focus({ preventScroll: true });
  });

  // Which calls a card shows as waiting: the same calls mean the same state of the run.
  const callIds = (card) => all(card, ".call[id]").map((call) => call.id).sort().join(" ");

  const inside = (root, id) => root.querySelector(`#${CSS.escape(id)}`);

  // The old cards are read as they were swapped out, by content rather than class: htmx gives a new
  // element with a known id its predecessor's classes until it settles.
  function keep(fresh, { order, cards }) {
    for (const { node, pinned } of cards) {
      const now = inside(fresh, node.id);
      const calls = callIds(node);
      const outcome = node.querySelector(".outcome") !== null;
      const ended = outcome && calls === ""; // the run waits here no more (it ended, or continues)
      if (now) {
        const waiting = now.matches(CARD) && now.querySelector(".outcome") === null;
        const same = callIds(now) === calls;
        // Half-filled, or sent back with errors next to the fields: the reviewer's work.
        const dirty = node.querySelector("form[data-dirty], .field-errors, .form-errors, .notice") !== null;
        // Waiting still: keep the half-filled form, the outcome of this page's decision while the run
        // waits on the very calls it shows ("suspended again"), and what is at or above the reviewer
        // (marked if its calls changed). Ended: keep that outcome rather than the summary (it says
        // more), unless it only said "continuing in the background": the summary says how it ended.
        if (waiting ? dirty || (outcome && same) || pinned : ended && !node.querySelector(".outcome-continuing")) {
          now.replaceWith(node);
          restore(node, waiting && !same);
        } else {
          carryBodies(node, now);
          const was = all(node, "details");
          all(now, "details").forEach((d, i) => (d.open ||= Boolean(was[i]?.open)));
        }
      } else if (ended) {
        // The run is not listed any more, but the reviewer should still see what their decision did.
        place(fresh, node, order);
        restore(node, false);
      } else if (pinned && order.slice(order.indexOf(node.id) + 1).some((id) => inside(fresh, id))) {
        // Gone at or above the reviewer: the cards after it would move up under the pointer.
        place(fresh, node, order);
        restore(node, true);
      }
      // Otherwise the run was decided elsewhere (or left this page's filters): it goes.
    }
  }

  // A folded row's body is fetched when it opens (partials/run_card.html): one already here goes
  // on into the refetched card rather than fold and load again, while the call shows the same.
  function carryBodies(node, now) {
    for (const body of all(node, ".call[id] > details > .call-body:not(.call-body-lazy)")) {
      const id = body.closest(".call").id;
      const lazy = inside(now, id)?.querySelector(":scope > details > .call-body-lazy");
      if (lazy?.getAttribute("data-body-key") !== body.getAttribute("data-body-key")) continue;
      lazy.replaceWith(body);
      window.htmx.process(body);
    }
  }

  function restore(card, gone) {
    card.classList.toggle("is-gone", gone);
    card.querySelector(":scope > .gone-note").hidden = !gone;
    window.htmx.process(card); // htmx cleaned the old subtree up when it swapped it out
  }

  // Back where it was among the cards still listed.
  function place(fresh, node, order) {
    const i = order.indexOf(node.id);
    const present = (ids) => ids.map((id) => inside(fresh, id)).find(Boolean);
    const next = present(order.slice(i + 1));
    const previous = present(order.slice(0, i).reverse());
    const anchor = fresh.querySelector(".run-card, .empty, .list-foot");
    if (next) next.before(node);
    else if (previous) previous.after(node);
    else if (anchor) anchor.before(node);
    else fresh.append(node);
  }

  function holdNew(fresh, saved) {
    const pill = fresh.querySelector(".new-pill");
    if (!pill) return;
    const present = new Set();
    for (const card of all(fresh, CARD)) {
      present.add(card.id);
      if (saved.order.includes(card.id)) continue;
      if (saved.hold) {
        held.add(card.id);
        card.remove();
      } else if (saved.reveal) {
        card.setAttribute("tabindex", "-1");
        if (!fresh.contains(document.activeElement)) card.focus(); // the first one shown
      }
    }
    for (const id of held) if (!present.has(id)) held.delete(id); // decided elsewhere meanwhile
    if (held.size) {
      pill.textContent = `${held.size} new run${held.size === 1 ? "" : "s"} — show`;
      pill.hidden = false;
    }
  }

  document.addEventListener("click", (e) => {
    const pill = e.target.closest?.(".new-pill");
    if (!pill) return;
    held.clear();
    revealing = true;
    refresh(pill.closest(LIVE));
  });

  // --- A call decided elsewhere ---------------------------------------------------------------------

  const DECIDED = { approve: "Approved", decline: "Declined", resume: "Answered" };
  // An expiry is nobody's decision: said apart from a reviewer's "no".
  const EXPIRED_NOTE = "Expired: nobody answered before its deadline. Nothing you do here decides it again.";

  // Said at once on the call, whatever the card's refetch waits for (the reviewer typing in it, the
  // pointer on it): who decided, and its buttons disabled. What the reviewer typed stays.
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

  // --- Run output (textContent throughout: model output is never parsed as HTML) --------------------

  const SAY = {
    "tool-call": (p) => `→ ${p.tool_name} ${JSON.stringify(p.args)}`,
    "tool-result": (p) => `← ${p.tool_name}: ${JSON.stringify(p.result)}`,
    "tool-call-approval": (p) => `⏸ ${p.tool_name} needs approval`,
    "tool-call-suspended": (p) => `⏸ ${p.tool_name} waits for input`,
    finish: (p) => (p.status === "suspended" ? "The run waits for a decision again." : `Run ${p.status}.`),
    error: (p) => `Error: ${p.error}`,
  };

  const span = (className, textContent) => Object.assign(document.createElement("span"), { className, textContent });

  function appendOutput(chunk) {
    const list = document.querySelector(`[data-live-output='${CSS.escape(chunk.run_id)}']`);
    if (!list) return;
    const section = list.closest("[hidden]");
    if (section) section.hidden = false;
    const kind = chunk.type === "text-delta" ? "text" : chunk.type;
    const payload = chunk.payload || {};
    let last = list.lastElementChild;
    if (last?.getAttribute("data-kind") === "finish" && kind !== "finish") {
      list.textContent = ""; // a new continuation of the same run: start over
      last = null;
    }
    if (kind !== "text" || last?.getAttribute("data-kind") !== "text") {
      last = list.appendChild(document.createElement("li"));
      last.setAttribute("data-kind", kind);
    }
    if (kind === "text") {
      last.textContent += payload.text || "";
    } else {
      last.textContent = SAY[kind] ? SAY[kind](payload) : kind;
    }
    if (kind === "tool-call" && "model_args" in payload) {
      // Approved with edited arguments: the line shows those the tool ran with; say who, show the model's.
      const who = span("edited-by", `edited by ${payload.edited_by || "a reviewer"}`);
      last.append(" ", who, " ", span("model-args", `the model's: ${JSON.stringify(payload.model_args)}`));
    }
  }

  // --- The socket ----------------------------------------------------------------------------------

  function subscribeRuns() {
    for (const el of all(document, "[data-live-output]")) {
      socket.send(JSON.stringify({ subscribe_run: el.getAttribute("data-live-output") }));
    }
  }

  // --- Presence: who else has a card open (names as text, never HTML) ------------------------------

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
      if (socket?.readyState === WebSocket.OPEN && !announced.has(run)) {
        announced.add(run);
        socket.send(JSON.stringify({ presence: run }));
      }
      showPresence(el);
    }
  }
  // A refetched or new card: announce it, and show who is there at once.
  document.addEventListener("htmx:afterSettle", announcePresence);

  // Whatever changed while this socket did not listen (the page loading, the connection away, the
  // agents this reviewer may see changing): every live partial refetches once.
  const refreshAll = () => all(document, LIVE).forEach(schedule);

  function receive(message) {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    if (data.type === "event" && data.event) {
      document.dispatchEvent(new CustomEvent("cs:live-event", { detail: data.event })); // signals.js
      const { agent_id: agent, run_id: run } = data.event;
      const selectors = ["[data-live='all']"];
      if (agent) selectors.push(`[data-live-agent='${CSS.escape(agent)}']`);
      if (run) selectors.push(`[data-live-run='${CSS.escape(run)}']`);
      all(document, selectors.join(",")).forEach(schedule);
      if (data.event.type === "call-decided" && data.event.tool_call_id) markDecided(data.event);
    } else if (data.type === "presence" && data.run_id) {
      present.set(data.run_id, Array.isArray(data.users) ? data.users.map(String) : []);
      all(document, `[data-presence-run='${CSS.escape(data.run_id)}']`).forEach(showPresence);
    } else if (data.type === "chunk" && data.chunk) {
      appendOutput(data.chunk);
    } else if (data.type === "agents") {
      subscribeRuns(); // a run's output this page lost, or may see again
      refreshAll();
    }
  }

  function connect() {
    retryTimer = null;
    setState(attempts === 0 && !socket ? "connecting" : "offline");
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${url}`);
    socket = ws;
    ws.addEventListener("open", () => {
      attempts = 0;
      setState("live");
      subscribeRuns();
      announced.clear();
      present.clear();
      announcePresence();
      refreshAll();
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
