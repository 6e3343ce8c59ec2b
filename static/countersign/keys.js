// The inbox from the keyboard: j/k move between calls, a approves the current one, d opens its
// decline with the reason focused, e opens its argument editor, x ticks it for a bulk decision, ?
// lists the keys (Esc closes). Also: the skip link, and bulk ticks kept across live refetches.
//
// Markup (approvals/templates/approvals/inbox.html, partials/run_card.html): #run-list, its
// .run-card > .call[id] sections (each a folded details.call-row: the current call's row opens),
// their button.approve, .decline-form (in details.decline), details.edit-args,
// input.bulk-select (naming form#bulk-form, with .bulk-count), dialog#keys-help, .keys-open,
// .skip-link. The current call is remembered by id (ids are stable: approvals/ids.py), so it
// survives the refetches live.js makes.
//
// Keys never clash with typing: they do nothing in a text field, textarea, select or editable
// element, with Ctrl, Alt or Meta held, or while a dialog is open.
//
// Nor do they act on what the reviewer has not seen (letters of a reason typed before its field was
// there once approved a refund): a approves only the focused call whose body has come, settled and
// shows its Approve button in sight, and only once; it never waits to act later. While the list is being
// replaced (a live refetch), a and x do nothing. d and e, which only open a form, may wait for the body
// and the list to settle; what is typed meanwhile is text, never commands (see pending).
(() => {
  "use strict";

  const listOf = () => document.getElementById("run-list");
  if (!listOf()) return;
  // (A call decided elsewhere while on the screen, its line said by live-notes.js, is passed over:
  // nothing is left to do on it.)
  const CALL = ".run-card:not(.is-gone) .call[id]:not(:has(> .decided-note))";
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
  let arriving = null; // the call the keys moved to while its body was on its way (see htmx:afterSettle)

  // The current call's row is open, so the keys act on what the reviewer can read. ``from``: where
  // j/k moved from (cs:keys-moved tells live-notes.js, which lets the cards passed go).
  function select(call, from = null) {
    if (pending?.id !== call.id) pending = null;
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
    arriving = unfetched(call) ? call.id : null;
    currentId = call.id;
    call.classList.add("is-current");
    call.setAttribute("tabindex", "-1");
    call.focus({ preventScroll: true });
    // (Once focus has left them: the cards passed may go, and what was below them moves up.)
    if (from) document.dispatchEvent(new CustomEvent("cs:keys-moved", { detail: { from, to: call } }));
    call.scrollIntoView({ block: "nearest" });
  }

  // From the current call; once it is gone (decided: its card now shows the outcome, which has
  // focus), from wherever focus is in the list.
  function move(step) {
    const all = calls();
    const here = current();
    const anchor = document.activeElement;
    const inList = anchor && anchor !== document.body && listOf().contains(anchor);
    const after = (c) => anchor.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING;
    let next;
    if (here) {
      next = all[all.indexOf(here) + step];
    } else if (inList) {
      next = step > 0 ? all.find(after) : all.filter((c) => !after(c) && !anchor.contains(c)).pop();
    }
    // Past the last call of a list paged from a position (the queue): its next page, which starts
    // after this page's last run, however many of this page were decided.
    if (step > 0 && !next && (here || inList || all.length === 0) && followNext()) return;
    if (all.length === 0) return;
    if (!here) next ??= step > 0 ? all[0] : all[all.length - 1];
    // At either end the ring stays, brought back into view (a live refetch may have moved the page).
    if (next ?? here) select(next ?? here, here ?? (inList ? anchor : null));
  }

  // The list's "Next" that keys may follow (data-keys-follow): clicked, and once its page is in,
  // its first call is the current one.
  let following = false;
  function followNext() {
    const link = listOf().querySelector("a[rel='next'][data-keys-follow]");
    if (!link || listMoving()) return false;
    following = true;
    link.click();
    return true;
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

  // typed: the keys pressed while d waited for the form, put where they were meant to go.
  function decline(call, typed = "") {
    const form = call.querySelector(".decline-form");
    if (!form) return;
    reveal(form);
    const reason = form.querySelector("[name='reason']");
    (reason ?? form.querySelector("button"))?.focus();
    if (!reason || !typed) return;
    reason.setRangeText(typed, reason.value.length, reason.value.length, "end");
    reason.dispatchEvent(new Event("input", { bubbles: true })); // (live-refetch.js keeps a started form)
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

  // --- When a key may act ------------------------------------------------------------------------

  // What htmx is still fetching, swapping or settling: what shows there is about to change (and until
  // htmx has settled a new body, htmx-added, its forms would post without htmx).
  const MOVING = ".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added";

  // Requests whose answer replaces the whole list: a live refetch (which also marks the list itself),
  // the filters, the pager. Read as done once their xhr is (or aborted), so that an answer whose events
  // never reach the document (its element swapped away meanwhile) leaves nothing behind.
  const toList = new Set();
  document.addEventListener("htmx:beforeSend", (e) => {
    const target = e.detail.target;
    if (target instanceof Element && target.contains(listOf())) toList.add(e.detail.xhr);
  });

  function listMoving() {
    for (const xhr of toList) {
      if (xhr.readyState === XMLHttpRequest.DONE || xhr.readyState === XMLHttpRequest.UNSENT) toList.delete(xhr);
    }
    const list = listOf();
    return !list || toList.size > 0 || list.matches(MOVING);
  }

  // The call's body is still to come (a folded row's is fetched when it opens: partials/run_card.html).
  const unfetched = (call) => call.querySelector(":scope > details > .call-body-lazy") !== null;

  // Its body has come, and nothing in its card or the list is on its way: a decision's answer (it
  // replaces the card), another call's body arriving above it, a refetch.
  function settled(call) {
    const card = call.closest(".run-card") ?? call;
    return !unfetched(call) && !card.matches(MOVING) && !card.querySelector(MOVING) && !listMoving();
  }

  // In the viewport and on top there (not under a sticky bar or a backdrop): the reviewer can see it.
  function inSight(el) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) return false;
    return el.contains(document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2));
  }

  // --- a: at once or not at all -----------------------------------------------------------------

  // Only the call the reviewer is on (focus in it), open, settled, its Approve button in sight and not
  // already pressed: htmx disables it and marks its form the moment it posts, until the answer has
  // replaced the card, so a second a (or a repeat) meanwhile finds the call unsettled.
  function approvable(call) {
    const button = call.querySelector("button.approve");
    return (
      rowOf(call)?.open === true &&
      call.contains(document.activeElement) &&
      settled(call) &&
      button !== null &&
      !button.disabled &&
      inSight(button)
    );
  }

  // Otherwise a opens the row (which fetches its body) and stops there: an approval never waits for a
  // body to arrive, since the reviewer could not have read what it approves.
  function approve(call) {
    if (approvable(call)) {
      call.querySelector("button.approve").click();
      return;
    }
    const row = rowOf(call);
    if (row && !row.open) row.open = true;
  }

  // --- d and e: may wait for the body -----------------------------------------------------------

  // d and e only open a form and move focus into it, so they may wait for the body on its way (and for
  // a refetch of the list to settle), for the call they were pressed on; dropping them instead would
  // turn the reason typed after d into commands. Until focus is in the form, whatever the reviewer
  // goes on typing is text, never a command: d's keys are kept, in order, and put in the reason once
  // it has focus; e's are dropped (its first field may be a number, a select or a checkbox: no one
  // place for text). Backspace takes the last key back, Escape gives up the wait, Enter does nothing
  // (there is nothing to submit yet), and j/k are text too (Escape, then move). The wait ends when the
  // form opens, when the call is gone or its body fails to come, when focus goes elsewhere, or after a
  // few seconds if nothing was typed meanwhile (typed keys never turn into commands).
  let pending = null; // {id, act, typed: [key]}

  function act(call, fn) {
    if (settled(call)) return fn(call);
    rowOf(call).open = true; // (the fetch starts when the row opens)
    const waiting = { id: call.id, act: fn, typed: [] };
    pending = waiting;
    window.setTimeout(() => {
      if (pending === waiting && waiting.typed.length === 0) pending = null;
    }, 5000);
  }

  // A key pressed while d or e waits: true if it was taken.
  function hold(e) {
    if (e.key === "Escape") pending = null;
    else if (e.key === "Backspace") pending.typed.pop();
    else if ([...e.key].length === 1) pending.typed.push(e.key); // a printable key (named keys are longer)
    else if (e.key !== "Enter") return false; // Tab, arrows, Shift...: the browser's
    e.preventDefault();
    return true;
  }

  // After each settle (the body's, or a refetch that brought the row back: the events of the body's
  // own request fire on the placeholder, no longer in the page), and after each answer (one swapping
  // nothing, an error, settles nothing). Waits while anything is still moving.
  function actPending() {
    if (!pending) return;
    const call = document.getElementById(pending.id);
    if (!call?.matches(CALL)) {
      pending = null; // decided (here or elsewhere), or gone from the list
      return;
    }
    if (!settled(call)) return;
    const { act: fn, typed } = pending;
    pending = null;
    if (call.id === currentId) fn(call, typed.join(""));
  }
  for (const type of ["htmx:afterSettle", "htmx:afterRequest"]) {
    document.addEventListener(type, () => window.setTimeout(actPending, 0));
  }

  // The body did not come (htmx:responseError, sendError on its placeholder): nothing to wait for.
  for (const type of ["htmx:responseError", "htmx:sendError"]) {
    document.addEventListener(type, (e) => {
      if (pending && e.target instanceof Element && e.target.closest(".call[id]")?.id === pending.id) pending = null;
    });
  }

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

  const ON_CALL = { a: approve, d: decline, e: edit, x: tick };

  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
    if (typing(e.target) || document.querySelector("dialog[open]")) return;
    if (pending && hold(e)) return;
    if ("jkadex".includes(e.key)) byKeys = true;
    if (e.key === "?") {
      e.preventDefault();
      showHelp();
    } else if (e.key === "j" || e.key === "k") {
      e.preventDefault();
      move(e.key === "j" ? 1 : -1);
    } else if (ON_CALL[e.key] && !e.repeat) {
      const call = current();
      if (!call) return;
      e.preventDefault(); // (d and e move focus into a field: the key must not be typed there)
      if (e.key === "d" || e.key === "e") act(call, ON_CALL[e.key]); // (may wait: see pending)
      // a and x at once or not at all: not while the list is being replaced (the call may be about to
      // move, change or go). (x: the tick is beside the row, not in its body.)
      else if (!listMoving()) ON_CALL[e.key](call);
    }
  });

  // A pointer in the list picks the call it is on, so the keys act where the reviewer looks.
  document.addEventListener("focusin", (e) => {
    const call = e.target instanceof Element ? e.target.closest(CALL) : null;
    if (pending && call?.id !== pending.id) pending = null; // the reviewer went elsewhere
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
        byKeys = true; // (the keyboard's way into the list, whatever followed it)
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
    if (following && !listMoving()) {
      following = false;
      const first = calls()[0];
      if (first) {
        byKeys = true;
        select(first);
        return;
      }
    }
    const here = current();
    if (!here) return;
    here.classList.add("is-current"); // a refetched card comes without the class
    // A swap above it (a decision's outcome, a live refetch) may have pushed it out of view: while
    // the reviewer works from the keyboard, the ring stays in sight.
    if (byKeys) here.scrollIntoView({ block: "nearest" });
    // Its body came (below the fold, often): a approves only an Approve button in sight, so it is
    // brought into view, once, unless the reviewer took the pointer or the wheel meanwhile.
    if (here.id === arriving && !unfetched(here)) {
      arriving = null;
      if (byKeys) here.querySelector("button.approve")?.scrollIntoView({ block: "nearest" });
    }
  });

  let byKeys = false; // the keys moved last, not the pointer or the wheel
  for (const type of ["pointerdown", "wheel"]) {
    document.addEventListener(type, () => (byKeys = false), { passive: true });
  }

  // Offered where there is a keyboard to use them: not on a touch screen (the keys still work if one
  // is plugged in: ? lists them).
  if (!window.matchMedia("(hover: none) and (pointer: coarse)").matches) {
    for (const button of document.querySelectorAll(".keys-open")) button.hidden = false;
  }
})();
