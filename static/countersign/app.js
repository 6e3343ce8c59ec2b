// Countersign: the little the pages need beyond htmx. No inline handlers anywhere (strict CSP).
(function () {
  "use strict";

  // htmx 2 does not swap error responses: say so instead of failing silently.
  function showProblem(text) {
    var main = document.getElementById("main");
    if (!main) return;
    var list = main.querySelector("ul.messages");
    if (!list) {
      list = document.createElement("ul");
      list.className = "messages";
      list.setAttribute("role", "status");
      main.insertBefore(list, main.firstChild);
    }
    var item = document.createElement("li");
    item.className = "message error";
    item.textContent = text; // text, never HTML
    list.appendChild(item);
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var reason = xhr.status === 403
      ? "Not allowed (403): you may lack a permission, or the page is stale. Reload and try again."
      : "The server answered " + xhr.status + ". Reload the page to see the current state.";
    showProblem(reason);
  });

  document.addEventListener("htmx:sendError", function () {
    showProblem("Could not reach the server. Check the connection and try again.");
  });

  // A call row the reviewer expanded stays expanded when its list or card is fetched again (a live
  // refetch): closing it would move everything below it, and lose the reviewer's place.
  var expanded = [];
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !target.querySelectorAll) return;
    expanded = Array.prototype.map.call(
      target.querySelectorAll("section.call[id] > details.call-row[open]"),
      function (row) { return row.parentNode.id; }
    );
  });
  document.addEventListener("htmx:afterSwap", function () {
    expanded.forEach(function (id) {
      var call = document.getElementById(id);
      var row = call && call.querySelector(":scope > details.call-row");
      if (row) row.open = true;
    });
    expanded = [];
  });

  // A folded inbox row's body is fetched when the row opens (partials/run_card.html), whatever
  // opened it: a click, the keys, a refetch or a history restore putting it back open. Either the
  // row opens after htmx wired its placeholder up (toggle, which does not bubble: the document hears
  // it while it is captured), or htmx wires up a placeholder whose row is already open (a swap, a
  // restore, a card kept by live.js: a trigger sent before then had no listener yet). hx-sync drops
  // a second request while one is on its way.
  var LAZY = "details.call-row[open] > .call-body-lazy";
  function loadBody(body) {
    window.htmx.trigger(body, "cs:load-body");
  }
  document.addEventListener("toggle", function (event) {
    var row = event.target;
    if (row.matches && row.matches("details.call-row") && row.open) {
      row.parentNode.querySelectorAll(LAZY).forEach(loadBody);
    }
  }, true);
  document.addEventListener("htmx:afterProcessNode", function (event) {
    if (event.target.matches && event.target.matches(LAZY)) loadBody(event.target);
  });

  // On a phone the menu folds behind its button (base.html); the link that opens it without
  // JavaScript (the :target rule of app.css) gives way to the button, which says whether it is open.
  var menuButton = document.querySelector(".menu-toggle");
  var menu = document.getElementById("site-menu");
  if (menuButton && menu) {
    var setMenu = function (open) {
      menu.classList.toggle("is-open", open);
      menuButton.setAttribute("aria-expanded", String(open));
    };
    document.querySelectorAll(".menu-link").forEach(function (link) { link.hidden = true; });
    menuButton.hidden = false;
    menuButton.addEventListener("click", function () {
      setMenu(menuButton.getAttribute("aria-expanded") !== "true");
    });
    menu.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || !menu.classList.contains("is-open")) return;
      setMenu(false);
      menuButton.focus();
    });
  }

  // On a phone the filters start folded behind their button, unless they have something to say.
  if (window.matchMedia("(max-width: 40rem)").matches) {
    document.querySelectorAll("details.filter-panel").forEach(function (panel) {
      if (!panel.querySelector(".field-errors")) panel.open = false;
    });
  }

  // A decision sent back with errors: focus goes to the first invalid field (its row and any
  // folded part opened), so the reviewer lands on what to fix.
  document.addEventListener("htmx:afterSwap", function (event) {
    var config = event.detail.requestConfig;
    if (!config || config.verb !== "post" || !event.target || !event.target.querySelector) return;
    var invalid = event.target.querySelector("[aria-invalid='true']");
    if (!invalid) return;
    for (var up = invalid.parentElement; up; up = up.parentElement) {
      if (up.tagName === "DETAILS") up.open = true;
    }
    invalid.focus();
  });

  // After a decision replaces a card, move focus to its outcome so keyboard and screen reader users
  // land on what happened. The event fires on the new card (the old one, the target, is gone after an
  // outerHTML swap); live refetches (GET) must not move anyone's focus.
  document.addEventListener("htmx:afterSwap", function (event) {
    var config = event.detail.requestConfig;
    if (!config || config.verb !== "post") return;
    var swapped = event.target;
    if (!swapped || !swapped.isConnected || !swapped.querySelector) return;
    var outcome = swapped.querySelector(".outcome");
    if (outcome) {
      outcome.setAttribute("tabindex", "-1");
      outcome.focus({ preventScroll: false });
    }
  });
})();
