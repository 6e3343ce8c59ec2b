// Each live partial refetches itself (over HTTP through htmx, keeping its page's filters and
// pagination) when a live event names what it shows, and on every (re)connect (live.js); and a
// refetch never gets in the reviewer's way.
//
// Markup:
//   [id][hx-trigger="cs:refresh"][data-live="all" | data-live-agent=ID | data-live-run=ID]
//                                refetched when an event names it, and on every (re)connect
//   .new-pill, .gone-note        (hidden) a list's count of the calls held back; a card's note while
//                                it is held as it was (.is-gone)
//   .run-card[data-kept]         decided elsewhere while open (live-notes.js): kept where it was
//   .call-body[data-body-key]    a call's body; .call-body-lazy: not fetched yet (a folded row)
//
// A refetch waits (data-stale) while a request from inside the partial is in flight (a decision,
// whose answer swaps into its card) and while a field in it has focus. A card showing the outcome of
// a decision taken here stays until its run moves on, and so does a form the reviewer started or
// that came back with errors; <details> stay open. Nothing at or above the pointer or focus moves,
// and no card there changes the calls it shows (a click decides the call it was aimed at): new runs
// wait behind the pill, and a card there decided elsewhere stays, .is-gone, until the reviewer moves
// on.
//
// Not used from htmx: hx-preserve keeps an element whole, buttons that must change included; hx-sync
// queues on the element an outerHTML swap replaces, dropping the queue (hence `refetching`);
// hx-trigger's `throttle:` drops the end of a burst and `delay:` waits as long as events keep coming,
// where schedule's fixed window does neither.
(() => {
  "use strict";

  if (!window.csLive) return;
  const { LIVE } = window.csLive;
  const CARD = ".run-card[id]";
  const COALESCE_MS = 40;
  const byId = (id) => document.getElementById(id);
  const all = (root, selector) => Array.from(root.querySelectorAll(selector));

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
  const held = new Map(); // ids of the new cards held back behind the pill -> their calls
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
          carryNotes(node, now);
          const was = all(node, "details");
          all(now, "details").forEach((d, i) => (d.open ||= Boolean(was[i]?.open)));
        }
      } else if (ended || node.hasAttribute("data-kept")) {
        // Decided here, or elsewhere while the reviewer had it open (live-notes.js): its line says
        // what happened, where it was, until the reviewer moves on.
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

  // What happened to a call while it was on the screen (live-notes.js) is said until the reviewer
  // moves on, whatever refetches its card.
  function carryNotes(node, now) {
    for (const note of all(node, ".call[id] > .live-note")) {
      const call = inside(now, note.parentElement.id);
      if (call && !call.querySelector(":scope > .live-note")) call.prepend(note);
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

  // Runs that land after the last card the page showed (the next page's moving up as calls are
  // decided, or a list ordered oldest first) show at once: nothing the reviewer sees moves, and they
  // are not new. The others wait behind the pill, which counts the calls really new: not shown here
  // already, not decided meanwhile.
  function holdNew(fresh, saved) {
    const pill = fresh.querySelector(".new-pill");
    if (!pill) return;
    const present = new Set();
    const cards = all(fresh, CARD);
    const lastKept = cards.findLastIndex((card) => saved.order.includes(card.id));
    cards.forEach((card, i) => {
      present.add(card.id);
      if (saved.order.includes(card.id) || i > lastKept) return;
      if (saved.hold) {
        held.set(card.id, all(card, ".call[id]").length || 1);
        card.remove();
      } else if (saved.reveal) {
        card.setAttribute("tabindex", "-1");
        if (!fresh.contains(document.activeElement)) card.focus(); // the first one shown
      }
    });
    for (const id of held.keys()) if (!present.has(id)) held.delete(id); // decided elsewhere meanwhile
    const calls = [...held.values()].reduce((sum, n) => sum + n, 0);
    if (calls) {
      pill.textContent = `${calls} new call${calls === 1 ? "" : "s"} — show`;
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

  // What an event names: the partials showing everything, its agent, or its run.
  document.addEventListener("cs:live-event", (e) => {
    const { agent_id: agent, run_id: run } = e.detail;
    const selectors = ["[data-live='all']"];
    if (agent) selectors.push(`[data-live-agent='${CSS.escape(agent)}']`);
    if (run) selectors.push(`[data-live-run='${CSS.escape(run)}']`);
    all(document, selectors.join(",")).forEach(schedule);
  });

  // Whatever changed while the socket did not listen (the page loading, the connection away, the
  // agents this reviewer may see changing): every live partial refetches once.
  const refreshAll = () => all(document, LIVE).forEach(schedule);
  document.addEventListener("cs:live-open", refreshAll);
  document.addEventListener("cs:live-agents", refreshAll);
})();
