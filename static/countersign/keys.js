// The inbox from the keyboard: j/k move between calls, a approves the current one, d opens its
// decline with the reason focused, e opens its argument editor, x ticks it for a bulk decision, ?
// lists the keys (Esc closes). Also: the skip link, and bulk ticks kept across live refetches.
//
// Markup (approvals/templates/approvals/inbox.html, partials/run_card.html): #run-list, its
// .run-card > .call[id] sections (each a folded details.call-row: the current call's row opens),
// their button.approve, .decline-form (in details.decline), details.edit-args,
// input.bulk-select (naming form#bulk-form, with .bulk-count), dialog#keys-help, .keys-open,
// .skip-link. The current call is remembered by id (ids are stable: approvals/dom_ids.py), so it
// survives the refetches live.js makes.
//
// Keys never clash with typing: they do nothing in a text field, textarea, select or editable
// element, with Ctrl, Alt or Meta held, or while a dialog is open.
(() => {
  "use strict";

  const listOf = () => document.getElementById("run-list");
  if (!listOf()) return;
  const CALL = ".run-card:not(.is-gone) .call[id]";
  const help = document.getElementById("keys-help");
  const ticked = new Set(); // values of the bulk checkboxes the reviewer ticked
  let currentId = null;

  const calls = () => Array.from(listOf()?.querySelectorAll(CALL) ?? []);

  function current() {
    const el = currentId ? document.getElementById(currentId) : null;
    return el?.matches(CALL) ? el : null;
  }

  const rowOf = (call) => call.querySelector(":scope > details.call-row");
  let openedByKeys = null; // the row the keys opened, folded again when they move on (untouched)

  // The current call's row is open, so the keys act on what the reviewer can read.
  function select(call) {
    for (const old of document.querySelectorAll(".call.is-current")) old.classList.remove("is-current");
    const previous = openedByKeys && document.getElementById(openedByKeys);
    if (previous && previous !== call && !previous.querySelector("form[data-dirty]")) {
      const row = rowOf(previous);
      if (row) row.open = false;
    }
    openedByKeys = null;
    const row = rowOf(call);
    if (row && !row.open) {
      row.open = true;
      openedByKeys = call.id;
    }
    currentId = call.id;
    call.classList.add("is-current");
    call.setAttribute("tabindex", "-1");
    call.focus({ preventScroll: true });
    call.scrollIntoView({ block: "nearest" });
  }

  // From the current call; once it is gone (decided: its card now shows the outcome, which has
  // focus), from wherever focus is in the list.
  function move(step) {
    const all = calls();
    if (all.length === 0) return;
    const here = current();
    let next;
    if (here) {
      next = all[all.indexOf(here) + step];
    } else {
      const anchor = document.activeElement;
      if (anchor && anchor !== document.body && listOf().contains(anchor)) {
        const after = (c) => anchor.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING;
        next = step > 0 ? all.find(after) : all.filter((c) => !after(c) && !anchor.contains(c)).pop();
      }
      next ??= step > 0 ? all[0] : all[all.length - 1];
    }
    // At either end the ring stays, brought back into view (a live refetch may have moved the page).
    if (next ?? here) select(next ?? here);
  }

  function approve(call) {
    const button = call.querySelector("button.approve");
    if (button && !button.disabled) button.click();
  }

  // Shows a control hidden in a closed <details> or behind a toggle ("Decline…") and returns it.
  function reveal(el) {
    for (let up = el.parentElement; up && up !== listOf(); up = up.parentElement) {
      if (up.tagName === "DETAILS" && !up.open) up.open = true;
    }
    if (el.closest("[hidden]")) {
      const hidden = el.closest("[hidden]");
      const toggle = hidden.id && document.querySelector(`[aria-controls='${CSS.escape(hidden.id)}']`);
      if (toggle) toggle.click();
      else hidden.hidden = false;
    }
    return el;
  }

  function decline(call) {
    const form = call.querySelector(".decline-form");
    if (!form) return;
    reveal(form);
    const reason = form.querySelector("[name='reason']");
    (reason ?? form.querySelector("button"))?.focus();
  }

  const FIELD = "textarea, select, input:not([type='hidden'])";

  // The first field of the parameters' form (or, for a tool without one, of the JSON view).
  function edit(call) {
    const details = call.querySelector("details.edit-args");
    if (!details) return;
    details.open = true;
    const form = details.querySelector("form.edit-args-fields") ?? details.querySelector("form.edit-args-form");
    form?.querySelector(FIELD)?.focus();
  }

  // A folded row's body (and in it the forms the keys act on) is fetched when the row opens
  // (partials/run_card.html): a key pressed meanwhile acts once the body is in, on the call it was
  // pressed on, and only while the reviewer has not moved on (or for a few seconds).
  let pending = null; // {id, act}
  // (Until htmx has settled the new body, htmx-added: its forms would post without htmx.)
  const loading = (call) =>
    call.querySelector(":scope > details > :is(.call-body-lazy, .call-body.htmx-added)") !== null;

  function act(call, fn) {
    if (!loading(call)) return fn(call);
    rowOf(call).open = true; // (the fetch starts when the row opens)
    pending = { id: call.id, act: fn };
    window.setTimeout(() => pending?.id === call.id && (pending = null), 5000);
  }

  // htmx:load (on the new content): the swap replaced the element that asked, so its own events
  // fire on a node no longer in the page. Also after any settle: a live refetch may bring the row back.
  function actPending() {
    const call = pending && document.getElementById(pending.id);
    if (!call || loading(call)) return;
    const { act: fn } = pending;
    pending = null;
    if (call.id === currentId) fn(call);
  }
  document.addEventListener("htmx:load", actPending);
  document.addEventListener("htmx:afterSettle", () => window.setTimeout(actPending, 0));

  function tick(call) {
    const box = call.querySelector("input.bulk-select");
    if (!box) return;
    box.checked = !box.checked;
    box.dispatchEvent(new Event("change", { bubbles: true }));
  }

  const showHelp = () => help && !help.open && help.showModal();

  const TYPING = /^(TEXTAREA|SELECT)$/;
  const NOT_TEXT = /^(checkbox|radio|button|submit|reset|file|color|range)$/;
  function typing(target) {
    if (!(target instanceof Element)) return false;
    if (target.isContentEditable || TYPING.test(target.tagName)) return true;
    return target.tagName === "INPUT" && !NOT_TEXT.test(target.type);
  }

  const ON_CALL = { a: approve, d: decline, e: edit };

  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
    if (typing(e.target) || document.querySelector("dialog[open]")) return;
    if ("jkadex".includes(e.key)) byKeys = true;
    if (e.key === "?") {
      e.preventDefault();
      showHelp();
    } else if (e.key === "j" || e.key === "k") {
      e.preventDefault();
      move(e.key === "j" ? 1 : -1);
    } else if ((ON_CALL[e.key] || e.key === "x") && !e.repeat) {
      const call = current();
      if (!call) return;
      e.preventDefault(); // (d and e move focus into a field: the key must not be typed there)
      if (e.key === "x") tick(call); // (the tick is beside the row, not in its body)
      else act(call, ON_CALL[e.key]);
    }
  });

  // A pointer in the list picks the call it is on, so the keys act where the reviewer looks.
  document.addEventListener("focusin", (e) => {
    const call = e.target instanceof Element ? e.target.closest(CALL) : null;
    if (call && call.id !== currentId) {
      for (const old of document.querySelectorAll(".call.is-current")) old.classList.remove("is-current");
      currentId = call.id;
      call.classList.add("is-current");
    }
  });

  document.addEventListener("click", (e) => {
    const target = e.target instanceof Element ? e.target : null;
    if (target?.closest(".skip-link")) {
      const first = calls()[0];
      if (first) {
        e.preventDefault();
        select(first);
      }
    } else if (target?.closest(".keys-open")) {
      showHelp();
    }
  });

  // --- Bulk ticks: kept across the refetches that replace the list ------------------------------

  function count() {
    const label = document.querySelector("#bulk-form .bulk-count");
    if (!label) return;
    const n = document.querySelectorAll("input.bulk-select:checked").length;
    label.textContent = n ? `${n} selected` : "";
  }

  document.addEventListener("change", (e) => {
    const box = e.target;
    if (!(box instanceof HTMLInputElement) || !box.classList.contains("bulk-select")) return;
    if (box.checked) ticked.add(box.value);
    else ticked.delete(box.value);
    count();
  });

  document.addEventListener("htmx:afterSettle", () => {
    for (const box of document.querySelectorAll("input.bulk-select")) box.checked = ticked.has(box.value);
    count();
    const here = current();
    if (!here) return;
    here.classList.add("is-current"); // a refetched card comes without the class
    // A swap above it (a decision's outcome, a live refetch) may have pushed it out of view: while
    // the reviewer works from the keyboard, the ring stays in sight.
    if (byKeys) here.scrollIntoView({ block: "nearest" });
  });

  let byKeys = false; // the keys moved last, not the pointer or the wheel
  for (const type of ["pointerdown", "wheel"]) {
    document.addEventListener(type, () => (byKeys = false), { passive: true });
  }

  for (const button of document.querySelectorAll(".keys-open")) button.hidden = false;
})();
