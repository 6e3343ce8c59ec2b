// Live updates: a websocket says "something changed"; the partials on this page refetch themselves
// over HTTP (htmx), so each page keeps its own filters and pagination. No inline script anywhere.
//
// Markup contract (see templates/base.html and approvals/templates):
//   <body data-live-url="/ws/live/">          the socket to open (only on logged-in pages)
//   <span id="live-status" role="status" hidden>
//                                             the connection badge; data-state = connecting|live|offline|signed-out
//                                             (signed out: the server closed the socket with 4401; a
//                                             "Sign in again" link follows the badge, nothing reconnects)
//   <el id="..." hx-get="..." hx-trigger="cs:refresh" hx-swap="outerHTML"
//       data-live="all" | data-live-agent="ID" | data-live-run="ID">
//                                             refetched when an event concerns it, and on (re)connect
//   <ol data-live-output="RUN_ID">            receives the run's streamed output (text, tool results);
//                                             its closest [hidden] section is shown on the first chunk
//   <button class="new-pill" hidden>          in a list: counts the runs held back (see below); a click
//                                             shows them
//
// A refetch must never get in the reviewer's way:
//   - it waits while a request from inside the partial is in flight (a decision: its answer swaps into
//     the card it came from, which must still be in the page) and while a field in it has focus;
//   - a card showing the outcome of a decision taken on this page stays (until the run it shows has
//     moved on), and so does a card with a form the reviewer has started to fill in or that came
//     back with errors (while the run still waits);
//     open <details> stay open, and focus stays on what it was on;
//   - a card whose run was decided elsewhere goes away (inbox) or shows how it ended (run page).
// Nothing at or above the reviewer's pointer or focus moves, and no card there changes the calls it
// shows (a click must decide the call it was aimed at):
//   - new runs wait behind the list's "N new runs — show" pill until the reviewer asks for them;
//   - a card there stays as it is; one decided or changed elsewhere stays too, marked "is-gone" (its
//     buttons would only say "already decided"), until the pointer and focus have moved on.
// Signed out (the socket closed with 4401, or a refetch was sent to the login page): the badge says
// so and the page's buttons are disabled; nothing is decided by a session that has ended.
(function () {
  "use strict";

  var body = document.body;
  var url = body && body.getAttribute("data-live-url");
  if (!url || !window.WebSocket) return;

  var LIVE = "[data-live],[data-live-agent],[data-live-run]";
  var CARD = ".run-card[id]";
  var COALESCE_MS = 40;
  var badge = document.getElementById("live-status");
  var labels = {
    connecting: "Connecting…",
    live: "Live",
    offline: "Reconnecting…",
    "signed-out": "Signed out",
  };
  var titles = {
    connecting: "Opening the live connection",
    live: "Changes made elsewhere appear here as they happen",
    offline: "Live updates are paused; retrying. The page refreshes itself once it is back.",
    "signed-out": "Your session ended (logged out, expired or revoked): sign in again to see live changes",
  };

  var socket = null;
  var attempts = 0;
  var retryTimer = null;

  function setState(state) {
    if (!badge) return;
    badge.hidden = false;
    badge.setAttribute("data-state", state);
    badge.textContent = labels[state] || state;
    badge.title = titles[state] || "";
  }

  // The session is over: say so, and offer the way back. The link reloads this page, which sends the
  // reviewer through the login form (every page requires it) and back here.
  function signedOut() {
    var ws = socket;
    socket = null; // (its close event is then ignored: nothing reconnects)
    if (ws) ws.close();
    setState("signed-out");
    document.querySelectorAll("#main button").forEach(function (button) {
      button.disabled = true;
    });
    if (!badge || document.getElementById("live-sign-in")) return;
    var link = document.createElement("a");
    link.id = "live-sign-in";
    link.className = "live-sign-in";
    link.href = window.location.pathname + window.location.search;
    link.textContent = "Sign in again";
    badge.after(link);
  }

  // --- Which requests are in flight --------------------------------------------------------------

  var userRequests = new Map(); // xhr -> the live partial a request from inside it belongs to
  var refreshing = {}; // live partial id -> true while its own refetch is in flight
  var again = {}; // live partial id -> an event arrived during that refetch

  function liveOf(el) {
    return el && el.closest ? el.closest(LIVE) : null;
  }

  function hasUserRequest(live) {
    var found = false;
    userRequests.forEach(function (owner) {
      if (owner === live || (owner.id && owner.id === live.id)) found = true;
    });
    return found;
  }

  function typingIn(live) {
    var active = document.activeElement;
    return !!(active && live.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName));
  }

  function busy(live) {
    return hasUserRequest(live) || typingIn(live);
  }

  // --- Where the reviewer is ---------------------------------------------------------------------

  var pointer = null; // where the pointer rests (viewport coordinates); null: unknown, or off the page
  var moved = null; // a pending look at what was held back while the pointer was there
  // (Until the pointer moves on a page, where it is is unknown: a page just loaded holds nothing back.)

  function track(e) {
    if (e.type !== "pointerout") pointer = { x: e.clientX, y: e.clientY };
    else if (!e.relatedTarget) pointer = null; // left the window (or a touch ended)
    if (moved === null && document.querySelector("[data-stale]")) {
      moved = window.setTimeout(function () {
        moved = null;
        flushStale();
      }, 150);
    }
  }
  ["pointermove", "pointerover", "pointerout"].forEach(function (type) {
    document.addEventListener(type, track, { passive: true });
  });

  // How far down a partial the reviewer is: the pointer's height when it rests on the partial, and
  // the bottom of what has focus in it. Null: neither. What starts at or above it must not move.
  function holdLine(live) {
    var line = null;
    var under = pointer && document.elementFromPoint(pointer.x, pointer.y);
    if (under && live.contains(under)) line = pointer.y;
    var active = document.activeElement;
    if (active && active !== body && live.contains(active)) {
      line = Math.max(line === null ? -Infinity : line, active.getBoundingClientRect().bottom);
    }
    return line;
  }

  function above(el, line) {
    return line !== null && el.getBoundingClientRect().top <= line;
  }

  // A card held as it was (decided or changed elsewhere) is still where the reviewer is.
  function pinned(live) {
    var line = holdLine(live);
    return Array.prototype.some.call(live.querySelectorAll(".is-gone"), function (card) {
      return above(card, line);
    });
  }

  // The server sends an htmx request of an ended session to the login page (HX-Redirect). A refetch
  // nobody asked for must not leave the page (and what the reviewer was doing): say signed out.
  document.addEventListener("htmx:beforeOnLoad", function (e) {
    var elt = e.detail.elt;
    if (elt && elt.matches && elt.matches(LIVE) && e.detail.xhr.getResponseHeader("HX-Redirect")) {
      e.preventDefault();
      signedOut();
    }
  });

  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail.elt;
    var xhr = e.detail.xhr;
    var live = liveOf(elt);
    if (!live || !xhr) return;
    if (live === elt) {
      // The partial's own refetch.
      var id = live.id;
      if (!id) return;
      refreshing[id] = true;
      xhr.addEventListener("loadend", function () {
        delete refreshing[id];
        if (again[id]) {
          delete again[id];
          schedule(document.getElementById(id));
        }
      });
      return;
    }
    userRequests.set(xhr, live);
    xhr.addEventListener("loadend", function () {
      userRequests.delete(xhr);
      // htmx has swapped the answer by now (load runs before loadend): catch up on what waited.
      window.setTimeout(flushStale, 0);
    });
  });

  // --- Refetching ---------------------------------------------------------------------------------

  var timers = new Map(); // live partial (or its id) -> pending coalesced refresh

  // Events come in bursts (decided, resumed, completed): one refetch per partial per burst.
  function schedule(el) {
    if (!el) return;
    var key = el.id || el;
    if (timers.has(key)) return;
    timers.set(
      key,
      window.setTimeout(function () {
        timers.delete(key);
        // The partial may have been swapped meanwhile: refresh whatever now carries its id.
        refresh(el.isConnected || !el.id ? el : document.getElementById(el.id));
      }, COALESCE_MS)
    );
  }

  function refresh(el) {
    if (!el || !el.isConnected || !window.htmx) return;
    if (busy(el)) {
      el.setAttribute("data-stale", "");
      return;
    }
    if (el.id && refreshing[el.id]) {
      // htmx would queue this on the element its answer replaces, and drop it: ask again after.
      again[el.id] = true;
      return;
    }
    el.removeAttribute("data-stale");
    window.htmx.trigger(el, "cs:refresh");
  }

  function flushStale() {
    document.querySelectorAll("[data-stale]").forEach(function (el) {
      if (!busy(el) && !pinned(el)) refresh(el);
    });
  }

  document.addEventListener("focusout", function () {
    // After focus settles, refresh what was held back and is no longer busy.
    window.setTimeout(flushStale, 0);
  });

  // Forms the reviewer has started to fill in survive refetches (see keepAcrossSwap).
  document.addEventListener("input", function (e) {
    var form = e.target.closest && e.target.closest("form");
    if (form) form.setAttribute("data-dirty", "");
  });
  document.addEventListener("submit", function (e) {
    e.target.removeAttribute("data-dirty");
  });

  // --- Keeping what the reviewer is looking at across a refetch ----------------------------------

  var swaps = new WeakMap(); // xhr -> what the old partial held

  // Which calls a card shows as waiting: the same calls mean the same state of the run.
  function callIds(card) {
    return Array.prototype.map
      .call(card.querySelectorAll(".call[id]"), function (c) {
        return c.id;
      })
      .sort()
      .join(" ");
  }

  function openDetails(card) {
    var open = [];
    card.querySelectorAll("details").forEach(function (d, i) {
      if (d.open) open.push(i);
    });
    return open;
  }

  document.addEventListener("htmx:beforeSwap", function (e) {
    var old = e.detail.target;
    var config = e.detail.requestConfig;
    if (!old || !old.matches || !old.matches(LIVE) || !config || config.elt !== old) return;
    if (!e.detail.shouldSwap) return;
    if (busy(old)) {
      // A decision started (or the reviewer clicked into a field) while this refetch was on its way.
      e.detail.shouldSwap = false;
      old.setAttribute("data-stale", "");
      return;
    }
    var cards = Array.prototype.slice.call(old.querySelectorAll(CARD));
    var active = document.activeElement;
    var line = holdLine(old);
    var first = old.querySelector(CARD + ", .empty");
    var reveal = revealing;
    revealing = false;
    swaps.set(e.detail.xhr, {
      id: old.id,
      // New runs would go in above the reviewer (newest first), or some already wait: hold them back.
      hold: !reveal && (held.size > 0 || (first !== null && above(first, line))),
      reveal: reveal,
      focused: active && active !== document.body && old.contains(active) ? active : null,
      order: cards.map(function (c) {
        return c.id;
      }),
      cards: cards.map(function (c) {
        return {
          node: c,
          // Told by content, not by the card's class: htmx gives a swapped-in element with a known id
          // its predecessor's attributes until it settles, and this refetch may come before that.
          outcome: c.querySelector(".outcome") !== null,
          continuing: c.querySelector(".outcome-continuing") !== null,
          // Half-filled, or sent back with errors next to the fields: the reviewer's work.
          dirty: c.querySelector("form[data-dirty], .field-errors, .form-errors, .notice") !== null,
          calls: callIds(c),
          open: openDetails(c),
          above: above(c, line),
        };
      }),
    });
  });

  document.addEventListener("htmx:afterSwap", function (e) {
    var saved = e.detail.xhr && swaps.get(e.detail.xhr);
    if (!saved) {
      // A list swapped some other way (filters, another page) shows all there is.
      if (e.target.querySelector && e.target.querySelector(".new-pill")) held.clear();
      return;
    }
    swaps.delete(e.detail.xhr);
    var fresh = (saved.id && document.getElementById(saved.id)) || e.target;
    if (!fresh || !fresh.isConnected) return;
    keepAcrossSwap(fresh, saved);
    holdNew(fresh, saved);
    // A card held as it was: look again once the reviewer has moved on.
    if (fresh.querySelector(".is-gone")) fresh.setAttribute("data-stale", "");
    // Focus was on something kept (the outcome a decision just focused, say): put it back.
    if (saved.focused && saved.focused.isConnected) saved.focused.focus({ preventScroll: true });
  });

  function inside(root, id) {
    var el = document.getElementById(id);
    return el && root.contains(el) ? el : null;
  }

  function keepAcrossSwap(fresh, saved) {
    saved.cards.forEach(function (kept) {
      var node = kept.node;
      var now = inside(fresh, node.id);
      if (now) {
        var waiting = now.matches(CARD) && now.querySelector(".outcome") === null;
        var same = callIds(now) === kept.calls;
        var keep = waiting
          ? kept.dirty || (kept.outcome && same) || kept.above
          : ended(kept) && !kept.continuing;
        if (keep) {
          // Waiting still: keep the half-filled form rather than the fresh copy, the outcome of
          // this page's decision while the run waits on the very calls it shows ("suspended again"),
          // and whatever is at or above the reviewer's pointer or focus (marked if its calls changed).
          // Ended: keep that outcome rather than the summary (it says the same, and more), unless it
          // only said "continuing in the background": the summary then says how it ended.
          now.replaceWith(node);
          markGone(node, waiting && !same);
          window.htmx.process(node); // htmx cleaned the old subtree up when it swapped it out
        } else {
          now.querySelectorAll("details").forEach(function (d, i) {
            if (kept.open.indexOf(i) !== -1) d.open = true;
          });
        }
      } else if (ended(kept)) {
        // The outcome of a decision taken on this page: the run is not listed any more, but the
        // reviewer should still see what their decision did. (An outcome that shows the run waiting
        // again is stale once the run is gone: someone decided it elsewhere.)
        place(fresh, node, saved.order);
        window.htmx.process(node);
      } else if (kept.above && followed(fresh, saved.order, node.id)) {
        // Gone at or above the reviewer: the cards after it would move up under the pointer.
        place(fresh, node, saved.order);
        markGone(node, true);
        window.htmx.process(node);
      }
      // Otherwise the run was decided elsewhere (or left this page's filters): it goes.
    });
  }

  function followed(fresh, order, id) {
    return order.slice(order.indexOf(id) + 1).some(function (other) {
      return inside(fresh, other) !== null;
    });
  }

  function markGone(card, gone) {
    card.classList.toggle("is-gone", gone);
    var note = card.querySelector(":scope > .gone-note");
    if (gone && !note) {
      note = document.createElement("p");
      note.className = "gone-note";
      note.setAttribute("role", "status");
      note.textContent = "Decided or changed elsewhere: this card updates once you move on";
      card.prepend(note);
    } else if (!gone && note) {
      note.remove();
    }
  }

  // --- New runs wait behind the pill ---------------------------------------------------------------

  var held = new Set(); // ids of the cards held back
  var revealing = false; // the pill was clicked: the next refetch shows them

  function holdNew(fresh, saved) {
    var pill = fresh.querySelector(".new-pill");
    if (!pill) return;
    var present = new Set();
    fresh.querySelectorAll(CARD).forEach(function (card) {
      present.add(card.id);
      if (saved.order.indexOf(card.id) !== -1) return;
      if (saved.hold) {
        held.add(card.id);
        card.remove();
      } else if (saved.reveal) {
        card.setAttribute("tabindex", "-1");
        if (!fresh.contains(document.activeElement)) card.focus(); // the first one shown
      }
    });
    held.forEach(function (id) {
      if (!present.has(id)) held.delete(id); // decided elsewhere meanwhile
    });
    if (held.size) {
      pill.textContent = held.size + (held.size === 1 ? " new run" : " new runs") + " — show";
      pill.hidden = false;
    }
  }

  document.addEventListener("click", function (e) {
    var pill = e.target.closest && e.target.closest(".new-pill");
    if (!pill) return;
    held.clear();
    revealing = true;
    refresh(liveOf(pill));
  });

  // The outcome of a decision after which the run no longer waits here (it ended, or it continues in
  // the background), as opposed to one that still shows it waiting on other calls.
  function ended(kept) {
    return kept.outcome && kept.calls === "";
  }

  function place(fresh, node, order) {
    var i = order.indexOf(node.id);
    var j, other;
    for (j = i + 1; j < order.length; j++) {
      other = inside(fresh, order[j]);
      if (other) return other.before(node);
    }
    for (j = i - 1; j >= 0; j--) {
      other = inside(fresh, order[j]);
      if (other) return other.after(node);
    }
    var anchor = fresh.querySelector(".run-card, .empty, .list-foot");
    if (anchor) anchor.before(node);
    else fresh.appendChild(node);
  }

  // --- Events and run output ----------------------------------------------------------------------

  function targetsFor(event) {
    var selectors = ["[data-live='all']"];
    if (event.agent_id) selectors.push("[data-live-agent='" + CSS.escape(event.agent_id) + "']");
    if (event.run_id) selectors.push("[data-live-run='" + CSS.escape(event.run_id) + "']");
    return document.querySelectorAll(selectors.join(","));
  }

  function refreshAll() {
    document.querySelectorAll(LIVE).forEach(schedule);
  }

  function describe(chunk) {
    var payload = chunk.payload || {};
    switch (chunk.type) {
      case "tool-call":
        return "→ " + payload.tool_name + " " + JSON.stringify(payload.args);
      case "tool-result":
        return "← " + payload.tool_name + ": " + JSON.stringify(payload.result);
      case "tool-call-approval":
        return "⏸ " + payload.tool_name + " needs approval";
      case "tool-call-suspended":
        return "⏸ " + payload.tool_name + " waits for input";
      case "finish":
        return payload.status === "suspended" ? "The run waits for a decision again." : "Run " + payload.status + ".";
      case "error":
        return "Error: " + payload.error;
      default:
        return chunk.type;
    }
  }

  // Approved with edited arguments: the line shows those the tool ran with; say who, show the model's.
  function edited(item, payload) {
    var who = document.createElement("span");
    who.className = "edited-by";
    who.textContent = "edited by " + (payload.edited_by || "a reviewer");
    var model = document.createElement("span");
    model.className = "model-args";
    model.textContent = "the model's: " + JSON.stringify(payload.model_args);
    item.append(" ", who, " ", model);
  }

  function appendOutput(chunk) {
    var list = document.querySelector("[data-live-output='" + CSS.escape(chunk.run_id) + "']");
    if (!list) return;
    var section = list.closest("[hidden]");
    if (section) section.hidden = false;
    var last = list.lastElementChild;
    if (last && last.getAttribute("data-kind") === "finish" && chunk.type !== "finish") {
      // A new continuation of the same run: start over.
      list.textContent = "";
      last = null;
    }
    if (chunk.type === "text-delta") {
      if (!last || last.getAttribute("data-kind") !== "text") {
        last = document.createElement("li");
        last.setAttribute("data-kind", "text");
        list.appendChild(last);
      }
      last.textContent += (chunk.payload && chunk.payload.text) || "";
      return;
    }
    var item = document.createElement("li");
    item.setAttribute("data-kind", chunk.type);
    item.textContent = describe(chunk); // textContent: model output is never parsed as HTML
    if (chunk.type === "tool-call" && chunk.payload && "model_args" in chunk.payload) {
      edited(item, chunk.payload);
    }
    list.appendChild(item);
  }

  function subscribeRuns() {
    document.querySelectorAll("[data-live-output]").forEach(function (el) {
      socket.send(JSON.stringify({ subscribe_run: el.getAttribute("data-live-output") }));
    });
  }

  // --- The socket ---------------------------------------------------------------------------------

  function connect() {
    retryTimer = null;
    setState(attempts === 0 && !socket ? "connecting" : "offline");
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + window.location.host + url);
    socket = ws;
    ws.addEventListener("open", function () {
      attempts = 0;
      setState("live");
      subscribeRuns();
      // Whatever changed before this socket listened (while the page loaded, or while it was away):
      // refetch every live partial once.
      refreshAll();
    });
    ws.addEventListener("message", function (message) {
      var data;
      try {
        data = JSON.parse(message.data);
      } catch (err) {
        return;
      }
      if (data.type === "event" && data.event) {
        targetsFor(data.event).forEach(schedule);
        body.dispatchEvent(new CustomEvent("cs:run-event", { detail: data.event }));
      } else if (data.type === "chunk" && data.chunk) {
        appendOutput(data.chunk);
      } else if (data.type === "agents") {
        // Which agents this reviewer may see changed: every partial may show something else now,
        // and a run's output this page lost (or may see again) follows.
        subscribeRuns();
        refreshAll();
      }
    });
    ws.addEventListener("close", function (e) {
      if (socket !== ws) return;
      if (e.code === 4401) {
        signedOut();
        return; // the session is gone: reconnecting would not help
      }
      setState("offline");
      retry();
    });
  }

  function retry() {
    if (retryTimer !== null) return;
    attempts += 1;
    var delay = Math.min(15000, 500 * Math.pow(2, attempts - 1));
    retryTimer = window.setTimeout(connect, delay / 2 + Math.random() * (delay / 2));
  }

  // Back online (network, or the tab woke up): try now rather than at the end of the backoff.
  function retryNow() {
    if (!socket || socket.readyState !== WebSocket.CLOSED || retryTimer === null) return;
    window.clearTimeout(retryTimer);
    retryTimer = null;
    attempts = 0;
    connect();
  }
  window.addEventListener("online", retryNow);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") retryNow();
  });

  connect();
})();
