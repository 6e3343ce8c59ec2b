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
//
// A refetch must never get in the reviewer's way:
//   - it waits while a request from inside the partial is in flight (a decision: its answer swaps into
//     the card it came from, which must still be in the page) and while a field in it has focus;
//   - a card showing the outcome of a decision taken on this page stays (until the run it shows has
//     moved on), and so does a card with a form the reviewer has started to fill in or that came
//     back with errors (while the run still waits);
//     open <details> stay open, and focus stays on what it was on;
//   - a card whose run was decided elsewhere goes away (inbox) or shows how it ended (run page).
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
    setState("signed-out");
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
      if (!busy(el)) refresh(el);
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
    swaps.set(e.detail.xhr, {
      id: old.id,
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
        };
      }),
    });
  });

  document.addEventListener("htmx:afterSwap", function (e) {
    var saved = e.detail.xhr && swaps.get(e.detail.xhr);
    if (!saved) return;
    swaps.delete(e.detail.xhr);
    var fresh = (saved.id && document.getElementById(saved.id)) || e.target;
    if (!fresh || !fresh.isConnected) return;
    keepAcrossSwap(fresh, saved);
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
        var keep = waiting
          ? kept.dirty || (kept.outcome && callIds(now) === kept.calls)
          : ended(kept) && !kept.continuing;
        if (keep) {
          // Waiting still: keep the half-filled form rather than the fresh copy, and the outcome of
          // this page's decision while the run waits on the very calls it shows ("suspended again").
          // Ended: keep that outcome rather than the summary (it says the same, and more), unless it
          // only said "continuing in the background": the summary then says how it ended.
          now.replaceWith(node);
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
      }
      // Otherwise the run was decided elsewhere (or left this page's filters): it goes.
    });
  }

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
