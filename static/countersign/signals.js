// Signals that something waits: the tab title carries the waiting count (inbox, overview), cards
// that arrive live are highlighted for a moment, and (opt-in) the browser notifies the reviewer of
// new calls on the agents they follow.
//
// Markup: body[data-follows] (JSON ids of the followed agents, templates/base.html), the inbox's
// #run-list and the overview's #agent-table with their [data-total], form#follow-form[data-agent]
// [data-following] (swapped by htmx when the reviewer follows or unfollows), button.notify-enable.
// Run events come from live.js as "cs:live-event" on document (id-only: nothing of the model's
// output reaches a notification).
(() => {
  "use strict";

  let follows = new Set();
  try {
    follows = new Set(JSON.parse(document.body.getAttribute("data-follows") || "[]"));
  } catch {
    // an unreadable list follows nothing
  }

  // --- The tab title ------------------------------------------------------------------------------

  const COUNT = /^\(\d+\) /;
  function title() {
    const total = document.querySelector("#run-list [data-total], #agent-table [data-total]");
    if (!total) return;
    const n = Number(total.getAttribute("data-total"));
    const base = document.title.replace(COUNT, "");
    document.title = n > 0 ? `(${n}) ${base}` : base;
  }

  // --- New cards, highlighted once (the animation respects prefers-reduced-motion: app.css) -----

  const cardIds = (root) => new Set(Array.from(root?.querySelectorAll(".run-card[id]") ?? [], (c) => c.id));
  let known = cardIds(document.getElementById("run-list"));

  document.addEventListener("htmx:afterSettle", () => {
    const list = document.getElementById("run-list");
    if (!list) return;
    title();
    for (const card of list.querySelectorAll(".run-card[id]")) {
      if (known.has(card.id)) continue;
      card.classList.add("is-new");
      card.addEventListener("animationend", () => card.classList.remove("is-new"), { once: true });
      // Without the animation (reduced motion) the tint goes after a while all the same.
      window.setTimeout(() => card.classList.remove("is-new"), 4000);
    }
    known = cardIds(list);
  });

  // --- Notifications ----------------------------------------------------------------------------

  const canNotify = "Notification" in window;
  const enable = document.querySelector("button.notify-enable");

  function showEnable() {
    if (!enable || !canNotify) return;
    enable.hidden = Notification.permission === "granted" || Notification.permission === "denied";
  }

  enable?.addEventListener("click", async () => {
    await Notification.requestPermission();
    showEnable();
  });
  showEnable();

  // Following or unfollowing on the inbox (the form's answer replaces it).
  document.addEventListener("htmx:afterSwap", (e) => {
    const form = e.target instanceof Element ? e.target.closest("#follow-form") : null;
    if (!form) return;
    const agent = form.getAttribute("data-agent");
    if (form.getAttribute("data-following") === "yes") follows.add(agent);
    else follows.delete(agent);
  });

  // Not for what the reviewer already looks at: that agent's inbox, in a visible tab.
  function looking(agent) {
    if (document.visibilityState !== "visible") return false;
    return Array.from(document.querySelectorAll("#run-list[data-live-agent]")).some(
      (list) => list.getAttribute("data-live-agent") === agent
    );
  }

  document.addEventListener("cs:live-event", (e) => {
    const event = e.detail || {};
    if (event.type !== "run-suspended" || !follows.has(event.agent_id)) return;
    if (!canNotify || Notification.permission !== "granted" || looking(event.agent_id)) return;
    const note = new Notification("A call waits for a decision", {
      body: `Agent ${event.agent_id}: run ${event.run_id}`,
      tag: `countersign-${event.agent_id}-${event.run_id}`,
    });
    note.addEventListener("click", () => {
      window.focus();
      location.assign(`/runs/${encodeURIComponent(event.run_id)}/?agent=${encodeURIComponent(event.agent_id)}`);
    });
  });
})();
