// Live updates: a websocket says "something changed"; the partials on this page refetch themselves
// over HTTP (htmx), so each page keeps its own filters and pagination. No inline script anywhere.
//
// Markup contract (see approvals/templates):
//   <body data-live-url="/ws/live/">          the socket to open (only on logged-in pages)
//   <span id="live-status">                   the connection badge; data-state = connecting|live|offline
//   <el hx-get="..." hx-trigger="cs:refresh"  data-live="all" | data-live-agent="ID" | data-live-run="ID">
//                                             refetched when an event concerns it, and on reconnect
//   <ol data-live-output="RUN_ID">            receives the run's streamed output (text, tool results)
(function () {
  "use strict";

  var body = document.body;
  var url = body && body.getAttribute("data-live-url");
  if (!url || !window.WebSocket) return;

  var badge = document.getElementById("live-status");
  var socket = null;
  var attempts = 0;
  var everConnected = false;
  var labels = { connecting: "Connecting…", live: "Live", offline: "Reconnecting…" };

  function setState(state) {
    if (!badge) return;
    badge.setAttribute("data-state", state);
    badge.textContent = labels[state] || state;
    badge.title = state === "live" ? "Updates arrive as they happen" : "Live updates are paused; retrying";
  }

  // Must match approvals/dom_ids.py: anything but ASCII letters, digits, "-" and "_" becomes _x<hex>_.
  function safe(value) {
    return String(value).replace(/[^A-Za-z0-9_-]/gu, function (c) {
      return "_x" + c.codePointAt(0).toString(16) + "_";
    });
  }

  // A partial the reviewer is typing into is not swapped under their hands: it refreshes when they leave it.
  function busy(el) {
    var active = document.activeElement;
    if (active && el.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    return el.querySelector("[data-dirty]") !== null;
  }

  function refresh(el) {
    if (!document.body.contains(el)) return;
    if (busy(el)) {
      el.setAttribute("data-stale", "");
      return;
    }
    el.removeAttribute("data-stale");
    if (window.htmx) window.htmx.trigger(el, "cs:refresh");
  }

  document.addEventListener("input", function (e) {
    var form = e.target.closest && e.target.closest("form");
    if (form) form.setAttribute("data-dirty", "");
  });
  document.addEventListener("submit", function (e) {
    e.target.removeAttribute("data-dirty");
  });
  document.addEventListener("focusout", function () {
    // After focus settles, refresh what was held back and is no longer busy.
    window.setTimeout(function () {
      document.querySelectorAll("[data-stale]").forEach(function (el) {
        if (!busy(el)) refresh(el);
      });
    }, 0);
  });

  function targetsFor(event) {
    var selectors = ["[data-live='all']"];
    if (event.agent_id) selectors.push("[data-live-agent='" + CSS.escape(event.agent_id) + "']");
    if (event.run_id) selectors.push("[data-live-run='" + CSS.escape(event.run_id) + "']");
    return document.querySelectorAll(selectors.join(","));
  }

  function refreshAll() {
    document.querySelectorAll("[data-live],[data-live-agent],[data-live-run]").forEach(refresh);
  }

  function appendOutput(chunk) {
    var list = document.querySelector("[data-live-output='" + CSS.escape(chunk.run_id) + "']");
    if (!list) return;
    var payload = chunk.payload || {};
    var last = list.lastElementChild;
    if (chunk.type === "text-delta") {
      if (!last || last.getAttribute("data-kind") !== "text") {
        last = document.createElement("li");
        last.setAttribute("data-kind", "text");
        list.appendChild(last);
      }
      last.textContent += payload.text || "";
      return;
    }
    var item = document.createElement("li");
    item.setAttribute("data-kind", chunk.type);
    var text;
    if (chunk.type === "tool-call") text = "→ " + payload.tool_name + " " + JSON.stringify(payload.args);
    else if (chunk.type === "tool-result") text = "← " + payload.tool_name + ": " + JSON.stringify(payload.result);
    else if (chunk.type === "finish") text = "Run " + payload.status;
    else if (chunk.type === "error") text = "Error: " + payload.error;
    else text = chunk.type + " " + (payload.tool_name || "");
    item.textContent = text; // textContent: model output is never parsed as HTML
    list.appendChild(item);
  }

  function subscribeRuns() {
    document.querySelectorAll("[data-live-output]").forEach(function (el) {
      socket.send(JSON.stringify({ subscribe_run: el.getAttribute("data-live-output") }));
    });
  }

  function connect() {
    setState(everConnected ? "offline" : "connecting");
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + url);
    socket.addEventListener("open", function () {
      attempts = 0;
      setState("live");
      subscribeRuns();
      // Whatever happened while we were away: refetch every live partial once.
      if (everConnected) refreshAll();
      everConnected = true;
    });
    socket.addEventListener("message", function (message) {
      var data;
      try {
        data = JSON.parse(message.data);
      } catch (err) {
        return;
      }
      if (data.type === "event" && data.event) {
        targetsFor(data.event).forEach(refresh);
        body.dispatchEvent(new CustomEvent("cs:run-event", { detail: data.event }));
      } else if (data.type === "chunk" && data.chunk) {
        appendOutput(data.chunk);
      }
    });
    socket.addEventListener("close", function (e) {
      setState("offline");
      if (e.code === 4401) {
        badge && (badge.textContent = "Signed out");
        return; // the session is gone: reconnecting would not help
      }
      attempts += 1;
      var delay = Math.min(15000, 500 * Math.pow(2, attempts - 1));
      window.setTimeout(connect, delay / 2 + Math.random() * (delay / 2));
    });
  }

  connect();
})();
