// Countersign: times in the viewer's time zone (approvals/times.py renders them on the server).
// This script tells the server the browser's zone (a cookie), keeps relative times ("3 min")
// ticking, and fixes the rare page rendered before the zone was known. No inline code (strict CSP).
(function () {
  "use strict";

  var COOKIE = "countersign_tz";
  var TICK_MS = 15000;

  function browserZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (error) {
      return "";
    }
  }

  function readCookie(name) {
    var prefix = name + "=";
    var found = document.cookie.split("; ").find(function (part) { return part.indexOf(prefix) === 0; });
    return found ? decodeURIComponent(found.slice(prefix.length)) : "";
  }

  var zone = browserZone();
  if (zone && readCookie(COOKIE) !== zone) {
    // Read by the server on the next request (middleware.viewer_time_zone); a year, like the choice.
    document.cookie = COOKIE + "=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax";
  }

  // The same words as approvals.times.relative_text.
  function relative(ms) {
    var seconds = Math.abs(ms) / 1000;
    if (seconds < 45) return "just now";
    var minutes = Math.max(1, Math.floor(seconds / 60));
    if (minutes < 60) return minutes + " min";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return minutes ? hours + " h " + minutes + " min" : hours + " h";
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours && days < 7 ? days + " d " + hours + " h" : days + " d";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-relative][datetime]").forEach(function (element) {
      var at = Date.parse(element.getAttribute("datetime"));
      if (!isNaN(at)) {
        var text = relative(now - at);
        if (element.textContent !== text) element.textContent = text;
      }
    });
  }

  // The same shape as approvals.times.local_text: "2026-12-01 11:44:28 EST".
  function localText(date) {
    var parts = {};
    new Intl.DateTimeFormat("en-US", {
      timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short",
    }).formatToParts(date).forEach(function (part) { parts[part.type] = part.value; });
    return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" + parts.minute + ":"
      + parts.second + " " + parts.timeZoneName;
  }

  // A page the server rendered before it knew any zone (the first one, usually the login page, has
  // no times): its absolute times are shown in the browser's zone; the next page comes right.
  function localize(root) {
    if (!zone || document.body.dataset.timeZoneSource !== "default" || zone === document.body.dataset.timeZone) return;
    root.querySelectorAll("time[datetime][title^='UTC ']:not([data-relative])").forEach(function (element) {
      var at = new Date(element.getAttribute("datetime"));
      if (!isNaN(at.getTime())) element.textContent = localText(at);
    });
  }

  // Deadlines count down from the seconds left as the server counted them when it rendered the
  // element (data-countdown), so a browser clock that is off changes nothing. The same words as
  // approvals.deadline_views.remaining_text; a call due within DUE_SOON_S stands out.
  var DUE_SOON_S = 300;
  var seen = new WeakMap();

  function remainingText(seconds) {
    if (seconds <= 0) return "due now";
    var hours = Math.floor(seconds / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var secs = seconds % 60;
    if (hours) return hours + " h " + minutes + " min left";
    if (minutes) return minutes + " min " + secs + " s left";
    return secs + " s left";
  }

  // How long ago a live note's change happened ("3 s ago"), counted from when the page heard of it.
  function agoText(seconds) {
    if (seconds < 60) return seconds + " s ago";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    return Math.floor(seconds / 3600) + " h ago";
  }

  function countDown() {
    var now = performance.now();
    document.querySelectorAll("time[data-ago]").forEach(function (element) {
      if (!seen.has(element)) seen.set(element, now);
      var text = agoText(Math.floor((now - seen.get(element)) / 1000));
      if (element.textContent !== text) element.textContent = text;
    });
    document.querySelectorAll("[data-countdown]").forEach(function (element) {
      var total = parseInt(element.getAttribute("data-countdown"), 10);
      if (isNaN(total)) return;
      if (!seen.has(element)) seen.set(element, now);
      var left = Math.max(0, total - Math.floor((now - seen.get(element)) / 1000));
      var text = remainingText(left);
      if (element.textContent !== text) element.textContent = text;
      var holder = element.closest(".chip-deadline, .deadline");
      if (holder) holder.classList.toggle("is-due-soon", left < DUE_SOON_S);
    });
  }

  function start() {
    localize(document);
    tick();
    countDown();
    window.setInterval(tick, TICK_MS);
    window.setInterval(countDown, 1000);
    document.addEventListener("htmx:afterSettle", function (event) {
      localize(event.target);
      tick();
      countDown();
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
